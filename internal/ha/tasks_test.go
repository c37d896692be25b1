package ha

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
	"github.com/ctsync/ctsync/internal/watch"
)

// nullWatcher has data for nothing: tasks never become ready to run.
type nullWatcher struct{}

func (nullWatcher) Subscribe(string, watch.Query)  {}
func (nullWatcher) Unsubscribe(string, string)     {}
func (nullWatcher) UnsubscribeAll(string)          {}
func (nullWatcher) Get(string) (any, uint64, bool) { return nil, 0, false }
func (nullDriver) Init(context.Context) error      { return nil }
func (nullDriver) Forget(context.Context) error    { return nil }
func (nullDriver) Destroy(context.Context, driver.Run) (driver.Result, error) {
	return driver.Result{}, nil
}

type nullDriver struct{}

func (nullDriver) Plan(context.Context, driver.Run, *task.Inputs) (driver.Result, error) {
	return driver.Result{}, nil
}
func (nullDriver) Apply(context.Context, driver.Run, *task.Inputs) (driver.Result, error) {
	return driver.Result{}, nil
}

type memTasks struct {
	mu   sync.Mutex
	recs map[string]store.TaskRecord
	fail bool
}

func (m *memTasks) SaveTask(_ context.Context, name string, rec store.TaskRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail {
		return store.ErrNotLeader
	}
	m.recs[name] = rec
	return nil
}

func (m *memTasks) RemoveTaskRecord(_ context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail {
		return store.ErrNotLeader
	}
	delete(m.recs, name)
	return nil
}

func (m *memTasks) TaskRecords() map[string]store.TaskRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]store.TaskRecord{}
	for k, v := range m.recs {
		out[k] = v
	}
	return out
}

func spec(name string, enabled bool) task.Spec {
	return task.Spec{Name: name, Enabled: enabled, Module: "./m",
		Condition: task.Condition{Services: &task.ServicesCondition{ServicesSelector: task.ServicesSelector{Names: []string{"web"}}}}}
}

func standbyController(t *testing.T, specs ...task.Spec) *reconcile.Controller {
	t.Helper()
	c := reconcile.New(reconcile.Options{Watcher: nullWatcher{}, Standby: true,
		NewDriver: func(task.Spec) (driver.Driver, error) { return nullDriver{}, nil }}, specs)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	// Run has started once the enabled tasks wait in the queue (a follower
	// queues, it does not run).
	testutil.Eventually(t, 5*time.Second, "controller started", func() bool {
		for _, st := range c.Tasks() {
			if st.Spec.Enabled && !st.Active {
				return false
			}
		}
		return true
	})
	return c
}

func taskSet(c *reconcile.Controller) map[string]bool {
	out := map[string]bool{}
	for _, st := range c.Tasks() {
		if !st.Deleting {
			out[st.Spec.Name] = st.Spec.Enabled
		}
	}
	return out
}

