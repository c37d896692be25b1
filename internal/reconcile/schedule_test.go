package reconcile

import (
	"context"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/reconcile/reconciletest"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// A schedule task created while the daemon runs ticks from its creation:
// the schedule loop, asleep until its next tick (an hour when no task has
// a schedule), looks again when a task is added, and again when a
// disabled one is enabled.
func TestScheduleTaskCreatedAtRunTimeTicks(t *testing.T) {
	clk := reconciletest.NewClock()
	h := start(t, 2, nil, servicesTask("a", "web"), func(o *Options) { o.Clock = clk })
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h.waitApplied(t, "a")
	testutil.WaitFor(t, "the start-up run to be over", h.ctrl.Settled)

	cron := task.Spec{Name: "cron", Module: "./m", Enabled: true, BufferPeriod: &task.BufferPeriod{},
		Condition: task.Condition{Schedule: &task.ScheduleCondition{Cron: "*/10 * * * * * *"}}}
	if err := h.ctrl.Create(context.Background(), cron, false); err != nil {
		t.Fatal(err)
	}
	h.waitApplied(t, "cron") // the run at creation, as at start-up
	// A tick that comes while a run holds the task is skipped (see
	// TestScheduleTickDuringRunIsSkipped): the apply above is seen from
	// inside the run, so wait for the run to end before the tick.
	testutil.WaitFor(t, "the run at creation to end", func() bool { st, err := h.ctrl.Task("cron"); return err == nil && !st.Active })
	created := clk.Now()
	testutil.WaitFor(t, "the new task's next tick to be set", func() bool { return !h.ctrl.NextRun("cron").IsZero() })
	next := h.ctrl.NextRun("cron")
	if d := next.Sub(created); d <= 0 || d > 10*time.Second {
		t.Fatalf("next tick %s after creation, want within 10s", d)
	}
	// The loop may still sleep on the timer it set before the task was
	// created: move the clock only once it sleeps until that tick.
	testutil.WaitFor(t, "the schedule loop to wait for that tick", func() bool { return clk.PendingAt(next) })
	clk.Advance(next.Sub(created))
	h.waitApplied(t, "cron")
	testutil.WaitFor(t, "the tick's run to end", func() bool { st, err := h.ctrl.Task("cron"); return err == nil && !st.Active })

	// Disabled, then enabled: it ticks again.
	if _, err := h.ctrl.SetEnabled(context.Background(), "cron", false, ""); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the tick to be dropped", func() bool { return h.ctrl.NextRun("cron").IsZero() })
	if _, err := h.ctrl.SetEnabled(context.Background(), "cron", true, ""); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the enabled task's next tick to be set", func() bool { return !h.ctrl.NextRun("cron").IsZero() })
}

// A cron tick that comes while the task runs is skipped, as CTS skips a
// scheduled task that is active when its cron fires: the run in progress
// is not followed by another one for that tick.
func TestScheduleTickDuringRunIsSkipped(t *testing.T) {
	clk := reconciletest.NewClock()
	cron := task.Spec{Name: "cron", Module: "./m", Enabled: true, BufferPeriod: &task.BufferPeriod{},
		Condition: task.Condition{Schedule: &task.ScheduleCondition{Cron: "*/10 * * * * * *"}}}
	h := start(t, 2, []string{"cron"}, cron, func(o *Options) { o.Clock = clk })
	// The start-up run is in the driver, held there.
	testutil.WaitFor(t, "the start-up run to be in the driver", func() bool {
		h.rec.mu.Lock()
		defer h.rec.mu.Unlock()
		return h.rec.running["cron"] == 1
	})
	testutil.WaitFor(t, "the next tick to be set", func() bool { return !h.ctrl.NextRun("cron").IsZero() })
	tick := h.ctrl.NextRun("cron")
	testutil.WaitFor(t, "the schedule loop to wait for the tick", func() bool { return clk.WaitPending(1, 0) })
	clk.Advance(tick.Sub(clk.Now()))
	testutil.WaitFor(t, "the tick to be handled", func() bool { return h.ctrl.NextRun("cron").After(tick) })

	h.gates["cron"] <- struct{}{} // the start-up run ends
	h.waitApplied(t, "cron")
	testutil.WaitFor(t, "the task to settle or run again", func() bool {
		h.rec.mu.Lock()
		again := h.rec.running["cron"] > 0
		h.rec.mu.Unlock()
		return again || h.ctrl.Settled()
	})
	h.rec.mu.Lock()
	again := h.rec.running["cron"] > 0
	h.rec.mu.Unlock()
	if again {
		t.Fatal("the task runs again for a tick that came during its run")
	}
}
