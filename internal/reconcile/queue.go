package reconcile

import (
	"context"
	"slices"
	"time"
)

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
		var (
			req Request
			ok  bool
		)
		if e != nil {
			req, ok = c.takeLocked(e)
		}
		if !ok {
			c.mu.Unlock()
			continue
		}
		spec := e.spec
		c.mu.Unlock()

		release, err := c.acquireSlot(runCtx)
		if err != nil {
			// The runs were interrupted (shutdown) before this one got a
			// slot: it stays due, as it was.
			c.mu.Lock()
			c.untakeLocked(e, req)
			c.mu.Unlock()
			continue
		}
		t0 := time.Now()
		res := c.reconcile(runCtx, e, &spec, req)
		res.dur = time.Since(t0)
		release()

		c.mu.Lock()
		c.endRunLocked(e, req, res)
		c.mu.Unlock()
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
