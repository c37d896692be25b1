package reconcile

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/reconcile/reconciletest"
	"github.com/ctsync/ctsync/internal/task"
)

// TestWorkQueue checks the work queue on its own: FIFO order, removal,
// the depth it reports, and how long it has been stuck.
func TestWorkQueue(t *testing.T) {
	clk := reconciletest.NewClock()
	var depth int
	q := newWorkQueue(1, clk, func(n int) { depth = n })
	q.push("a")
	q.push("b")
	q.push("c")
	q.remove("b")
	if q.len() != 2 || depth != 3 {
		t.Fatalf("len %d, reported depth %d; want 2 and 3 (removal reports nothing)", q.len(), depth)
	}
	clk.Advance(2 * time.Minute)
	if got := q.stuck(clk.Now()); got != 2*time.Minute {
		t.Fatalf("stuck %s, want 2m", got)
	}
	if name, ok := q.pop(); !ok || name != "a" || depth != 1 {
		t.Fatalf("pop = %q, %v (depth %d), want a", name, ok, depth)
	}
	if got := q.stuck(clk.Now()); got != 0 {
		t.Fatalf("stuck %s right after progress, want 0", got)
	}
	if name, _ := q.pop(); name != "c" {
		t.Fatalf("pop = %q, want c", name)
	}
	if _, ok := q.pop(); ok {
		t.Fatal("pop on an empty queue")
	}
}

// TestWorkQueueSlotHonoursContext checks that waiting for a run slot ends
// with the caller's context.
func TestWorkQueueSlotHonoursContext(t *testing.T) {
	q := newWorkQueue(1, reconciletest.NewClock(), nil)
	release, err := q.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := q.acquire(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire with every slot taken and the context ended: %v, want context.Canceled", err)
	}
	release()
}

// TestRequests checks the requests recorded on a task (API runs, drift
// checks, destroys): a caller whose context ends before a worker takes its
// request gets the context's error, the request never runs and the task
// is back where it was; once the workers run, a request is done by a
// worker holding a run slot, the caller waiting for its generation; after
// shutdown a request is refused.
func TestRequests(t *testing.T) {
	d := &slotDriver{}
	c := New(Options{Watcher: newFakeWatcher(), MaxParallel: 1, NewDriver: func(task.Spec) (driver.Driver, error) { return d, nil }},
		[]task.Spec{{Name: "a"}})
	d.c = c
	e := c.tasks["a"]
	ask := func(ctx context.Context) (Result, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.stepLocked(e, evReserve, wake{}) {
			t.Fatalf("task not reserved: phase %s", e.lc.phase)
		}
		gen, err := c.submitLocked(e, intent{kind: intentInspect})
		if err != nil {
			return Result{}, err
		}
		return c.awaitIntentLocked(ctx, e, gen)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ask(ctx); !errors.Is(err, context.Canceled) || d.plans.Load() != 0 {
		t.Fatalf("request before the workers start, context ended: %v (plans %d), want context.Canceled and no run", err, d.plans.Load())
	}
	c.mu.Lock()
	if e.lc.phase != phaseIdle || c.q.len() != 0 || e.lc.intent != nil {
		t.Fatalf("withdrawn request: phase %s, queue %v, intent %v; want idle, empty, none", e.lc.phase, c.q.names, e.lc.intent)
	}
	c.mu.Unlock()
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(runCtx); close(done) }()
	if _, err := ask(context.Background()); err != nil || d.plans.Load() != 1 || d.slots.Load() != 1 {
		t.Fatalf("request: %v, plans %d, slots taken during the run %d; want nil, 1 and 1", err, d.plans.Load(), d.slots.Load())
	}
	stop()
	<-done
	if _, err := ask(context.Background()); !errors.Is(err, errStopped) || d.plans.Load() != 1 {
		t.Fatalf("request after shutdown: %v (plans %d), want errStopped and no run", err, d.plans.Load())
	}
}

// slotDriver plans, noting how many run slots are taken while it does.
type slotDriver struct {
	driver.Driver
	plans, slots atomic.Int64
	c            *Controller
}

func (d *slotDriver) Init(context.Context) error { return nil }

func (d *slotDriver) Plan(context.Context, driver.Run, *task.Inputs) (driver.Result, error) {
	d.plans.Add(1)
	d.slots.Store(int64(len(d.c.q.slots)))
	return driver.Result{}, nil
}
