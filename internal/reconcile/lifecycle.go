package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/gate"
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
	// (lifecycle.held, gates.go): nothing is due; a change plans again
	// (and supersedes the held plan), an approval or a rejection takes the
	// task (evReserve), its expiry (the task's timer) drops it (evExpire).
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
	// evDrop: the held plan ended (approved, rejected, superseded, or
	// forgotten when this instance stops running the task): a held task
	// waits for its next change.
	evDrop
	// evSubmit: the caller that reserved the task records its request (an
	// intent) and hands the task to the queue.
	evSubmit
	// evWithdraw: the caller of a request that no worker has taken yet
	// went away: the task goes back to what it was doing.
	evWithdraw
	// evHold: the run's plan is held for approval (a safety gate): it is
	// the task's held plan, with its expiry on the task's timer.
	evHold
	// evExpire: the held plan's expiry came (the task's timer) before a
	// decision: it is dropped, and a held task waits for its next change.
	evExpire

	lastEvent = evExpire
)

var eventNames = [...]string{"queue", "buffer", "fire", "take", "reserve", "retry", "done", "stop", "delete", "abandon", "gone", "drop",
	"submit", "withdraw", "hold", "expire"}

func (e event) String() string { return enumName(e, eventNames[:]) }

// facts are what a transition depends on besides the phase.
type facts struct {
	timer      bool  // a timer is armed (a buffered change, or a retry, waits)
	timerPhase phase // what the armed timer waits for: phaseBuffering or phaseRetryWait
	rerun      bool  // running: the task became due again during the run
	doomed     bool  // running: the task is to be deleted when the run ends
	held       bool  // a safety gate holds a plan of the task (lifecycle.held)
	intent     bool  // a request (an intent: run now, a drift check ...) waits for a worker or runs
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
	hold  bool // the plan given with the event is the task's held plan
	drop  bool // the held plan is no longer held
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
			// queued for a request: the change runs after it
			return step{to: p, ok: true, rerun: f.intent}
		case phaseRunning:
			return step{to: p, ok: true, rerun: true}
		}
	case evBuffer:
		switch p {
		case phaseIdle, phaseBuffering, phaseRetryWait, phaseHeld:
			return step{to: phaseBuffering, ok: true, arm: true}
		case phaseQueued: // due already: the queued run reads the change
			if f.intent { // a request comes first: the period runs meanwhile
				return step{to: p, ok: true, arm: true}
			}
			return step{to: p, ok: true}
		case phaseRunning: // the period runs during the run
			return step{to: p, ok: true, arm: true}
		}
	case evFire:
		switch p {
		case phaseBuffering, phaseRetryWait:
			return step{to: phaseQueued, ok: true}
		case phaseQueued:
			return step{to: p, ok: true, rerun: f.intent}
		case phaseRunning:
			return step{to: p, ok: true, rerun: true}
		}
	case evTake:
		switch {
		case p == phaseQueued && f.intent:
			// A request: a timer stays armed (a drift check applies
			// nothing; a run reads data a buffered change may postdate).
			return step{to: phaseRunning, ok: true}
		case p == phaseQueued: // this run reads the current data: a timer is moot
			return step{to: phaseRunning, ok: true, stop: true}
		case p == phaseDeleting && f.intent: // the deletion's destroy
			return step{to: p, ok: true}
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
		switch {
		case p == phaseQueued && f.intent: // the deletion waits for the request, as for a run
			return step{to: p, ok: true, stop: true, doom: true}
		case p == phaseIdle, p == phaseQueued, p == phaseBuffering, p == phaseRetryWait, p == phaseHeld:
			return step{to: phaseDeleting, ok: true, stop: true}
		case p == phaseRunning: // the deletion waits for the run
			return step{to: p, ok: true, stop: true, doom: true}
		}
	case evAbandon:
		switch {
		case p == phaseRunning, p == phaseQueued && f.doomed: // the run goes on and ends as any other
			return step{to: p, ok: true, spare: true}
		case p == phaseDeleting:
			return step{to: phaseIdle, ok: true}
		}
	case evGone:
		return step{to: phaseIdle, ok: true, stop: true}
	case evDrop, evExpire:
		switch {
		case !f.held:
		case p == phaseHeld:
			return step{to: phaseIdle, ok: true, drop: true}
		default: // a run, a request or a change goes on
			return step{to: p, ok: true, drop: true}
		}
	case evHold:
		switch p {
		case phaseRunning, phaseDeleting: // the end of the run decides (evDone: held)
			return step{to: p, ok: true, hold: true}
		}
	case evSubmit:
		if p == phaseRunning {
			if f.doomed { // deleted meanwhile: the request is dropped
				return step{to: phaseDeleting, ok: true, stop: true}
			}
			return step{to: phaseQueued, ok: true}
		}
	case evWithdraw:
		switch p {
		case phaseQueued:
			switch {
			case f.doomed: // the deletion waited for the request
				return step{to: phaseDeleting, ok: true, stop: true}
			case f.rerun:
				return step{to: p, ok: true}
			case f.timer:
				return step{to: f.timerPhase, ok: true}
			case f.held:
				return step{to: phaseHeld, ok: true}
			default:
				return step{to: phaseIdle, ok: true}
			}
		case phaseDeleting:
			return step{to: p, ok: true}
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
	timer      Timer // armed for the earliest of timerAt (timerSet) and the held plan's expiry
	timerSet   bool  // a buffer period or a retry delay waits (timerPhase, timerAt)
	timerPhase phase
	timerAt    time.Time // when it fires
	before     func()    // runs (under c.mu) when it fires, before evFire
	gen        int       // invalidates stale timers
	deadline   time.Time // the buffer period's hard deadline
	// recheckAt is when the first removal its hold-down keeps applies
	// (zero: none): the task's timer makes it due then.
	recheckAt time.Time
	// held is the plan a safety gate holds for approval (nil: none is
	// pending), whatever the phase (a change may be planned meanwhile);
	// it expires at held.expireAt (the task's timer). gates.go keeps
	// what the operator sees of the task's plans (gateState).
	held *heldRun
	// Failures of the current desired state (failHash).
	retries   int // consecutive failed runs, retried with backoff
	failHash  string
	lockWaits int // consecutive runs that found the state locked (retried without a limit)
	retry     Retry
	// waiting says why the task cannot run yet (ErrWaiting, an upstream
	// task), "" otherwise.
	waiting string
	// intent is the request a caller recorded (run now, a drift check, an
	// approval ...: submitLocked), taken by the worker that takes the task
	// off the queue; nil when none waits. reqGen counts the requests,
	// observed is the generation of the last one done: a caller waits
	// until observed reaches its request's, and finds what it did in
	// results.
	intent   *intent
	reqGen   uint64
	observed uint64
	results  map[uint64]intentResult
	// took is the request of the job a worker took (takeLocked) until it
	// ends (endLocked): what the job's snapshot reads (taken).
	took *Request
	// check: a targeted run left its full check due (Result.checkDue)
	// and no run has checked everything since. When a run ends and
	// nothing else is due, the check waits CheckDelay on the task's timer
	// (as a buffered change: a newer change replaces its trigger and runs
	// first), then runs (TriggerCheck). It lives in memory only: a
	// disabled, removed or stopped task, or a member that stops running
	// it (failover), drops it.
	check bool
}

// CheckDelay is how long the full check a targeted run left due waits,
// once the task is idle, before it runs: a change that follows the first
// within it runs first (targeted too), so a burst of changes is checked
// once, after its last.
const CheckDelay = 2 * time.Second

// checkIfIdle makes the task's pending full check due, through the
// task's timer (CheckDelay), when the task is enabled and idle: nothing
// else is due or waits. c.mu is held.
func checkIfIdle(c *taskTable, e *entry) {
	lc := &e.lc
	if !lc.check || !e.spec.Enabled || lc.phase != phaseIdle || e.throwaway != "" {
		return
	}
	if lc.due.Trigger.IsZero() {
		lc.due.Trigger = Due(TriggerCheck)
	}
	c.stepLocked(e, evBuffer, wake{d: CheckDelay})
}

// replaceable reports whether a trigger gives way to a newer reason to
// run: none yet, or a pending full check (which stays pending).
func replaceable(t Trigger) bool { return t.IsZero() || t.Kind == TriggerCheck }

// intentResult is what a request did, kept for its caller.
type intentResult struct {
	res Result
	err error
}

// wake is the timer a step arms: after d, before runs (under c.mu) and the
// task's timer fires.
type wake struct {
	d      time.Duration
	before func()
	hold   *heldRun // evHold: the plan held
}

// stepLocked moves a task through its lifecycle on ev and carries out the
// effects: the run queue, the timer, and waking whoever waits for a task
// to change (StateChanged). It reports whether the event applied. c.mu is held.
func (c *taskTable) stepLocked(e *entry, ev event, w wake) bool {
	lc := &e.lc
	f := facts{timer: lc.timerSet, timerPhase: lc.timerPhase, rerun: lc.rerun, doomed: lc.doomed, held: lc.held != nil,
		intent: lc.intent != nil}
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
			kind = phaseBuffering // a running or requested task's buffer period
		}
		c.armLocked(e, kind, w)
	}
	if s.rerun {
		lc.rerun = true
	}
	if s.hold || s.drop {
		lc.held = nil
		if s.hold {
			lc.held = w.hold
		}
		c.rearmLocked(e)
		c.changedLocked()
	}
	if s.doom {
		lc.doomed = true
		c.changedLocked()
	}
	if s.spare || (s.to != phaseRunning && s.to != phaseDeleting && (s.to != phaseQueued || !f.intent)) {
		if lc.doomed {
			c.changedLocked()
		}
		lc.doomed = false
	}
	if ev == evStop || ev == evGone {
		lc.due = Request{} // what was due is dropped
		lc.check = false
	}
	if in := lc.intent; in != nil && !in.taken && ev != evTake && s.to != phaseQueued && (s.to != phaseDeleting || in.req.Mode != ModeDestroy) {
		// The task left the queue otherwise (deleted, disabled, gone):
		// the request is not run.
		c.endIntentLocked(e, Result{}, fmt.Errorf("task %q: the request was dropped: %w", e.spec.Name, errDropped))
	}
	if from == s.to {
		return true
	}
	c.changedLocked()
	if from == phaseQueued {
		c.q.remove(e.key())
	}
	if s.to == phaseQueued {
		c.q.push(e.key())
	}
	// A rerun is consumed when the task is queued for it or a run that
	// reads the current data starts; a request (intent) does neither.
	if !s.rerun && ev != evSubmit && (ev != evTake || !f.intent) {
		lc.rerun = false
	}
	if from == phaseRunning && ev != evGone && ev != evSubmit && e.throwaway == "" {
		c.wakeDependentsLocked(e.spec.Name) // they look again (chain.go)
	}
	return true
}

