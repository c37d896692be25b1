package reconcile

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/ctsync/ctsync/internal/backoff"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/store"
)

// driftLoop asks for a drift check of the tasks that have drift detection
// on their interval: it records the request on the task (intentDrift) and
// a worker does it (reconciler.checkDrift), when this member owns the task
// (nextLocked). A plan with changes while the
// task's inputs equal the ones last applied means the infrastructure was
// changed outside Terraform: that is recorded as a drift event (and, with
// remediate, the task is applied again). A task whose inputs changed is
// not checked: its next run is already due.
func (c *sources) driftLoop(ctx context.Context) {
	for {
		c.driftWakes.Add(1)
		now := c.opts.Clock.Now()
		var earliest time.Time
		c.mu.Lock()
		for _, e := range c.tasks {
			dd := e.spec.DriftDetection
			if dd == nil || !e.spec.Enabled || e.deletingLocked() || c.standby {
				e.nextDrift = time.Time{}
				continue
			}
			if e.nextDrift.IsZero() {
				e.nextDrift = now.Add(jitter(dd.Interval.D()))
			}
			if !e.nextDrift.After(now) {
				c.requestLocked(e, intent{kind: intentDrift, noReply: true}) // not while queued or running
				e.nextDrift = now.Add(jitter(dd.Interval.D()))
			}
			if earliest.IsZero() || e.nextDrift.Before(earliest) {
				earliest = e.nextDrift
			}
		}
		c.mu.Unlock()
		if !c.waitUntil(ctx, earliest, c.driftKick) {
			return
		}
	}
}

// jitter spreads drift checks by ±10% so tasks with the same interval do
// not all plan at once.
func jitter(d time.Duration) time.Duration {
	return backoff.Around10.Spread(d)
}

// driftFound is what a drift check found (outcome.drift).
type driftFound struct {
	drifted   bool
	remediate bool // apply the task again
}

// checkDrift plans the task of j and records what it found.
func (r *reconciler) checkDrift(ctx context.Context, j job) Result {
	s := j.spec
	log := r.log.With("task_name", s.Name)
	want, ready, err := r.obs.desiredIn(ctx, s, j.view)
	if !ready || err != nil {
		return Result{}
	}
	hash := want.Used
	if st := r.opts.Store.Run(s.Name); st.Dirty() || want.Fingerprint != st.Applied || inputsMoved(st.Parts, want.Parts) {
		log.Debug("drift check skipped: the task's desired state or module inputs changed, or its last run failed, since its last apply (a plan would show that, not drift)")
		return Result{}
	}
	in, ready := BuildInputs(s, j.view.get)
	if !ready {
		return Result{}
	}
	start := time.Now()
	res, err := r.drive(ctx, j.drv, s, j.exports, driver.Run{ID: uuid.NewString()}, &in, ModePlan)
	drifted := err == nil && res.Changes
	found := &driftFound{drifted: drifted}
	if r.opts.Metrics != nil {
		r.opts.Metrics.Drift(s.Name, drifted)
	}
	if err != nil {
		log.Warn("drift check failed", "error", err)
		return Result{drift: found}
	}
	if !drifted {
		log.Debug("drift check: no changes")
		return Result{drift: found}
	}
	found.remediate = s.DriftDetection != nil && s.DriftDetection.Remediate
	log.Warn("drift detected: the infrastructure differs from the task's last apply",
		"add", res.Add, "change", res.Change, "destroy", res.Destroy, "remediate", found.remediate)
	ev := store.Event{ID: uuid.NewString(), TaskName: s.Name, Success: true, StartTime: start, EndTime: time.Now(),
		Kind: store.KindDrift, Trigger: "drift-check", InputsHash: hash,
		Plan:    &store.PlanSummary{Add: res.Add, Change: res.Change, Destroy: res.Destroy},
		LogPath: res.LogPath, LogTail: r.opts.redact(s.Name, tail(res.LogPath, 4096)), TFCRunURL: res.RunURL}
	r.record(ctx, ev)
	return Result{drift: found}
}
