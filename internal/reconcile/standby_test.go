package reconcile

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/reconcile/reconciletest"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// A new leader applies the cluster's enabled flags to its standby
// controller, whose tasks are queued (a follower queues, it does not run):
// the flag changes, a disabled task leaves the queue and does not run on
// activation; a run=now stays refused while queued.
func TestStandbySetEnabledOnQueuedTask(t *testing.T) {
	h := start(t, 4, nil, func(o *Options) { o.Standby = true }, servicesTask("a", "web"), servicesTask("b", "web"))
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	testutil.WaitFor(t, "tasks queued on the follower", func() bool {
		a, _ := h.ctrl.Task("a")
		b, _ := h.ctrl.Task("b")
		return a.Active && b.Active
	})
	ctx := context.Background()
	if _, err := h.ctrl.SetEnabled(ctx, "a", false, "now"); !errors.Is(err, ErrActive) {
		t.Fatalf("run=now on a queued standby task: %v, want ErrActive", err)
	}
	if _, err := h.ctrl.SetEnabled(ctx, "a", false, ""); err != nil {
		t.Fatalf("disable a queued task on standby: %v", err)
	}
	if st, _ := h.ctrl.Task("a"); st.Spec.Enabled || st.Active {
		t.Fatalf("a after disable: enabled=%v active=%v", st.Spec.Enabled, st.Active)
	}
	h.ctrl.SetActive(true)
	h.waitApplied(t, "b")
	h.noApply(t)
	if n := h.rec.count("a"); n != 0 {
		t.Fatalf("disabled task ran %d times on activation", n)
	}
}

// A follower with a schedule task sleeps until each tick and lets it pass:
// it does not spin on a tick in the past (it once used ~40% of a core).
func TestStandbyScheduleDoesNotSpin(t *testing.T) {
	s := task.Spec{Name: "cron", Module: "./m", Enabled: true, BufferPeriod: &task.BufferPeriod{},
		Condition: task.Condition{Schedule: &task.ScheduleCondition{Cron: "* * * * * * *"}}} // every second
	h := start(t, 2, nil, s, func(o *Options) { o.Standby = true })
	base := h.ctrl.src.scheduleWakes.Load()
	testutil.WaitFor(t, "three schedule ticks to pass", func() bool { return h.ctrl.src.scheduleWakes.Load() >= base+3 })
	if n := h.ctrl.src.scheduleWakes.Load() - base; n > 10 {
		t.Fatalf("the schedule loop woke %d times for 3 ticks: it spins", n)
	}
	if h.rec.count("cron") != 0 {
		t.Fatal("a follower ran a schedule task")
	}
}

// Live: before Run (the daemon waits for Consul); a queued task that no worker takes while run slots
// are free makes the controller not live after WedgedAfter (fake clock); a
// follower with queued tasks is live.
func TestLiveness(t *testing.T) {
	clk := reconciletest.NewClock()
	c := New(Options{Watcher: newFakeWatcher(), Clock: clk}, []task.Spec{servicesTask("a", "web")})
	if err := c.Live(); err != nil {
		t.Fatalf("not live before Run (the daemon waits for Consul then): %v", err)
	}
	// Running, but with no workers: what a wedged worker pool looks like.
	c.mu.Lock()
	c.running, c.started = true, true
	c.enqueueLocked(c.tasks["a"], Due(TriggerChange))
	c.mu.Unlock()
	if err := c.Live(); err != nil {
		t.Fatalf("live at once: %v", err)
	}
	clk.Advance(WedgedAfter)
	if err := c.Live(); err == nil || !strings.Contains(err.Error(), "stuck") {
		t.Fatalf("Live after %s with a task queued and no worker: %v", WedgedAfter, err)
	}
	c.SetActive(false) // a follower queues and runs nothing: fine
	if err := c.Live(); err != nil {
		t.Fatalf("follower: %v", err)
	}
	// Notifications that the note loop never takes.
	c.Notify("a", healthKey("web"))
	clk.Advance(WedgedAfter)
	if err := c.Live(); err == nil || !strings.Contains(err.Error(), "notifications") {
		t.Fatalf("Live with a stuck note loop: %v", err)
	}
}