// armLocked (re)starts the task's wait (a buffer period or a retry delay)
// for w.d; when it is over, w.before runs under c.mu and the task moves on
// (evFire).
func (c *taskTable) armLocked(e *entry, kind phase, w wake) {
	lc := &e.lc
	lc.timerSet = true
	lc.timerPhase = kind
	lc.timerAt = c.opts.Clock.Now().Add(w.d)
	lc.before = w.before
	c.rearmLocked(e)
}

// stopTimerLocked drops the task's wait (a buffer period or a retry delay)
// and its buffer deadline; the held plan's expiry stays.
func (c *taskTable) stopTimerLocked(e *entry) {
	lc := &e.lc
	lc.timerSet, lc.before = false, nil
	lc.deadline = time.Time{}
	c.rearmLocked(e)
}

// halt stops the task's timer altogether, and drops its wait (shutdown,
// removal).
func (lc *lifecycle) halt() {
	lc.check = false
	lc.timerSet, lc.before = false, nil
	lc.recheckAt = time.Time{}
	lc.deadline = time.Time{}
	if lc.timer != nil {
		lc.timer.Stop()
		lc.timer = nil
	}
	lc.gen++
}

// rearmLocked sets the task's one timer for the earliest of its wait and
// its held plan's expiry (none: no timer).
func (c *taskTable) rearmLocked(e *entry) {
	lc := &e.lc
	if lc.timer != nil {
		lc.timer.Stop()
		lc.timer = nil
	}
	lc.gen++
	var at time.Time
	if lc.timerSet {
		at = lc.timerAt
	}
	if h := lc.held; h != nil && !h.expireAt.IsZero() && (at.IsZero() || h.expireAt.Before(at)) {
		at = h.expireAt
	}
	if r := lc.recheckAt; !r.IsZero() && (at.IsZero() || r.Before(at)) {
		at = r
	}
	if at.IsZero() {
		return
	}
	gen := lc.gen
	lc.timer = c.opts.Clock.AfterFunc(max(at.Sub(c.opts.Clock.Now()), 0), func() {
		c.mu.Lock()
		var evs []gate.Event
		if lc.gen == gen {
			lc.timer = nil
			evs = c.timerLocked(e)
		}
		c.mu.Unlock()
		for _, ev := range evs {
			c.gk.gateEvent(ev)
		}
	})
}

