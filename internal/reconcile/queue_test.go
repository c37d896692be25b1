package reconcile

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/reconcile/reconciletest"
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

// TestHandOff checks the runs handed to the workers (API runs, drift
// checks, destroys): a caller whose context ends before a worker takes
// its run gets the context's error and the run never happens; once the
// workers run, each handed run is done by a worker holding a run slot,
// the caller waiting; after shutdown a handed run is refused.
func TestHandOff(t *testing.T) {
	c := New(Options{Watcher: newFakeWatcher(), MaxParallel: 1}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	if err := c.handOff(ctx, func(context.Context) { ran = true }); !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("handOff before the workers start, context ended: %v (ran %v), want context.Canceled and no run", err, ran)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(runCtx); close(done) }()
	slots := -1
	if err := c.handOff(context.Background(), func(context.Context) { slots = len(c.q.slots) }); err != nil || slots != 1 {
		t.Fatalf("handOff: %v, slots taken during the run %d; want nil and 1", err, slots)
	}
	stop()
	<-done
	if err := c.handOff(context.Background(), func(context.Context) { t.Error("a run handed over after shutdown ran") }); !errors.Is(err, errStopped) {
		t.Fatalf("handOff after shutdown: %v, want errStopped", err)
	}
}
