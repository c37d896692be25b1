package ha

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

// soloOver returns the coordinator of an instance alone over the history
// database at path, with the configured specs.
func soloOver(t *testing.T, path string, log *slog.Logger, specs ...task.Spec) *Solo {
	t.Helper()
	c, err := NewCoordinator(CoordinatorOptions{Tasks: specs, Logger: log, Local: func() (store.Store, error) {
		b, err := store.OpenBolt(path, 0, nil)
		if err == nil {
			t.Cleanup(func() { _ = b.Close() })
		}
		return b, err
	}})
	if err != nil {
		t.Fatal(err)
	}
	return c.(*Solo)
}

// lockedBuf is a log buffer safe for concurrent writes.
type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// An instance alone keeps the tasks changed through the API in its
// history database: after a restart the task created through the API is
// back (with its enabled flag), the one deleted through it stays deleted
// and leaves no record (a task of the files with its name is kept), a
// configured task disabled through it stays disabled, and a stored task
// with the name of a configured one is ignored, with a log line saying so.
func TestSoloRestoresTasksChangedThroughTheAPI(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), store.HistoryFile)
	file := []task.Spec{spec("file", true), spec("other", true)}

	first := soloOver(t, path, nil, file...)
	c1 := standbyController(t, file...)
	activate(t, c1)
	api := first.API(c1)
	if _, ok := api.(*Persisting); !ok {
		t.Fatalf("the API's controller alone is %T, want a *Persisting", api)
	}
	for _, s := range []task.Spec{spec("kept", true), spec("gone", true), spec("off", true)} {
		if err := api.Create(ctx, s, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := api.SetEnabled(ctx, "off", false, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := api.SetEnabled(ctx, "other", false, ""); err != nil {
		t.Fatal(err)
	}
	if err := api.Delete(ctx, "gone", false); err != nil {
		t.Fatal(err)
	}
	if rec, ok := first.st.(store.Tasks).TaskRecords()["gone"]; ok {
		t.Errorf("a deleted task created through the API left a record: %+v", rec)
	}
	// A record of a created task named as a task the file has now.
	if err := first.st.(store.Tasks).SaveTask(ctx, "file", store.TaskRecord{Spec: &task.Spec{Name: "file", Module: "./elsewhere", Enabled: true}}); err != nil {
		t.Fatal(err)
	}
	if err := first.st.(*store.Bolt).Close(); err != nil {
		t.Fatal(err)
	}

	// Restarted with a task named as the deleted one in the files: it is
	// kept.
	var logs lockedBuf
	file2 := append(file, spec("gone", true))
	second := soloOver(t, path, slog.New(slog.NewTextHandler(&logs, nil)), file2...)
	c2 := reconcile.New(reconcile.Options{Watcher: nullWatcher{},
		NewDriver: func(task.Spec) (driver.Driver, error) { return nullDriver{}, nil }}, file2)
	if err := second.Restore(ctx, c2); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"file": true, "other": false, "kept": true, "off": false, "gone": true}
	got := taskSet(c2)
	if len(got) != len(want) {
		t.Fatalf("tasks after the restart %v, want %v", got, want)
	}
	for name, on := range want {
		if g, ok := got[name]; !ok || g != on {
			t.Errorf("task %q after the restart: present %v enabled %v, want enabled %v", name, ok, g, on)
		}
	}
	if st, _ := c2.Task("file"); st.Spec.Module != "./m" {
		t.Errorf("the configured task was replaced by the stored one: module %q", st.Spec.Module)
	}
	if l := logs.String(); !strings.Contains(l, "task_name=file") || !strings.Contains(l, "the stored task is ignored") {
		t.Errorf("the conflict is not logged with the task's name:\n%s", l)
	}
}

// updatableCtrl is a controller with an Update that replaces the task
// (enough for the record's test; the controller's own keeps run state).
type updatableCtrl struct {
	*reconcile.Controller
	fail error
}

func (u updatableCtrl) Update(ctx context.Context, s task.Spec) error {
	if u.fail != nil {
		return u.fail
	}
	if err := u.Controller.Delete(ctx, s.Name, false); err != nil {
		return err
	}
	return u.Controller.Create(ctx, s, false)
}

// A change of a task's settings through the API is saved as the task's
// record (restored after a restart); a change the controller refuses
// leaves the record as it was.
func TestPersistingUpdateSavesTheTask(t *testing.T) {
	ctx := context.Background()
	recs := &memTasks{recs: map[string]store.TaskRecord{}}
	c := standbyController(t)
	activate(t, c)
	p := &Persisting{Controller: updatableCtrl{Controller: c}, Store: recs, Configured: ConfiguredNames(nil)}
	if err := p.Create(ctx, spec("api", true), false); err != nil {
		t.Fatal(err)
	}
	changed := spec("api", true)
	changed.Version = "2.0.0"
	if err := p.Update(ctx, changed); err != nil {
		t.Fatal(err)
	}
	if rec := recs.TaskRecords()["api"]; rec.Spec == nil || rec.Spec.Version != "2.0.0" {
		t.Fatalf("record after the update: %+v", rec)
	}
	p.Controller = updatableCtrl{Controller: c, fail: reconcile.ErrActive}
	again := changed
	again.Version = "3.0.0"
	if err := p.Update(ctx, again); !errors.Is(err, reconcile.ErrActive) {
		t.Fatalf("refused update: %v", err)
	}
	if rec := recs.TaskRecords()["api"]; rec.Spec == nil || rec.Spec.Version != "2.0.0" {
		t.Fatalf("record after a refused update: %+v", rec)
	}
}

// A task whose settings were changed through the API (its record holds
// the new ones) gets them when the records are applied again (a new
// leader, a follower's refresh, a restart), not only its enabled flag.
func TestApplyStoredUpdatesChangedSettings(t *testing.T) {
	ctx := context.Background()
	c := standbyController(t, spec("api", true))
	changed := spec("api", false)
	changed.Version = "2.0.0"
	recs := map[string]store.TaskRecord{"api": {Spec: &changed}}
	if _, err := ApplyStored(ctx, updatableCtrl{Controller: c}, recs, map[string]bool{}, map[string]bool{}, nil); err != nil {
		t.Fatal(err)
	}
	st, err := c.Task("api")
	if err != nil || st.Spec.Version != "2.0.0" || st.Spec.Enabled {
		t.Fatalf("after applying the records: %+v %v", st.Spec, err)
	}
	// The same records again change nothing.
	if _, err := ApplyStored(ctx, updatableCtrl{Controller: c, fail: errors.New("no update expected")}, recs, map[string]bool{}, map[string]bool{}, nil); err != nil {
		t.Fatal(err)
	}
}
