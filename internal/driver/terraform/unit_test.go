package terraform

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	tfjson "github.com/hashicorp/terraform-json"
	"github.com/zclconf/go-cty/cty"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver/terraform/tftext"
)

func TestStateKVPath(t *testing.T) {
	for in, want := range map[string]string{
		"":                                "consul-terraform-sync/terraform",
		"consul-terraform-sync/":          "consul-terraform-sync/terraform",
		"consul-terraform-sync":           "consul-terraform-sync/terraform",
		"consul-terraform-sync/terraform": "consul-terraform-sync/terraform",
		"a/b/terraform/":                  "a/b/terraform",
		"terraform":                       "terraform",
		"/":                               "terraform",
		"myterraform/":                    "myterraform/terraform",
	} {
		if got := stateKVPath(in); got != want {
			t.Errorf("stateKVPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestConsulBackendDefaultsAndEnv(t *testing.T) {
	c := config.Consul{Address: "https://c.example:8501", Token: "tok", KVPath: "kv/",
		TLS:  config.ConsulTLS{CACert: "/ca", Cert: "/cert", Key: "/key", CAPath: "/capath", ServerName: "sni"},
		Auth: config.ConsulAuth{Username: "u", Password: "p"}}
	b, err := resolveBackend(&config.Backend{Type: "consul", Attrs: map[string]cty.Value{"path": cty.StringVal("mine")}}, c)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"address": "c.example:8501", "path": "mine", "scheme": "https", "ca_file": "/ca", "cert_file": "/cert", "key_file": "/key"}
	for k, v := range want {
		if got := b.Attrs[k]; got.IsNull() || got.AsString() != v {
			t.Errorf("backend %s = %#v, want %q", k, got, v)
		}
	}
	if _, ok := b.Attrs["access_token"]; ok {
		t.Error("the token must not be a backend attribute")
	}
	env := consulEnv(c)
	for k, v := range map[string]string{
		"CONSUL_HTTP_ADDR": "https://c.example:8501", "CONSUL_HTTP_TOKEN": "tok", "CONSUL_HTTP_AUTH": "u:p",
		"CONSUL_HTTP_SSL": "true", "CONSUL_HTTP_SSL_VERIFY": "false", "CONSUL_CACERT": "/ca", "CONSUL_CAPATH": "/capath",
		"CONSUL_CLIENT_CERT": "/cert", "CONSUL_CLIENT_KEY": "/key", "CONSUL_TLS_SERVER_NAME": "sni",
	} {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}

	// A non-consul backend gets no consul defaults and no consul env.
	b, err = resolveBackend(&config.Backend{Type: "s3", Attrs: map[string]cty.Value{"bucket": cty.StringVal("b")}}, c)
	if err != nil || len(b.Attrs) != 1 {
		t.Fatalf("s3 backend: %#v %v", b, err)
	}
	t.Setenv("CONSUL_HTTP_TOKEN", "")
	o := Options{Consul: c, Env: map[string]string{"EXTRA": "1"}, PluginCacheDir: "/cache",
		Providers: []config.Provider{{Name: "p", TaskEnv: map[string]string{"P_TOKEN": "x"}}}}
	e, err := buildEnv(&o, false)
	if err != nil {
		t.Fatal(err)
	}
	if e[cacheMayBreakLockEnv] != "1" {
		t.Errorf("%s not set: concurrent inits would rewrite the shared plugin cache", cacheMayBreakLockEnv)
	}
	if e["CONSUL_HTTP_TOKEN"] != "" || e["EXTRA"] != "1" || e["P_TOKEN"] != "x" || e["TF_PLUGIN_CACHE_DIR"] != "/cache" || e["CHECKPOINT_DISABLE"] != "1" {
		t.Fatalf("env: %v", e)
	}
	// Inherited variables that terraform-exec manages are dropped, not fatal.
	t.Setenv("TF_LOG", "TRACE")
	t.Setenv("TF_VAR_services", "{}")
	t.Setenv("TF_CLI_CONFIG_FILE", "/keep/me")
	t.Setenv("TF_DATA_DIR", "/shared/by/all/tasks")
	e, err = buildEnv(&o, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := e["TF_LOG"]; ok {
		t.Error("TF_LOG kept")
	}
	if _, ok := e["TF_VAR_services"]; ok {
		t.Error("TF_VAR_services kept: the environment could override module inputs")
	}
	if _, ok := e["TF_DATA_DIR"]; ok {
		t.Error("TF_DATA_DIR kept: tasks would share one .terraform folder")
	}
	if e["TF_CLI_CONFIG_FILE"] != "/keep/me" || e["CONSUL_HTTP_TOKEN"] != "tok" {
		t.Fatalf("env: %v", e)
	}
}

func TestParseCounts(t *testing.T) {
	out := "module.x: Creating...\n\nApply complete! Resources: 2 added, 1 changed, 3 destroyed.\n"
	if a, c, d := tftext.ApplyCounts(out); a != 2 || c != 1 || d != 3 {
		t.Fatal(a, c, d)
	}
	if a, c, d := tftext.ApplyCounts("Apply complete! Resources: 1 imported, 4 added, 0 changed, 0 destroyed."); a != 4 || c != 0 || d != 0 {
		t.Fatal(a, c, d)
	}
	if a, c, d := tftext.ApplyCounts("Destroy complete! Resources: 5 destroyed.\n"); a != 0 || c != 0 || d != 5 {
		t.Fatal(a, c, d)
	}
	if a, c, d := tftext.ApplyCounts("Error: boom"); a+c+d != 0 {
		t.Fatal(a, c, d)
	}
	if a, c, d := tftext.PlanCounts("...\nPlan: 1 to add, 2 to change, 3 to destroy.\n"); a != 1 || c != 2 || d != 3 {
		t.Fatal(a, c, d)
	}
	plan := &tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{
		{Change: &tfjson.Change{Actions: tfjson.Actions{tfjson.ActionCreate}}},
		{Change: &tfjson.Change{Actions: tfjson.Actions{tfjson.ActionUpdate}}},
		{Change: &tfjson.Change{Actions: tfjson.Actions{tfjson.ActionDelete}}},
		{Change: &tfjson.Change{Actions: tfjson.Actions{tfjson.ActionDelete, tfjson.ActionCreate}}},
		{Change: &tfjson.Change{Actions: tfjson.Actions{tfjson.ActionNoop}}},
		{Change: &tfjson.Change{Actions: tfjson.Actions{tfjson.ActionRead}}},
		{Change: nil},
	}}
	if n := countPlan(plan); n.Add != 2 || n.Change != 1 || n.Destroy != 2 || n.Replace != 1 {
		t.Fatalf("%+v", n)
	}
}

func TestRotateLogs(t *testing.T) {
	dir := t.TempDir()
	logs := filepath.Join(dir, logsDir)
	os.MkdirAll(logs, 0o750)
	base := time.Now().Add(-time.Hour)
	for i := 0; i < 6; i++ {
		p := filepath.Join(logs, "r"+strconv.Itoa(i)+".log")
		os.WriteFile(p, nil, 0o600)
		os.Chtimes(p, base.Add(time.Duration(i)*time.Minute), base.Add(time.Duration(i)*time.Minute))
	}
	os.WriteFile(filepath.Join(logs, initLogName), nil, 0o600)
	os.WriteFile(filepath.Join(logs, "notes.txt"), nil, 0o600)
	// The current run's log is kept even if its mtime looks old.
	old := filepath.Join(logs, "current.log")
	os.WriteFile(old, nil, 0o600)
	os.Chtimes(old, base.Add(-time.Hour), base.Add(-time.Hour))
	if err := rotateLogs(dir, "current.log", 3); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(logs)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := "current.log,init.log,notes.txt,r4.log,r5.log"
	if got := join(names); got != want {
		t.Fatalf("after rotation: %s, want %s", got, want)
	}
}

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}

func TestValidRunID(t *testing.T) {
	for _, id := range []string{"", ".", "..", "a/b", `a\b`, "init", "init.log"} {
		if validRunID(id) == nil {
			t.Errorf("run id %q accepted", id)
		}
	}
	for _, id := range []string{"01HV3K", "run-1", "2024-01-01T00:00:00Z"} {
		if err := validRunID(id); err != nil {
			t.Errorf("run id %q: %v", id, err)
		}
	}
}

func TestWriteFileAtomic(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f.json")
	if changed, err := writeFileAtomic(p, []byte("a"), 0o600); err != nil || !changed {
		t.Fatal(changed, err)
	}
	if changed, err := writeFileAtomic(p, []byte("a"), 0o640); err != nil || changed {
		t.Fatal(changed, err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
	if changed, err := writeFileAtomic(p, []byte("b"), 0o640); err != nil || !changed {
		t.Fatal(changed, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
}

// An unchanged large file is compared a chunk at a time, not read whole;
// a change anywhere, a longer or a shorter file is seen.
func TestWriteFileAtomicLargeFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "terraform.tfvars")
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	if changed, err := writeFileAtomic(p, data, 0o640); err != nil || !changed {
		t.Fatal(changed, err)
	}
	allocs := testing.AllocsPerRun(5, func() {
		if changed, err := writeFileAtomic(p, data, 0o640); err != nil || changed {
			t.Fatal(changed, err)
		}
	})
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	if changed, _ := writeFileAtomic(p, data, 0o640); changed {
		t.Fatal("unchanged file rewritten")
	}
	runtime.ReadMemStats(&ms1)
	if got := ms1.TotalAlloc - ms0.TotalAlloc; got > 256<<10 && !raceEnabled {
		t.Errorf("comparing an unchanged 1 MiB file allocated %d bytes (%v allocations): it was read whole", got, allocs)
	}
	last := bytes.Clone(data)
	last[len(last)-1] = 'x'
	for name, d := range map[string][]byte{"last byte": last, "longer": append(bytes.Clone(data), 'x'), "shorter": data[:len(data)-1]} {
		if changed, err := writeFileAtomic(p, d, 0o640); err != nil || !changed {
			t.Fatalf("%s: changed=%v err=%v", name, changed, err)
		}
		if b, _ := os.ReadFile(p); !bytes.Equal(b, d) {
			t.Fatalf("%s: file not written", name)
		}
	}
}

func TestApplyPhases(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ph := applyPhases(t0, t0.Add(2*time.Second), t0.Add(5*time.Second))
	if len(ph) != 2 || ph[0].Name != "plan" || ph[1].Name != "apply" || !ph[0].End.Equal(ph[1].Start) || !ph[1].End.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("split: %+v", ph)
	}
	if ph := applyPhases(t0, time.Time{}, t0.Add(time.Second)); len(ph) != 1 || ph[0].Name != "apply" {
		t.Fatalf("no plan line: %+v", ph)
	}
}

// Initialised: a task's directory holds what Init leaves (.ctsync-init and
// .terraform/); a missing or emptied directory does not.
func TestInitialised(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "task")
	if Initialised(dir) {
		t.Fatal("a missing directory is initialised")
	}
	if err := os.MkdirAll(filepath.Join(dir, dataDir), 0o750); err != nil {
		t.Fatal(err)
	}
	if Initialised(dir) {
		t.Fatal("initialised without the record of init")
	}
	if err := os.WriteFile(filepath.Join(dir, fingerprintFile), []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	if !Initialised(dir) {
		t.Fatal("not initialised with .ctsync-init and .terraform/")
	}
	if err := os.RemoveAll(filepath.Join(dir, dataDir)); err != nil {
		t.Fatal(err)
	}
	if Initialised(dir) {
		t.Fatal("initialised without .terraform/")
	}
}
