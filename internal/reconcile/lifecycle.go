package reconcile

import (
	"time"
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
)

var phaseNames = [...]string{"idle", "queued", "buffering", "retry-wait", "running", "deleting"}

func (p phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "unknown"
}

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
)

var eventNames = [...]string{"queue", "buffer", "fire", "take", "reserve", "retry", "done", "stop", "delete"}

func (e event) String() string {
	if int(e) < len(eventNames) {
		return eventNames[e]
	}
	return "unknown"
}

// facts are what a transition depends on besides the phase.
type facts struct {
	timer      bool  // a timer is armed (a buffered change, or a retry, waits)
	timerPhase phase // what the armed timer waits for: phaseBuffering or phaseRetryWait
	rerun      bool  // running: the task became due again during the run
	doomed     bool  // running: the task is to be deleted when the run ends
}

// step is the outcome of a transition.
type step struct {
	to    phase
	ok    bool // false: refused (the task is busy or gone) or moot (a stale timer); nothing changes
	arm   bool // (re)arm the timer (a buffer period or a retry delay)
	stop  bool // stop the timer: what it waited for is due now, or dropped
	rerun bool // the running task runs again when its run ends
	doom  bool // the running task is deleted when its run ends
}

// transition is the task lifecycle: the phase a task in phase p moves to on
// ev. It has no effects; stepLocked carries them out.
func transition(p phase, ev event, f facts) step {
	refused := step{to: p}
	switch ev {
	case evQueue:
		switch p {
		case phaseIdle, phaseBuffering, phaseRetryWait:
			return step{to: phaseQueued, ok: true, stop: true}
		case phaseQueued:
			return step{to: p, ok: true}
		case phaseRunning:
			return step{to: p, ok: true, rerun: true}
		}
	case evBuffer:
		switch p {
		case phaseIdle, phaseBuffering, phaseRetryWait:
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
		case phaseIdle, phaseBuffering, phaseRetryWait:
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
			default:
				return step{to: phaseIdle, ok: true}
			}
		case phaseDeleting: // the deletion failed: the task stays, disabled
			return step{to: phaseIdle, ok: true}
		}
	case evStop:
		switch p {
		case phaseIdle, phaseQueued, phaseBuffering, phaseRetryWait:
			return step{to: phaseIdle, ok: true, stop: true}
		}
	case evDelete:
		switch p {
		case phaseIdle, phaseQueued, phaseBuffering, phaseRetryWait:
			return step{to: phaseDeleting, ok: true, stop: true}
		case phaseRunning: // the deletion waits for the run
			return step{to: p, ok: true, stop: true, doom: true}
		}
	}
	return refused
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
	f := facts{timer: e.timer != nil, timerPhase: e.timerPhase, rerun: e.rerun, doomed: e.doomed}
	s := transition(e.phase, ev, f)
	if !s.ok {
		return false
	}
	from := e.phase
	e.phase = s.to
	if s.stop {
		c.stopTimerLocked(e)
	}
	if s.arm {
		kind := phaseRetryWait
		if ev == evBuffer {
			kind = phaseBuffering
		}
		c.armLocked(e, kind, w)
	}
	if s.rerun {
		e.rerun = true
	}
	if s.doom {
		e.doomed = true
		c.changedLocked()
	}
	if from == s.to {
		return true
	}
	c.changedLocked()
	if from == phaseQueued && ev != evTake { // a worker took it off the queue itself
		c.unqueueLocked(e.spec.Name)
	}
	if s.to == phaseQueued {
		c.queue = append(c.queue, e.spec.Name)
		if c.queueSince.IsZero() {
			c.queueSince = c.opts.Clock.Now()
		}
		if c.opts.Metrics != nil {
			c.opts.Metrics.QueueDepth(len(c.queue))
		}
		signal(c.kick)
	}
	if from == phaseRunning || s.to == phaseRunning {
		e.rerun = false // consumed: the task is queued, or starts a run that reads the current data
	}
	if from == phaseRunning {
		c.wakeDependentsLocked(e.spec.Name) // they look again (chain.go)
	}
	return true
}

// armLocked (re)starts the task's timer; when it fires, w.before runs under
// c.mu and the task moves on (evFire).
func (c *Controller) armLocked(e *entry, kind phase, w wake) {
	if e.timer != nil {
		e.timer.Stop()
	}
	e.gen++
	gen := e.gen
	e.timerPhase = kind
	e.timerAt = c.opts.Clock.Now().Add(w.d)
	e.timer = c.opts.Clock.AfterFunc(w.d, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if e.gen != gen {
			return
		}
		e.timer = nil
		if w.before != nil {
			w.before()
		}
		c.stepLocked(e, evFire, wake{})
	})
}

// stopTimerLocked drops the task's timer and its buffer deadline.
func (c *Controller) stopTimerLocked(e *entry) {
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	e.gen++
	e.deadline = time.Time{}
}
