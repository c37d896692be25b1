package config

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"
)

func testSecret(path string, params []string) (*Secret, error) {
	switch path {
	case "kv/data/app":
		return &Secret{Data: map[string]any{"data": map[string]any{"user": "alice", "pass": "pw-1", "port": 8080.0},
			"metadata": map[string]any{"version": 3.0}}}, nil
	case "kv1/app":
		return &Secret{LeaseDuration: 60, Data: map[string]any{"token": "t0k3n"}}, nil
	case "pki/issue/web":
		return &Secret{LeaseID: "pki/1", Renewable: true, LeaseDuration: 30,
			Data: map[string]any{"cn": strings.Join(params, ",")}}, nil
	}
	return nil, fmt.Errorf("no secret at %q", path)
}

func TestRenderSecrets(t *testing.T) {
	t.Setenv("CTSYNC_X", "x")
	l := lookups{secret: testSecret}
	for in, want := range map[string]string{
		`{{ with secret "kv/data/app" }}{{ .Data.data.user }}:{{ .Data.data.pass }}{{ end }}`:                               "alice:pw-1",
		`{{with secret "/kv/data/app/"}}{{.Data.data.port}}{{end}}`:                                                         "8080",
		`u={{ with secret "kv1/app" }}{{ .Data.token }} ({{ .LeaseDuration }}s){{ end }}!`:                                  "u=t0k3n (60s)!",
		`{{ with secret "pki/issue/web" "common_name=a" "ttl=1h" }}{{ .Data.cn }} {{ .LeaseID }} {{ .Renewable }}{{ end }}`: "common_name=a,ttl=1h pki/1 true",
		`{{ with secret "kv/data/app" }}{{ env "CTSYNC_X" }}-{{ .Data.metadata.version }}{{ end }}`:                         "x-3",
		`{{ with secret "kv/data/app" -}}   {{ .Data.data.user }}   {{- end }}`:                                             "alice",
	} {
		got, err := renderWith(in, l)
		if err != nil || got != want {
			t.Errorf("render(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		`{{ with secret "kv/data/app" }}{{ .Data.data.nope }}{{ end }}`:    `secret "kv/data/app" has no value at .Data.data.nope`,
		`{{ with secret "kv/data/app" }}{{ .Data.data.user.x }}{{ end }}`:  `.Data.data.user is not a map`,
		`{{ with secret "kv/data/app" }}{{ .Secret }}{{ end }}`:            `.Secret is not a field of a secret`,
		`{{ with secret "missing/path" }}{{ .Data }}{{ end }}`:             `no secret at "missing/path"`,
		`{{ with secret "kv/data/app" }}{{ .Data.data.pass }}{{ end }}{{ `: "unterminated",
	} {
		_, err := renderWith(in, l)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("render(%q) error = %v, want %q", in, err, want)
		}
		if err != nil && (strings.Contains(err.Error(), "pw-1") || strings.Contains(err.Error(), "alice")) {
			t.Errorf("render(%q) error quotes a secret value: %v", in, err)
		}
	}
}

func TestResolveProvidersWithVault(t *testing.T) {
	clearConsulEnv(t)
	t.Setenv("VAULT_ADDR", "")
	t.Setenv("VAULT_TOKEN", "")
	dir := t.TempDir()
	f := writeFile(t, dir, "c.hcl", lines(
		`vault {`,
		`  address = "http://127.0.0.1:8200"`,
		`  token   = "root-token"`,
		`}`,
		`terraform_provider "a" {`,
		`  user = "{{ with secret \"kv/data/app\" }}{{ .Data.data.user }}{{ end }}"`,
		`  task_env {`,
		`    PASS = "{{ with secret \"kv/data/app\" }}{{ .Data.data.pass }}{{ end }}"`,
		`  }`,
		`}`,
		`terraform_provider "b" {`,
		`  token = "{{ with secret \"kv1/app\" }}{{ .Data.token }}{{ end }}"`,
		`}`,
		`terraform_provider "c" {`,
		`  region = "eu"`,
		`}`,
	))
	cfg := mustLoad(t, f)
	if !cfg.Vault.Enabled || cfg.Vault.Token != "root-token" || !cfg.Vault.RenewToken || cfg.Vault.DefaultLeaseDuration != DefaultVaultLeaseDuration {
		t.Fatalf("vault = %+v", cfg.Vault)
	}
	if !cfg.Providers[0].NeedsResolution() || !cfg.Providers[0].UsesVault() || cfg.Providers[2].UsesVault() {
		t.Fatal("blocks with secrets must wait for resolution")
	}
	if err := ResolveProviders(context.Background(), cfg, nil); err == nil || !strings.Contains(err.Error(), "missing Vault configuration") {
		t.Fatalf("ResolveProviders without a Vault reader: %v", err)
	}

	cfg = mustLoad(t, f)
	var down bool
	reader := func(ctx context.Context, path string, params []string) (*Secret, error) {
		if down && path == "kv1/app" {
			return nil, fmt.Errorf("dial tcp: connection refused: %w", ErrVaultUnavailable)
		}
		return testSecret(path, params)
	}
	down = true
	waiting, err := ResolveProvidersWith(context.Background(), cfg, Lookups{Secret: reader})
	if err != nil {
		t.Fatal(err)
	}
	if len(waiting) != 1 || waiting["b"] == nil || !strings.Contains(waiting["b"].Error(), "connection refused") {
		t.Fatalf("waiting = %v", waiting)
	}
	a := cfg.Providers[0]
	if a.NeedsResolution() || a.Args.Attrs["user"] != cty.StringVal("alice") || a.TaskEnv["PASS"] != "pw-1" {
		t.Fatalf("a = %+v", a)
	}
	if got := a.SecretKeys(); len(got) != 1 || got[0] != "kv/data/app" {
		t.Errorf("secret keys = %q", got)
	}
	b := cfg.Providers[1]
	if !b.NeedsResolution() {
		t.Fatal("b must still wait for Vault")
	}
	if _, err := ResolveProvider(context.Background(), b, Lookups{Secret: reader}); !errors.Is(err, ErrVaultUnavailable) {
		t.Fatalf("b with Vault down: %v", err)
	}
	down = false
	b, err = ResolveProvider(context.Background(), b, Lookups{Secret: reader})
	if err != nil || b.Args.Attrs["token"] != cty.StringVal("t0k3n") || b.NeedsResolution() {
		t.Fatalf("b = %+v, %v", b, err)
	}
	// A rotated secret: resolving the resolved block again reads it anew.
	rotated := func(ctx context.Context, path string, params []string) (*Secret, error) {
		return &Secret{Data: map[string]any{"data": map[string]any{"user": "bob", "pass": "pw-2"}}}, nil
	}
	a2, err := ResolveProvider(context.Background(), a, Lookups{Secret: rotated})
	if err != nil || a2.Args.Attrs["user"] != cty.StringVal("bob") || a2.TaskEnv["PASS"] != "pw-2" {
		t.Fatalf("rotated a = %+v, %v", a2, err)
	}
	if a.Args.Attrs["user"] != cty.StringVal("alice") {
		t.Error("resolving again changed the original block")
	}
	cfg.Providers[1] = b
	secrets := strings.Join(cfg.Secrets(), "|")
	for _, s := range []string{"alice", "pw-1", "t0k3n"} {
		if !strings.Contains(secrets, s) {
			t.Errorf("secret %q not in Secrets()", s)
		}
	}

	// A secret that does not exist is a configuration error naming the field.
	cfg = mustLoad(t, f)
	_, err = ResolveProvidersWith(context.Background(), cfg, Lookups{Secret: func(ctx context.Context, path string, params []string) (*Secret, error) {
		return nil, nil
	}})
	if err == nil || !strings.Contains(err.Error(), `c.hcl:6: terraform_provider "a".user: Vault secret "kv/data/app" does not exist`) {
		t.Fatalf("missing secret: %v", err)
	}
}

func TestVaultAndSyslogBlocks(t *testing.T) {
	clearConsulEnv(t)
	for _, k := range []string{"VAULT_ADDR", "VAULT_TOKEN", "VAULT_NAMESPACE", "VAULT_RENEW_TOKEN", "VAULT_UNWRAP_TOKEN", "VAULT_SKIP_VERIFY", "VAULT_CACERT"} {
		t.Setenv(k, "")
	}
	t.Setenv("HOME", t.TempDir())
	dir := t.TempDir()
	cfg := mustLoad(t, writeFile(t, dir, "c.hcl", "port = 1\n"))
	if cfg.Vault.Enabled || cfg.Syslog.Enabled || cfg.Syslog.Facility != "LOCAL0" || cfg.Syslog.Name != "consul-terraform-sync" {
		t.Fatalf("defaults: vault %+v syslog %+v", cfg.Vault, cfg.Syslog)
	}
	t.Setenv("VAULT_ADDR", "https://vault:8200")
	t.Setenv("VAULT_CACERT", "/env/ca.pem")
	t.Setenv("VAULT_SKIP_VERIFY", "true")
	t.Setenv("VAULT_UNWRAP_TOKEN", "true")
	cfg = mustLoad(t, writeFile(t, dir, "c.hcl", lines(
		`vault {`,
		`  namespace = "ns1"`,
		`  vault_agent_token_file = "/run/vault/token"`,
		`  default_lease_duration = "30s"`,
		`  tls {`,
		`    server_name = "vault.example"`,
		`  }`,
		`  transport {`,
		`    dial_timeout = "3s"`,
		`  }`,
		`}`,
		`syslog {`,
		`  facility = "local3"`,
		`}`,
	)))
	v := cfg.Vault
	if !v.Enabled || v.Address != "https://vault:8200" || v.Namespace != "ns1" || v.Token != "" || v.RenewToken ||
		!v.UnwrapToken || v.AgentTokenFile != "/run/vault/token" || v.DefaultLeaseDuration.String() != "30s" ||
		v.TLS.Verify || !v.TLS.Enabled || v.TLS.CACert != "/env/ca.pem" || v.TLS.ServerName != "vault.example" || v.Transport.DialTimeout.String() != "3s" {
		t.Errorf("vault = %+v", v)
	}
	if s := cfg.Syslog; !s.Enabled || s.Facility != "LOCAL3" || s.Name != "consul-terraform-sync" {
		t.Errorf("syslog = %+v", s)
	}
	// ~/.vault-token, as the Vault CLI writes it.
	t.Setenv("VAULT_UNWRAP_TOKEN", "")
	home := t.TempDir()
	t.Setenv("HOME", home)
	writeFile(t, home, ".vault-token", "hvs.from-file\n")
	cfg = mustLoad(t, writeFile(t, dir, "c.hcl", lines(`vault {`, `}`, `syslog {`, `  enabled = false`, `  name = "x"`, `}`)))
	if cfg.Vault.Token != "hvs.from-file" || !cfg.Vault.RenewToken || cfg.Syslog.Enabled {
		t.Errorf("vault = %+v, syslog = %+v", cfg.Vault, cfg.Syslog)
	}
}
