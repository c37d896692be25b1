package resolve_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/resolve"
	"github.com/ctsync/ctsync/internal/tmpl"
	"github.com/ctsync/ctsync/internal/vault"
	"github.com/ctsync/ctsync/internal/vault/vaulttest"
)

// Secrets outside terraform_provider blocks (consul.token, api_auth
// secrets, webhook headers) read from Vault: resolved before use, checked
// like values written in the file, redacted, and never quoted in errors.

const secretFieldsConfig = `
consul {
  address = "127.0.0.1:1"
  token   = "{{ with secret \"secret/data/ctsync\" }}{{ .Data.data.consul }}{{ end }}"
}
vault {
  address = "%[1]s"
  token   = "%[2]s"
}
api_auth {
  token {
    name   = "ops"
    secret = "{{ with secret \"secret/data/ctsync\" }}{{ .Data.data.api }}{{ end }}"
    access = "write"
  }
  token {
    name   = "plain"
    secret = "plain-token-0123456789"
    access = "read"
  }
}
notification "webhook" {
  name    = "ops"
  url     = "https://hooks.example.com/x"
  headers = {
    Authorization = "Bearer {{ with secret \"kv1/hook\" }}{{ .Data.token }}{{ end }}"
    X-Plain       = "plain"
  }
}
`

func writeCfg(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.hcl")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func vaultReader(t *testing.T, v *vaulttest.Vault) resolve.SecretReader {
	t.Helper()
	m, err := vault.New(vault.Options{Logger: slog.New(slog.DiscardHandler), Config: config.Vault{
		Enabled: true, Address: v.Addr, Token: v.Token, Transport: config.DefaultTransport, DefaultLeaseDuration: config.DefaultVaultLeaseDuration}})
	if err != nil {
		t.Fatal(err)
	}
	return m.Read
}

func TestSecretFieldsFromVault(t *testing.T) {
	v := vaulttest.Start(t)
	consulTok, apiTok, hookTok := "consul-tok-3c1a9", "api-token-from-vault-0123", "hook-tok-77ab2"
	v.PutKV2(t, "ctsync", map[string]any{"consul": consulTok, "api": apiTok})
	v.PutKV1(t, "hook", map[string]any{"token": hookTok}, "")

	cfg, err := config.Load([]string{writeCfg(t, fmt.Sprintf(secretFieldsConfig, v.Addr, v.Token))})
	if err != nil {
		t.Fatal(err)
	}
	// Before resolution the fields are empty: an API token nobody can
	// present, no template text anywhere.
	if cfg.Consul.Token != "" || cfg.APIAuth.Tokens[0].Secret != "" || cfg.Notifications[0].Headers["Authorization"] != "" {
		t.Fatalf("unresolved fields hold values: %q %q %q", cfg.Consul.Token, cfg.APIAuth.Tokens[0].Secret, cfg.Notifications[0].Headers)
	}
	fields := cfg.SecretFields()
	if len(fields) != 3 {
		t.Fatalf("secret fields: %+v", fields)
	}
	if err := resolve.SecretFields(context.Background(), cfg, vaultReader(t, v)); err != nil {
		t.Fatal(err)
	}
	if cfg.Consul.Token != consulTok {
		t.Errorf("consul.token = %q", cfg.Consul.Token)
	}
	if cfg.APIAuth.Tokens[0].Secret != apiTok || cfg.APIAuth.Tokens[1].Secret != "plain-token-0123456789" {
		t.Errorf("api tokens: %+v", cfg.APIAuth.Tokens)
	}
	if h := cfg.Notifications[0].Headers; h["Authorization"] != "Bearer "+hookTok || h["X-Plain"] != "plain" {
		t.Errorf("headers: %q", h)
	}
	for _, s := range []string{consulTok, apiTok, "Bearer " + hookTok} {
		if !slices.Contains(cfg.Secrets(), s) {
			t.Errorf("Secrets() lacks a value read from Vault")
		}
	}
	for _, f := range cfg.SecretFields() {
		want := []string{"secret/data/ctsync"}
		if f.Kind == config.FieldHeader {
			want = []string{"kv1/hook"}
		}
		if !slices.Equal(f.Keys, want) {
			t.Errorf("%s read %q, want %q", f.Field, f.Keys, want)
		}
	}

	// A rotation: the field resolves again to the new value.
	v.PutKV2(t, "ctsync", map[string]any{"consul": consulTok, "api": apiTok + "-2"})
	var apiField config.SecretField
	for _, f := range cfg.SecretFields() {
		if f.Kind == config.FieldAPIToken {
			apiField = f
		}
	}
	// A new reader: the first one keeps the value it read until its
	// Manager runs and notices the change.
	got, _, err := resolve.SecretField(context.Background(), apiField, vaultReader(t, v))
	if err != nil || got != apiTok+"-2" {
		t.Errorf("rotated api token: %q, %v", got, err)
	}
}

