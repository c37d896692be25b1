package reconcile

import (
	"errors"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
)

// phase is where a task is in its lifecycle. Every change of phase goes
// through transition (the rules, a pure function) and stepLocked (their
// effects on the queue, the timer and waiters).
type phase uint8

const (
	// phaseIdle: nothing is due (a schedule task waits for its tick).
	phaseIdle phase = iota
	// phaseQueued: on the run queue, waiting for a worker.
	phaseQueued
	// phaseBuffering: a change waits out the buffer period (timer armed).
	phaseBuffering
	// phaseRetryWait: a failed run waits for its retry (timer armed).
	phaseRetryWait
	// phaseRunning: one run holds the task: a worker's, an API call's
	// (run=now, enable with run, inspect), a drift check's, or a run of
	// a task marked for deletion that the deletion waits for.
	phaseRunning
	// phaseDeleting: a deletion holds the task (destroy, then removal).
	phaseDeleting
	// phaseHeld: a safety gate holds the task's plan for approval
	// (gates.go): nothing is due; a change plans again (and supersedes
	// the held plan), an approval or a rejection takes the task (evReserve).
	phaseHeld
)

var phaseNames = [...]string{"idle", "queued", "buffering", "retry-wait", "running", "deleting", "held"}

func (p phase) String() string { return enumName(p, phaseNames[:]) }

// event is what happens to a task.
type event uint8

const (
	// evQueue: the task is due now (start-up, a change without buffer
	// period, a schedule tick, a new leader, a rerun).
	evQueue event = iota
	// evBuffer: a change that waits out the buffer period.
	evBuffer
	// evFire: the task's timer (buffer period or retry delay) fired.
	evFire
	// evTake: a worker took the task off the queue to run it.
	evTake
	// evReserve: an API call or a drift check takes the task to run it
	// itself; refused while the task is queued, running or deleted.
	evReserve
	// evRetry: the run failed and is retried after a delay.
	evRetry
	// evDone: the run ended (and was not retried), or a deletion failed.
	evDone
	// evStop: the task was disabled: what was due is dropped.
	evStop
	// evDelete: the task is to be deleted.
	evDelete
	// evAbandon: the deletion was given up (its caller went away) before
	// it began: the task stays as it was.
	evAbandon
	// evGone: the task was removed while a run held it: the run's end
	// concerns nobody.
	evGone
	// evDrop: the held plan was dropped (it expired): the task waits for
	// its next change.
	evDrop
)

var eventNames = [...]string{"queue", "buffer", "fire", "take", "reserve", "retry", "done", "stop", "delete", "abandon", "gone", "drop"}

func (e event) String() string { return enumName(e, eventNames[:]) }

// facts are what a transition depends on besides the phase.
type facts struct {
	timer      bool  // a timer is armed (a buffered change, or a retry, waits)
	timerPhase phase // what the armed timer waits for: phaseBuffering or phaseRetryWait
	rerun      bool  // running: the task became due again during the run
	doomed     bool  // running: the task is to be deleted when the run ends
	held       bool  // a safety gate holds a plan of the task (gates.go)
}

// step is the outcome of a transition.
type step struct {
	to    phase
	ok    bool // false: refused (the task is busy or gone) or moot (a stale timer); nothing changes
	arm   bool // (re)arm the timer (a buffer period or a retry delay)
	stop  bool // stop the timer: what it waited for is due now, or dropped
	rerun bool // the running task runs again when its run ends
	doom  bool // the running task is deleted when its run ends
	spare bool // the running task is no longer to be deleted
}

