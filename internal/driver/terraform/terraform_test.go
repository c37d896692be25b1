package terraform

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/task"
)

// initRan reports whether the last Init ran `terraform init` (it rewrites
// logs/init.log) and removes the log for the next check.
func initRan(t *testing.T, d *Driver) bool {
	t.Helper()
	p := filepath.Join(d.WorkDir(), logsDir, initLogName)
	b, err := os.ReadFile(p)
	if os.IsNotExist(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), "terraform init")
}

func TestLifecycle(t *testing.T) {
	bin := needTerraform(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	o := localTask(t, dir, "life", bin)
	o.Spec.Parallelism = 2

	d := mustNew(t, o)
	if err := d.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if !initRan(t, d) {
		t.Fatal("first Init did not run terraform init")
	}
	if b, err := os.ReadFile(filepath.Join(d.WorkDir(), ".terraform", "environment")); err != nil || string(b) != "life" {
		t.Fatalf("selected workspace = %q (%v), want life", b, err)
	}

	// A new driver for the same, unchanged task: no init.
	d = mustNew(t, o)
	if err := d.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if initRan(t, d) {
		t.Fatal("Init ran terraform init although nothing changed")
	}

	// A different module source changes main.tf: init again.
	o.Spec.Module = writeModule(t, dir, "mod-life-v2", map[string]string{"main.tf": builtinModule})
	d = mustNew(t, o)
	if err := d.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if !initRan(t, d) {
		t.Fatal("Init did not re-run terraform init after the module source changed")
	}

	// A missing .terraform folder also means init.
	if err := os.RemoveAll(filepath.Join(d.WorkDir(), ".terraform")); err != nil {
		t.Fatal(err)
	}
	if err := d.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if !initRan(t, d) {
		t.Fatal("Init did not re-run terraform init without .terraform")
	}

	res, err := d.Apply(ctx, run("apply-1"), services("web-1"))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Changes || res.Add != 1 || res.Change != 0 || res.Destroy != 0 {
		t.Fatalf("first apply: %+v", res)
	}
	if !strings.Contains(res.Output, "Apply complete!") || res.Duration <= 0 {
		t.Fatalf("apply output/duration: %q %v", res.Output, res.Duration)
	}

	res, err = d.Plan(ctx, run("plan-1"), services("web-1"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Changes || res.Add+res.Change+res.Destroy != 0 {
		t.Fatalf("plan after apply with the same inputs: %+v", res)
	}
	if fileExists(filepath.Join(d.WorkDir(), planFile)) {
		t.Error("the plan file was left behind")
	}

	res, err = d.Plan(ctx, run("plan-2"), services("web-1", "web-2"))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Changes || res.Change != 1 || res.Add != 0 || res.Destroy != 0 {
		t.Fatalf("plan with a new service: %+v", res)
	}
	if !strings.Contains(res.Output, "module.life.terraform_data.services will be updated") || !strings.Contains(res.Output, "web-2") {
		t.Fatalf("plan text does not show the change:\n%s", res.Output)
	}

	res, err = d.Apply(ctx, run("apply-2"), services("web-1", "web-2"))
	if err != nil || !res.Changes || res.Change != 1 {
		t.Fatalf("second apply: %+v %v", res, err)
	}
	res, err = d.Apply(ctx, run("apply-3"), services("web-1", "web-2"))
	if err != nil || res.Changes {
		t.Fatalf("apply without changes: %+v %v", res, err)
	}

	res, err = d.Destroy(ctx, run("destroy-1"))
	if err != nil || !res.Changes || res.Destroy != 1 {
		t.Fatalf("destroy: %+v %v", res, err)
	}
	res, err = d.Plan(ctx, run("plan-3"), services("web-1", "web-2"))
	if err != nil || !res.Changes || res.Add != 1 {
		t.Fatalf("plan after destroy: %+v %v", res, err)
	}
}

func TestFailuresAreClassified(t *testing.T) {
	bin := needTerraform(t)
	ctx := testCtx(t)
	dir := t.TempDir()

	d := mustNew(t, localTask(t, dir, "fails", bin))
	_, err := d.Apply(ctx, run("bad"), services("bad"))
	var de *driver.Error
	if !errors.As(err, &de) {
		t.Fatalf("want *driver.Error, got %T %v", err, err)
	}
	if de.Op != "apply" || de.Summary != "Error: Resource precondition failed: A service named bad is not allowed." {
		t.Fatalf("error = %+v", de)
	}
	if got := err.Error(); got != "apply: Error: Resource precondition failed: A service named bad is not allowed." {
		t.Fatalf("Error() = %q", got)
	}
	if driver.IsTerminal(err) {
		t.Fatal("a precondition on the data is not a terminal error: the data may change")
	}

	// A task variable the module does not declare.
	o := localTask(t, dir, "undeclared", bin)
	o.Spec.Variables = map[string]string{"not_in_module": `"x"`}
	d = mustNew(t, o)
	res, err := d.Plan(ctx, run("p"), services("web-1"))
	if !errors.As(err, &de) || de.Op != "plan" || de.Summary != `Error: Unsupported argument: An argument named "not_in_module" is not expected here.` {
		t.Fatalf("plan error = %v", err)
	}
	if !driver.IsTerminal(err) {
		t.Fatal("an unsupported argument is a terminal error")
	}
	if res.LogPath == "" {
		t.Fatal("a failed run still has a log")
	}
	b, _ := os.ReadFile(res.LogPath)
	if !strings.Contains(string(b), "Unsupported argument") {
		t.Fatalf("run log lacks the error:\n%s", b)
	}

	// A module that does not exist fails at init.
	o = localTask(t, dir, "nomodule", bin)
	o.Spec.Module = "../does-not-exist"
	d = mustNew(t, o)
	err = d.Init(ctx)
	if !errors.As(err, &de) || de.Op != "init" || !strings.Contains(de.Summary, "Error: ") {
		t.Fatalf("init error = %v", err)
	}
	if !driver.IsTerminal(err) {
		t.Fatalf("a missing local module is a terminal error: %v", err)
	}
	if fileExists(filepath.Join(d.WorkDir(), fingerprintFile)) {
		t.Fatal("a failed init left a fingerprint")
	}

	// A cancelled context is reported as such.
	d = mustNew(t, localTask(t, dir, "cancelled", bin))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = d.Plan(cctx, run("c"), services())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled plan: %v", err)
	}
	if driver.IsTerminal(err) {
		t.Fatal("an interrupted run is not terminal")
	}
}

// recorder is a slog.Handler that keeps records.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func TestRunLogsAndForwarding(t *testing.T) {
	bin := needTerraform(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	rec := &recorder{}
	o := localTask(t, dir, "logs", bin)
	o.KeepRunLogs = 2
	o.Logger = slog.New(rec)
	o.Driver.Log = true
	o.Driver.PersistLog = true
	d := mustNew(t, o)

	var last driver.Result
	for _, id := range []string{"run-1", "run-2", "run-3"} {
		res, err := d.Plan(ctx, run(id), services("web-1"))
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(d.WorkDir(), logsDir, id+".log"); res.LogPath != want {
			t.Fatalf("LogPath = %q, want %q", res.LogPath, want)
		}
		last = res
	}
	entries, err := os.ReadDir(filepath.Join(d.WorkDir(), logsDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "init.log,run-2.log,run-3.log" {
		t.Fatalf("logs = %v, want init.log and the two newest runs", names)
	}
	st, err := os.Stat(last.LogPath)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("run log mode %v (%v), want 0600", st.Mode().Perm(), err)
	}
	b, _ := os.ReadFile(last.LogPath)
	if !strings.Contains(string(b), "terraform plan") || !strings.Contains(string(b), "Plan: 1 to add") {
		t.Fatalf("run log:\n%s", b)
	}
	if strings.Count(string(b), "Plan: 1 to add") != 1 {
		t.Fatalf("the plan is logged more than once:\n%s", b)
	}
	if st, err := os.Stat(filepath.Join(d.WorkDir(), tfLogFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("terraform.log must be private (it holds every value Terraform handles): %v %v", st, err)
	}
	if st, err := os.Stat(filepath.Join(d.WorkDir(), tfLogFile)); err != nil || st.Size() == 0 {
		t.Fatalf("persist_log: terraform.log missing or empty (%v)", err)
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	found := false
	for _, r := range rec.recs {
		var taskName string
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "task_name" {
				taskName = a.Value.String()
			}
			return true
		})
		if r.Level == slog.LevelInfo && taskName == "logs" && strings.Contains(r.Message, "Plan: 1 to add") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no forwarded Terraform line with task=logs among %d records", len(rec.recs))
	}

	if _, err := d.Plan(ctx, run("../escape"), services()); err == nil {
		t.Fatal("a run id with a path separator was accepted")
	}
}

// Many drivers initialise and apply at once, sharing one plugin cache.
func TestParallelDrivers(t *testing.T) {
	bin := needTerraform(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	cache := filepath.Join(dir, "plugin-cache")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	needLocalProvider(t)
	src := writeModule(t, dir, "mod-file", map[string]string{"main.tf": localFileModule})
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	drivers := make([]*Driver, n)
	for i := 0; i < n; i++ {
		name := "par" + string(rune('a'+i))
		o := localTask(t, dir, name, bin)
		o.Spec.Module = src
		o.Spec.Variables = map[string]string{"filename": `"` + filepath.Join(dir, name+".txt") + `"`}
		o.Providers = []config.Provider{{Name: "local"}}
		o.Driver.RequiredProviders = map[string]config.RequiredProvider{"local": {Source: "hashicorp/local", Version: "1.4.0"}}
		o.PluginCacheDir = cache
		drivers[i] = mustNew(t, o)
	}
	for i := range drivers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := drivers[i].Init(ctx); err != nil {
				errs[i] = err
				return
			}
			_, errs[i] = drivers[i].Apply(ctx, run("r"), services("web-1"))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("driver %d: %v", i, err)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(cache, "registry.terraform.io", "hashicorp", "local", "*")); len(m) == 0 {
		t.Fatal("the plugin cache was not used")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	base := Options{Spec: task.Spec{Name: "t", Module: "./m"}, WorkDir: t.TempDir(), Binary: "/nonexistent/terraform"}
	cases := map[string]func(o *Options){
		"bad variable expression": func(o *Options) { o.Spec.Variables = map[string]string{"v": `"unterminated`} },
		"variable with reference": func(o *Options) { o.Spec.Variables = map[string]string{"v": `var.other`} },
		"function call":           func(o *Options) { o.Spec.Variables = map[string]string{"v": `file("/etc/passwd")`} },
		"reserved variable":       func(o *Options) { o.Spec.Variables = map[string]string{"services": `{}`} },
		"bad task name":           func(o *Options) { o.Spec.Name = "a b" },
		"duplicate provider": func(o *Options) {
			o.Providers = []config.Provider{{Name: "p"}, {Name: "p", Alias: "x"}}
		},
		"labelled nested block": func(o *Options) {
			o.Providers = []config.Provider{{Name: "p", Args: config.ProviderBody{Blocks: []config.ProviderBlock{{Type: "b", Labels: []string{"x"}}}}}}
		},
		"prohibited env": func(o *Options) { o.Env = map[string]string{"TF_LOG": "DEBUG"} },
		"prohibited task_env": func(o *Options) {
			o.Providers = []config.Provider{{Name: "p", TaskEnv: map[string]string{"TF_VAR_x": "1"}}}
		},
		"unknown provider value": func(o *Options) {
			o.Providers = []config.Provider{{Name: "p", Args: config.ProviderBody{Attrs: map[string]cty.Value{"a": cty.UnknownVal(cty.String)}}}}
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			o := base
			mutate(&o)
			if _, err := New(o); err == nil {
				t.Fatal("New accepted it")
			} else if strings.Contains(name, "variable") && !strings.Contains(err.Error(), `"v"`) && !strings.Contains(err.Error(), `"services"`) {
				t.Fatalf("error does not name the variable: %v", err)
			}
		})
	}
}
