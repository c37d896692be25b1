package reconcile

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/ctsync/ctsync/internal/gate"
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
	// work is the runs handed to the workers by callers that wait for
	// them (handOff), taken before names.
	work []*work
	// workers is how many workers are taking work (the controller's Run,
	// or RunOnce, has started them and they have not stopped).
	workers int
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
	j := job{Request: req, spec: s, e: e, prev: e.prevInputs}
	if gated(s) {
		j.orphans, e.gates.orphans = e.gates.orphans, nil
	}
	c.mu.Unlock()
	res := c.rec.Run(ctx, j)
	c.mu.Lock()
	c.ranLocked(e, res)
	c.mu.Unlock()
	if h := res.hold; h != nil {
		c.gateEvent(gate.Event{Kind: gate.EventApproval, Action: gate.ActionHeld, Task: s.Name, Plan: clonePlan(h.plan), Trigger: h.run.trigger})
	}
	return res
}

// work is a run that a caller hands to the workers and waits for (an API
// call's run or plan, a drift check's plan, a deletion's destroy): the
// task is the caller's already (reserved, or being deleted). A worker
// takes a run slot with ctx and calls run with it.
type work struct {
	ctx  context.Context
	run  func(ctx context.Context)
	done chan error // nil once run returned; ctx's error when no slot was free before it ended
}

// errStopped is the error of a run handed to the workers once they have
// stopped.
var errStopped = errors.New("ctsync is shutting down: no new runs")

// handOff hands run to a worker, which takes a run slot with ctx and calls
// run with it, and waits until run returns. It fails, without calling
// run, when ctx ends before a worker took it or before a slot was free,
// or when the workers have stopped (shutdown). Before the workers start
// (the daemon waits for Consul) it waits for them.
func (c *Controller) handOff(ctx context.Context, run func(ctx context.Context)) error {
	w := &work{ctx: ctx, run: run, done: make(chan error, 1)}
	c.mu.Lock()
	if c.closing && c.q.workers == 0 {
		c.mu.Unlock()
		return errStopped
	}
	c.q.work = append(c.q.work, w)
	c.mu.Unlock()
	c.q.wake()
	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
	}
	c.mu.Lock()
	waiting := slices.Contains(c.q.work, w)
	c.q.work = slices.DeleteFunc(c.q.work, func(o *work) bool { return o == w })
	c.mu.Unlock()
	if waiting {
		return ctx.Err()
	}
	return <-w.done // a worker has it
}

// takeWork takes the first run handed to the workers; nil when none
// waits. c.mu is held.
func (q *workQueue) takeWork() *work {
	if len(q.work) == 0 {
		return nil
	}
	w := q.work[0]
	q.work = q.work[1:]
	if len(q.work) > 0 {
		q.wake() // more: wake another worker
	}
	return w
}

// perform runs w holding a run slot.
func (q *workQueue) perform(w *work) {
	release, err := q.acquire(w.ctx)
	if err != nil {
		w.done <- err
		return
	}
	w.run(w.ctx)
	release()
	w.done <- nil
}

// worker takes the runs handed to the workers and the task names off the
// queue, and runs them, one at a time. Once ctx ends it takes no more
// names, but the runs handed over until the runs requested through the
// API are over (Run waits for them).
func (c *Controller) worker(ctx, runCtx context.Context) {
	c.mu.Lock()
	c.q.workers++
	c.mu.Unlock()
	for {
		c.mu.Lock()
		if w := c.q.takeWork(); w != nil {
			c.mu.Unlock()
			c.q.perform(w)
			continue
		}
		stopping := ctx.Err() != nil
		if stopping && c.apiOpen == 0 {
			c.q.workers--
			c.mu.Unlock()
			c.q.wake() // the other workers stop too
			return
		}
		if stopping || c.standby || !c.runnableLocked() { // runnableLocked: owned.go
			c.mu.Unlock()
			done := ctx.Done()
			if stopping {
				done = nil // woken when the last API run ends (apiRun)
			}
			select {
			case <-done:
			case <-c.q.kick:
			}
			continue
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
