package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/task"
)

// gateHelp are the counters of the safety gates' outcomes (docs/safety.md),
// one per gate.Event action counted, named as the other run counters
// (ctsync_task_runs_<action>_total).
var gateHelp = map[string]string{
	gate.ActionHeld:     "Runs of a task whose plan the approval rules held for an operator.",
	gate.ActionApproved: "Held plans of a task an operator approved.",
	gate.ActionRejected: "Held plans of a task an operator rejected.",
	gate.ActionExpired:  "Held plans of a task dropped because nobody approved them within approval.expire.",
	gate.ActionDenied:   "Runs of a task whose plan the task's policy denied (nothing applied).",
}

// registerGates adds ctsync_task_runs_{held,approved,rejected,expired,denied}_total
// and ctsync_task_runs_held_window_total.
func (m *Metrics) registerGates() {
	m.heldWindow = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctsync_task_runs_held_window_total",
		Help: "Runs of a task held by the destroys applied within approval.window (the plan alone would have applied); also counted in ctsync_task_runs_held_total.",
	}, []string{"task"})
	m.perTask = append(m.perTask, m.heldWindow)
	m.reg.MustRegister(m.heldWindow)
	m.gates = map[string]*prometheus.CounterVec{}
	for action, help := range gateHelp {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ctsync_task_runs_" + action + "_total",
			Help: help,
		}, []string{"task"})
		m.gates[action] = c
		m.perTask = append(m.perTask, c)
		m.reg.MustRegister(c)
	}
}

// OnGate counts what a safety gate did with one of a task's runs: the
// controller's gate hook hands it the same gate.Event as the notifiers
// (notify.Dispatcher.OnGate). Actions without a counter (superseded) are
// not counted.
func (m *Metrics) OnGate(e gate.Event) {
	c, ok := m.gates[e.Action]
	if !ok {
		return
	}
	m.touch(e.Task)
	c.WithLabelValues(e.Task).Inc()
	if e.Action == gate.ActionHeld && e.Plan.Window != nil {
		m.heldWindow.WithLabelValues(e.Task).Inc()
	}
}

// gateZeros makes the counters of the gates a task has exist at zero, so
// that increase() sees their first outcome: the approval counters for a
// task with an approval block, the denied one for a task with a policy.
func (m *Metrics) gateZeros(s task.Spec) {
	if s.Approval != nil {
		for _, a := range []string{gate.ActionHeld, gate.ActionApproved, gate.ActionRejected, gate.ActionExpired} {
			m.gates[a].WithLabelValues(s.Name)
		}
		if s.Approval.EffectiveWindow() > 0 && (s.Approval.MaxDestroy != nil || s.Approval.MaxDestroyPercent != nil) {
			m.heldWindow.WithLabelValues(s.Name)
		}
	}
	if s.Policy != nil {
		m.gates[gate.ActionDenied].WithLabelValues(s.Name)
	}
}
