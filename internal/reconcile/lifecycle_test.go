package reconcile

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/reconcile/reconciletest"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// TestTransitionTable is the task lifecycle, every phase × event: where the
// task goes, whether the event applies, and what happens to its timer. A
// change to a rule shows up here as a changed row.
func TestTransitionTable(t *testing.T) {
	const (
		I = phaseIdle
		Q = phaseQueued
		B = phaseBuffering
		W = phaseRetryWait
		R = phaseRunning
		D = phaseDeleting
		H = phaseHeld
	)
	no := facts{}
	rerun := facts{rerun: true}
	doomed := facts{doomed: true, rerun: true}
	buffered := facts{timer: true, timerPhase: B}
	retrying := facts{timer: true, timerPhase: W}
	ok := func(to phase) step { return step{to: to, ok: true} }
	refused := func(p phase) step { return step{to: p} }
	withStop := func(s step) step { s.stop = true; return s }
	withArm := func(s step) step { s.arm = true; return s }
	cases := []struct {
		from phase
		ev   event
		f    facts
		want step
	}{
		// A change with no buffer period, a tick, start-up, a new leader.
		{I, evQueue, no, withStop(ok(Q))},
		{Q, evQueue, no, ok(Q)},
		{B, evQueue, buffered, withStop(ok(Q))}, // due now: the buffer timer is moot
		{W, evQueue, retrying, withStop(ok(Q))},
		{R, evQueue, no, step{to: R, ok: true, rerun: true}},
		{D, evQueue, no, refused(D)},
		// A change that waits out the buffer period.
		{I, evBuffer, no, withArm(ok(B))},
		{Q, evBuffer, no, ok(Q)}, // due already
		{B, evBuffer, buffered, withArm(ok(B))},
		{W, evBuffer, retrying, withArm(ok(B))},
		{R, evBuffer, no, withArm(ok(R))}, // the period runs during the run
		{D, evBuffer, no, refused(D)},
		// The timer fires.
		{I, evFire, no, refused(I)},
		{Q, evFire, no, ok(Q)},
		{B, evFire, no, ok(Q)},
		{W, evFire, no, ok(Q)},
		{R, evFire, no, step{to: R, ok: true, rerun: true}},
		{D, evFire, no, refused(D)},
		// A worker takes the task off the queue.
		{Q, evTake, buffered, withStop(ok(R))},
		{I, evTake, no, refused(I)},
		{R, evTake, no, refused(R)},
		// An API run or a drift check takes the task.
		{I, evReserve, no, ok(R)},
		{B, evReserve, buffered, ok(R)}, // the timer stays armed
		{W, evReserve, retrying, ok(R)},
		{Q, evReserve, no, refused(Q)},
		{R, evReserve, no, refused(R)},
		{D, evReserve, no, refused(D)},
		// A failed run is retried.
		{R, evRetry, no, withArm(ok(W))},
		{R, evRetry, rerun, withStop(ok(Q))}, // a change came during the run: it runs now
		{R, evRetry, doomed, withStop(ok(D))},
		{I, evRetry, no, refused(I)},
		// A run ends.
		{R, evDone, no, ok(I)},
		{R, evDone, rerun, withStop(ok(Q))},
		{R, evDone, buffered, ok(B)},
		{R, evDone, retrying, ok(W)},
		{R, evDone, doomed, withStop(ok(D))},
		{D, evDone, no, ok(I)}, // a failed deletion: the task stays
		{I, evDone, no, refused(I)},
		{Q, evDone, no, refused(Q)},
		// Disabled.
		{I, evStop, no, withStop(ok(I))},
		{Q, evStop, no, withStop(ok(I))},
		{B, evStop, buffered, withStop(ok(I))},
		{W, evStop, retrying, withStop(ok(I))},
		{R, evStop, no, refused(R)},
		{D, evStop, no, refused(D)},
		// Deleted.
		{I, evDelete, no, withStop(ok(D))},
		{Q, evDelete, no, withStop(ok(D))},
		{B, evDelete, buffered, withStop(ok(D))},
		{W, evDelete, retrying, withStop(ok(D))},
		{R, evDelete, no, step{to: R, ok: true, stop: true, doom: true}},
		{D, evDelete, no, refused(D)},
		// A deletion given up before it began.
		{R, evAbandon, doomed, step{to: R, ok: true, spare: true}}, // the run ends as any other
		{D, evAbandon, no, ok(I)},
		{I, evAbandon, no, refused(I)},
		{Q, evAbandon, no, refused(Q)},
		// The task was removed while a run held it.
		{R, evGone, rerun, withStop(ok(I))},
		{I, evGone, no, withStop(ok(I))},
		// A safety gate holds the run's plan (gates.go).
		{R, evDone, facts{held: true}, ok(H)},
		{R, evDone, facts{held: true, rerun: true}, withStop(ok(Q))},                                    // a change came: plan again
		{R, evDone, facts{held: true, timer: true, timerPhase: B}, ok(B)},                               // a buffered change plans again
		{H, evQueue, no, withStop(ok(Q))},                                                               // a change: plan again, supersede
		{H, evBuffer, no, withArm(ok(B))},                                                               // the plan stays held meanwhile
		{H, evReserve, no, ok(R)},                                                                       // approve, reject
		{H, evTake, no, refused(H)},                                                                     // not queued
		{H, evFire, no, refused(H)},                                                                     // a stale timer
		{H, evDrop, facts{held: true}, step{to: I, ok: true, drop: true}},                               // decided: waits for a change
		{H, evExpire, facts{held: true}, step{to: I, ok: true, drop: true}},                             // expired: waits for a change
		{B, evExpire, facts{held: true, timer: true, timerPhase: B}, step{to: B, ok: true, drop: true}}, // a change plans again
		{R, evDrop, facts{held: true}, step{to: R, ok: true, drop: true}},                               // approved, or superseded by the run
		{I, evDrop, no, refused(I)},                                                                     // decided meanwhile
		{R, evDrop, no, refused(R)},
		{I, evExpire, no, refused(I)},
		{R, evHold, no, step{to: R, ok: true, hold: true}}, // the run's end decides: held
		{D, evHold, no, step{to: D, ok: true, hold: true}}, // a deletion's destroy plan
		{I, evHold, no, refused(I)},
		{H, evHold, facts{held: true}, refused(H)},
		{H, evStop, no, withStop(ok(I))}, // disabled
		{H, evDelete, no, withStop(ok(D))},
		// Requests (intents): the caller that reserved the task hands it
		// to the queue; a worker takes it with the request, leaving a
		// pending timer armed; a change meanwhile runs after it.
		{R, evSubmit, no, ok(Q)},
		{R, evSubmit, rerun, ok(Q)}, // the change runs after the request
		{R, evSubmit, doomed, withStop(ok(D))},
		{I, evSubmit, no, refused(I)},
		{Q, evSubmit, no, refused(Q)},
		{Q, evTake, facts{intent: true, timer: true, timerPhase: B}, ok(R)}, // the timer stays armed
		{D, evTake, facts{intent: true}, ok(D)},                             // a deletion's destroy
		{D, evTake, no, refused(D)},
		{Q, evQueue, facts{intent: true}, step{to: Q, ok: true, rerun: true}},
		{Q, evFire, facts{intent: true}, step{to: Q, ok: true, rerun: true}},
		{Q, evBuffer, facts{intent: true}, withArm(ok(Q))},
		// A request withdrawn before a worker took it.
		{Q, evWithdraw, no, ok(I)},
		{Q, evWithdraw, rerun, ok(Q)},
		{Q, evWithdraw, buffered, ok(B)},
		{Q, evWithdraw, facts{held: true}, ok(H)},
		{D, evWithdraw, no, ok(D)},
		{R, evWithdraw, no, refused(R)},
		{Q, evWithdraw, facts{doomed: true, intent: true}, withStop(ok(D))}, // the deletion waited for it
		// A deletion waits for a request on the queue as for a run.
		{Q, evDelete, facts{intent: true}, step{to: Q, ok: true, stop: true, doom: true}},
		{Q, evAbandon, facts{doomed: true, intent: true}, step{to: Q, ok: true, spare: true}},
		{Q, evAbandon, no, refused(Q)},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s+%s", tc.from, tc.ev), func(t *testing.T) {
			if got := transition(tc.from, tc.ev, tc.f); got != tc.want {
				t.Errorf("transition(%s, %s, %+v) = %+v, want %+v", tc.from, tc.ev, tc.f, got, tc.want)
			}
		})
	}
}