// timerLocked is the task's timer firing: the held plan expires when its
// time has come (gates.go), the wait ends when its time has come, and the
// timer is set again for what is left. It returns the gate events.
func (c *taskTable) timerLocked(e *entry) []gate.Event {
	lc := &e.lc
	now := c.opts.Clock.Now()
	var evs []gate.Event
	if h := lc.held; h != nil && !h.expireAt.IsZero() && !now.Before(h.expireAt) {
		evs = append(evs, c.gk.expireLocked(e)...) // gates.go: evExpire
	}
	if r := lc.recheckAt; !r.IsZero() && !now.Before(r) {
		lc.recheckAt = time.Time{}
		c.dueLocked(e, Trigger{Kind: TriggerChange, Detail: "removal_delay"}) // a removal applies
	}
	if lc.timerSet && !now.Before(lc.timerAt) {
		lc.timerSet = false
		if lc.before != nil {
			lc.before()
			lc.before = nil
		}
		c.stepLocked(e, evFire, wake{})
	}
	c.rearmLocked(e)
	return evs
}

// forceLocked makes the task due now, applying even when its desired state
// is unchanged (a schedule tick, drift remediation, outputs a downstream
// task needs, a failover): queued, or, when it is running, queued again
// when the run ends. t is the run's trigger unless another reason came
// first; replace makes it the trigger anyway. c.mu is held.
func (c *taskTable) forceLocked(e *entry, t Trigger, replace bool) {
	if replace || replaceable(e.lc.due.Trigger) {
		e.lc.due.Trigger = t
	}
	e.lc.due.Force = true
	c.enqueueLocked(e, t)
}

