package reconcile

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// fdCount is the number of open file descriptors of this process.
func fdCount(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// logDriver does what the Terraform driver does with files on every run:
// it writes a per-run log file, keeps the newest few, and hands the log
// path back (the controller reads its tail into the event).
type logDriver struct {
	dir  string
	runs atomic.Int64
	done chan struct{}
}

func (d *logDriver) Init(context.Context) error { return nil }
func (d *logDriver) Plan(context.Context, driver.Run, *task.Inputs) (driver.Result, error) {
	return driver.Result{}, nil
}
func (d *logDriver) Forget(context.Context) error { return nil }
func (d *logDriver) Destroy(context.Context, driver.Run) (driver.Result, error) {
	return driver.Result{}, nil
}
func (d *logDriver) Apply(_ context.Context, run driver.Run, in *task.Inputs) (driver.Result, error) {
	p := filepath.Join(d.dir, run.ID+".log")
	if err := os.WriteFile(p, fmt.Appendf(nil, "apply %d services\nApply complete!\n", len(in.Services)), 0o600); err != nil {
		return driver.Result{}, err
	}
	n := d.runs.Add(1)
	_ = os.Remove(filepath.Join(d.dir, fmt.Sprintf("old-%d.log", n-3)))
	_ = os.Rename(p, filepath.Join(d.dir, fmt.Sprintf("old-%d.log", n)))
	d.done <- struct{}{}
	return driver.Result{LogPath: filepath.Join(d.dir, fmt.Sprintf("old-%d.log", n)), Add: 1, Changes: true}, nil
}

// 10,000 runs through the controller leave the process with the file
// descriptors and goroutines it had, and the store's history bounded.
func TestResourcesStableOver10000Runs(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 runs")
	}
	const runs = 10000
	d := &logDriver{dir: t.TempDir(), done: make(chan struct{}, 1)}
	st := store.NewMemory(0)
	h := start(t, 4, nil, servicesTask("a", "web"), func(o *Options) {
		o.Store = st
		o.NewDriver = func(task.Spec) (driver.Driver, error) { return d, nil }
	})
	set := func(i int) { h.w.Set(healthKey("web"), []task.Service{inst(fmt.Sprintf("web-%d", i), "web")}) }
	wait := func() {
		select {
		case <-d.done:
		case <-time.After(testutil.Scale(10 * time.Second)):
			t.Fatalf("no run after %d", d.runs.Load())
		}
	}
	// Warm up: the first runs create what stays (driver, timers, maps).
	for i := 0; i < 10; i++ {
		set(i)
		wait()
	}
	runtime.GC()
	fds, goroutines := fdCount(t), runtime.NumGoroutine()
	for i := 10; i < runs; i++ {
		set(i)
		wait()
	}
	// Let the last run's bookkeeping (event, in-flight marker) finish.
	testutil.WaitFor(t, "the last run's event", func() bool { return len(st.Events("a")) >= store.DefaultHistory })
	if n := d.runs.Load(); n != runs {
		t.Fatalf("%d runs, want %d", n, runs)
	}
	// A file of the last run (its log) may still be on its way to being
	// closed: a leak over 10,000 runs would not come back down.
	for deadline := time.Now().Add(testutil.Scale(time.Second)); fdCount(t) > fds && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got := fdCount(t); got > fds {
		t.Errorf("open file descriptors grew from %d to %d over %d runs", fds, got, runs)
	}
	// Goroutines of the last run may still be on their way out.
	for deadline := time.Now().Add(testutil.Scale(time.Second)); runtime.NumGoroutine() > goroutines && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got := runtime.NumGoroutine(); got > goroutines {
		t.Errorf("goroutines grew from %d to %d over %d runs", goroutines, got, runs)
	}
	if n := len(st.Events("a")); n != store.DefaultHistory {
		t.Errorf("%d events kept, want the history bound %d", n, store.DefaultHistory)
	}
	h.ctrl.mu.Lock()
	notes, queue := len(h.ctrl.src.notes), h.ctrl.q.len()
	h.ctrl.mu.Unlock()
	if notes > 1 || queue > 1 {
		t.Errorf("controller backlog after the runs: %d notes, %d queued", notes, queue)
	}
}

// Notifications waiting for the note loop are coalesced per task and
// query, so a view that changes faster than the loop keeps up cannot grow
// the backlog without bound; once handled, a note can be queued again.
func TestNotifyBacklogIsBounded(t *testing.T) {
	c := New(Options{Watcher: newFakeWatcher()}, []task.Spec{servicesTask("a", "web"), servicesTask("b", "web")})
	for i := 0; i < 100000; i++ {
		c.Notify("a", healthKey("web"))
		c.Notify("b", healthKey("web"))
		c.Notify("a", healthKey("db"))
	}
	c.mu.Lock()
	n := len(c.src.notes)
	c.mu.Unlock()
	if n != 3 {
		t.Fatalf("%d notes waiting, want 3 (one per task and query)", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.src.noteLoop(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	signal(c.src.noteKick)
	testutil.Eventually(t, time.Second, "the notes handled", func() bool {
		c.mu.Lock()
		n = len(c.src.notes)
		c.mu.Unlock()
		return n == 0
	})
	c.mu.Lock()
	left := len(c.src.noted)
	c.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d handled notes still marked as waiting: they would never be queued again", left)
	}
}