// transition is the task lifecycle: the phase a task in phase p moves to on
// ev. It has no effects; stepLocked carries them out.
func transition(p phase, ev event, f facts) step {
	refused := step{to: p}
	switch ev {
	case evQueue:
		switch p {
		case phaseIdle, phaseBuffering, phaseRetryWait, phaseHeld:
			return step{to: phaseQueued, ok: true, stop: true}
		case phaseQueued:
			return step{to: p, ok: true}
		case phaseRunning:
			return step{to: p, ok: true, rerun: true}
		}
	case evBuffer:
		switch p {
		case phaseIdle, phaseBuffering, phaseRetryWait, phaseHeld:
			return step{to: phaseBuffering, ok: true, arm: true}
		case phaseQueued: // due already: the queued run reads the change
			return step{to: p, ok: true}
		case phaseRunning: // the period runs during the run
			return step{to: p, ok: true, arm: true}
		}
	case evFire:
		switch p {
		case phaseBuffering, phaseRetryWait:
			return step{to: phaseQueued, ok: true}
		case phaseQueued:
			return step{to: p, ok: true}
		case phaseRunning:
			return step{to: p, ok: true, rerun: true}
		}
	case evTake:
		if p == phaseQueued { // this run reads the current data: a timer is moot
			return step{to: phaseRunning, ok: true, stop: true}
		}
	case evReserve:
		switch p {
		case phaseIdle, phaseBuffering, phaseRetryWait, phaseHeld:
			// A pending timer stays armed: a drift check applies
			// nothing, and a run it started reads data that a buffered
			// change may postdate.
			return step{to: phaseRunning, ok: true}
		}
	case evRetry:
		if p == phaseRunning {
			switch {
			case f.doomed:
				return step{to: phaseDeleting, ok: true, stop: true}
			case f.rerun: // a change came during the run: it runs now
				return step{to: phaseQueued, ok: true, stop: true}
			default:
				return step{to: phaseRetryWait, ok: true, arm: true}
			}
		}
	case evDone:
		switch p {
		case phaseRunning:
			switch {
			case f.doomed:
				return step{to: phaseDeleting, ok: true, stop: true}
			case f.rerun:
				return step{to: phaseQueued, ok: true, stop: true}
			case f.timer:
				return step{to: f.timerPhase, ok: true}
			case f.held: // the run's plan waits for approval
				return step{to: phaseHeld, ok: true}
			default:
				return step{to: phaseIdle, ok: true}
			}
		case phaseDeleting:
			if f.held { // the deletion's destroy plan waits for approval
				return step{to: phaseHeld, ok: true}
			}
			// the deletion failed: the task stays, disabled
			return step{to: phaseIdle, ok: true}
		}
	case evStop:
		switch p {
		case phaseIdle, phaseQueued, phaseBuffering, phaseRetryWait, phaseHeld:
			return step{to: phaseIdle, ok: true, stop: true}
		}
	case evDelete:
		switch p {
		case phaseIdle, phaseQueued, phaseBuffering, phaseRetryWait, phaseHeld:
			return step{to: phaseDeleting, ok: true, stop: true}
		case phaseRunning: // the deletion waits for the run
			return step{to: p, ok: true, stop: true, doom: true}
		}
	case evAbandon:
		switch p {
		case phaseRunning: // the run goes on and ends as any other
			return step{to: p, ok: true, spare: true}
		case phaseDeleting:
			return step{to: phaseIdle, ok: true}
		}
	case evGone:
		return step{to: phaseIdle, ok: true, stop: true}
	case evDrop:
		if p == phaseHeld {
			return step{to: phaseIdle, ok: true}
		}
	}
	return refused
}

// lifecycle is a task's state in the queue: its phase, and everything
// besides the phase that decides what happens to the task next. Only the
// code in this file writes it (TestLifecycleWritesStayInLifecycle); the
// rest of the controller reads it under c.mu and moves it by events.
type lifecycle struct {
	// phase is where the task is in its lifecycle (see transition).
	phase phase
	// due is the run that is due: what first made the task due since its
	// last run (Trigger, Seen), and whether it applies even when nothing
	// changed (Force, which any event may add). A worker takes it with
	// the task (takeLocked).
	due Request
	// The sub-state of phaseRunning: what the run's end leads to.
	rerun    bool // became due during the run: runs again afterwards
	doomed   bool // marked for deletion: deleted when the run ends
	deferred bool // notified during the first run: settled when it ends
	// ranOnce: a run has started with complete data; buffer periods apply
	// from then on (a new leader or owner starts again without).
	ranOnce bool
	// The timer (a buffer period, or a retry delay) and what it waits for
	// (phaseBuffering or phaseRetryWait: the phase a task returns to when a
	// run it did not take from the queue ends).
	timer      Timer
	timerPhase phase
	timerAt    time.Time // when it fires
	gen        int       // invalidates stale timers
	deadline   time.Time // the buffer period's hard deadline
	// Failures of the current desired state (failHash).
	retries   int // consecutive failed runs, retried with backoff
	failHash  string
	lockWaits int // consecutive runs that found the state locked (retried without a limit)
	retry     Retry
	// waiting says why the task cannot run yet (ErrWaiting, an upstream
	// task), "" otherwise.
	waiting string
	// last is how the last run a worker took ended (RunOnce reads it).
	last outcome
}

// wake is the timer a step arms: after d, before runs (under c.mu) and the
// task's timer fires.
type wake struct {
	d      time.Duration
	before func()
}

