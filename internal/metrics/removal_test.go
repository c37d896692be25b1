package metrics

import (
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/holddown"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/task"
)

// The hold-down's and the window's metrics: at zero once a task has
// removal_delay (or a window over a destroy rule), fed by OnRemoval and
// OnGate, gone with the task.
func TestRemovalAndWindowMetrics(t *testing.T) {
	list := &tasks{}
	fifty := 50
	delay := task.Duration(30 * time.Second)
	fw := reconcile.TaskState{Spec: task.Spec{Name: "fw", RemovalDelay: &delay,
		Approval: &task.Approval{MaxDestroyPercent: &fifty}}}
	list.set(fw, state("plain", false))
	m := New(Options{Tasks: list.get})

	text := scrape(t, m)
	has(t, text, `ctsync_task_removals_pending{task="fw"} 0`, `ctsync_task_removals_total{action="pending",task="fw"} 0`,
		`ctsync_task_removals_total{action="cancelled",task="fw"} 0`, `ctsync_task_removals_total{action="applied",task="fw"} 0`,
		`ctsync_task_runs_held_window_total{task="fw"} 0`)
	hasNot(t, text, `ctsync_task_removals_pending{task="plain"}`, `ctsync_task_runs_held_window_total{task="plain"}`)

	step := func(a string) holddown.Change { return holddown.Change{Action: a} }
	m.OnRemoval("fw", []holddown.Change{step(holddown.ActionPending), step(holddown.ActionPending), step(holddown.ActionPending)}, 3)
	m.OnRemoval("fw", []holddown.Change{step(holddown.ActionCancelled), step(holddown.ActionCancelled), step(holddown.ActionApplied)}, 0)
	m.OnGate(gate.Event{Kind: gate.EventApproval, Action: gate.ActionHeld, Task: "fw", Plan: gate.Plan{Window: &gate.WindowNote{Window: "1h"}}})
	m.OnGate(gate.Event{Kind: gate.EventApproval, Action: gate.ActionHeld, Task: "fw"})
	has(t, scrape(t, m), `ctsync_task_removals_pending{task="fw"} 0`, `ctsync_task_removals_total{action="pending",task="fw"} 3`,
		`ctsync_task_removals_total{action="cancelled",task="fw"} 2`, `ctsync_task_removals_total{action="applied",task="fw"} 1`,
		`ctsync_task_runs_held_window_total{task="fw"} 1`, `ctsync_task_runs_held_total{task="fw"} 2`)

	list.set(state("plain", false))
	hasNot(t, scrape(t, m), `task="fw"`)
}
