package reconcile

import (
	"context"
	"slices"
	"time"

	"github.com/ctsync/ctsync/internal/task"
)

// workQueue is the controller's work queue: the names of the tasks due to
// run, first in first out, and the run slots. It holds keys only: what a
// task is due for, and whether it may be on the queue at all, is its
// lifecycle's (lifecycle.go: stepLocked is the one that pushes and
// removes). Guarded by Controller.mu, but for the slots (a semaphore) and
// the kick channel.
type workQueue struct {
	names []string
	// since is when the queue last made progress while not empty (zero
	// when empty): Live reports a queue that waits too long.
	since time.Time
	kick  chan struct{} // wakes a worker
	slots chan struct{} // one token per Terraform run allowed at once
	clock Clock
	depth func(n int) // reports the queue's length (metrics); nil for none
}

func newWorkQueue(parallel int, clock Clock, depth func(int)) workQueue {
	return workQueue{kick: make(chan struct{}, 1), slots: make(chan struct{}, parallel), clock: clock, depth: depth}
}

// push appends a task's name and wakes a worker.
func (q *workQueue) push(name string) {
	q.names = append(q.names, name)
	if q.since.IsZero() {
		q.since = q.clock.Now()
	}
	q.report()
	q.wake()
}

// pop takes the first name off the queue; false when it is empty.
func (q *workQueue) pop() (string, bool) {
	if len(q.names) == 0 {
		return "", false
	}
	name := q.names[0]
	q.names = q.names[1:]
	q.since = time.Time{}
	if len(q.names) > 0 {
		q.since = q.clock.Now() // progress
		q.wake()                // more work: wake another worker
	}
	q.report()
	return name, true
}

// remove takes a task's name off the queue (it was disabled, is being
// deleted, or belongs to another member).
func (q *workQueue) remove(name string) {
	q.names = slices.DeleteFunc(q.names, func(n string) bool { return n == name })
	if len(q.names) == 0 {
		q.since = time.Time{}
	}
}

func (q *workQueue) len() int { return len(q.names) }

func (q *workQueue) report() {
	if q.depth != nil {
		q.depth(len(q.names))
	}
}

// wake wakes a worker (to look at the queue again).
func (q *workQueue) wake() { signal(q.kick) }

// stuck reports how long names have waited with run slots free and no
// worker taking any (0 when the queue is empty or moves).
func (q *workQueue) stuck(now time.Time) time.Duration {
	if q.since.IsZero() || len(q.slots) == cap(q.slots) {
		return 0
	}
	return now.Sub(q.since)
}

// acquire takes one of the run slots, waiting for one to be free or for
// ctx to end (then it returns ctx's error). Every run of Terraform (a
// worker's, an API call's, a drift check's, -once's, a destroy) holds a
// slot; release gives it back.
func (q *workQueue) acquire(ctx context.Context) (release func(), err error) {
	select {
	case q.slots <- struct{}{}:
		return func() { <-q.slots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// reconcile hands one run of the task e, which the caller holds (phase
// running), to the reconciler, and applies what the run did to the task's
// state (ranLocked).
func (c *Controller) reconcile(ctx context.Context, e *entry, s *task.Spec, req Request) outcome {
	c.mu.Lock()
	prev := e.prevInputs
	c.mu.Unlock()
	res := c.rec.Run(ctx, job{Request: req, spec: s, e: e, prev: prev})
	c.mu.Lock()
	c.ranLocked(e, res)
	c.mu.Unlock()
	return res
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
			case <-c.q.kick:
			}
			continue
		}
		if ctx.Err() != nil {
			c.mu.Unlock()
			return
		}
		name, _ := c.q.pop() // runnableLocked: not empty
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

		release, err := c.q.acquire(runCtx)
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