// TestTransitionRefusalsChangeNothing checks the invariant every caller
// relies on: an event that does not apply leaves the task where it was,
// with its timer and flags untouched.
func TestTransitionRefusalsChangeNothing(t *testing.T) {
	for p := phaseIdle; p <= phaseHeld; p++ {
		for ev := evQueue; ev <= lastEvent; ev++ {
			for _, f := range []facts{{}, {rerun: true}, {doomed: true}, {timer: true, timerPhase: phaseBuffering}, {intent: true}} {
				s := transition(p, ev, f)
				if !s.ok && (s.to != p || s.arm || s.stop || s.rerun || s.doom || s.spare) {
					t.Errorf("transition(%s, %s, %+v) refused but changes something: %+v", p, ev, f, s)
				}
				if s.ok && s.arm && s.stop {
					t.Errorf("transition(%s, %s, %+v) both arms and stops the timer", p, ev, f)
				}
				if s.ok && s.to == phaseRunning && p != phaseRunning && ev != evTake && ev != evReserve {
					t.Errorf("transition(%s, %s) starts a run: only a worker or a reservation may", p, ev)
				}
			}
		}
	}
}

// TestStepLockedQueue checks stepLocked's effects on the run queue: a task
// is on it exactly while it is queued, once.
func TestStepLockedQueue(t *testing.T) {
	c := New(Options{}, nil)
	e := &entry{spec: task.Spec{Name: "a", Enabled: true}}
	c.tasks["a"] = e
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stepLocked(e, evQueue, wake{})
	c.stepLocked(e, evQueue, wake{})
	if c.q.len() != 1 || e.lc.phase != phaseQueued {
		t.Fatalf("queued twice: queue %v, phase %s", c.q.names, e.lc.phase)
	}
	c.stepLocked(e, evStop, wake{})
	if c.q.len() != 0 || e.lc.phase != phaseIdle {
		t.Fatalf("disabled: queue %v, phase %s", c.q.names, e.lc.phase)
	}
	c.stepLocked(e, evReserve, wake{})
	c.stepLocked(e, evQueue, wake{}) // a change during the run
	if c.q.len() != 0 || !e.lc.rerun {
		t.Fatalf("change while running: queue %v, rerun %v", c.q.names, e.lc.rerun)
	}
	idle := c.changed
	c.stepLocked(e, evDone, wake{})
	if c.q.len() != 1 || e.lc.phase != phaseQueued || e.lc.rerun {
		t.Fatalf("run ended with a rerun due: queue %v, phase %s, rerun %v", c.q.names, e.lc.phase, e.lc.rerun)
	}
	select {
	case <-idle:
	default:
		t.Fatal("the end of the run did not wake waiters")
	}
	c.stepLocked(e, evDelete, wake{})
	if c.q.len() != 0 || e.lc.phase != phaseDeleting {
		t.Fatalf("deleted: queue %v, phase %s", c.q.names, e.lc.phase)
	}
}

