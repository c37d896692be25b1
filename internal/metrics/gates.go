package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/task"
)

var _ gate.Metrics = (*Metrics)(nil)

// gateHelp are the counters of the safety gates' outcomes (docs/safety.md),
// one per outcome, named as the other run counters.
var gateHelp = map[gate.Outcome]string{
	gate.OutcomeHeld:     "Runs of a task whose plan the approval rules held for an operator.",
	gate.OutcomeApproved: "Held plans of a task an operator approved.",
	gate.OutcomeRejected: "Held plans of a task an operator rejected.",
	gate.OutcomeExpired:  "Held plans of a task dropped because nobody approved them within approval.expire.",
	gate.OutcomeDenied:   "Runs of a task whose plan the task's policy denied (nothing applied).",
}

// registerGates adds ctsync_task_runs_{held,approved,rejected,expired,denied}_total.
func (m *Metrics) registerGates() {
	m.gates = map[gate.Outcome]*prometheus.CounterVec{}
	for o, help := range gateHelp {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ctsync_task_runs_" + string(o) + "_total",
			Help: help,
		}, []string{"task"})
		m.gates[o] = c
		m.perTask = append(m.perTask, c)
		m.reg.MustRegister(c)
	}
}

// GateOutcome counts what a gate did with one of a task's runs. An unknown
// outcome is ignored.
func (m *Metrics) GateOutcome(task string, o gate.Outcome) {
	c, ok := m.gates[o]
	if !ok {
		return
	}
	m.touch(task)
	c.WithLabelValues(task).Inc()
}

// gateZeros makes the counters of the gates a task has exist at zero, so
// that increase() sees their first outcome: the approval counters for a
// task with an approval block, the denied one for a task with a policy.
func (m *Metrics) gateZeros(s task.Spec) {
	if s.Approval != nil {
		for _, o := range []gate.Outcome{gate.OutcomeHeld, gate.OutcomeApproved, gate.OutcomeRejected, gate.OutcomeExpired} {
			m.gates[o].WithLabelValues(s.Name)
		}
	}
	if s.Policy != nil {
		m.gates[gate.OutcomeDenied].WithLabelValues(s.Name)
	}
}
