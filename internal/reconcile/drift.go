package reconcile

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/ctsync/ctsync/internal/backoff"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/store"
)

// driftLoop plans tasks that have drift detection on their interval. A plan
// with changes while the task's inputs equal the ones last applied means
// the infrastructure was changed outside Terraform: that is recorded as a
// drift event (and, with remediate, the task is applied again). A task
// whose inputs changed is not checked: its next run is already due.
func (c *Controller) driftLoop(ctx context.Context, runCtx context.Context) {
	for {
		c.driftWakes.Add(1)
		now := c.opts.Clock.Now()
		var due []*entry
		var earliest time.Time
		c.mu.Lock()
		for _, e := range c.tasks {
			dd := e.spec.DriftDetection
			if dd == nil || !e.spec.Enabled || e.deletingLocked() || c.standby || !c.ownsLocked(e.spec.Name) {
				e.nextDrift = time.Time{}
				continue
			}
			if e.nextDrift.IsZero() {
				e.nextDrift = now.Add(jitter(dd.Interval.D()))
			}
			if !e.nextDrift.After(now) {
				if c.stepLocked(e, evReserve, wake{}) { // not while queued or running
					due = append(due, e)
				}
				e.nextDrift = now.Add(jitter(dd.Interval.D()))
			}
			if earliest.IsZero() || e.nextDrift.Before(earliest) {
				earliest = e.nextDrift
			}
		}
		c.mu.Unlock()
		for _, e := range due {
			c.checkDrift(runCtx, e)
		}
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

// checkDrift plans one reserved task and records what it found.
func (c *Controller) checkDrift(ctx context.Context, e *entry) {
	defer c.release(e)
	s := e.spec
	log := c.log.With("task_name", s.Name)
	want, ready, err := c.desired(ctx, &s)
	if !ready || err != nil {
		return
	}
	hash := want.Used
	if st := c.opts.Store.Run(s.Name); st.Dirty() || want.Fingerprint != st.Applied || inputsMoved(st.Parts, want.Parts) {
		log.Debug("drift check skipped: the task's desired state or module inputs changed, or its last run failed, since its last apply (a plan would show that, not drift)")
		return
	}
	in, ready := BuildInputs(&s, c.get)
	if !ready {
		return
	}
	var (
		start time.Time
		res   driver.Result
	)
	if herr := c.handOff(ctx, func(ctx context.Context) {
		start = time.Now()
		res, err = c.rec.drive(ctx, e, &s, driver.Run{ID: uuid.NewString()}, &in, ModePlan)
	}); herr != nil {
		return // shutting down
	}
	drifted := err == nil && res.Changes
	c.mu.Lock()
	e.drifted = drifted
	e.lastDriftCheck = c.opts.Clock.Now()
	c.mu.Unlock()
	if c.opts.Metrics != nil {
		c.opts.Metrics.Drift(s.Name, drifted)
	}
	if err != nil {
		log.Warn("drift check failed", "error", err)
		return
	}
	if !drifted {
		log.Debug("drift check: no changes")
		return
	}
	remediate := s.DriftDetection != nil && s.DriftDetection.Remediate
	log.Warn("drift detected: the infrastructure differs from the task's last apply",
		"add", res.Add, "change", res.Change, "destroy", res.Destroy, "remediate", remediate)
	ev := store.Event{ID: uuid.NewString(), TaskName: s.Name, Success: true, StartTime: start, EndTime: time.Now(),
		Kind: store.KindDrift, Trigger: "drift-check", InputsHash: hash,
		Plan:    &store.PlanSummary{Add: res.Add, Change: res.Change, Destroy: res.Destroy},
		LogPath: res.LogPath, LogTail: c.redact(s.Name, tail(res.LogPath, 4096)), TFCRunURL: res.RunURL}
	c.rec.record(ctx, ev)
	if remediate {
		c.mu.Lock()
		c.forceLocked(e, Due(TriggerDrift), true) // running: queued again when released
		c.mu.Unlock()
	}
}
