package reconcile

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
)

// markDirtyLocked records that a task's inputs may have changed and
// schedules its run through the buffer period. c.mu is held.
func (c *Controller) markDirtyLocked(e *entry, trigger Trigger) {
	if !e.spec.Enabled || !c.started {
		return
	}
	if !e.spec.IsDynamic() {
		// Schedule tasks run on their cron ticks; data only matters for
		// their start-up run, which waits until the data is there.
		if !e.ranOnce {
			c.dueLocked(e, Due(TriggerStart))
		}
		return
	}
	if e.trigger.IsZero() {
		e.trigger = trigger
		e.seen = time.Now()
	}
	bp := e.spec.BufferPeriod
	buffered := bp != nil && bp.Enabled && bp.Min > 0
	if e.phase == phaseRunning && !e.ranOnce && buffered {
		// The task's first run is under way, and whether it has read its
		// data yet is not known here: decide when it ends (buffered if it
		// ran, at once if it found its data incomplete).
		e.deferred = true
		return
	}
	if !e.ranOnce || !buffered {
		c.stepLocked(e, evQueue, wake{})
		return
	}
	now := c.opts.Clock.Now()
	if e.deadline.IsZero() {
		e.deadline = now.Add(bp.Max.D())
	}
	d := bp.Min.D()
	if until := e.deadline.Sub(now); d > until {
		d = until
	}
	c.stepLocked(e, evBuffer, wake{d: d, before: func() { e.deadline = time.Time{} }})
}

// dueLocked makes an enabled task run as soon as its data is there, as at
// start-up: a dynamic task through markDirtyLocked (unbuffered before its
// first run), a schedule task directly — CTS also runs schedule tasks in
// its start-up pass. The inputs hash still skips a task already up to date.
func (c *Controller) dueLocked(e *entry, trigger Trigger) {
	if !e.spec.Enabled {
		return
	}
	if e.spec.IsDynamic() {
		c.markDirtyLocked(e, trigger)
		return
	}
	if e.trigger.IsZero() {
		e.trigger = trigger
	}
	c.enqueueLocked(e)
}

// enqueueLocked makes the task due now: it is queued, or, when it is
// running, runs again once the run ends. c.mu is held.
func (c *Controller) enqueueLocked(e *entry) {
	c.stepLocked(e, evQueue, wake{})
}

// unqueueLocked takes a task off the run queue (it was disabled or is being
// deleted). c.mu is held.
func (c *Controller) unqueueLocked(name string) {
	c.queue = slices.DeleteFunc(c.queue, func(n string) bool { return n == name })
	if len(c.queue) == 0 {
		c.queueSince = time.Time{}
	}
}

// worker takes task names off the queue and runs them, one at a time.
func (c *Controller) worker(ctx, runCtx context.Context) {
	for {
		c.mu.Lock()
		if c.standby || !c.runnableLocked() { // runnableLocked: owned.go
			c.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-c.kick:
			}
			continue
		}
		if ctx.Err() != nil {
			c.mu.Unlock()
			return
		}
		name := c.queue[0]
		c.queue = c.queue[1:]
		c.queueSince = time.Time{}
		if len(c.queue) > 0 {
			c.queueSince = c.opts.Clock.Now() // progress
		}
		if len(c.queue) > 0 {
			signal(c.kick) // more work: wake another worker
		}
		if c.opts.Metrics != nil {
			c.opts.Metrics.QueueDepth(len(c.queue))
		}
		e := c.tasks[name]
		if e == nil || !c.stepLocked(e, evTake, wake{}) {
			c.mu.Unlock()
			continue
		}
		trigger := e.trigger
		e.trigger = Trigger{}
		e.runSeen, e.seen = e.seen, time.Time{}
		force := e.force
		e.force = false
		spec := e.spec
		c.mu.Unlock()

		release, err := c.acquireSlot(runCtx)
		if err != nil {
			// The runs were interrupted (shutdown) before this one got a
			// slot: it stays due, as it was.
			c.mu.Lock()
			e.trigger, e.force = trigger, force
			c.stepLocked(e, evQueue, wake{}) // running: queued again by evDone
			c.stepLocked(e, evDone, wake{})
			c.mu.Unlock()
			continue
		}
		res := c.reconcile(runCtx, e, &spec, Request{Name: name, Trigger: trigger, Force: force})
		release()

		c.mu.Lock()
		locked := res.failed && errors.Is(res.err, driver.ErrStateLocked)
		if !locked {
			e.lockWaits = 0
		}
		switch {
		case locked && e.spec.Enabled:
			// Someone else holds the task's state lock. Unlike other
			// failures this is retried until the run gets the lock: a lock
			// always ends (see driver.ErrStateLocked), and giving up would
			// leave the task behind the catalog until its next change.
			// The delay doubles up to LockRetryCap.
			e.lockWaits++
			delay := lockPolicy(c.opts.RetryBase).Delay(e.lockWaits)
			c.log.Info("retrying task: its Terraform state is locked by another process", "task_name", name,
				"attempt", e.lockWaits, "delay", delay.Round(time.Millisecond))
			e.trigger = Due(TriggerRetry)
			e.rerun = false // a change does not free the lock: the retry reads it
			e.retryAttempt, e.lastErr = e.lockWaits, c.redact(driver.ErrorSummary(res.err))
			c.stepLocked(e, evRetry, wake{d: delay})
		case res.failed && res.terminal:
			c.log.Warn("task failed with a terminal error: it runs again when its desired state changes",
				"task_name", name, "error", res.err)
			c.stepLocked(e, evDone, wake{}) // a change that came during the run runs now
		case res.failed && e.spec.Enabled && !e.doomed && c.opts.mayRetry(e.retries):
			e.retries++
			delay := retryPolicy(c.opts.RetryBase, c.opts.RetryMax).Delay(e.retries)
			if !res.waiting {
				c.log.Info("retrying task after failure", "task_name", name, "attempt", e.retries, "delay", delay.Round(time.Millisecond))
			}
			e.retryAttempt, e.lastErr = e.retries, c.redact(driver.ErrorSummary(res.err))
			// A change that came during the run runs now.
			c.stepLocked(e, evRetry, wake{d: delay, before: func() {
				if e.trigger.IsZero() {
					e.trigger = Due(TriggerRetry)
				}
			}})
		default:
			c.stepLocked(e, evDone, wake{})
		}
		c.undeferLocked(e)
		c.mu.Unlock()
	}
}

// undeferLocked settles a notification deferred while the task's first
// run was under way (see markDirtyLocked).
func (c *Controller) undeferLocked(e *entry) {
	if e.deferred {
		e.deferred = false
		c.markDirtyLocked(e, Due(TriggerChange))
	}
}

// acquireSlot takes one of the MaxParallel run slots, waiting for one to
// be free or for ctx to end (then it returns ctx's error). Every run of
// Terraform (a worker's, an API call's, a drift check's, -once's, a
// destroy) holds a slot; release gives it back.
func (c *Controller) acquireSlot(ctx context.Context) (release func(), err error) {
	select {
	case c.slots <- struct{}{}:
		return func() { <-c.slots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