// markDirtyLocked records that a task's inputs may have changed and
// schedules its run through the buffer period. c.mu is held.
func (c *taskTable) markDirtyLocked(e *entry, trigger Trigger) {
	if !e.spec.Enabled || !c.started {
		return
	}
	firstRun := e.lc.phase == phaseRunning && !e.lc.ranOnce
	if !e.spec.IsDynamic() {
		// Schedule tasks run on their cron ticks; data only matters for
		// their start-up run, which waits until the data is there.
		switch {
		case firstRun: // decided when it ends (as below)
			e.lc.deferred = true
		case !e.lc.ranOnce:
			c.dueLocked(e, Due(TriggerStart))
		}
		return
	}
	if replaceable(e.lc.due.Trigger) {
		e.lc.due.Trigger = trigger
		e.lc.due.Seen = time.Now()
	}
	bp := e.spec.BufferPeriod
	buffered := bp != nil && bp.Enabled && bp.Min > 0
	if firstRun {
		// The task's first run is under way, and whether it reads its
		// data is known when it ends (its outcome says): decide then
		// (buffered if it ran, at once if it found its data incomplete).
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
func (c *taskTable) dueLocked(e *entry, trigger Trigger) {
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
func (c *taskTable) enqueueLocked(e *entry, t Trigger) {
	if replaceable(e.lc.due.Trigger) {
		e.lc.due.Trigger = t
	}
	c.stepLocked(e, evQueue, wake{})
}

// undeferLocked settles a notification deferred while the task's first
// run was under way (see markDirtyLocked).
func (c *taskTable) undeferLocked(e *entry) {
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
func (c *taskTable) startLocked(e *entry) {
	if !c.standby {
		c.gk.restoreHeldLocked(e) // heldstore.go: before its first decision
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

// restoreLocked makes h, a plan held before this process or member ran the
// task (restored from the store: restoreHeldLocked), the task's held plan,
// as the end of the run that held it would: an idle task (or one waiting
// out a buffer period or a retry) is held, with the plan's expiry on its
// timer; a queued one keeps its place, its plan held meanwhile. c.mu is
// held.
func (c *gateKeeper) restoreLocked(e *entry, h *heldRun) {
	if c.stepLocked(e, evReserve, wake{}) {
		c.stepLocked(e, evHold, wake{hold: h})
		c.stepLocked(e, evDone, wake{})
		return
	}
	e.lc.held = h
	c.rearmLocked(e)
	c.changedLocked()
}

// adoptLocked reconciles a task this instance has just become responsible
// for (it became the leader, or the task's owner): its first run here is
// not buffered, and it applies even when nothing changed when the previous
// holder stopped in the middle of a run (inFlight). c.mu is held.
func (c *taskTable) adoptLocked(e *entry, t Trigger, inFlight bool) {
	c.gk.restoreHeldLocked(e) // heldstore.go: before its first decision
	e.lc.ranOnce = false
	if inFlight {
		e.lc.due.Trigger, e.lc.due.Force = Due(TriggerFailover), true
	}
	c.dueLocked(e, t)
}

// takeLocked moves a queued task to running for the worker that took it
// off the queue (or a deletion's destroy request), and returns the job: a
// snapshot of everything the run reads of the task's state (jobLocked),
// with the request it does: the task's intent if one waits, else the run
// that was due. false when the task cannot be taken (any more). c.mu is
// held.
func (c *taskTable) takeLocked(e *entry) (job, bool) {
	if !c.stepLocked(e, evTake, wake{}) {
		return job{}, false
	}
	var j job // the reconciler reads the snapshot (workers.snapshot)
	if in := e.lc.intent; in != nil {
		in.taken = true
		j.intent = *in
		j.Request = in.req
		j.Name = e.spec.Name
	} else {
		j.Request = e.lc.due
		j.Name = e.spec.Name
		e.lc.due = Request{}
	}
	req := j.Request
	e.lc.took = &req
	return j, true
}

// taken is the job a worker took of the task named name (takeLocked): its
// request, and its caller's intent if it is one; false when no worker holds
// the task. It changes nothing. c.mu is held.
func (lc *lifecycle) taken(name string) (job, bool) {
	if lc.took == nil {
		return job{}, false
	}
	var j job
	j.Request = *lc.took
	if in := lc.intent; in != nil && in.taken {
		j.intent = *in
	}
	j.Name = name
	return j, true
}

// untakeLocked puts back a run the task was due for that the worker could
// not start (no run slot before shutdown): the task stays due, as it was.
// c.mu is held.
func (c *taskTable) untakeLocked(e *entry, j job) {
	e.lc.took = nil
	e.lc.due = j.Request
	c.stepLocked(e, evQueue, wake{}) // running: queued again by evDone
	c.stepLocked(e, evDone, wake{})
}

// submitLocked records the request in of a task its caller holds
// (reserved: phase running; or being deleted: a destroy) as the task's
// intent, hands the task to the queue, and returns the intent's
// generation: the caller waits for it (awaitLocked). It fails when the
// workers have stopped, or the task is being deleted meanwhile. c.mu is
// held.
func (c *taskTable) submitLocked(e *entry, in intent) (uint64, error) {
	if c.closing && c.q.workers == 0 {
		if e.lc.phase == phaseRunning {
			c.stepLocked(e, evDone, wake{})
		}
		return 0, errStopped
	}
	e.lc.reqGen++
	in.gen = e.lc.reqGen
	e.lc.intent = &in
	if e.lc.phase == phaseDeleting {
		c.q.push(e.key())
		return in.gen, nil
	}
	if !c.stepLocked(e, evSubmit, wake{}) || e.lc.phase != phaseQueued {
		// deleted meanwhile: stepLocked dropped the request
		return 0, fmt.Errorf("task %q is being deleted: %w", e.spec.Name, errDropped)
	}
	return in.gen, nil
}

// requestLocked reserves the task and submits the request in (a drift
// check, -once, the discard of expired plans); false when the task is
// queued, running or deleted. c.mu is held.
func (c *taskTable) requestLocked(e *entry, in intent) (uint64, bool) {
	if !c.stepLocked(e, evReserve, wake{}) {
		return 0, false
	}
	gen, err := c.submitLocked(e, in)
	return gen, err == nil
}

// endIntentLocked records the end of the task's intent: its generation is
// observed, and its waiter gets res and err. c.mu is held.
func (c *taskTable) endIntentLocked(e *entry, res Result, err error) {
	in := e.lc.intent
	if in == nil {
		return
	}
	e.lc.intent = nil
	if e.lc.results == nil {
		e.lc.results = map[uint64]intentResult{}
	}
	if !in.noReply {
		e.lc.results[in.gen] = intentResult{res: res, err: err}
	}
	e.lc.observed = in.gen
	c.changedLocked()
}

// awaitIntentLocked waits until the task has observed generation gen (its
// request ran, or was dropped), and returns what it did. When ctx ends
// before a worker took the request, the request is withdrawn (it never
// runs) and ctx's error returned; once a worker has it, the caller waits
// for its end. c.mu is held.
func (c *taskTable) awaitIntentLocked(ctx context.Context, e *entry, gen uint64) (Result, error) {
	if err := c.awaitLocked(ctx, func() bool { return e.lc.observed >= gen }); err != nil {
		if in := e.lc.intent; in != nil && in.gen == gen && !in.taken {
			e.lc.intent = nil
			c.stepLocked(e, evWithdraw, wake{})
			if e.lc.phase == phaseDeleting {
				c.q.remove(e.key())
			}
			return Result{}, err
		}
		_ = c.awaitLocked(context.WithoutCancel(ctx), func() bool { return e.lc.observed >= gen })
	}
	r := e.lc.results[gen]
	delete(e.lc.results, gen)
	return r.res, r.err
}

// releaseLocked ends a reservation (evReserve) that submitted nothing; a
// change that came meanwhile runs now. c.mu is held.
func (c *taskTable) releaseLocked(e *entry) {
	if c.tasks[e.spec.Name] != e && e.throwaway == "" { // gone meanwhile
		c.stepLocked(e, evGone, wake{})
		return
	}
	c.stepLocked(e, evDone, wake{})
	c.undeferLocked(e)
	checkIfIdle(c, e)
}

// wait records why the task cannot run yet ("" when it can), and reports
// whether the reason is new. c.mu is held.
func (lc *lifecycle) wait(why string) (changed bool) {
	changed = lc.waiting != why
	lc.waiting = why
	return changed
}

// commitLocked is the one applier of what a run decided (the reconciler's
// Result) to the task's state: that it read complete data (buffer
// periods apply from now on), why it waits, the desired state it was for
// (the failures of an older one do not count against it), the Consul data
// of its recorded event, its success, the plan it held or superseded, the
// upstream tasks it needs to run, what a drift check found. It returns the
// gate events to hand to the hook once c.mu is released. c.mu is held.
func (c *taskTable) commitLocked(e *entry, j job, res Result) []gate.Event {
	if res.readData {
		e.lc.ranOnce = true
	}
	if res.discarded > 0 {
		c.gk.discardedLocked(e, res.discarded) // gates.go
	}
	if res.setWait {
		e.lc.wait(res.waitReason)
	}
	if res.fingerprint != "" {
		e.lc.runs(res.fingerprint)
	}
	if res.recorded {
		e.prevInputs = res.inputs
	}
	if res.holdSeen && j.hd == e.hd && e.throwaway == "" && e.lc.recheckAt != res.holdNext {
		e.lc.recheckAt = res.holdNext // evaluated again when the first pending removal applies
		c.rearmLocked(e)
	}
	if res.applied {
		e.drifted = false // just applied: matches the configuration again
		e.lc.succeeded()
		// A targeted run leaves its full check due; any other run that
		// applied planned everything: it was the check.
		e.lc.check = res.checkDue
	} else if j.Request.Trigger.Kind == TriggerCheck && res.next == nil {
		// A check that did not run (the task waits, its last failure was
		// terminal ...) is dropped rather than tried again and again:
		// the task's next run plans everything (it refreshes after a
		// failure).
		e.lc.check = false
	}
	var evs []gate.Event
	if sp := res.supersede; sp != nil {
		evs = append(evs, c.gk.supersedeLocked(e, sp)...) // gates.go
	}
	if h := res.hold; h != nil {
		if h.destroy && j.gen != 0 && j.approved == nil { // a deletion's destroy
			h.enabled = j.wasEnabled
		} else if h.destroy && j.approved != nil { // planned again after its approval
			h.enabled = j.approved.enabled
		}
		evs = append(evs, c.gk.holdLocked(e, h)) // gates.go
	}
	if j.replaces != "" && res.next == nil {
		evs = append(evs, c.gk.supersedeLocked(e, &supersession{id: j.replaces})...) // the run failed before it planned
	}
	for _, k := range res.kicks {
		c.kickLocked(k) // chain.go
	}
	if d := res.drift; d != nil {
		e.drifted = d.drifted
		e.lastDriftCheck = c.opts.Clock.Now()
		if d.remediate {
			c.forceLocked(e, Due(TriggerDrift), true) // running: queued again when the check ends
		}
	}
	return evs
}

// runs records the fingerprint of the desired state a run applies:
// the failures of an older one do not count against it. c.mu is held.
func (lc *lifecycle) runs(fingerprint string) {
	if lc.failHash != fingerprint {
		lc.retries = 0
		lc.failHash = fingerprint
	}
}

// succeeded records a successful run. c.mu is held.
func (lc *lifecycle) succeeded() {
	lc.retries = 0
}

// endRunLocked moves a task whose run (taken from the queue) has ended on:
// retried after a delay when it failed and may be retried, else done; a
// change that came during the run runs now. c.mu is held.
func (c *taskTable) endRunLocked(e *entry, req Request, res Result) {
	lc, name := &e.lc, e.spec.Name
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
		lc.retry = Retry{Attempt: lc.lockWaits, LastError: c.opts.redact(name, driver.ErrorSummary(res.err))}
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
		lc.retry = Retry{Attempt: lc.retries, LastError: c.opts.redact(name, driver.ErrorSummary(res.err))}
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
	checkIfIdle(c, e)
}

// endLocked moves the task on once its job j has ended and what it did
// is committed (commitLocked): a run the task was due for through
// endRunLocked (retries); a request ends as a reservation does, and its
// caller gets res. c.mu is held.
func (c *taskTable) endLocked(e *entry, j job, res Result) {
	e.lc.took = nil
	if j.gen == 0 {
		c.endRunLocked(e, j.Request, res)
		return
	}
	switch {
	case c.tasks[e.spec.Name] != e && e.throwaway == "": // deleted by its run (an approved destroy)
		c.stepLocked(e, evGone, wake{})
	case e.lc.phase == phaseDeleting: // the deletion's destroy: Delete moves it on
	default:
		c.stepLocked(e, evDone, wake{})
		c.undeferLocked(e)
		checkIfIdle(c, e)
	}
	c.endIntentLocked(e, res, nil)
}

// retryLocked is the task's pending retry (runinfo.go), if one waits.
func (e *entry) retryLocked() *Retry {
	lc := &e.lc
	if lc.phase != phaseRetryWait || !lc.timerSet || lc.timerPhase != phaseRetryWait {
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