// TestHeldPlanIsPartOfTheLifecycle checks that a held plan lives in the
// task's lifecycle: evHold keeps it and sets the task's one timer for its
// expiry (no timer of its own), a buffer period waits on the same timer,
// and the expiry is an event (evExpire) that drops the plan and makes the
// held task idle.
func TestHeldPlanIsPartOfTheLifecycle(t *testing.T) {
	clk := reconciletest.NewClock()
	c := New(Options{Watcher: newFakeWatcher(), Clock: clk}, nil)
	e := &entry{spec: task.Spec{Name: "a", Enabled: true}, changed: make(chan struct{}, 1)}
	c.tasks["a"] = e
	c.mu.Lock()
	c.stepLocked(e, evReserve, wake{})
	now := time.Now()
	h := &heldRun{plan: gate.Plan{ID: "p1", Task: "a", State: gate.Pending, Created: now, Expires: now.Add(time.Hour)}, run: &runRecord{}}
	c.gk.holdLocked(e, h)
	c.stepLocked(e, evDone, wake{})
	if e.lc.phase != phaseHeld || e.lc.held != h || e.lc.timer == nil || e.lc.timerSet {
		t.Fatalf("held: phase %s, held %v, timer %v, wait %v; want held, the plan, the expiry armed, no wait", e.lc.phase, e.lc.held, e.lc.timer, e.lc.timerSet)
	}
	c.stepLocked(e, evBuffer, wake{d: time.Minute}) // a change: planned again after its buffer period
	if e.lc.phase != phaseBuffering || e.lc.held != h {
		t.Fatalf("a change while held: phase %s, held %v; want buffering, the plan still held", e.lc.phase, e.lc.held)
	}
	if n := len(clk.Pending()); n != 1 {
		t.Fatalf("%d timers pending, want the task's one timer", n)
	}
	c.stopTimerLocked(e) // the buffer period dropped: the expiry stays
	if e.lc.timer == nil || len(clk.Pending()) != 1 {
		t.Fatalf("the expiry's timer went with the buffer period")
	}
	c.stepLocked(e, evDrop, wake{}) // not a decision on a plan in buffering: the plan goes, the phase stays
	c.stepLocked(e, evDone, wake{})
	if e.lc.held != nil || e.lc.phase != phaseBuffering || e.lc.timer != nil || len(clk.Pending()) != 0 {
		t.Fatalf("dropped: held %v, phase %s, timer %v, pending %v", e.lc.held, e.lc.phase, e.lc.timer, clk.Pending())
	}
	// Held again, then expired by the timer.
	c.stepLocked(e, evReserve, wake{})
	h2 := &heldRun{plan: gate.Plan{ID: "p2", Task: "a", State: gate.Pending, Created: now, Expires: now.Add(time.Hour)}, run: &runRecord{}}
	c.gk.holdLocked(e, h2)
	c.stepLocked(e, evDone, wake{})
	c.mu.Unlock()
	clk.Advance(time.Hour)
	testutil.WaitFor(t, "the plan to expire", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return e.lc.held == nil && c.gk.plans[e].plan.State == gate.Expired && e.lc.phase != phaseHeld
	})
}

