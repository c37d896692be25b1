package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	ctsapi "github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/ha"
	"github.com/ctsync/ctsync/internal/notify"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/watch"
)

// quietWatcher has data for nothing: no task runs.
type quietWatcher struct{}

func (quietWatcher) Subscribe(string, watch.Query)  {}
func (quietWatcher) Unsubscribe(string, string)     {}
func (quietWatcher) UnsubscribeAll(string)          {}
func (quietWatcher) Get(string) (any, uint64, bool) { return nil, 0, false }

// recordingUpdater records the tasks a reload updates.
type recordingUpdater struct {
	mu    sync.Mutex
	specs []task.Spec
}

func (r *recordingUpdater) Update(_ context.Context, s task.Spec) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.specs = append(r.specs, s)
	return nil
}

func reloadTask(name, service string) string {
	return fmt.Sprintf(`
task {
  name   = %q
  module = "org/mod/null"
  condition "services" {
    names = [%q]
  }
}
`, name, service)
}

// reloadApp is a daemon's app over the configuration file path, with a
// controller that runs nothing.
func reloadApp(t *testing.T, path string, logs *lockedBuffer) (*app, *recordingUpdater) {
	t.Helper()
	cfg, err := config.Load([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	log, level := newLoggerLevel(cfg, logs)
	a := &app{cfg: cfg, log: log, level: level, flags: &startFlags{configs: stringsFlag{path}}, fileTasks: cfg.Tasks}
	if a.coord, err = ha.NewCoordinator(ha.CoordinatorOptions{Tasks: cfg.Tasks}); err != nil {
		t.Fatal(err)
	}
	a.ctrl = reconcile.New(reconcile.Options{Watcher: quietWatcher{},
		NewDriver: func(task.Spec) (driver.Driver, error) { return nil, fmt.Errorf("no driver") }}, cfg.Tasks)
	up := &recordingUpdater{}
	a.updater = up
	return a, up
}

func names(c *reconcile.Controller) []string {
	var out []string
	for _, st := range c.Tasks() {
		if !st.Deleting {
			out = append(out, st.Spec.Name)
		}
	}
	return out
}

// A reload makes the tasks what the files say: an added task is created,
// a removed one deleted, a changed one updated; the log level changes;
// a file with an error changes nothing and names the file and line.
func TestReloadConfigTasks(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ctsync.hcl")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`log_level = "info"` + reloadTask("keep", "web") + reloadTask("change", "web") + reloadTask("drop", "web"))
	logs := &lockedBuffer{}
	a, up := reloadApp(t, path, logs)
	ctx := t.Context()

	// Disabled through the API: a change in the files keeps it disabled.
	if _, err := a.ctrl.SetEnabled(ctx, "change", false, ""); err != nil {
		t.Fatal(err)
	}
	write(`log_level = "debug"` + reloadTask("keep", "web") + reloadTask("change", "db") + reloadTask("new", "web"))
	summary, err := a.reloadConfig(ctx, nil)
	if err != nil {
		t.Fatalf("reload: %v\n%s", err, logs)
	}
	if summary != "1 task(s) added, 1 changed, 1 removed" {
		t.Errorf("summary %q", summary)
	}
	got := strings.Join(slices.Sorted(slices.Values(names(a.ctrl))), ",")
	if got != "change,keep,new" {
		t.Errorf("tasks after the reload: %s", got)
	}
	if len(up.specs) != 1 || up.specs[0].Name != "change" || up.specs[0].Condition.Services.Names[0] != "db" || up.specs[0].Enabled {
		t.Errorf("updated: %+v", up.specs)
	}
	if a.level.Level() != slog.LevelDebug {
		t.Errorf("log level %v after the reload, want debug", a.level.Level())
	}
	if !strings.Contains(logs.String(), "resources are kept") {
		t.Errorf("the deletion is not logged:\n%s", logs)
	}

	// A file with an error: nothing changes.
	write(`log_level = "info"` + reloadTask("keep", "web") + "\ntask {\n  name = \"bad\"\n  nonsense = 1\n}\n")
	if _, err := a.reloadConfig(ctx, nil); err == nil || !strings.Contains(err.Error(), "ctsync.hcl:") {
		t.Fatalf("a bad file: %v, want an error naming the file and line", err)
	}
	if got := strings.Join(slices.Sorted(slices.Values(names(a.ctrl))), ","); got != "change,keep,new" {
		t.Errorf("tasks after a refused reload: %s", got)
	}
	if a.level.Level() != slog.LevelDebug {
		t.Errorf("a refused reload changed the log level")
	}

	// A task that names a provider block the files add: refused (the
	// providers in force are the start's).
	write(`log_level = "debug"
terraform_provider "null" {
  alias = "two"
}` + reloadTask("keep", "web") + reloadTask("change", "db") + reloadTask("new", "web") + `
task {
  name      = "prov"
  module    = "org/mod/null"
  providers = ["null.two"]
  condition "services" {
    names = ["web"]
  }
}
`)
	if _, err := a.reloadConfig(ctx, nil); err == nil || !strings.Contains(err.Error(), `"null.two"`) || !strings.Contains(err.Error(), "needs a restart") {
		t.Fatalf("a task with a new provider block: %v", err)
	}
	if got := strings.Join(slices.Sorted(slices.Values(names(a.ctrl))), ","); got != "change,keep,new" {
		t.Errorf("tasks after a refused reload: %s", got)
	}

	// A setting that needs a restart is logged, and the rest applies.
	write(`log_level = "debug"
working_dir = "elsewhere"` + reloadTask("keep", "web"))
	if _, err := a.reloadConfig(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "need a restart") || !strings.Contains(logs.String(), "working_dir") {
		t.Errorf("working_dir is not reported as needing a restart:\n%s", logs)
	}
	if got := strings.Join(names(a.ctrl), ","); got != "keep" {
		t.Errorf("tasks: %s", got)
	}
}

// fakeLiveAPI records what a reload puts in force in the API server.
type fakeLiveAPI struct {
	reloadErr error
	lives     []ctsapi.Live
}

func (f *fakeLiveAPI) Reload() error         { return f.reloadErr }
func (f *fakeLiveAPI) SetLive(l ctsapi.Live) { f.lives = append(f.lives, l) }

// A reload puts api_tasks, the global buffer period and the api_auth
// tokens in force in the API; a token or TLS file the API cannot read
// again refuses the whole reload (no task changes).
func TestReloadConfigAPISettings(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ctsync.hcl")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(reloadTask("keep", "web"))
	logs := &lockedBuffer{}
	a, _ := reloadApp(t, path, logs)
	a.obs.notifier = notify.New(notify.Options{})
	srv := &fakeLiveAPI{}
	write(`
notification "webhook" {
  url = "https://hooks.example.com/ctsync-0123456789"
}
api_auth {
  token {
    name   = "ops"
    secret = "ops-secret-0123456789"
    access = "write"
  }
}
api_tasks {
  allowed_modules = ["org/*"]
}
buffer_period {
  min = "7s"
  max = "30s"
}
task {
  name        = "own_dir"
  module      = "org/mod/null"
  working_dir = "` + filepath.Join(dir, "own") + `"
  condition "services" {
    names = ["web"]
  }
}
` + reloadTask("keep", "web"))
	if _, err := a.reloadConfig(t.Context(), srv); err != nil {
		t.Fatal(err)
	}
	if len(srv.lives) != 1 {
		t.Fatalf("SetLive calls: %d", len(srv.lives))
	}
	l := srv.lives[0]
	if !l.SetTokens || len(l.Tokens) != 1 || l.Tokens[0].Name != "ops" {
		t.Errorf("tokens in force: %+v", l)
	}
	if !slices.Equal(l.Tasks.AllowedModules, []string{"org/*"}) || a.apiTasks().AllowedModules[0] != "org/*" {
		t.Errorf("api_tasks in force: %+v / %+v", l.Tasks, a.apiTasks())
	}
	if l.BufferPeriod.Min.D().Seconds() != 7 {
		t.Errorf("buffer period in force: %+v", l.BufferPeriod)
	}
	if !slices.Contains(l.LogDirs, filepath.Join(dir, "own")) {
		t.Errorf("the run logs of a task added with its own working_dir are not served: %v", l.LogDirs)
	}
	if !strings.Contains(logs.String(), "reload: notifications changed") {
		t.Errorf("the notification block added is not put in force:\n%s", logs)
	}
	// The same files again: the tokens are not replaced.
	if _, err := a.reloadConfig(t.Context(), srv); err != nil {
		t.Fatal(err)
	}
	if srv.lives[1].SetTokens {
		t.Errorf("unchanged tokens replaced")
	}

	srv.reloadErr = fmt.Errorf(`api tokens: token "ops": unreadable`)
	write(reloadTask("keep", "web") + reloadTask("other", "web"))
	if _, err := a.reloadConfig(t.Context(), srv); err == nil || !strings.Contains(err.Error(), `token "ops"`) {
		t.Fatalf("a bad token file: %v", err)
	}
	if got := strings.Join(slices.Sorted(slices.Values(names(a.ctrl))), ","); got != "keep,own_dir" || len(srv.lives) != 2 {
		t.Errorf("a refused reload changed something: tasks %s, SetLive calls %d", got, len(srv.lives))
	}
}
