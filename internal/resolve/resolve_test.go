package resolve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/testutil"
	"github.com/ctsync/ctsync/internal/tmpl"
)

// clearConsulEnv makes the Consul defaults independent of the test host.
func clearConsulEnv(t *testing.T) {
	t.Helper()
	for _, n := range []string{"CONSUL_HTTP_ADDR", "CONSUL_TOKEN", "CONSUL_HTTP_TOKEN", "CONSUL_CACERT",
		"CONSUL_CAPATH", "CONSUL_CLIENT_CERT", "CONSUL_CLIENT_KEY", "CONSUL_TLS_SERVER_NAME"} {
		t.Setenv(n, "")
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustLoad(t *testing.T, paths ...string) *config.Config {
	t.Helper()
	cfg, err := config.Load(paths)
	if err != nil {
		t.Fatalf("Load(%v): %v", paths, err)
	}
	return cfg
}

func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }

func testSecret(path string, params []string) (*tmpl.Secret, error) {
	switch path {
	case "kv/data/app":
		return &tmpl.Secret{Data: map[string]any{"data": map[string]any{"user": "alice", "pass": "pw-1", "port": 8080.0},
			"metadata": map[string]any{"version": 3.0}}}, nil
	case "kv1/app":
		return &tmpl.Secret{LeaseDuration: 60, Data: map[string]any{"token": "t0k3n"}}, nil
	}
	return nil, fmt.Errorf("no secret at %q", path)
}

// fakeKV is a KVGetter over a map, counting reads.
type fakeKV struct {
	data  map[string]string // "key@dc" -> value
	reads atomic.Int32
	delay time.Duration
	err   error
}

func (f *fakeKV) get(ctx context.Context, key, dc string) ([]byte, bool, error) {
	f.reads.Add(1)
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
	if f.err != nil {
		return nil, false, f.err
	}
	v, ok := f.data[key+"@"+dc]
	return []byte(v), ok, nil
}

func TestResolveProviders(t *testing.T) {
	clearConsulEnv(t)
	t.Setenv("CTSYNC_TEST_REGION", "eu-west-1")
	t.Setenv("CTSYNC_TEST_TRICKY", `{{ key "must/not/be/read" }}`)
	dir := t.TempDir()
	f := writeFile(t, dir, "p.hcl", `
terraform_provider "aws" {
  alias  = "kv"
  token  = "{{ key \"secrets/aws/token\" }}"
  region = "{{ env \"CTSYNC_TEST_REGION\" }}"
  tricky = "{{ env \"CTSYNC_TEST_TRICKY\" }}"
  list   = ["{{ key \"/secrets/aws/token\" }}", "{{ key \"cfg/zone@dc2\" }}"]
  task_env {
    AWS_SECRET = "pre-{{- key \"secrets/aws/token\" -}}  -post"
  }
  assume_role {
    role_arn = "{{ key \"cfg/role\" }}"
  }
}

terraform_provider "aws" {
  region = "{{ env \"CTSYNC_TEST_REGION\" }}"
  tricky = "{{ env \"CTSYNC_TEST_TRICKY\" }}"
}
`)
	cfg := mustLoad(t, f)
	kvp, plain := &cfg.Providers[0], &cfg.Providers[1]
	if !kvp.NeedsResolution() || plain.NeedsResolution() {
		t.Fatalf("pending: %v %v", kvp.NeedsResolution(), plain.NeedsResolution())
	}
	// A block without {{ key }} is resolved by Load; a value that looks
	// like a template after resolution stays plain text.
	if !plain.Args.Attrs["region"].RawEquals(cty.StringVal("eu-west-1")) ||
		!plain.Args.Attrs["tricky"].RawEquals(cty.StringVal(`{{ key "must/not/be/read" }}`)) {
		t.Errorf("env-only block = %#v", plain.Args.Attrs)
	}
	// The pending block is still as written.
	if !kvp.Args.Attrs["region"].RawEquals(cty.StringVal(`{{ env "CTSYNC_TEST_REGION" }}`)) {
		t.Errorf("pending block changed before resolution: %#v", kvp.Args.Attrs["region"])
	}

	kv := &fakeKV{data: map[string]string{
		"secrets/aws/token@": "t0k3n",
		"cfg/zone@dc2":       "zone-b",
		"cfg/role@":          "arn:role",
	}}
	if err := Providers(context.Background(), cfg, kv.get); err != nil {
		t.Fatal(err)
	}
	p := cfg.Providers[0]
	if p.NeedsResolution() {
		t.Error("still pending after Providers")
	}
	want := map[string]cty.Value{
		"token":  cty.StringVal("t0k3n"),
		"region": cty.StringVal("eu-west-1"),
		"tricky": cty.StringVal(`{{ key "must/not/be/read" }}`),
		"list":   cty.TupleVal([]cty.Value{cty.StringVal("t0k3n"), cty.StringVal("zone-b")}),
	}
	if !reflect.DeepEqual(p.Args.Attrs, want) {
		t.Errorf("attrs = %#v", p.Args.Attrs)
	}
	if !p.Args.Blocks[0].Body.Attrs["role_arn"].RawEquals(cty.StringVal("arn:role")) {
		t.Errorf("nested = %#v", p.Args.Blocks[0].Body.Attrs)
	}
	if !reflect.DeepEqual(p.TaskEnv, map[string]string{"AWS_SECRET": "pre-t0k3n-post"}) {
		t.Errorf("task_env = %#v", p.TaskEnv)
	}
	if p.Alias != "kv" || p.Ref() != "aws.kv" {
		t.Errorf("alias lost: %q", p.Alias)
	}
	// Each distinct key is read once per block.
	if n := kv.reads.Load(); n != 3 {
		t.Errorf("%d KV reads, want 3", n)
	}
	// Resolving again is a no-op that does not touch Consul.
	if err := Providers(context.Background(), cfg, nil); err != nil {
		t.Fatal(err)
	}
}

func TestResolveProvidersErrors(t *testing.T) {
	clearConsulEnv(t)
	const secret = "s3cr3t-v4lue"
	dir := t.TempDir()
	f := writeFile(t, dir, "p.hcl", lines(
		`terraform_provider "a" {`,
		`  good = "{{ key \"present\" }}"`,
		`  bad  = "{{ key \"missing\" }}"`,
		`  task_env = {`,
		`    E = "{{ key \"missing@dc9\" }}"`,
		`  }`,
		`}`,
		`terraform_provider "b" {`,
		`  x = "{{ key \"present\" }}"`,
		`}`,
	))
	cfg := mustLoad(t, f)
	kv := &fakeKV{data: map[string]string{"present@": secret}}
	err := Providers(context.Background(), cfg, kv.get)
	list := config.AsList(err)
	if len(list) != 2 {
		t.Fatalf("errors = %v", err)
	}
	if got := list[0].Error(); !strings.HasSuffix(list[0].Range.Filename, "p.hcl") || list[0].Range.Start.Line != 3 ||
		!strings.Contains(got, `terraform_provider "a".bad: Consul KV key "missing" does not exist`) {
		t.Errorf("first error = %v", got)
	}
	if got := list[1].Error(); list[1].Range.Start.Line != 5 ||
		!strings.Contains(got, `terraform_provider "a".task_env.E: Consul KV key "missing" in datacenter "dc9" does not exist`) {
		t.Errorf("second error = %v", got)
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("a value leaked into the error: %v", err)
	}
	// The block that failed keeps its templates; the other was resolved.
	if !cfg.Providers[0].NeedsResolution() || cfg.Providers[1].NeedsResolution() {
		t.Errorf("pending after errors: %v %v", cfg.Providers[0].NeedsResolution(), cfg.Providers[1].NeedsResolution())
	}

	// Consul errors are reported per key, without values.
	cfg = mustLoad(t, f)
	kv = &fakeKV{err: errors.New("Unexpected response code: 403 (Permission denied)")}
	err = Providers(context.Background(), cfg, kv.get)
	if err == nil || !strings.Contains(err.Error(), `reading Consul KV key "present": Unexpected response code: 403`) {
		t.Errorf("consul error = %v", err)
	}
}

// Blocks resolve in parallel, each within its own time limit.
func TestResolveProvidersTimeoutAndParallel(t *testing.T) {
	clearConsulEnv(t)
	var b strings.Builder
	for _, n := range []string{"a", "b", "c", "d"} {
		b.WriteString("terraform_provider \"" + n + "\" {\n  v = \"{{ key \\\"k\\\" }}\"\n}\n")
	}
	cfg := mustLoad(t, writeFile(t, t.TempDir(), "p.hcl", b.String()))
	kv := &fakeKV{data: map[string]string{"k@": "v"}, delay: 300 * time.Millisecond}
	start := time.Now()
	if err := Providers(context.Background(), cfg, kv.get); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("4 blocks of 300ms took %s: not parallel", d)
	}

	resolveTimeout = 500 * time.Millisecond
	defer func() { resolveTimeout = Timeout }()
	cfg = mustLoad(t, writeFile(t, t.TempDir(), "p.hcl", b.String()))
	kv = &fakeKV{data: map[string]string{"k@": "v"}, delay: time.Minute}
	start = time.Now()
	err := Providers(context.Background(), cfg, kv.get)
	if err == nil || !strings.Contains(err.Error(), `timed out after 500ms reading Consul KV key "k"`) || len(config.AsList(err)) != 4 {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > testutil.Scale(2*time.Second) { // a read blocks for a minute
		t.Errorf("timeout took %s", d)
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
	if !cfg.Vault.Enabled || cfg.Vault.Token != "root-token" || !cfg.Vault.RenewToken || cfg.Vault.DefaultLeaseDuration != config.DefaultVaultLeaseDuration {
		t.Fatalf("vault = %+v", cfg.Vault)
	}
	if !cfg.Providers[0].NeedsResolution() || !cfg.Providers[0].UsesVault() || cfg.Providers[2].UsesVault() {
		t.Fatal("blocks with secrets must wait for resolution")
	}
	if err := Providers(context.Background(), cfg, nil); err == nil || !strings.Contains(err.Error(), "missing Vault configuration") {
		t.Fatalf("Providers without a Vault reader: %v", err)
	}

	cfg = mustLoad(t, f)
	var down bool
	reader := func(ctx context.Context, path string, params []string) (*tmpl.Secret, error) {
		if down && path == "kv1/app" {
			return nil, fmt.Errorf("dial tcp: connection refused: %w", tmpl.ErrVaultUnavailable)
		}
		return testSecret(path, params)
	}
	down = true
	waiting, err := ProvidersWith(context.Background(), cfg, Lookups{Secret: reader})
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
	if _, err := Provider(context.Background(), b, Lookups{Secret: reader}); !errors.Is(err, tmpl.ErrVaultUnavailable) {
		t.Fatalf("b with Vault down: %v", err)
	}
	down = false
	b, err = Provider(context.Background(), b, Lookups{Secret: reader})
	if err != nil || b.Args.Attrs["token"] != cty.StringVal("t0k3n") || b.NeedsResolution() {
		t.Fatalf("b = %+v, %v", b, err)
	}
	// A rotated secret: resolving the resolved block again reads it anew.
	rotated := func(ctx context.Context, path string, params []string) (*tmpl.Secret, error) {
		return &tmpl.Secret{Data: map[string]any{"data": map[string]any{"user": "bob", "pass": "pw-2"}}}, nil
	}
	a2, err := Provider(context.Background(), a, Lookups{Secret: rotated})
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
	_, err = ProvidersWith(context.Background(), cfg, Lookups{Secret: func(ctx context.Context, path string, params []string) (*tmpl.Secret, error) {
		return nil, nil
	}})
	if err == nil || !strings.Contains(err.Error(), `c.hcl:6: terraform_provider "a".user: Vault secret "kv/data/app" does not exist`) {
		t.Fatalf("missing secret: %v", err)
	}
}
