package reconcile

import (
	"context"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/reconcile/reconciletest"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

func driftEvents(h *harness, name string) int {
	n := 0
	for _, ev := range h.st.Events(name) {
		if ev.Kind == store.KindDrift {
			n++
		}
	}
	return n
}

// driftParked waits until the drift loop has looked again since wakes and
// is asleep: its timer (and the schedule loop's hour) are pending.
func driftParked(t *testing.T, h *harness, clk *reconciletest.Clock, wakes int64) {
	t.Helper()
	testutil.WaitFor(t, "the drift loop to look again and sleep", func() bool {
		return h.ctrl.src.driftWakes.Load() > wakes && len(clk.Pending()) == 2
	})
}

// nextCheckWithin reports whether the drift loop's pending sleep is a
// check due within d (not the hour it sleeps with nothing to check).
func nextCheckWithin(clk *reconciletest.Clock, d time.Duration) bool {
	for _, p := range clk.Pending() {
		if p <= d {
			return true
		}
	}
	return false
}

// advanceUntil moves the fake clock on by 1.2 s (a little more than a
// check's interval with its jitter) each time it looks, until cond holds:
// a check that came while the task was queued or running is put off by an
// interval, and is then due at the next step.
func advanceUntil(t *testing.T, clk *reconciletest.Clock, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, what, func() bool {
		if cond() {
			return true
		}
		clk.Advance(1200 * time.Millisecond)
		return false
	})
}

// With no task to check, the drift loop sleeps for an hour: enabling a
// task again, or creating one, must wake it so its checks start on time.
// Time is a fake clock: nothing here waits for real seconds.
func TestDriftChecksFollowEnableAndCreate(t *testing.T) {
	clk := reconciletest.NewClock()
	s := servicesTask("a", "web")
	s.DriftDetection = &task.DriftDetection{Interval: task.Duration(time.Second)}
	h := start(t, 4, nil, s, func(o *Options) { o.Clock = clk })
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h.waitApplied(t, "a")
	idle(t, h, "a")
	// The fake driver's plans always have changes: each check is a drift.
	testutil.WaitFor(t, "the first check to be due", func() bool { return nextCheckWithin(clk, 1100*time.Millisecond) })
	advanceUntil(t, clk, "a first drift check", func() bool { return driftEvents(h, "a") >= 1 })

	ctx := context.Background()
	wakes := h.ctrl.src.driftWakes.Load()
	if _, err := h.ctrl.SetEnabled(ctx, "a", false, ""); err != nil {
		t.Fatal(err)
	}
	driftParked(t, h, clk, wakes)
	if nextCheckWithin(clk, time.Minute) {
		t.Fatalf("a check is due for a disabled task: pending %v", clk.Pending())
	}
	before := driftEvents(h, "a")
	clk.Advance(3 * time.Second)
	if got := driftEvents(h, "a"); got != before {
		t.Fatalf("a disabled task was checked for drift (%d -> %d)", before, got)
	}

	if _, err := h.ctrl.SetEnabled(ctx, "a", true, ""); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "a check due after enabling", func() bool { return nextCheckWithin(clk, 1100*time.Millisecond) })
	advanceUntil(t, clk, "a drift check after enabling", func() bool { return driftEvents(h, "a") > before })

	wakes = h.ctrl.src.driftWakes.Load()
	if _, err := h.ctrl.SetEnabled(ctx, "a", false, ""); err != nil {
		t.Fatal(err)
	}
	driftParked(t, h, clk, wakes)
	b := servicesTask("b", "web")
	b.DriftDetection = &task.DriftDetection{Interval: task.Duration(time.Second)}
	if err := h.ctrl.Create(ctx, b, false); err != nil {
		t.Fatal(err)
	}
	h.waitApplied(t, "b")
	idle(t, h, "b") // a check that comes while it runs is put off by an interval
	testutil.WaitFor(t, "a check due after creating", func() bool { return nextCheckWithin(clk, 1100*time.Millisecond) })
	advanceUntil(t, clk, "a drift check of the created task", func() bool { return driftEvents(h, "b") >= 1 })
}
