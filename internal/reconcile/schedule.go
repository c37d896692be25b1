package reconcile

import (
	"context"
	"time"

	"github.com/hashicorp/cronexpr"
)

// scheduleLoop enqueues schedule-condition tasks when their cron expression
// fires. One goroutine serves every schedule task: it sleeps until the
// earliest next tick, or until a task is added or enabled (cronKick), so
// that a schedule task created at run time ticks from its creation.
func (c *sources) scheduleLoop(ctx context.Context) {
	for {
		c.scheduleWakes.Add(1)
		now := c.opts.Clock.Now()
		var earliest time.Time
		c.mu.Lock()
		for _, e := range c.tasks {
			sc := e.spec.Condition.Schedule
			if sc == nil || !e.spec.Enabled {
				e.nextCron = time.Time{}
				continue
			}
			if !e.nextCron.IsZero() && !e.nextCron.After(now) {
				// A follower lets the tick pass (the leader runs it; a
				// new leader reconciles every task when it takes over)
				// and waits for the next one: it must not spin on a
				// tick in the past.
				switch {
				case c.standby:
				case e.lc.phase == phaseRunning:
					// As CTS: a tick that finds the task running is
					// skipped; the next tick runs it.
					c.log.Warn("scheduled task is active: this tick is skipped", "task_name", e.spec.Name,
						"tick", e.nextCron.Format(time.RFC3339))
				default:
					// A tick runs the task even when its desired state
					// is unchanged, as CTS does: a schedule is a
					// promise to run.
					c.forceLocked(e, Due(TriggerSchedule), false)
				}
				e.nextCron = time.Time{}
			}
			if e.nextCron.IsZero() {
				expr, err := cronexpr.Parse(sc.Cron)
				if err != nil { // validated at decode
					continue
				}
				e.nextCron = expr.Next(now)
			}
			if !e.nextCron.IsZero() && (earliest.IsZero() || e.nextCron.Before(earliest)) {
				earliest = e.nextCron
			}
		}
		c.mu.Unlock()
		if !c.waitUntil(ctx, earliest, c.cronKick) {
			return
		}
	}
}

// waitUntil sleeps on the controller's clock until at (an hour when at is
// zero: the loop then just looks again), or until kick fires. It returns
// false when ctx ends.
func (c *sources) waitUntil(ctx context.Context, at time.Time, kick <-chan struct{}) bool {
	wait := time.Hour
	if !at.IsZero() {
		wait = at.Sub(c.opts.Clock.Now())
	}
	fired := make(chan struct{})
	t := c.opts.Clock.AfterFunc(max(wait, 0), func() { close(fired) })
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-fired:
	case <-kick:
	}
	return true
}

// NextRun returns when a schedule task runs next (zero if not scheduled).
func (c *Controller) NextRun(name string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.tasks[name]; e != nil {
		return e.nextCron
	}
	return time.Time{}
}
