package config

import (
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/ctsync/ctsync/internal/task"
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
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func strp(s string) *string { return &s }

func sec(n int) task.Duration { return task.Duration(time.Duration(n) * time.Second) }

func mustLoad(t *testing.T, paths ...string) *Config {
	t.Helper()
	cfg, err := Load(paths)
	if err != nil {
		t.Fatalf("Load(%v): %v", paths, err)
	}
	return cfg
}

// normalize removes what legitimately differs between equivalent
// configurations written differently (positions, file names, expression
// spelling), so that the rest can be compared with reflect.DeepEqual.
func normalize(t *testing.T, cfg *Config) Config {
	t.Helper()
	c := *cfg
	c.Files, c.Warnings, c.Ranges = nil, nil, nil
	c.Providers = nil
	for _, p := range cfg.Providers {
		p.Range = hcl.Range{}
		p.Args = normBody(p.Args)
		c.Providers = append(c.Providers, p)
	}
	if b := cfg.Driver.Backend; b != nil {
		nb := &Backend{Type: b.Type, Attrs: map[string]cty.Value{}}
		for k, v := range b.Attrs {
			nb.Attrs[k] = cty.StringVal(hclLiteral(v))
		}
		c.Driver.Backend = nb
	}
	c.Tasks = nil
	for _, s := range cfg.Tasks {
		if s.Variables != nil {
			vars := map[string]string{}
			for k, text := range s.Variables {
				vars[k] = canonicalExpr(t, text)
			}
			s.Variables = vars
		}
		c.Tasks = append(c.Tasks, s)
	}
	return c
}

func normBody(b ProviderBody) ProviderBody {
	out := ProviderBody{Attrs: map[string]cty.Value{}}
	for k, v := range b.Attrs {
		out.Attrs[k] = cty.StringVal(hclLiteral(v))
	}
	for _, nb := range b.Blocks {
		out.Blocks = append(out.Blocks, ProviderBlock{Type: nb.Type, Labels: nb.Labels, Body: normBody(nb.Body)})
	}
	return out
}

// canonicalExpr evaluates HCL expression text and renders its value.
func canonicalExpr(t *testing.T, text string) string {
	t.Helper()
	expr, diags := hclsyntax.ParseExpression([]byte(text), "var", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatalf("variable text %q does not parse: %v", text, diags)
	}
	v, diags := expr.Value(nil)
	if diags.HasErrors() {
		t.Fatalf("variable text %q does not evaluate: %v", text, diags)
	}
	return hclLiteral(v)
}

func TestLoadFull(t *testing.T) {
	clearConsulEnv(t)
	cfg := mustLoad(t, "testdata/full.hcl")

	if cfg.LogLevel != "DEBUG" || cfg.LogFormat != "json" || cfg.Port != 9000 || cfg.WorkingDir != "/var/lib/ctsync" ||
		cfg.ID != "cts-01" || cfg.MaxParallelRuns != 8 {
		t.Errorf("top-level fields: %+v", cfg)
	}
	if want := (task.BufferPeriod{Enabled: true, Min: sec(10), Max: sec(60)}); cfg.BufferPeriod != want {
		t.Errorf("buffer_period = %+v, want %+v", cfg.BufferPeriod, want)
	}
	wantConsul := Consul{
		Address: "consul.example.com:8501",
		Token:   "s3cr3t-token",
		KVPath:  "ctsync/",
		TLS: ConsulTLS{Enabled: true, Verify: false, CACert: "/etc/ca.pem", CAPath: "/etc/ca.d",
			Cert: "/etc/cert.pem", Key: "/etc/key.pem", ServerName: "consul.example.com"},
		Auth: ConsulAuth{Enabled: true, Username: "admin", Password: "hunter2"},
		Transport: Transport{DialKeepAlive: 15 * time.Second, DialTimeout: 20 * time.Second, DisableKeepAlives: true,
			IdleConnTimeout: time.Minute, MaxIdleConns: 10, MaxIdleConnsPerHost: 50, TLSHandshakeTimeout: 3 * time.Second},
		ServiceRegistration: ServiceRegistration{Enabled: true, ServiceName: "ctsync", Address: "10.0.0.5", Namespace: "ns1",
			DefaultCheck: DefaultCheck{Enabled: false, Address: "https://10.0.0.5:9000"}},
	}
	if !reflect.DeepEqual(cfg.Consul, wantConsul) {
		t.Errorf("consul =\n%+v\nwant\n%+v", cfg.Consul, wantConsul)
	}

	drv := cfg.Driver
	if drv.Path != "/usr/local/bin" || !drv.Log || !drv.PersistLog {
		t.Errorf("driver = %+v", drv)
	}
	if drv.Backend == nil || drv.Backend.Type != "s3" || len(drv.Backend.Attrs) != 2 ||
		!drv.Backend.Attrs["bucket"].RawEquals(cty.StringVal("state")) {
		t.Errorf("backend = %+v", drv.Backend)
	}
	wantRP := map[string]RequiredProvider{"aws": {Source: "hashicorp/aws", Version: ">= 5.0"}, "local": {Version: "2.4.0"}}
	if !reflect.DeepEqual(drv.RequiredProviders, wantRP) {
		t.Errorf("required_providers = %+v", drv.RequiredProviders)
	}

	if len(cfg.Providers) != 2 {
		t.Fatalf("providers: %+v", cfg.Providers)
	}
	aws := cfg.Providers[0]
	if aws.Name != "aws" || aws.Alias != "" || aws.Ref() != "aws" ||
		!reflect.DeepEqual(aws.TaskEnv, map[string]string{"AWS_PROFILE": "prod"}) ||
		!aws.Args.Attrs["region"].RawEquals(cty.StringVal("eu-west-1")) ||
		!aws.Args.Attrs["retries"].RawEquals(cty.NumberIntVal(3)) || len(aws.Args.Attrs) != 2 {
		t.Errorf("provider aws = %+v", aws)
	}
	if aws.Range.Start.Line != 75 || !strings.HasSuffix(aws.Range.Filename, "full.hcl") {
		t.Errorf("provider range = %v", aws.Range)
	}
	if east := cfg.Providers[1]; east.Ref() != "aws.east" || len(east.Args.Attrs) != 1 {
		t.Errorf("provider aws.east = %+v", east)
	}

	if len(cfg.Tasks) != 4 {
		t.Fatalf("tasks: %d", len(cfg.Tasks))
	}
	web := cfg.Tasks[0]
	wantWeb := task.Spec{
		Name:        "web",
		Description: "configures the web load balancer",
		Enabled:     false,
		Module:      "org/web/lb",
		Version:     "1.2.3",
		Providers:   []string{"aws"},
		Variables: map[string]string{
			// web.tfvars, as written
			"tags":     `["a", "b"]`,
			"settings": "{\n  size = \"large\"\n  on   = true\n}",
			// override.tfvars.json overrides replicas, rendered from JSON
			"replicas": "3",
			"note":     `"from $${json}"`,
			// inline variables override both
			"owner": `"inline"`,
			"extra": `["x", "y"]`,
		},
		VariableFiles: []string{"testdata/vars/web.tfvars", "testdata/vars/override.tfvars.json"},
		WorkingDir:    "/tmp/web",
		BufferPeriod:  &task.BufferPeriod{Enabled: true, Min: sec(2), Max: sec(8)},
		Condition: task.Condition{Services: &task.ServicesCondition{
			ServicesSelector: task.ServicesSelector{
				Names: []string{"web", "api"}, Datacenter: "dc1", Namespace: "default",
				Filter:             `Service.Tags contains "prod"`,
				CTSUserDefinedMeta: map[string]string{"team": "web"},
			},
			UseAsModuleInput: false,
		}},
		ModuleInput: task.ModuleInputs{ConsulKV: &task.ConsulKVSelector{Path: "config/web", Recurse: true, Datacenter: "dc2", Namespace: "ns"}},
		Parallelism: 5,
	}
	if !reflect.DeepEqual(web, wantWeb) {
		t.Errorf("task web =\n%#v\nwant\n%#v", web, wantWeb)
	}

	catalog := cfg.Tasks[1]
	wantCatalog := task.Spec{
		Name: "catalog", Enabled: true, Module: "./modules/catalog", Providers: []string{"aws.east"},
		BufferPeriod: &task.BufferPeriod{Enabled: true, Min: sec(10), Max: sec(60)},
		Condition: task.Condition{CatalogServices: &task.CatalogServicesCondition{
			Regexp: "^web.*", Datacenter: "dc1", Namespace: "ns", NodeMeta: map[string]string{"rack": "r1"}, UseAsModuleInput: true}},
		ModuleInput: task.ModuleInputs{Services: &task.ServicesSelector{Regexp: strp("")}},
	}
	if !reflect.DeepEqual(catalog, wantCatalog) {
		t.Errorf("task catalog =\n%#v\nwant\n%#v", catalog, wantCatalog)
	}

	kv := cfg.Tasks[2]
	if kv.BufferPeriod == nil || *kv.BufferPeriod != (task.BufferPeriod{}) {
		t.Errorf("kv buffer = %+v", kv.BufferPeriod)
	}
	if c := kv.Condition.ConsulKV; c == nil || c.Path != "app/config" || !c.Recurse || !c.UseAsModuleInput {
		t.Errorf("kv condition = %+v", c)
	}

	nightly := cfg.Tasks[3]
	if nightly.Condition.Schedule == nil || nightly.Condition.Schedule.Cron != "0 0 2 * * * *" {
		t.Errorf("nightly condition = %+v", nightly.Condition)
	}
	if nightly.BufferPeriod == nil || nightly.BufferPeriod.Enabled {
		t.Errorf("schedule task buffer must be disabled: %+v", nightly.BufferPeriod)
	}

	if len(cfg.Files) != 1 || cfg.Files[0] != "testdata/full.hcl" {
		t.Errorf("files = %v", cfg.Files)
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("warnings = %v", cfg.Warnings)
	}
	for key, line := range map[string]int{
		"task.web":                             88,
		"task.web.condition.services.names":    108,
		"task.web.condition.services.names[1]": 108,
		"task.catalog.providers[0]":            129,
		"task.nightly.condition.schedule.cron": 164,
	} {
		if r, ok := cfg.Ranges[key]; !ok || r.Start.Line != line {
			t.Errorf("Ranges[%q] = %v (%v), want line %d", key, r, ok, line)
		}
	}
}

func TestHCLAndJSONAreEquivalent(t *testing.T) {
	clearConsulEnv(t)
	h := normalize(t, mustLoad(t, "testdata/full.hcl"))
	j := normalize(t, mustLoad(t, "testdata/full.json"))
	if !reflect.DeepEqual(h, j) {
		t.Errorf("HCL and JSON differ:\nHCL:  %#v\nJSON: %#v", h, j)
		for i := range h.Tasks {
			if i < len(j.Tasks) && !reflect.DeepEqual(h.Tasks[i], j.Tasks[i]) {
				t.Errorf("task %d:\nHCL:  %#v\nJSON: %#v", i, h.Tasks[i], j.Tasks[i])
			}
		}
	}
}

func TestDefaults(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	f := writeFile(t, dir, "min.hcl", `
task {
  name   = "t"
  module = "m"
  condition "services" {
    regexp = ""
  }
}
`)
	cfg := mustLoad(t, f)
	host, _ := os.Hostname()
	if cfg.LogLevel != "INFO" || cfg.LogFormat != "text" || cfg.Port != 8558 || cfg.WorkingDir != "sync-tasks" ||
		cfg.ID != "cts-"+host || cfg.MaxParallelRuns != runtime.GOMAXPROCS(0) {
		t.Errorf("top-level defaults: %+v", cfg)
	}
	if cfg.BufferPeriod != task.DefaultBufferPeriod {
		t.Errorf("buffer default = %+v", cfg.BufferPeriod)
	}
	want := Consul{
		Address:   "localhost:8500",
		KVPath:    "consul-terraform-sync/",
		TLS:       ConsulTLS{Verify: true},
		Transport: DefaultTransport,
		ServiceRegistration: ServiceRegistration{Enabled: true, ServiceName: "consul-terraform-sync",
			DefaultCheck: DefaultCheck{Enabled: true}},
	}
	if !reflect.DeepEqual(cfg.Consul, want) {
		t.Errorf("consul defaults =\n%+v\nwant\n%+v", cfg.Consul, want)
	}
	if want := (Transport{DialKeepAlive: 30 * time.Second, DialTimeout: 30 * time.Second, IdleConnTimeout: 5 * time.Second,
		MaxIdleConnsPerHost: 100, TLSHandshakeTimeout: 10 * time.Second}); cfg.Consul.Transport != want {
		t.Errorf("transport defaults = %+v", cfg.Consul.Transport)
	}
	if !reflect.DeepEqual(cfg.Driver, TerraformDriver{Refresh: task.RefreshAuto}) || cfg.Providers != nil {
		t.Errorf("driver/providers defaults: %+v %+v", cfg.Driver, cfg.Providers)
	}
	s := cfg.Tasks[0]
	if !s.Enabled || s.WorkingDir != "" || s.BufferPeriod == nil || *s.BufferPeriod != task.DefaultBufferPeriod ||
		!s.Condition.Services.UseAsModuleInput || s.Condition.Services.Regexp == nil || *s.Condition.Services.Regexp != "" {
		t.Errorf("task defaults: %#v", s)
	}
}

func TestConsulEnvAndImplicitEnable(t *testing.T) {
	clearConsulEnv(t)
	t.Setenv("CONSUL_HTTP_ADDR", "env:8500")
	t.Setenv("CONSUL_HTTP_TOKEN", "http-token")
	t.Setenv("CONSUL_CACERT", "/env/ca.pem")
	t.Setenv("CONSUL_TLS_SERVER_NAME", "env.server")
	dir := t.TempDir()

	cfg := mustLoad(t, writeFile(t, dir, "a.hcl", "port = 1\n"))
	c := cfg.Consul
	if c.Address != "env:8500" || c.Token != "http-token" || c.TLS.CACert != "/env/ca.pem" || c.TLS.ServerName != "env.server" {
		t.Errorf("env fallbacks: %+v", c)
	}
	if c.TLS.Enabled || c.Auth.Enabled {
		t.Errorf("environment alone must not enable TLS or auth: %+v", c)
	}

	t.Setenv("CONSUL_TOKEN", "token-first")
	cfg = mustLoad(t, writeFile(t, dir, "b.hcl", `
consul {
  address = "cfg:8500"
  tls {
    cert = "/cfg/cert.pem"
  }
  auth {
    username = "u"
  }
}
`))
	c = cfg.Consul
	if c.Address != "cfg:8500" || c.Token != "token-first" || !c.TLS.Enabled || c.TLS.Cert != "/cfg/cert.pem" ||
		c.TLS.CACert != "/env/ca.pem" || !c.TLS.Verify || !c.Auth.Enabled || c.Auth.Username != "u" {
		t.Errorf("implicit enable: %+v", c)
	}

	cfg = mustLoad(t, writeFile(t, dir, "c.hcl", "consul {\n tls {\n enabled = false\n cert = \"x\"\n }\n}\n"))
	if cfg.Consul.TLS.Enabled {
		t.Errorf("explicit enabled = false must win")
	}
}

func TestMergeFilesAndDir(t *testing.T) {
	clearConsulEnv(t)
	cfg := mustLoad(t, "testdata/merge/base.hcl", "testdata/merge/dir")

	wantFiles := []string{"testdata/merge/base.hcl", "testdata/merge/dir/10-override.hcl", "testdata/merge/dir/20-more.json"}
	if !reflect.DeepEqual(cfg.Files, wantFiles) {
		t.Errorf("files = %v, want %v", cfg.Files, wantFiles)
	}
	if cfg.LogLevel != "ERR" || cfg.Port != 8700 {
		t.Errorf("scalars: log_level %q port %d", cfg.LogLevel, cfg.Port)
	}
	if cfg.Consul.Address != "base:8500" || cfg.Consul.Token != "token-two" {
		t.Errorf("consul merge: %+v", cfg.Consul)
	}
	if want := (task.BufferPeriod{Enabled: true, Min: sec(10), Max: sec(90)}); cfg.BufferPeriod != want {
		t.Errorf("buffer merge = %+v", cfg.BufferPeriod)
	}
	if !cfg.Driver.Log {
		t.Errorf("driver.log lost in merge")
	}
	wantRP := map[string]RequiredProvider{"aws": {Version: "1.0.0"}, "local": {Source: "hashicorp/local", Version: "2.0.0"}}
	if !reflect.DeepEqual(cfg.Driver.RequiredProviders, wantRP) {
		t.Errorf("required_providers merge = %+v", cfg.Driver.RequiredProviders)
	}
	b := cfg.Driver.Backend
	if b == nil || b.Type != "consul" || len(b.Attrs) != 2 || !b.Attrs["gzip"].RawEquals(cty.True) ||
		!b.Attrs["path"].RawEquals(cty.StringVal("state/path")) {
		t.Errorf("backend deep merge = %+v", b)
	}
	var refs []string
	for _, p := range cfg.Providers {
		refs = append(refs, p.Ref())
	}
	if !reflect.DeepEqual(refs, []string{"aws", "local"}) {
		t.Errorf("providers = %v", refs)
	}
	var names []string
	for _, s := range cfg.Tasks {
		names = append(names, s.Name)
	}
	if !reflect.DeepEqual(names, []string{"one", "two", "three"}) {
		t.Errorf("tasks = %v", names)
	}
	// Tasks inherit the merged global buffer period; schedule tasks have none.
	if bp := cfg.Tasks[0].BufferPeriod; *bp != cfg.BufferPeriod {
		t.Errorf("task one buffer = %+v", bp)
	}
	if bp := cfg.Tasks[2].BufferPeriod; bp.Enabled {
		t.Errorf("schedule task buffer = %+v", bp)
	}
	if r := cfg.Ranges["task.two.providers[1]"]; !strings.HasSuffix(r.Filename, "10-override.hcl") || r.Start.Line != 26 {
		t.Errorf("range of task two providers[1] = %v", r)
	}
}

func TestBufferPeriodInheritance(t *testing.T) {
	on := task.BufferPeriod{Enabled: true, Min: sec(10), Max: sec(40)}
	off := task.BufferPeriod{}
	b := func(enabled *bool, minS, maxS int) rawBuffer {
		var r rawBuffer
		if enabled != nil {
			r.enabled.set(*enabled, hcl.Range{})
		}
		if minS >= 0 {
			r.min.set(time.Duration(minS)*time.Second, hcl.Range{})
		}
		if maxS >= 0 {
			r.max.set(time.Duration(maxS)*time.Second, hcl.Range{})
		}
		return r
	}
	yes, no := true, false
	tests := []struct {
		name   string
		raw    rawBuffer
		parent task.BufferPeriod
		want   task.BufferPeriod
	}{
		{"nothing set inherits enabled parent", b(nil, -1, -1), on, on},
		{"nothing set inherits disabled parent", b(nil, -1, -1), off, off},
		{"enabled=false zeroes min and max", b(&no, 3, 9), on, off},
		{"enabled=true takes parent min when parent enabled", b(&yes, -1, -1), on, task.BufferPeriod{Enabled: true, Min: sec(10), Max: sec(40)}},
		{"enabled=true uses 5s when parent disabled", b(&yes, -1, -1), off, task.BufferPeriod{Enabled: true, Min: sec(5), Max: sec(20)}},
		{"min only: enabled, max = 4 x min", b(nil, 3, -1), off, task.BufferPeriod{Enabled: true, Min: sec(3), Max: sec(12)}},
		{"max only, parent enabled: parent min", b(nil, -1, 100), on, task.BufferPeriod{Enabled: true, Min: sec(10), Max: sec(100)}},
		{"max only, parent disabled: 5s min", b(nil, -1, 100), off, task.BufferPeriod{Enabled: true, Min: sec(5), Max: sec(100)}},
		{"both set", b(nil, 7, 9), on, task.BufferPeriod{Enabled: true, Min: sec(7), Max: sec(9)}},
		{"zero min", b(nil, 0, -1), on, task.BufferPeriod{Enabled: true}},
		{"explicit max below min is kept for validation", b(nil, 10, 5), on, task.BufferPeriod{Enabled: true, Min: sec(10), Max: sec(5)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := resolveBuffer(tt.raw, tt.parent); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestBufferPeriodThroughLoad(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	taskWith := func(name, buffer string) string {
		return "task {\n  name = \"" + name + "\"\n  module = \"m\"\n  " + buffer + "\n  condition \"services\" {\n    names = [\"a\"]\n  }\n}\n"
	}
	tests := []struct {
		name   string
		global string
		task   string
		want   task.BufferPeriod
	}{
		{"defaults", "", "", task.DefaultBufferPeriod},
		{"global inherited", `buffer_period { min = "1s" }`, "", task.BufferPeriod{Enabled: true, Min: sec(1), Max: sec(4)}},
		{"global disabled, task enabled", `buffer_period { enabled = false }`, `buffer_period { enabled = true }`,
			task.BufferPeriod{Enabled: true, Min: sec(5), Max: sec(20)}},
		{"global enabled, task max only", `buffer_period { min = "2s" }`, `buffer_period { max = "30s" }`,
			task.BufferPeriod{Enabled: true, Min: sec(2), Max: sec(30)}},
		{"task disabled", "", `buffer_period { enabled = false }`, task.BufferPeriod{}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := writeFile(t, dir, "b"+string(rune('a'+i))+".hcl", tt.global+"\n"+taskWith("t", tt.task))
			cfg := mustLoad(t, f)
			if got := *cfg.Tasks[0].BufferPeriod; got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestWarnings(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	f := writeFile(t, dir, "w.hcl", `consul {
  kv_namespace = "ns"
}
driver "terraform" {
  version = "1.5.7"
}
task {
  name   = "old"
  source = "org/mod/x"
  buffer_period {
    min = "1s"
  }
  condition "schedule" {
    cron = "@daily"
  }
  source_input "consul-kv" {
    path = "k"
  }
}
task {
  name   = "old2"
  module = "m"
  condition "services" {
    names               = ["a"]
    source_includes_var = false
    use_as_module_input = true
  }
}
`)
	cfg := mustLoad(t, f)
	joined := strings.Join(cfg.Warnings, "\n")
	for _, want := range []string{
		"w.hcl:2: consul.kv_namespace: is ignored",
		`w.hcl:5: driver "terraform".version: is ignored`,
		`w.hcl:9: task "old".source: is deprecated: use "module"`,
		`w.hcl:10: task "old".buffer_period: is ignored for schedule tasks`,
		`w.hcl:16: task "old".source_input: is deprecated`,
		`w.hcl:25: task "old2".condition "services".source_includes_var: is deprecated`,
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("warnings lack %q:\n%s", want, joined)
		}
	}
	old := cfg.Tasks[0]
	if old.Module != "org/mod/x" || *old.BufferPeriod != (task.BufferPeriod{}) || old.ModuleInput.ConsulKV == nil {
		t.Errorf("deprecated aliases not applied: %#v", old)
	}
	if !cfg.Tasks[1].Condition.Services.UseAsModuleInput {
		t.Errorf("use_as_module_input must win over source_includes_var")
	}
}

func TestSourceIncludesVarAlone(t *testing.T) {
	clearConsulEnv(t)
	f := writeFile(t, t.TempDir(), "a.hcl", `task {
  name   = "t"
  module = "m"
  condition "catalog-services" {
    regexp              = "x"
    source_includes_var = false
  }
}`)
	cfg := mustLoad(t, f)
	if cfg.Tasks[0].Condition.CatalogServices.UseAsModuleInput {
		t.Errorf("source_includes_var = false was not applied")
	}
}

func TestProviders(t *testing.T) {
	clearConsulEnv(t)
	t.Setenv("CTSYNC_TEST_REGION", "ap-south-1")
	t.Setenv("CTSYNC_TEST_KEY", "k3y")
	dir := t.TempDir()
	f := writeFile(t, dir, "p.hcl", `
terraform_provider "aws" {
  alias  = "mumbai"
  region = "{{ env \"CTSYNC_TEST_REGION\" }}"
  mixed  = "pre-{{env \"CTSYNC_TEST_KEY\"}}-post"
  list   = ["{{ env \"CTSYNC_TEST_REGION\" }}", "plain"]
  task_env {
    AWS_ACCESS_KEY_ID = "{{ env \"CTSYNC_TEST_KEY\" }}"
  }
  assume_role {
    role_arn = "arn:x"
    nested "lbl" {
      deep = 1
    }
  }
  features {}
}
`)
	cfg := mustLoad(t, f)
	p := cfg.Providers[0]
	if p.Ref() != "aws.mumbai" {
		t.Errorf("ref = %q", p.Ref())
	}
	if !p.Args.Attrs["region"].RawEquals(cty.StringVal("ap-south-1")) ||
		!p.Args.Attrs["mixed"].RawEquals(cty.StringVal("pre-k3y-post")) ||
		!p.Args.Attrs["list"].RawEquals(cty.TupleVal([]cty.Value{cty.StringVal("ap-south-1"), cty.StringVal("plain")})) {
		t.Errorf("env templates not resolved: %#v", p.Args.Attrs)
	}
	if _, ok := p.Args.Attrs["alias"]; ok {
		t.Errorf("alias must not be an argument")
	}
	if !reflect.DeepEqual(p.TaskEnv, map[string]string{"AWS_ACCESS_KEY_ID": "k3y"}) {
		t.Errorf("task_env = %v", p.TaskEnv)
	}
	if len(p.Args.Blocks) != 2 || p.Args.Blocks[0].Type != "assume_role" || p.Args.Blocks[1].Type != "features" {
		t.Fatalf("blocks = %#v", p.Args.Blocks)
	}
	ar := p.Args.Blocks[0].Body
	if !ar.Attrs["role_arn"].RawEquals(cty.StringVal("arn:x")) || len(ar.Blocks) != 1 ||
		!reflect.DeepEqual(ar.Blocks[0].Labels, []string{"lbl"}) || !ar.Blocks[0].Body.Attrs["deep"].RawEquals(cty.NumberIntVal(1)) {
		t.Errorf("nested blocks = %#v", ar)
	}

	j := writeFile(t, dir, "p.json", `{"terraform_provider": {"aws": {"region": "{{ env \"CTSYNC_TEST_REGION\" }}",
	  "task_env": {"A": "b"}, "alias": "x", "assume_role": {"role_arn": "arn:x"}}}}`)
	cfg = mustLoad(t, j)
	p = cfg.Providers[0]
	if p.Ref() != "aws.x" || !p.Args.Attrs["region"].RawEquals(cty.StringVal("ap-south-1")) ||
		!reflect.DeepEqual(p.TaskEnv, map[string]string{"A": "b"}) || p.Args.Attrs["assume_role"].Type().IsObjectType() == false {
		t.Errorf("JSON provider = %#v", p)
	}
}

// A task may name a provider that has no terraform_provider block (CTS's
// e2e configurations do: providers = ["local"]); it is used with its default
// configuration. An alias exists only through its block.
func TestProviderWithoutBlock(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	f := writeFile(t, dir, "p.hcl", `
task {
  name      = "web"
  module    = "./m"
  providers = ["local"]
  condition "services" {
    names = ["api"]
  }
}
`)
	cfg := mustLoad(t, f)
	if got := cfg.Tasks[0].Providers; !reflect.DeepEqual(got, []string{"local"}) || len(cfg.Providers) != 0 {
		t.Fatalf("providers = %v, blocks = %v", got, cfg.Providers)
	}
}

func TestHCLLiteral(t *testing.T) {
	v := cty.ObjectVal(map[string]cty.Value{
		"s": cty.StringVal("a\"b\\c\n${x}%{y}$z"),
		"n": cty.NumberFloatVal(1.5),
		"l": cty.TupleVal([]cty.Value{cty.True, cty.NullVal(cty.DynamicPseudoType), cty.NumberIntVal(1000000)}),
	})
	text := hclLiteral(v)
	want := `{
  l = [true, null, 1000000]
  n = 1.5
  s = "a\"b\\c\n$${x}%%{y}$z"
}`
	if text != want {
		t.Errorf("hclLiteral = %s\nwant          %s", text, want)
	}
	expr, diags := hclsyntax.ParseExpression([]byte(text), "x", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	back, diags := expr.Value(nil)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if !back.RawEquals(v) {
		t.Errorf("round trip: %#v != %#v", back, v)
	}
}

func TestLoadTaskFile(t *testing.T) {
	for _, f := range []string{"testdata/taskfile/task.hcl", "testdata/taskfile/task.json"} {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s, warns, err := LoadTaskFileWarnings(f)
			if err != nil {
				t.Fatal(err)
			}
			if s.Name != "from_file" || s.Module != "org/mod/x" || !s.Enabled ||
				s.BufferPeriod == nil || *s.BufferPeriod != task.DefaultBufferPeriod ||
				s.Condition.ConsulKV == nil || s.Condition.ConsulKV.UseAsModuleInput ||
				s.ModuleInput.Services == nil || !reflect.DeepEqual(s.ModuleInput.Services.Names, []string{"api"}) ||
				canonicalExpr(t, s.Variables["owner"]) != `"team-web"` || len(s.Variables) != 4 {
				t.Errorf("spec = %#v", s)
			}
			if len(warns) != 2 {
				t.Errorf("warnings = %v", warns)
			}
			if s2, err := LoadTaskFile(f); err != nil || !reflect.DeepEqual(s, s2) {
				t.Errorf("LoadTaskFile differs: %v", err)
			}
		})
	}

	dir := t.TempDir()
	bad := []struct {
		name, content, want string
	}{
		{"none.hcl", "# nothing\n", "does not contain a task, must contain at least one task"},
		{"two.hcl", "task {\n name = \"a\"\n}\ntask {\n name = \"b\"\n}\n", "cannot contain more than 1 task, contains 2 tasks"},
		{"other.hcl", "port = 1\n", "does not contain a task, must contain at least one task"},
		{"unknown.hcl", "bogus = 1\ntask {\n name = \"a\"\n}\n", "unknown.hcl:1: bogus: unknown top-level field"},
		{"invalid.hcl", "task {\n name = \"a\"\n module = \"m\"\n}\n", `invalid.hcl:1: task "a".condition: task should be configured with a condition block`},
		{"empty.json", "{}", "does not contain a task, must contain at least one task"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadTaskFile(writeFile(t, dir, tt.name, tt.content))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	if _, err := LoadTaskFile(filepath.Join(dir, "missing.hcl")); err == nil || !strings.Contains(err.Error(), "missing.hcl: cannot read task file") {
		t.Errorf("missing file error = %v", err)
	}
}

func TestVariablesKeepSourceText(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	f := writeFile(t, dir, "v.hcl", `task {
  name   = "t"
  module = "m"
  variables {
    num  = 1e3
    str  = "a ${"b"}"
    heredoc = <<EOT
hello
EOT
    obj  = { a = [1, 2] }
  }
  condition "services" {
    names = ["a"]
  }
}`)
	cfg := mustLoad(t, f)
	want := map[string]string{
		"num":     "1e3",
		"str":     `"a ${"b"}"`,
		"heredoc": `"hello\n"`,
		"obj":     "{ a = [1, 2] }",
	}
	if !reflect.DeepEqual(cfg.Tasks[0].Variables, want) {
		t.Errorf("variables = %#v", cfg.Tasks[0].Variables)
	}
}

// As CTS (which reads a task file as a configuration file and uses its
// task), a task file may hold other configuration fields: they are
// ignored, each with a warning naming its line, in HCL and JSON.
func TestTaskFileIgnoresOtherFields(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	for name, src := range map[string]string{
		"mixed.hcl":  "log_level = \"INFO\"\nterraform_provider \"local\" {}\ntask {\n  name = \"a\"\n  module = \"m\"\n  condition \"services\" {\n    names = [\"web\"]\n  }\n}\nconsul {\n  address = \"x:8500\"\n}\n",
		"mixed.json": "{\n\"log_level\": \"INFO\",\n\"terraform_provider\": {\"local\": {}},\n\"task\": {\"name\": \"a\", \"module\": \"m\", \"condition\": {\"services\": {\"names\": [\"web\"]}}},\n\"consul\": {\"address\": \"x:8500\"}\n}\n",
	} {
		s, warns, err := LoadTaskFileWarnings(writeFile(t, dir, name, src))
		if err != nil || s.Name != "a" {
			t.Fatalf("%s: %+v %v", name, s, err)
		}
		var got []string
		for _, w := range warns {
			if strings.Contains(w, "only the task block of a task file is used") {
				got = append(got, w)
			}
		}
		if len(got) != 3 || !strings.Contains(got[0], name+":") || !strings.Contains(got[0], "log_level: ignored") ||
			!strings.Contains(got[1], "terraform_provider: ignored") || !strings.Contains(got[2], "consul: ignored") {
			t.Errorf("%s: warnings %q", name, warns)
		}
	}
}

// TestLoadTooDeep: a configuration or task file nesting deeper than
// depth.Max levels is refused with its file and line before a parser
// recurses on it (issue 35: 65,000 `[` overflowed the parser's stack).
func TestLoadTooDeep(t *testing.T) {
	dir := t.TempDir()
	deep := strings.Repeat("[", 65000)
	for name, src := range map[string]string{
		"deep.hcl":  "task {\n  name = \"deep\"\n  module = \"./m\"\n  variables = {\n    x = " + deep + "\n  }\n}\n",
		"deep.json": `{"task": [{"name": "deep", "module": "./m", "variables": {"x": "${` + deep + `}"}}]}`,
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, load := range []func() error{
			func() error { _, err := Load([]string{p}); return err },
			func() error { _, err := LoadTaskFile(p); return err },
		} {
			errs := AsList(load())
			if len(errs) != 1 || errs[0].Range.Filename != p || !strings.Contains(errs[0].Error(), "nests deeper than 64 levels") {
				t.Fatalf("%s: %v, want one depth error", name, errs)
			}
			if name == "deep.hcl" && errs[0].Range.Start.Line != 5 {
				t.Fatalf("%s: error at line %d, want 5: %v", name, errs[0].Range.Start.Line, errs[0])
			}
		}
	}
}