// TestDeletionWaitsForAQueuedRequest checks that a deletion waits for a
// request on the queue (run now, say) as it waits for a run: the request
// runs, then the task is deleted; and that a request whose caller went
// away leaves the deletion to go on.
func TestDeletionWaitsForAQueuedRequest(t *testing.T) {
	c := New(Options{Watcher: newFakeWatcher()}, nil)
	e := &entry{spec: task.Spec{Name: "a", Enabled: true}, changed: make(chan struct{}, 1)}
	c.tasks["a"] = e
	c.mu.Lock()
	defer c.mu.Unlock()
	submit := func() {
		t.Helper()
		c.stepLocked(e, evReserve, wake{})
		if _, err := c.submitLocked(e, intent{kind: intentRun, req: Request{Name: "a", Force: true}}); err != nil {
			t.Fatal(err)
		}
	}
	submit()
	c.stepLocked(e, evDelete, wake{})
	if e.lc.phase != phaseQueued || !e.lc.doomed || e.lc.intent == nil || c.q.len() != 1 {
		t.Fatalf("deleted with a request queued: phase %s, doomed %v, intent %v, queue %v; want the request kept, the task doomed",
			e.lc.phase, e.lc.doomed, e.lc.intent, c.q.names)
	}
	c.q.take("a")
	j, ok := c.takeLocked(e)
	if !ok || j.gen == 0 || !e.lc.doomed {
		t.Fatalf("the request not taken (%v, gen %d) or the task no longer doomed (%v)", ok, j.gen, e.lc.doomed)
	}
	c.endLocked(e, j, Result{})
	if e.lc.phase != phaseDeleting || e.lc.observed != j.gen {
		t.Fatalf("the request ended: phase %s, observed %d; want deleting, %d", e.lc.phase, e.lc.observed, j.gen)
	}
	// Withdrawn: the deletion goes on.
	c.stepLocked(e, evAbandon, wake{}) // the deletion given up: idle
	submit()
	c.stepLocked(e, evDelete, wake{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.awaitIntentLocked(ctx, e, e.lc.reqGen); err == nil {
		t.Fatal("withdrawn request: no error")
	}
	if e.lc.phase != phaseDeleting || c.q.len() != 0 {
		t.Fatalf("withdrawn request of a doomed task: phase %s, queue %v; want deleting, empty", e.lc.phase, c.q.names)
	}
}
