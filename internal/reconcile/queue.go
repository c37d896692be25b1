package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// workQueue is the controller's work queue: the names of the tasks due to
// run, first in first out, and the run slots. It holds keys only: what a
// task is due for, and whether it may be on the queue at all, is its
// lifecycle's (lifecycle.go: stepLocked is the one that pushes and
// removes). Guarded by taskTable.mu, but for the slots (a semaphore) and
// the kick channel.
type workQueue struct {
	names []string
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

// take takes a task's name off the queue for a worker (see pop).
func (q *workQueue) take(name string) {
	i := slices.Index(q.names, name)
	if i < 0 {
		return
	}
	q.names = slices.Delete(q.names, i, i+1)
	q.since = time.Time{}
	if len(q.names) > 0 {
		q.since = q.clock.Now() // progress
		q.wake()                // more work: wake another worker
	}
	q.report()
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

// errStopped is the error of a request once the workers have stopped.
var errStopped = errors.New("ctsync is shutting down: no new runs")

// errDropped is wrapped by the error of a request dropped before a worker
// took it (the task was deleted or disabled meanwhile).
var errDropped = errors.New("task is being deleted")

// worker takes task names off the queue, one at a time, and does each
// task's job: it takes the task (its request, or the run it was due for,
// with a snapshot of its state: takeLocked), has the reconciler do it with
// a run slot held, and commits what it did (finish). Once ctx ends it
// takes only the requests of callers (they end with runCtx), until the runs
// requested through the API are over (Run waits for them).
func (c *workers) worker(ctx, runCtx context.Context) {
	c.mu.Lock()
	c.q.workers++
	c.mu.Unlock()
	for {
		c.mu.Lock()
		stopping := ctx.Err() != nil
		if stopping && c.apiOpen == 0 {
			c.q.workers--
			if c.q.workers == 0 {
				c.failIntentsLocked(errStopped) // lifecycle.go
			}
			c.mu.Unlock()
			c.q.wake() // the other workers stop too
			return
		}
		e, taken, ok := c.nextLocked(stopping)
		c.mu.Unlock()
		if !ok {
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
		release, err := func() {}, error(nil)
		if taken.kind != intentDiscard { // a discard runs no Terraform
			release, err = c.q.acquire(runCtx)
		}
		if err != nil && taken.gen != 0 {
			// The runs were interrupted (shutdown) before this request
			// got a slot: it ends, not run, and its caller is told.
			c.finish(runCtx, e, taken, Result{failed: true, err: fmt.Errorf("not run: %w", errStopped)})
			continue
		}
		if err != nil {
			// The runs were interrupted (shutdown) before this one got a
			// slot: it stays due, as it was.
			c.mu.Lock()
			c.untakeLocked(e, taken)
			c.mu.Unlock()
			continue
		}
		t0 := time.Now()
		jctx := WithActor(runCtx, taken.actor)
		res, err := c.rec.Reconcile(jctx, e.key())
		j := res.job
		if err != nil { // the job could not start: it ends, failed
			j, res = taken, Result{failed: true, err: err}
		}
		if res.next != nil {
			// Decided to run: what the decision found (the task read
			// its data, why it waits) holds from now on, while it runs.
			c.commit(e, j, res)
			res = c.rec.Execute(jctx, j, res.next)
		}
		res.dur = time.Since(t0)
		release()
		c.finish(runCtx, e, j, res)
	}
}

// nextLocked takes the first task on the queue this member runs now. A
// caller's request (an intent: run now, inspect, an approval, a
// deletion's destroy ...) is always taken. What the task is due for (a
// change, a tick, a retry; a drift check) is this member's only when it
// owns the task (high availability's spread mode: the one place ownership
// is asked: what is due for a task owned elsewhere is dropped, its owner
// runs it), and waits while this member stands by or stops. c.mu is held.
func (c *workers) nextLocked(stopping bool) (*entry, job, bool) {
	for i := 0; i < len(c.q.names); i++ {
		name := c.q.names[i]
		e := c.lookupLocked(name)
		in := (*intent)(nil)
		if e != nil {
			in = e.lc.intent
		}
		switch {
		case e == nil:
			c.q.remove(name)
			i--
			continue
		case in != nil && !in.owned():
		case !c.ownsLocked(name): // owned.go
			c.dropLocked(e) // lifecycle.go
			i--
			continue
		case stopping || c.standby:
			continue
		}
		c.q.take(name)
		if j, ok := c.takeLocked(e); ok {
			return e, j, true // the reconciler reads its snapshot (snapshot)
		}
		i--
	}
	return nil, job{}, false
}

// lookupLocked is the task, or the throw-away task being inspected, of a
// name on the queue. c.mu is held.
func (c *taskTable) lookupLocked(name string) *entry {
	if e := c.tasks[name]; e != nil {
		return e
	}
	return c.inspecting[name]
}

// snapshot is the job a worker took of the task (or the throw-away task
// being inspected) with the key name: its request and the snapshot of the
// task's state it reads (jobLocked). It is the reconciler's one read of the
// table (reconciler.snap), under its lock, and changes nothing.
func (c *workers) snapshot(name string) (job, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.lookupLocked(name)
	if e == nil {
		return job{}, fmt.Errorf("task %q: %w", name, ErrNotFound)
	}
	j, ok := e.lc.taken(e.spec.Name)
	if !ok {
		return job{}, fmt.Errorf("task %q: %w", name, errNotTaken)
	}
	c.jobLocked(e, &j)
	return j, nil
}

// jobLocked adds to the job j of the task the snapshot of the task's
// state it reads (job). It changes nothing. c.mu is held.
func (c *workers) jobLocked(e *entry, j *job) {
	s := e.spec
	j.spec, j.drv, j.prev, j.waiting, j.held = &s, &e.run, e.prevInputs, e.lc.waiting, c.gk.viewLocked(e)
	j.qs, j.hd = e.qs, e.hd
	if e.run.drv == nil && e.throwaway == "" { // the job builds the driver
		j.exports = exportsOutputs(c.tasks, s.Name)
	}
	j.orphans = c.gk.orphansLocked(e)
	if ups := s.Upstreams(); len(ups) > 0 {
		j.upstreams = make(map[string]upstreamView, len(ups))
		for _, n := range ups {
			if u := c.tasks[n]; u != nil {
				j.upstreams[n] = upstreamView{exists: true, phase: u.lc.phase, spec: u.spec, qs: u.qs, hd: u.hd}
			}
		}
	}
}

// commit commits what the job j of the task e did or decided
// (commitLocked, the one applier) and hands the gate events to their hook.
func (c *workers) commit(e *entry, j job, res Result) {
	c.mu.Lock()
	evs := c.commitLocked(e, j, res)
	c.mu.Unlock()
	for _, ev := range evs {
		c.gk.gateEvent(ev)
	}
}

// finish commits what the job j of the task e did (commitLocked, the one
// applier), hands the gate events to their hook, removes a task whose
// approved deletion is done, and moves the task on (endLocked): its caller,
// if any, gets res.
func (c *workers) finish(ctx context.Context, e *entry, j job, res Result) {
	c.commit(e, j, res)
	if res.removeTask {
		c.remove(ctx, e.spec.Name)
		if c.opts.OnDestroyed != nil {
			c.opts.OnDestroyed(e.spec.Name)
		}
	}
	c.mu.Lock()
	c.endLocked(e, j, res)
	c.mu.Unlock()
}

// failIntentsLocked ends every request no worker took (the workers have
// stopped). c.mu is held.
func (c *workers) failIntentsLocked(err error) {
	for _, m := range []map[string]*entry{c.tasks, c.inspecting} {
		for _, e := range m {
			if in := e.lc.intent; in != nil && !in.taken {
				c.endIntentLocked(e, Result{}, err)
				if e.lc.phase == phaseDeleting {
					c.q.remove(e.key())
				}
				c.stepLocked(e, evWithdraw, wake{})
			}
		}
	}
}

// dropLocked drops what a task owned by another member is due for (nextLocked):
// a drift check it was asked for, and the run it was due for. c.mu is
// held.
func (c *workers) dropLocked(e *entry) {
	if in := e.lc.intent; in != nil && !in.taken {
		c.endIntentLocked(e, Result{}, nil)
		c.stepLocked(e, evWithdraw, wake{})
	}
	c.stepLocked(e, evStop, wake{})
}