// stepLocked moves a task through its lifecycle on ev and carries out the
// effects: the run queue, the timer, and waking whoever waits for a task
// to change (StateChanged). It reports whether the event applied. c.mu is held.
func (c *Controller) stepLocked(e *entry, ev event, w wake) bool {
	lc := &e.lc
	f := facts{timer: lc.timer != nil, timerPhase: lc.timerPhase, rerun: lc.rerun, doomed: lc.doomed, held: e.gates.pending()}
	s := transition(lc.phase, ev, f)
	if !s.ok {
		return false
	}
	from := lc.phase
	lc.phase = s.to
	if s.stop {
		c.stopTimerLocked(e)
	}
	if s.arm {
		kind := s.to // the phase that waits for the timer
		if ev == evBuffer {
			kind = phaseBuffering // a running task's buffer period
		}
		c.armLocked(e, kind, w)
	}
	if s.rerun {
		lc.rerun = true
	}
	if s.doom {
		lc.doomed = true
		c.changedLocked()
	}
	if s.spare || (s.to != phaseRunning && s.to != phaseDeleting) {
		if lc.doomed {
			c.changedLocked()
		}
		lc.doomed = false
	}
	if ev == evStop || ev == evGone {
		lc.due = Request{} // what was due is dropped
	}
	if from == s.to {
		return true
	}
	c.changedLocked()
	if from == phaseQueued && ev != evTake { // a worker took it off the queue itself
		c.q.remove(e.spec.Name)
	}
	if s.to == phaseQueued {
		c.q.push(e.spec.Name)
	}
	if from == phaseRunning || s.to == phaseRunning {
		lc.rerun = false // consumed: the task is queued, or starts a run that reads the current data
	}
	if from == phaseRunning && ev != evGone {
		c.wakeDependentsLocked(e.spec.Name) // they look again (chain.go)
	}
	return true
}

// armLocked (re)starts the task's timer; when it fires, w.before runs under
// c.mu and the task moves on (evFire).
func (c *Controller) armLocked(e *entry, kind phase, w wake) {
	lc := &e.lc
	if lc.timer != nil {
		lc.timer.Stop()
	}
	lc.gen++
	gen := lc.gen
	lc.timerPhase = kind
	lc.timerAt = c.opts.Clock.Now().Add(w.d)
	lc.timer = c.opts.Clock.AfterFunc(w.d, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if lc.gen != gen {
			return
		}
		lc.timer = nil
		if w.before != nil {
			w.before()
		}
		c.stepLocked(e, evFire, wake{})
	})
}

// stopTimerLocked drops the task's timer and its buffer deadline.
func (c *Controller) stopTimerLocked(e *entry) {
	lc := &e.lc
	if lc.timer != nil {
		lc.timer.Stop()
		lc.timer = nil
	}
	lc.gen++
	lc.deadline = time.Time{}
}

// forceLocked makes the task due now, applying even when its desired state
// is unchanged (a schedule tick, drift remediation, outputs a downstream
// task needs, a failover): queued, or, when it is running, queued again
// when the run ends. t is the run's trigger unless another reason came
// first; replace makes it the trigger anyway. c.mu is held.
func (c *Controller) forceLocked(e *entry, t Trigger, replace bool) {
	if replace || e.lc.due.Trigger.IsZero() {
		e.lc.due.Trigger = t
	}
	e.lc.due.Force = true
	c.enqueueLocked(e, t)
}

// markDirtyLocked records that a task's inputs may have changed and
// schedules its run through the buffer period. c.mu is held.
func (c *Controller) markDirtyLocked(e *entry, trigger Trigger) {
	if !e.spec.Enabled || !c.started {
		return
	}
	if !e.spec.IsDynamic() {
		// Schedule tasks run on their cron ticks; data only matters for
		// their start-up run, which waits until the data is there.
		if !e.lc.ranOnce {
			c.dueLocked(e, Due(TriggerStart))
		}
		return
	}
	if e.lc.due.Trigger.IsZero() {
		e.lc.due.Trigger = trigger
		e.lc.due.Seen = time.Now()
	}
	bp := e.spec.BufferPeriod
	buffered := bp != nil && bp.Enabled && bp.Min > 0
	if e.lc.phase == phaseRunning && !e.lc.ranOnce && buffered {
		// The task's first run is under way, and whether it has read its
		// data yet is not known here: decide when it ends (buffered if it
		// ran, at once if it found its data incomplete).
		e.lc.deferred = true
		return
	}
	if !e.lc.ranOnce || !buffered {
		c.stepLocked(e, evQueue, wake{})
		return
	}
	now := c.opts.Clock.Now()
	if e.lc.deadline.IsZero() {
		e.lc.deadline = now.Add(bp.Max.D())
	}
	d := bp.Min.D()
	if until := e.lc.deadline.Sub(now); d > until {
		d = until
	}
	c.stepLocked(e, evBuffer, wake{d: d, before: func() { e.lc.deadline = time.Time{} }})
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
	c.enqueueLocked(e, trigger)
}