func TestSecretFieldErrors(t *testing.T) {
	v := vaulttest.Start(t)
	short := "short-9f"
	v.PutKV2(t, "ctsync", map[string]any{"api": short, "dup": "plain-token-0123456789", "nl": "a\nb"})
	vaultBlock := fmt.Sprintf("vault {\n  address = %q\n  token = %q\n}\n", v.Addr, v.Token)
	apiTok := func(tmpl string) string {
		return "api_auth {\n  token {\n    name = \"ops\"\n    secret = \"" + tmpl + "\"\n    access = \"write\"\n  }\n" +
			"  token {\n    name = \"plain\"\n    secret = \"plain-token-0123456789\"\n    access = \"read\"\n  }\n}\n"
	}
	sec := func(k string) string {
		return `{{ with secret \"secret/data/ctsync\" }}{{ .Data.data.` + k + ` }}{{ end }}`
	}

	// Load refuses {{ key }} (chicken and egg for the Consul token) and
	// {{ with secret }} without a vault block.
	for name, tc := range map[string]struct{ content, want string }{
		"consul key": {"consul {\n  token = \"{{ key \\\"acl/token\\\" }}\"\n}\n",
			"consul.token: {{ key }} cannot be used for the Consul token: ctsync needs the token to read Consul KV"},
		"header key": {"notification \"webhook\" {\n  url = \"https://h.example.com\"\n  headers = { A = \"{{ key \\\"k\\\" }}\" }\n}\n",
			"headers.A: {{ key }} cannot be used here"},
		"no vault": {"consul {\n  token = \"" + sec("consul") + "\"\n}\n",
			"consul.token: detected dynamic configuration using Vault: missing Vault configuration"},
		"no vault api": {apiTok(sec("api")), `api_auth.token "ops".secret: detected dynamic configuration using Vault`},
		"bad template": {vaultBlock + "consul {\n  token = \"{{ with secret \\\"x\\\" }}\"\n}\n", "consul.token: {{ with secret }} without its {{ end }}"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := config.Load([]string{writeCfg(t, tc.content)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}

	// Values read from Vault are checked as if written in the file, and
	// never quoted.
	for name, tc := range map[string]struct{ content, want string }{
		"short api token": {vaultBlock + apiTok(sec("api")), "the token read from Vault is too short"},
		"same secret":     {vaultBlock + apiTok(sec("dup")), `token "plain" has the same secret as token "ops"`},
		"missing secret":  {vaultBlock + "consul {\n  token = \"" + sec("nope") + "\"\n}\n", `consul.token: secret "secret/data/ctsync" has no value at .Data.data.nope`},
		"line break":      {vaultBlock + "notification \"webhook\" {\n  url = \"https://h.example.com\"\n  headers = { A = \"" + sec("nl") + "\" }\n}\n", "cannot contain line breaks"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := config.Load([]string{writeCfg(t, tc.content)})
			if err != nil {
				t.Fatal(err)
			}
			err = resolve.SecretFields(context.Background(), cfg, vaultReader(t, v))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if errors.Is(err, tmpl.ErrVaultUnavailable) {
				t.Errorf("a bad value is reported as Vault being unavailable")
			}
			if strings.Contains(err.Error(), short) {
				t.Errorf("the error quotes the value: %v", err)
			}
		})
	}

	// {{ env }} is resolved by Load.
	t.Setenv("CTSYNC_TEST_CONSUL_TOKEN", "env-consul-token")
	cfg, err := config.Load([]string{writeCfg(t, "consul {\n  token = \"{{ env \\\"CTSYNC_TEST_CONSUL_TOKEN\\\" }}\"\n}\n")})
	if err != nil || cfg.Consul.Token != "env-consul-token" || len(cfg.SecretFields()) != 0 {
		t.Fatalf("env token: %v %+v", err, cfg)
	}
}

func TestSecretFieldsVaultDown(t *testing.T) {
	v := vaulttest.Start(t)
	if !v.Fake() {
		t.Skip("needs the in-process Vault to take it down")
	}
	v.PutKV2(t, "ctsync", map[string]any{"consul": "consul-tok-3c1a9"})
	cfg, err := config.Load([]string{writeCfg(t, fmt.Sprintf("vault {\n  address = %q\n  token = %q\n}\n", v.Addr, v.Token)+
		"consul {\n  token = \"{{ with secret \\\"secret/data/ctsync\\\" }}{{ .Data.data.consul }}{{ end }}\"\n}\n")})
	if err != nil {
		t.Fatal(err)
	}
	v.SetDown(true)
	read := vaultReader(t, v)
	err = resolve.SecretFields(context.Background(), cfg, read)
	if !errors.Is(err, tmpl.ErrVaultUnavailable) || !strings.Contains(err.Error(), "consul.token") {
		t.Fatalf("error %v, want one naming consul.token and wrapping ErrVaultUnavailable", err)
	}
	v.SetDown(false)
	if err := resolve.SecretFields(context.Background(), cfg, read); err != nil || cfg.Consul.Token != "consul-tok-3c1a9" {
		t.Fatalf("after Vault is back: %v", err)
	}
}
