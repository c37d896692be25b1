package metrics

import "github.com/prometheus/client_golang/prometheus"

// Spread holds the metrics of spread mode (high_availability with
// spread_tasks): what this instance owns, how many members it sees, and how
// often ownership changes hands. Each instance exports its own.
type Spread struct {
	owned   prometheus.Gauge
	members prometheus.Gauge
	changes *prometheus.CounterVec
}

// RegisterSpread adds the spread-mode metrics to reg.
func RegisterSpread(reg *prometheus.Registry) *Spread {
	s := &Spread{
		owned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ctsync_ha_owned_tasks",
			Help: "Tasks this instance owns (spread mode): it runs them, and no other member does."}),
		members: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ctsync_ha_members",
			Help: "Members of the cluster this instance sees (spread mode), itself included once it has joined."}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ctsync_ha_ownership_changes_total",
			Help: "Ownership changes made by this instance (spread mode): acquire (a free task), takeover (a task of an expelled member), release (handed over or deleted), expel (a member silent for the takeover bound)."},
			[]string{"change"}),
	}
	for _, k := range []string{"acquire", "takeover", "release", "expel"} {
		s.changes.WithLabelValues(k)
	}
	reg.MustRegister(s.owned, s.members, s.changes)
	return s
}

// Owned sets the owned-task and member gauges.
func (s *Spread) Owned(tasks, members int) {
	s.owned.Set(float64(tasks))
	s.members.Set(float64(members))
}

// OwnershipChange counts one change of the kind.
func (s *Spread) OwnershipChange(kind string) { s.changes.WithLabelValues(kind).Inc() }