// enqueueLocked makes the task due now, for t unless another reason came
// first: it is queued, or, when it is running, runs again once the run
// ends. c.mu is held.
func (c *Controller) enqueueLocked(e *entry, t Trigger) {
	if e.lc.due.Trigger.IsZero() {
		e.lc.due.Trigger = t
	}
	c.stepLocked(e, evQueue, wake{})
}

// undeferLocked settles a notification deferred while the task's first
// run was under way (see markDirtyLocked).
func (c *Controller) undeferLocked(e *entry) {
	if e.lc.deferred {
		e.lc.deferred = false
		c.markDirtyLocked(e, Due(TriggerChange))
	}
}

// startLocked makes a task due at the daemon's start. It runs when its
// desired state differs from the one last applied (kept in the store across
// restarts); it also runs, whatever its desired state, when its run was in
// flight as the previous process stopped (the marker is still in the
// store), and when its working directory no longer holds what its last run
// left (Options.Prepared). A follower decides none of this: it is done on
// becoming the leader (SetActive). c.mu is held.
func (c *Controller) startLocked(e *entry) {
	if !c.standby {
		st := c.opts.Store.Run(e.spec.Name)
		switch {
		case st.InFlight != "":
			e.lc.due.Trigger, e.lc.due.Force = Trigger{Kind: TriggerStart, Detail: StartInterrupted}, true
		case st.Applied != "" && c.opts.Prepared != nil && !c.opts.Prepared(e.spec):
			e.lc.due.Trigger, e.lc.due.Force = Trigger{Kind: TriggerStart, Detail: StartNotPrepared}, true
		}
	}
	c.dueLocked(e, Due(TriggerStart))
}

// The triggers of a run at start that its desired state alone would not
// cause (startLocked).
const (
	StartInterrupted = "start: previous run interrupted"
	StartNotPrepared = "start: working directory missing"
)

// adoptLocked reconciles a task this instance has just become responsible
// for (it became the leader, or the task's owner): its first run here is
// not buffered, and it applies even when nothing changed when the previous
// holder stopped in the middle of a run (inFlight). c.mu is held.
func (c *Controller) adoptLocked(e *entry, t Trigger, inFlight bool) {
	e.lc.ranOnce = false
	if inFlight {
		e.lc.due.Trigger, e.lc.due.Force = Due(TriggerFailover), true
	}
	c.dueLocked(e, t)
}

// takeLocked moves a queued task to running for the worker that took it
// off the queue, and returns the run that was due; false when the task is
// not queued (any more). c.mu is held.
func (c *Controller) takeLocked(e *entry) (Request, bool) {
	if !c.stepLocked(e, evTake, wake{}) {
		return Request{}, false
	}
	req := e.lc.due
	req.Name = e.spec.Name
	e.lc.due = Request{}
	return req, true
}

// untakeLocked puts back a run the worker could not start (no run slot
// before shutdown): the task stays due, as it was. c.mu is held.
func (c *Controller) untakeLocked(e *entry, req Request) {
	e.lc.due = req
	c.stepLocked(e, evQueue, wake{}) // running: queued again by evDone
	c.stepLocked(e, evDone, wake{})
}

// submitLocked hands the run req to the queue (RunOnce). c.mu is held.
func (c *Controller) submitLocked(e *entry, req Request) {
	e.lc.due = req
	c.stepLocked(e, evQueue, wake{})
}

// reserveLocked takes the task for a run its caller starts itself (an API
// call, a drift check); false when it is queued, running or deleted.
func (c *Controller) reserveLocked(e *entry) bool {
	return c.stepLocked(e, evReserve, wake{})
}

// release ends a reservation; a change that came meanwhile runs now.
func (c *Controller) release(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tasks[e.spec.Name] != e { // gone meanwhile
		c.stepLocked(e, evGone, wake{})
		return
	}
	c.stepLocked(e, evDone, wake{})
	c.undeferLocked(e)
}

// readData records that a run of the task has read complete data: buffer
// periods apply from now on.
func (c *Controller) readData(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.lc.ranOnce = true
}

// wait records why the task cannot run yet ("" when it can), and reports
// whether the reason is new.
func (c *Controller) wait(e *entry, why string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waitLocked(e, why)
}

// waitLocked is wait with c.mu held.
func (c *Controller) waitLocked(e *entry, why string) (changed bool) {
	changed = e.lc.waiting != why
	e.lc.waiting = why
	return changed
}

