package config

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/ctsync/ctsync/internal/task"
)

// The deprecated CTS forms still work, each with a warning: a task's
// services list (alone it is the services condition; next to another
// condition it is the services module input), service blocks referenced by
// ID (or by name when they have no id), source for module, source_input.
func TestDeprecatedServicesList(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	f := writeFile(t, dir, "d.hcl", `
service {
  name                  = "web"
  id                    = "web-prod"
  datacenter            = "dc2"
  namespace             = "team"
  filter                = "Service.Tags contains \"prod\""
  description           = "production web"
  cts_user_defined_meta = { tier = "front" }
}
service {
  name = "db"
  cts_user_defined_meta {
    tier = "back"
  }
}
service {
  name   = "unused"
  filter = "x"
}

task {
  name     = "alone"
  source   = "org/m/x"
  services = ["web-prod", "db", "cache", "db"]
}

task {
  name     = "with-kv"
  module   = "org/m/x"
  services = ["cache", "api"]
  condition "consul-kv" {
    path = "k"
  }
}

task {
  name     = "with-catalog"
  module   = "org/m/x"
  source   = "ignored/because/module/is/set"
  services = ["web-prod"]
  condition "catalog-services" {
    regexp = "^web"
  }
  source_input "consul-kv" {
    path = "k"
  }
}
`)
	cfg := mustLoad(t, f)
	alone, withKV, withCatalog := cfg.Tasks[0], cfg.Tasks[1], cfg.Tasks[2]

	wantAlone := &task.ServicesCondition{UseAsModuleInput: true, ServicesSelector: task.ServicesSelector{
		Names: []string{"web", "db", "cache"},
		PerService: map[string]task.ServiceOptions{
			"web":   {Datacenter: "dc2", Namespace: "team", Filter: `Service.Tags contains "prod"`, CTSUserDefinedMeta: map[string]string{"tier": "front"}},
			"db":    {CTSUserDefinedMeta: map[string]string{"tier": "back"}},
			"cache": {},
		},
	}}
	if !reflect.DeepEqual(alone.Condition.Services, wantAlone) || alone.ModuleInput.Services != nil || alone.Module != "org/m/x" {
		t.Errorf("alone =\n%#v\nwant condition\n%#v", alone, wantAlone)
	}
	sel := alone.Condition.Services.ServicesSelector
	if o := sel.Options("web"); o.Datacenter != "dc2" || o.CTSUserDefinedMeta["tier"] != "front" {
		t.Errorf("Options(web) = %+v", o)
	}

	// Plain names only: exactly the shape of a module_input "services".
	if withKV.Condition.ConsulKV == nil || withKV.Condition.Services != nil ||
		!reflect.DeepEqual(withKV.ModuleInput.Services, &task.ServicesSelector{Names: []string{"cache", "api"}}) {
		t.Errorf("with-kv = %#v / %#v", withKV.Condition, withKV.ModuleInput.Services)
	}
	if withCatalog.Module != "org/m/x" || withCatalog.ModuleInput.Services == nil ||
		withCatalog.ModuleInput.Services.Options("web").Namespace != "team" || withCatalog.ModuleInput.ConsulKV == nil {
		t.Errorf("with-catalog = %#v", withCatalog)
	}

	warns := strings.Join(cfg.Warnings, "\n")
	for _, want := range []string{
		"d.hcl:2: service: is deprecated",
		"d.hcl:11: service: is deprecated",
		`d.hcl:25: task "alone".services: is deprecated`,
		`d.hcl:24: task "alone".source: is deprecated: use "module"`,
		`d.hcl:40: task "with-catalog".source: is deprecated and ignored: "module" is also set, and wins`,
		`d.hcl:45: task "with-catalog".source_input: is deprecated`,
	} {
		if !strings.Contains(warns, want) {
			t.Errorf("warnings lack %q:\n%s", want, warns)
		}
	}
	if r := cfg.Ranges["task.alone.condition.services.names[2]"]; r.Start.Line != 25 {
		t.Errorf("range of a list entry = %v", r)
	}
}

// Service blocks are merged across files like other lists: a task may
// refer to a block from another file.
func TestServiceBlockFromAnotherFile(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	a := writeFile(t, dir, "a.hcl", "task {\n  name = \"t\"\n  module = \"m\"\n  services = [\"api-east\"]\n}\n")
	b := writeFile(t, dir, "b.json", `{"service": [{"name": "api", "id": "api-east", "datacenter": "east"}]}`)
	cfg := mustLoad(t, a, b)
	c := cfg.Tasks[0].Condition.Services
	if c == nil || !reflect.DeepEqual(c.Names, []string{"api"}) || c.Options("api").Datacenter != "east" {
		t.Fatalf("condition = %#v", c)
	}
}

// The JSON form of the deprecated list.
func TestDeprecatedServicesListJSON(t *testing.T) {
	clearConsulEnv(t)
	f := writeFile(t, t.TempDir(), "d.json", `{"task": [{"name": "t", "module": "m", "services": ["a", "b"]}]}`)
	cfg := mustLoad(t, f)
	want := &task.ServicesCondition{UseAsModuleInput: true, ServicesSelector: task.ServicesSelector{Names: []string{"a", "b"}}}
	if !reflect.DeepEqual(cfg.Tasks[0].Condition.Services, want) {
		t.Fatalf("condition = %#v", cfg.Tasks[0].Condition.Services)
	}
}

// A task file (task create -task-file) may use the list too: entries are
// plain service names there.
func TestTaskFileServicesList(t *testing.T) {
	f := writeFile(t, t.TempDir(), "t.hcl", "task {\n  name = \"t\"\n  module = \"m\"\n  services = [\"web\"]\n}\n")
	s, warns, err := LoadTaskFileWarnings(f)
	if err != nil {
		t.Fatal(err)
	}
	if s.Condition.Services == nil || !reflect.DeepEqual(s.Condition.Services.Names, []string{"web"}) || len(warns) != 1 {
		t.Fatalf("spec %#v, warnings %v", s.Condition, warns)
	}
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
	if err := ResolveProviders(context.Background(), cfg, kv.get); err != nil {
		t.Fatal(err)
	}
	p := cfg.Providers[0]
	if p.NeedsResolution() {
		t.Error("still pending after ResolveProviders")
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
	if err := ResolveProviders(context.Background(), cfg, nil); err != nil {
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
	err := ResolveProviders(context.Background(), cfg, kv.get)
	list := AsList(err)
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
	err = ResolveProviders(context.Background(), cfg, kv.get)
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
	if err := ResolveProviders(context.Background(), cfg, kv.get); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("4 blocks of 300ms took %s: not parallel", d)
	}

	resolveTimeout = 500 * time.Millisecond
	defer func() { resolveTimeout = ProviderResolveTimeout }()
	cfg = mustLoad(t, writeFile(t, t.TempDir(), "p.hcl", b.String()))
	kv = &fakeKV{data: map[string]string{"k@": "v"}, delay: time.Minute}
	start = time.Now()
	err := ResolveProviders(context.Background(), cfg, kv.get)
	if err == nil || !strings.Contains(err.Error(), `timed out after 500ms reading Consul KV key "k"`) || len(AsList(err)) != 4 {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("timeout took %s", d)
	}
}
