package metrics

import (
	"testing"

	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/task"
)

func TestGateMetrics(t *testing.T) {
	list := &tasks{}
	gated := reconcile.TaskState{Spec: task.Spec{Name: "fw", Approval: &task.Approval{Required: true},
		Policy: &task.Policy{Files: []string{"fw.rego"}}}}
	list.set(gated, state("plain", false))
	m := New(Options{Tasks: list.get})

	// A task's gate counters exist at zero once it has the gate.
	text := scrape(t, m)
	has(t, text, `ctsync_task_runs_held_total{task="fw"} 0`, `ctsync_task_runs_approved_total{task="fw"} 0`,
		`ctsync_task_runs_rejected_total{task="fw"} 0`, `ctsync_task_runs_expired_total{task="fw"} 0`,
		`ctsync_task_runs_denied_total{task="fw"} 0`)
	hasNot(t, text, `ctsync_task_runs_held_total{task="plain"}`, `ctsync_task_runs_denied_total{task="plain"}`)

	for _, a := range []string{gate.ActionHeld, gate.ActionHeld, gate.ActionApproved, gate.ActionRejected,
		gate.ActionExpired, gate.ActionDenied, gate.ActionSuperseded} {
		m.OnGate(gate.Event{Kind: gate.EventApproval, Action: a, Task: "fw"})
	}
	has(t, scrape(t, m), `ctsync_task_runs_held_total{task="fw"} 2`, `ctsync_task_runs_approved_total{task="fw"} 1`,
		`ctsync_task_runs_rejected_total{task="fw"} 1`, `ctsync_task_runs_expired_total{task="fw"} 1`,
		`ctsync_task_runs_denied_total{task="fw"} 1`)

	// A deleted task's series go.
	list.set(state("plain", false))
	hasNot(t, scrape(t, m), `task="fw"`)
}