// ranLocked keeps what a run did (the reconciler's outcome) in the task's
// state: the desired state it was for (the failures of an older one do not
// count against it), the Consul data of its recorded event, and its
// success. c.mu is held.
func (c *Controller) ranLocked(e *entry, res outcome) {
	if res.fingerprint != "" {
		c.runsLocked(e, res.fingerprint)
	}
	if res.recorded {
		e.prevInputs = res.inputs
	}
	if res.applied {
		e.drifted = false // just applied: matches the configuration again
		c.succeededLocked(e)
	}
	if res.hold != nil {
		c.holdLocked(e, res.hold) // gates.go
	}
}

// runsLocked records the fingerprint of the desired state a run applies:
// the failures of an older one do not count against it. c.mu is held.
func (c *Controller) runsLocked(e *entry, fingerprint string) {
	if e.lc.failHash != fingerprint {
		e.lc.retries = 0
		e.lc.failHash = fingerprint
	}
}

// succeededLocked records a successful run. c.mu is held.
func (c *Controller) succeededLocked(e *entry) {
	e.lc.retries = 0
}

// endRunLocked moves a task whose run (taken from the queue) has ended on:
// retried after a delay when it failed and may be retried, else done; a
// change that came during the run runs now. c.mu is held.
func (c *Controller) endRunLocked(e *entry, req Request, res outcome) {
	lc, name := &e.lc, e.spec.Name
	lc.last = res
	if res.notReady && req.Force && req.Trigger.Kind != TriggerOnce {
		// A run that must apply whatever the desired state (the
		// previous run was interrupted, say) found its data incomplete:
		// it stays due, and applies once the data is there, with its
		// own trigger (what forces it; a forced run's trigger is not
		// the data's).
		lc.due.Trigger, lc.due.Force = req.Trigger, true
	}
	locked := res.failed && errors.Is(res.err, driver.ErrStateLocked)
	if !locked {
		lc.lockWaits = 0
	}
	switch {
	case req.Trigger.Kind == TriggerOnce: // -once reports it: no retry
		c.stepLocked(e, evDone, wake{})
	case locked && e.spec.Enabled:
		// Someone else holds the task's state lock. Unlike other
		// failures this is retried until the run gets the lock: a lock
		// always ends (see driver.ErrStateLocked), and giving up would
		// leave the task behind the catalog until its next change.
		// The delay doubles up to LockRetryCap.
		lc.lockWaits++
		delay := lockPolicy(c.opts.RetryBase).Delay(lc.lockWaits)
		c.log.Info("retrying task: its Terraform state is locked by another process", "task_name", name,
			"attempt", lc.lockWaits, "delay", delay.Round(time.Millisecond))
		lc.due.Trigger = Due(TriggerRetry)
		lc.rerun = false // a change does not free the lock: the retry reads it
		lc.retry = Retry{Attempt: lc.lockWaits, LastError: c.redact(name, driver.ErrorSummary(res.err))}
		c.stepLocked(e, evRetry, wake{d: delay})
	case res.failed && res.terminal:
		c.log.Warn("task failed with a terminal error: it runs again when its desired state changes",
			"task_name", name, "error", res.err)
		c.stepLocked(e, evDone, wake{}) // a change that came during the run runs now
	case res.failed && e.spec.Enabled && !lc.doomed && c.opts.mayRetry(lc.retries):
		lc.retries++
		delay := retryPolicy(c.opts.RetryBase, c.opts.RetryMax).Delay(lc.retries)
		if !res.waiting {
			c.log.Info("retrying task after failure", "task_name", name, "attempt", lc.retries, "delay", delay.Round(time.Millisecond))
		}
		lc.retry = Retry{Attempt: lc.retries, LastError: c.redact(name, driver.ErrorSummary(res.err))}
		// A change that came during the run runs now.
		c.stepLocked(e, evRetry, wake{d: delay, before: func() {
			if lc.due.Trigger.IsZero() {
				lc.due.Trigger = Due(TriggerRetry)
			}
		}})
	default:
		c.stepLocked(e, evDone, wake{})
	}
	c.undeferLocked(e)
}

// retryLocked is the task's pending retry (runinfo.go), if one waits.
func (e *entry) retryLocked() *Retry {
	lc := &e.lc
	if lc.phase != phaseRetryWait || lc.timer == nil || lc.timerPhase != phaseRetryWait {
		return nil
	}
	r := lc.retry
	r.NextAt = lc.timerAt
	return &r
}

// deletingLocked reports whether the task is being deleted (marked, or
// its deletion under way). c.mu is held.
func (e *entry) deletingLocked() bool {
	return e.lc.doomed || e.lc.phase == phaseDeleting
}