// API changes are saved, and a new leader's controller ends up with the
// same task set as the old leader's.
func TestPersistedTaskChangesReachTheNextLeader(t *testing.T) {
	configured := map[string]bool{"a": true, "b": true, "c": true}
	recs := &memTasks{recs: map[string]store.TaskRecord{}}
	ctx := context.Background()

	old := standbyController(t, spec("a", true), spec("b", true), spec("c", false))
	activate(t, old)
	p := &Persisting{Controller: old, Store: recs, Configured: ConfiguredNames(configured)}
	if err := p.Create(ctx, spec("api1", true), false); err != nil {
		t.Fatal(err)
	}
	if err := p.Create(ctx, spec("api2", true), false); err != nil {
		t.Fatal(err)
	}
	idle(t, old)
	if _, err := p.SetEnabled(ctx, "a", false, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SetEnabled(ctx, "c", true, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SetEnabled(ctx, "api2", false, ""); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, "b", false); err != nil {
		t.Fatal(err)
	}
	// inspect (which here waits for data that never comes) saves nothing
	ictx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, _ = p.SetEnabled(ictx, "a", true, "inspect")
	cancel()
	if r := recs.TaskRecords()["a"]; r.Enabled == nil || *r.Enabled {
		t.Fatalf("inspect changed the record of a: %+v", r)
	}
	if _, err := p.SetEnabled(ctx, "nope", true, ""); !errors.Is(err, reconcile.ErrNotFound) {
		t.Fatalf("unknown task: %v", err)
	}
	if _, ok := recs.TaskRecords()["nope"]; ok {
		t.Fatal("a failed change to an unknown task was saved")
	}
	if err := p.Delete(ctx, "nope", false); !errors.Is(err, reconcile.ErrNotFound) {
		t.Fatalf("delete unknown: %v", err)
	}
	want := map[string]bool{"a": false, "c": true, "api1": true, "api2": false}
	if got := taskSet(old); !equal(got, want) {
		t.Fatalf("old leader's tasks = %v, want %v", got, want)
	}

	// The follower has the configuration only, and (as a follower) its
	// tasks are queued: the flags must apply all the same.
	next := standbyController(t, spec("a", true), spec("b", true), spec("c", false))
	if _, err := ApplyStored(ctx, next, recs.TaskRecords(), configured, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := taskSet(next); !equal(got, want) {
		t.Fatalf("new leader's tasks = %v, want %v", got, want)
	}
	if st, _ := next.Task("api1"); st.Spec.Module != "./m" || st.Spec.Condition.Services == nil {
		t.Fatalf("api task not restored whole: %+v", st.Spec)
	}
	// Applying again changes nothing.
	if _, err := ApplyStored(ctx, next, recs.TaskRecords(), configured, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := taskSet(next); !equal(got, want) {
		t.Fatalf("second apply: %v", got)
	}
	// Records wiped (another leader ran with -reset-storage): the tasks
	// created through the API go, the configuration comes back as written.
	if _, err := ApplyStored(ctx, next, nil, configured, map[string]bool{"a": true, "b": true, "c": false}, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := taskSet(next), map[string]bool{"a": true, "c": false}; !equal(got, want) {
		t.Fatalf("after a reset: %v, want %v", got, want)
	}
}

// A change that cannot be saved (lost the lead meanwhile) is reported.
func TestPersistingReportsSaveFailures(t *testing.T) {
	recs := &memTasks{recs: map[string]store.TaskRecord{}, fail: true}
	c := standbyController(t, spec("a", true))
	activate(t, c)
	p := &Persisting{Controller: c, Store: recs, Configured: ConfiguredNames(map[string]bool{"a": true})}
	if err := p.Create(context.Background(), spec("x", true), false); !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("create: %v", err)
	}
	if _, err := c.Task("x"); err == nil {
		t.Fatal("a create that could not be saved left the task in memory")
	}
	if _, err := p.SetEnabled(context.Background(), "a", false, ""); !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("disable: %v", err)
	}
	if st, _ := c.Task("a"); !st.Spec.Enabled {
		t.Fatal("a disable that could not be saved went ahead")
	}
	if err := p.Delete(context.Background(), "a", false); !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("delete: %v", err)
	}
	if _, err := c.Task("a"); err != nil {
		t.Fatal("a delete that could not be saved went ahead")
	}
	// Saved again: the same create goes through.
	recs.mu.Lock()
	recs.fail = false
	recs.mu.Unlock()
	if err := p.Create(context.Background(), spec("x", true), false); err != nil {
		t.Fatalf("create again: %v", err)
	}
	if rec := recs.TaskRecords()["x"]; rec.Spec == nil || rec.Spec.Name != "x" {
		t.Fatalf("record of x: %+v", rec)
	}
}

// A creation the controller refuses after the record was saved (here: a
// dependency on a task that does not exist) leaves the record as it was:
// none, or the previous one.
func TestPersistingCreateUndoneWhenCreateFails(t *testing.T) {
	recs := &memTasks{recs: map[string]store.TaskRecord{"y": {Deleted: true}}}
	c := standbyController(t)
	activate(t, c)
	p := &Persisting{Controller: c, Store: recs, Configured: ConfiguredNames(map[string]bool{})}
	bad := spec("x", true)
	bad.DependsOn = []string{"missing"} // refused by the controller (task.CheckAdded)
	if err := p.Create(context.Background(), bad, false); err == nil {
		t.Fatal("a task depending on a missing task was created")
	}
	if _, ok := recs.TaskRecords()["x"]; ok {
		t.Fatal("the refused task's record stayed in the store")
	}
	bad.Name = "y"
	if err := p.Create(context.Background(), bad, false); err == nil {
		t.Fatal("a task depending on a missing task was created")
	}
	if rec := recs.TaskRecords()["y"]; !rec.Deleted || rec.Spec != nil {
		t.Fatalf("the previous record of y was not put back: %+v", rec)
	}
}

// activate makes the controller active and waits until the start-up runs
// (which find no data) are over.
func activate(t *testing.T, c *reconcile.Controller) {
	t.Helper()
	c.SetActive(true)
	idle(t, c)
}

func idle(t *testing.T, c *reconcile.Controller) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, "idle controller", func() bool {
		for _, st := range c.Tasks() {
			if st.Active {
				return false
			}
		}
		return true
	})
}

