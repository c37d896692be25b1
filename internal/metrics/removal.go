package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctsync/ctsync/internal/holddown"
	"github.com/ctsync/ctsync/internal/task"
)

// registerRemovals adds the metrics of removal_delay's hold-down
// (docs/safety.md): ctsync_task_removals_pending, what a task keeps now,
// and ctsync_task_removals_total by action, each step of a removal.
func (m *Metrics) registerRemovals() {
	m.pendingRm = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ctsync_task_removals_pending",
		Help: "Service instances, catalog services or nodes that left a task's condition and that it keeps in its module's input until removal_delay has passed.",
	}, []string{"task"})
	m.removals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctsync_task_removals_total",
		Help: "Steps of the removals a task's removal_delay holds down, by action: pending (one left), cancelled (it came back within the delay; nothing ran), applied (gone for the delay).",
	}, []string{"task", "action"})
	m.perTask = append(m.perTask, m.pendingRm, m.removals)
	m.reg.MustRegister(m.pendingRm, m.removals)
}

// OnRemoval counts the steps of a task's removals (holddown.Tracker.Drain)
// and sets its pending gauge to pending (len(Tracker.Pending())).
func (m *Metrics) OnRemoval(name string, changes []holddown.Change, pending int) {
	m.touch(name)
	for _, c := range changes {
		m.removals.WithLabelValues(name, c.Action).Inc()
	}
	m.pendingRm.WithLabelValues(name).Set(float64(pending))
}

// removalZeros makes a task's removal series exist at zero once it has a
// removal_delay, so that increase() sees the first step.
func (m *Metrics) removalZeros(s task.Spec) {
	if s.Removal() <= 0 {
		return
	}
	m.pendingRm.WithLabelValues(s.Name)
	for _, a := range []string{holddown.ActionPending, holddown.ActionCancelled, holddown.ActionApplied} {
		m.removals.WithLabelValues(s.Name, a)
	}
}