func equal(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// A deletion with destroy that the previous leader did not finish: the
// record keeps the task (its spec, for one created through the API), the
// new leader gets it back disabled, and finishes the destroy once it leads;
// the record then says deleted, nothing more to destroy.
func TestUnfinishedDestroyIsResumedByTheNextLeader(t *testing.T) {
	ctx := context.Background()
	configured := map[string]bool{"a": true}
	api3 := spec("api3", true)
	recs := &memTasks{recs: map[string]store.TaskRecord{
		"api3": {Deleted: true, Destroy: true, Spec: &api3},
		"a":    {Deleted: true, Destroy: true},
	}}
	next := standbyController(t, spec("a", true))
	destroys, err := ApplyStored(ctx, next, recs.TaskRecords(), configured, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(destroys) != 2 || destroys[0] != "a" || destroys[1] != "api3" {
		t.Fatalf("destroys = %v", destroys)
	}
	if got := taskSet(next); !equal(got, map[string]bool{"a": true, "api3": false}) {
		t.Fatalf("tasks kept for their destroy: %v", got)
	}
	p := &Persisting{Controller: next, Store: recs, Configured: ConfiguredNames(configured)}
	done := make(chan struct{})
	go func() { ResumeDestroys(ctx, p, destroys, slog.New(slog.DiscardHandler)); close(done) }()
	select {
	case <-done:
		t.Fatal("destroys ran before this instance led")
	default:
	}
	activate(t, next)
	<-done
	if got := taskSet(next); len(got) != 0 {
		t.Fatalf("tasks left after the resumed destroys: %v", got)
	}
	for _, name := range destroys {
		if r := recs.TaskRecords()[name]; !r.Deleted || r.Destroy || r.Spec != nil {
			t.Fatalf("record of %s after its destroy: %+v", name, r)
		}
	}
}

// Persisting.Delete with destroy records the pending destroy (with the spec
// of a task created through the API) before it starts, and the plain
// deletion once it is done.
func TestDeleteWithDestroyIsRecordedUntilDone(t *testing.T) {
	ctx := context.Background()
	recs := &memTasks{recs: map[string]store.TaskRecord{}}
	c := standbyController(t)
	activate(t, c)
	var seen []store.TaskRecord
	p := &Persisting{Controller: c, Store: &spyTasks{memTasks: recs, saved: &seen}, Configured: ConfiguredNames(map[string]bool{})}
	if err := p.Create(ctx, spec("api4", true), false); err != nil {
		t.Fatal(err)
	}
	idle(t, c)
	if err := p.Delete(ctx, "api4", true); err != nil {
		t.Fatal(err)
	}
	if len(seen) < 3 || !seen[1].Destroy || seen[1].Spec == nil || seen[1].Spec.Name != "api4" {
		t.Fatalf("records saved: %+v", seen)
	}
	if last := seen[len(seen)-1]; !last.Deleted || last.Destroy {
		t.Fatalf("final record %+v", last)
	}
}

type spyTasks struct {
	*memTasks
	saved *[]store.TaskRecord
}

func (s *spyTasks) SaveTask(ctx context.Context, name string, rec store.TaskRecord) error {
	*s.saved = append(*s.saved, rec)
	return s.memTasks.SaveTask(ctx, name, rec)
}

// refreshing applies the stored records to c over and over, holding mu
// each time, as every member of a spread cluster does on each change in
// Consul, until the returned stop is called (it waits for the last one).
func refreshing(t *testing.T, c Controller, recs *memTasks, mu *sync.Mutex) (stop func()) {
	done := make(chan struct{})
	refreshed := make(chan struct{})
	go func() {
		defer close(refreshed)
		for {
			select {
			case <-done:
				return
			default:
			}
			mu.Lock()
			_, err := ApplyStored(context.Background(), c, recs.TaskRecords(), nil, nil, nil)
			mu.Unlock()
			if err != nil {
				t.Errorf("refresh: %v", err)
				return
			}
		}
	}()
	return func() { close(done); <-refreshed }
}

// With Mu held by whoever applies the stored records (as every member of
// a spread cluster does on each change in Consul), creates and
// enable/disable changes racing with those refreshes all succeed and end
// with the task and its record in agreement.
func TestPersistingOrderedWithRefreshes(t *testing.T) {
	recs := &memTasks{recs: map[string]store.TaskRecord{}}
	c := standbyController(t)
	activate(t, c)
	var mu sync.Mutex
	p := &Persisting{Controller: c, Store: recs, Configured: ConfiguredNames(map[string]bool{}), Mu: &mu}
	stop := refreshing(t, c, recs, &mu)
	for i := range 30 {
		name := fmt.Sprintf("t%d", i)
		if err := p.Create(context.Background(), spec(name, false), false); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		if _, err := p.SetEnabled(context.Background(), name, true, ""); err != nil && !errors.Is(err, reconcile.ErrActive) {
			t.Fatalf("enable %s: %v", name, err)
		}
	}
	stop()
	for i := range 30 {
		name := fmt.Sprintf("t%d", i)
		if _, err := c.Task(name); err != nil {
			t.Errorf("%s: gone from the controller", name)
		}
		if rec := recs.TaskRecords()[name]; rec.Spec == nil {
			t.Errorf("%s: record %+v", name, rec)
		}
	}
}

// A delete racing with the refreshes of the stored records (spread mode:
// every member applies them on each change in Consul) is carried out by
// the delete itself: it succeeds, and the task and its record agree.
func TestPersistingDeleteOrderedWithRefreshes(t *testing.T) {
	recs := &memTasks{recs: map[string]store.TaskRecord{}}
	c := standbyController(t)
	activate(t, c)
	var mu sync.Mutex
	p := &Persisting{Controller: c, Store: recs, Configured: ConfiguredNames(map[string]bool{}), Mu: &mu}
	for i := range 30 {
		if err := p.Create(context.Background(), spec(fmt.Sprintf("t%d", i), false), false); err != nil {
			t.Fatal(err)
		}
	}
	stop := refreshing(t, c, recs, &mu)
	for i := range 30 {
		name := fmt.Sprintf("t%d", i)
		if err := p.Delete(context.Background(), name, false); err != nil {
			t.Errorf("delete %s: %v", name, err)
		}
	}
	stop()
	for i := range 30 {
		name := fmt.Sprintf("t%d", i)
		if st, err := c.Task(name); err == nil && !st.Deleting {
			t.Errorf("%s: still in the controller", name)
		}
		if rec := recs.TaskRecords()[name]; !rec.Deleted {
			t.Errorf("%s: record %+v", name, rec)
		}
	}
}

// heldDestroyCtrl is a controller whose deletions with destroy are held
// by a safety gate (reconcile.DestroyHeldError): the task stays.
type heldDestroyCtrl struct{ Controller }

func (h heldDestroyCtrl) Delete(ctx context.Context, name string, destroy bool) error {
	if !destroy {
		return h.Controller.Delete(ctx, name, destroy)
	}
	return &reconcile.DestroyHeldError{Plan: gate.Plan{ID: "p1", Task: name, Reason: "approval required", DeletesTask: true}}
}

// A deletion with destroy whose destroy plan is held stays recorded with
// its destroy pending (a new leader plans it again and its gates hold it);
// once the plan is rejected or expires, Kept puts the task's record back.
func TestDeleteWithHeldDestroyStaysRecordedUntilKept(t *testing.T) {
	ctx := context.Background()
	recs := &memTasks{recs: map[string]store.TaskRecord{}}
	c := standbyController(t)
	activate(t, c)
	p := &Persisting{Controller: heldDestroyCtrl{c}, Store: recs, Configured: ConfiguredNames(map[string]bool{})}
	if err := p.Create(ctx, spec("api5", true), false); err != nil {
		t.Fatal(err)
	}
	idle(t, c)
	var held *reconcile.DestroyHeldError
	if err := p.Delete(ctx, "api5", true); !errors.As(err, &held) {
		t.Fatalf("delete: %v, want DestroyHeldError", err)
	}
	if r := recs.TaskRecords()["api5"]; !r.Deleted || !r.Destroy || r.Spec == nil {
		t.Fatalf("record while the destroy is held: %+v; want the deletion with its destroy pending", r)
	}
	p.Kept(ctx, "api5")
	if r := recs.TaskRecords()["api5"]; r.Deleted || r.Destroy || r.Spec == nil || r.Spec.Name != "api5" {
		t.Fatalf("record once kept: %+v; want the task", r)
	}
	// Approved and destroyed (the controller deleted the task): the
	// deletion is recorded done, no destroy left for a new leader.
	p.Destroyed(ctx, "api5") // the task is still here: nothing recorded
	if r := recs.TaskRecords()["api5"]; r.Deleted {
		t.Fatalf("record of a task still there: %+v", r)
	}
	if err := c.Delete(ctx, "api5", false); err != nil {
		t.Fatal(err)
	}
	p.Destroyed(ctx, "api5")
	if r := recs.TaskRecords()["api5"]; !r.Deleted || r.Destroy || r.Spec != nil {
		t.Fatalf("record once destroyed: %+v; want the deletion done", r)
	}
}

// A new leader finishing a deletion whose destroy its gates hold again
// logs that the destroy waits for approval, at INFO: that is expected,
// not a failure (ERROR stays for real failures).
func TestResumedHeldDestroyIsNotAnError(t *testing.T) {
	ctx := context.Background()
	recs := &memTasks{recs: map[string]store.TaskRecord{}}
	c := standbyController(t)
	activate(t, c)
	p := &Persisting{Controller: heldDestroyCtrl{c}, Store: recs, Configured: ConfiguredNames(map[string]bool{})}
	if err := p.Create(ctx, spec("api6", true), false); err != nil {
		t.Fatal(err)
	}
	idle(t, c)
	var logs bytes.Buffer
	ResumeDestroys(ctx, p, []string{"api6"}, slog.New(slog.NewTextHandler(&logs, nil)))
	out := logs.String()
	if strings.Contains(out, "level=ERROR") || !strings.Contains(out, `level=INFO msg="ha: the destroy of the deleted task waits for approval; nothing destroyed" task_name=api6 plan=p1`) {
		t.Fatalf("logs of a resumed destroy held for approval:\n%s", out)
	}
	if r := recs.TaskRecords()["api6"]; !r.Deleted || !r.Destroy {
		t.Fatalf("record while the destroy is held: %+v; want the deletion with its destroy pending", r)
	}
}
