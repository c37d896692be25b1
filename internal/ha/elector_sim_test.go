package ha

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/reconcile/reconciletest"
	"github.com/ctsync/ctsync/internal/testutil"
)

// The timing rules (H, S, T, R) driven by a fake clock against a real
// Consul agent. The electors do not run their own loop: the simulation
// calls step and refresh for them, in a fixed order, at the fake times
// their schedule asks for, and advances the clock from one event to the
// next. Consul calls take real (short) time; no session expires in Consul
// during a test, which lasts far less than the session TTL.

// simTiming is a valid timing whose events fall on whole seconds:
// heartbeats at t0+3, 6, 9..., failed heartbeats retried 1s later, the
// step-down lease 5s after the last successful heartbeat was sent, takeover
// 10s after the last change a follower saw.
var simTiming = Timing{SessionTTL: 10 * time.Second, Heartbeat: 3 * time.Second, StepDown: 5 * time.Second,
	Takeover: 10 * time.Second, CallTimeout: time.Second, Retry: time.Second, Kill: 2 * time.Second}

type sim struct {
	t      *testing.T
	consul *testutil.Consul
	clk    *reconciletest.Clock
	t0     time.Time
	nodes  []*simNode

	mu      sync.Mutex
	active  map[string]bool
	changes []change // at: fake time
}

type simNode struct {
	id    string
	proxy *testutil.FaultProxy
	el    *Elector
	log   *logBuf
	next  time.Time
	steps []simStep
	// prepare makes OnElected fail while it returns an error.
	prepare func() error
}

// simStep is one call of step: at what time, and when it asked to look
// again; leading tells whether a term was held before the call, due whether
// the elector had asked to be stepped then (every elector is stepped
// whenever any is, as every read of the key wakes the loop).
type simStep struct {
	at, next     time.Time
	leading, due bool
}

func newSim(t *testing.T, ids ...string) *sim {
	s := &sim{t: t, consul: startConsul(t), clk: reconciletest.NewClock(), active: map[string]bool{}}
	s.t0 = s.clk.Now()
	for _, id := range ids {
		s.add(id)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range s.nodes {
				t.Logf("log of %s:\n%s", n.id, n.log.String())
			}
		}
	})
	return s
}

func (s *sim) add(id string) *simNode {
	t := s.t
	n := &simNode{id: id, proxy: testutil.StartFaultProxy(t, s.consul.Addr), log: &logBuf{}}
	client, err := api.NewClient(&api.Config{Address: n.proxy.Addr})
	if err != nil {
		t.Fatal(err)
	}
	n.el, err = New(Options{
		Client: client, Prefix: "consul-terraform-sync/sim", ID: id, Address: id + ".example:8558",
		Timing: simTiming, Clock: s.clk, Logger: newTextLogger(n.log),
		SetActive: func(on bool) { s.setActive(id, on) },
		OnElected: func(context.Context) error {
			if n.prepare != nil {
				return n.prepare()
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.nodes = append(s.nodes, n)
	return n
}

func (s *sim) setActive(id string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active[id] = on
	s.changes = append(s.changes, change{id, on, s.clk.Now()})
	n := 0
	for _, a := range s.active {
		if a {
			n++
		}
	}
	if n > 1 {
		s.t.Errorf("two instances active at once: %v", s.active)
	}
}

// at returns t0 + d.
func (s *sim) at(d time.Duration) time.Time { return s.t0.Add(d) }

// since returns how long after t0 tm is (for messages).
func (s *sim) since(tm time.Time) time.Duration { return tm.Sub(s.t0) }

// settled reports whether what the clock and the elections set off in the
// background has happened: every term whose lease ran out has ended, every
// other one is prepared (active) or failed to prepare.
func (n *simNode) settled(now time.Time) bool {
	e := n.el
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.term
	return t == nil || (t.deadline.After(now) && (t.failed || e.active))
}

func (s *sim) settle() {
	s.t.Helper()
	now := s.clk.Now()
	testutil.Eventually(s.t, 10*time.Second, "the electors to settle", func() bool {
		for _, n := range s.nodes {
			if !n.settled(now) {
				return false
			}
		}
		return true
	})
}

// wantsNow reports whether n asks to be stepped again at once: its last
// step said so, or its preparation failed (Run is woken then).
func (n *simNode) wantsNow(now time.Time) bool {
	e := n.el
	e.mu.Lock()
	failed := e.term != nil && e.term.failed
	e.mu.Unlock()
	return failed || !n.next.After(now)
}

// round does, at the current fake time, what every elector's loop and watch
// would: each one reads the key then does what is due, in order, until none
// asks to look again now; then all read the key (the others' writes are
// seen at the same instant).
func (s *sim) round() {
	s.t.Helper()
	now := s.clk.Now()
	for i := 0; ; i++ {
		if i == 10 {
			s.t.Fatalf("electors still busy after 10 passes at +%s", s.since(now))
		}
		busy := false
		for _, n := range s.nodes {
			if i > 0 && !n.wantsNow(now) {
				continue
			}
			n.el.refresh()
			n.el.mu.Lock()
			leading := n.el.term != nil
			n.el.mu.Unlock()
			due := !n.next.After(now)
			n.next = n.el.step(now)
			n.steps = append(n.steps, simStep{at: now, next: n.next, leading: leading, due: due})
		}
		s.settle()
		for _, n := range s.nodes {
			busy = busy || n.wantsNow(now)
		}
		if !busy {
			break
		}
	}
	for _, n := range s.nodes {
		n.el.refresh()
	}
}

// nextEvent is the earliest time an elector asks for or a lease runs out.
func (s *sim) nextEvent() time.Time {
	var next time.Time
	first := func(tm time.Time) {
		if next.IsZero() || tm.Before(next) {
			next = tm
		}
	}
	for _, n := range s.nodes {
		first(n.next)
		n.el.mu.Lock()
		if t := n.el.term; t != nil {
			first(t.deadline)
		}
		n.el.mu.Unlock()
	}
	return next
}

// runTo runs every event up to end, leaving the clock at end.
func (s *sim) runTo(end time.Time) {
	s.t.Helper()
	s.runUntil(end, nil)
}

// runUntil runs the events in time order until cond holds after one of them
// (it returns true) or the next one comes after end (the clock is left at
// end; it returns false).
func (s *sim) runUntil(end time.Time, cond func() bool) bool {
	s.t.Helper()
	if len(s.nodes[0].steps) == 0 {
		s.round()
	}
	for {
		if cond != nil && cond() {
			return true
		}
		next := s.nextEvent()
		if next.After(end) {
			s.clk.Advance(end.Sub(s.clk.Now()))
			s.settle()
			return false
		}
		s.clk.Advance(next.Sub(s.clk.Now()))
		s.settle()
		s.round()
	}
}

func (s *sim) leader() *simNode {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var l *simNode
	for _, n := range s.nodes {
		if s.active[n.id] {
			if l != nil {
				s.t.Fatalf("%s and %s both active", l.id, n.id)
			}
			l = n
		}
	}
	if l == nil {
		s.t.Fatal("no active instance")
	}
	return l
}

func (s *sim) changeList() []change {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]change(nil), s.changes...)
}

// wantChanges checks the sequence of activations (id, on, at t0+d).
func (s *sim) wantChanges(want ...change) {
	s.t.Helper()
	got := s.changeList()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = got[i].id == want[i].id && got[i].active == want[i].active && got[i].at.Equal(want[i].at)
	}
	if !ok {
		s.t.Fatalf("activations:\n got  %s\n want %s", s.fmtChanges(got), s.fmtChanges(want))
	}
}

func (s *sim) fmtChanges(cs []change) string {
	var b strings.Builder
	for _, c := range cs {
		on := "off"
		if c.active {
			on = "on"
		}
		b.WriteString(c.id + " " + on + " at +" + s.since(c.at).String() + "; ")
	}
	return b.String()
}

func (s *sim) on(id string, d time.Duration) change  { return change{id, true, s.at(d)} }
func (s *sim) off(id string, d time.Duration) change { return change{id, false, s.at(d)} }

// beat returns the heartbeat counter in the lock key.
func (s *sim) beat() uint64 {
	s.t.Helper()
	kv, _, err := s.consul.Client.KV().Get("consul-terraform-sync/sim/leader", nil)
	if err != nil || kv == nil {
		s.t.Fatalf("reading the lock key: %v %v", kv, err)
	}
	var r record
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		s.t.Fatal(err)
	}
	return r.Beat
}

// leadingSteps returns, for the steps n asked for while holding a term in
// [from, to], at and next relative to t0.
func (s *sim) leadingSteps(n *simNode, from, to time.Time) [][2]time.Duration {
	var out [][2]time.Duration
	for _, st := range n.steps {
		if st.leading && st.due && !st.at.Before(from) && !st.at.After(to) {
			out = append(out, [2]time.Duration{s.since(st.at), s.since(st.next)})
		}
	}
	return out
}

func (s *sim) wantLeadingSteps(n *simNode, from, to time.Time, want ...[2]time.Duration) {
	s.t.Helper()
	got := s.leadingSteps(n, from, to)
	if len(got) != len(want) {
		s.t.Fatalf("%s's steps as leader (at, next): got %v, want %v", n.id, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			s.t.Fatalf("%s's steps as leader (at, next): got %v, want %v", n.id, got, want)
		}
	}
}

func sec(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }

func stepAt(at, next float64) [2]time.Duration { return [2]time.Duration{sec(at), sec(next)} }

// H: the leader heartbeats every H exactly, each heartbeat is a new value of
// the key that every follower sees, and for three takeover periods nobody
// else campaigns.
func TestSimHeartbeatsKeepTheLeader(t *testing.T) {
	s := newSim(t, "a", "b", "c")
	s.round()
	l := s.leader()
	if l.id != "a" {
		t.Fatalf("the first to step is %s, want a", l.id)
	}
	end := s.at(3 * simTiming.Takeover) // 30s: heartbeats at 3, 6, ..., 30
	s.runTo(end)

	s.wantChanges(s.on("a", 0))
	var want [][2]time.Duration
	for i := 1; i <= 10; i++ {
		want = append(want, stepAt(float64(3*i), float64(3*i+3)))
	}
	s.wantLeadingSteps(l, s.at(time.Nanosecond), end, want...)
	if b := s.beat(); b != 11 { // the acquisition and 10 heartbeats
		t.Fatalf("beat %d in the key, want 11", b)
	}
	for _, n := range s.nodes[1:] {
		n.el.mu.Lock()
		last := n.el.tr.lastOther
		n.el.mu.Unlock()
		if !last.Equal(end) {
			t.Fatalf("%s last saw the leader beat at +%s, want +30s", n.id, s.since(last))
		}
		if strings.Contains(n.log.String(), "ha: acquired leadership") {
			t.Fatalf("%s acquired the lock:\n%s", n.id, n.log.String())
		}
	}
}

// S, R and T: a leader cut from Consul retries its heartbeat every R, steps
// down by its own clock S after the last heartbeat it sent successfully; the
// follower takes over T after the last change it saw, not a moment earlier;
// when the link heals the old leader follows.
func TestSimPartitionedLeaderStepsDownBeforeTakeover(t *testing.T) {
	s := newSim(t, "a", "b")
	a, b := s.nodes[0], s.nodes[1]
	s.runTo(s.at(sec(3.5))) // a acquired at 0, beat at 3
	a.proxy.Refuse()
	// b's takeover is due at 3 + T = 13: at 13 - 1ns it has not happened.
	s.runTo(s.at(sec(13) - time.Nanosecond))
	s.wantChanges(s.on("a", 0), s.off("a", sec(8)))
	// Heartbeat due at 6 fails, retried at 7 (R), fails; the lease ends the
	// term at 3 + S = 8.
	s.wantLeadingSteps(a, s.at(sec(3.5)), s.clk.Now(), stepAt(6, 7), stepAt(7, 8))
	if !strings.Contains(a.log.String(), "reason=\"no successful heartbeat for 5s\"") {
		t.Fatalf("a stepped down for another reason:\n%s", a.log.String())
	}
	if !s.runUntil(s.at(sec(13)), func() bool { return len(s.changeList()) == 3 }) {
		t.Fatal("no takeover at +13s")
	}
	s.wantChanges(s.on("a", 0), s.off("a", sec(8)), s.on("b", sec(13)))
	if !strings.Contains(b.log.String(), "how=takeover") {
		t.Fatalf("b did not take over:\n%s", b.log.String())
	}

	a.proxy.Restore()
	s.runTo(s.at(sec(13) + 3*simTiming.Takeover))
	s.wantChanges(s.on("a", 0), s.off("a", sec(8)), s.on("b", sec(13)))
	if id, _ := a.el.Leader(); id != "b" {
		t.Fatalf("a sees leader %q, want b", id)
	}
}

// A refusal shorter than S - H - R costs one failed heartbeat, retried R
// later, and changes nothing.
func TestSimShortRefusalKeepsTheLeader(t *testing.T) {
	s := newSim(t, "a", "b")
	a := s.nodes[0]
	s.runTo(s.at(sec(3.5)))
	a.proxy.Refuse()
	s.runTo(s.at(sec(6.5))) // the heartbeat at 6 fails
	a.proxy.Restore()
	s.runTo(s.at(3 * simTiming.Takeover))
	s.wantChanges(s.on("a", 0))
	// Heartbeats at 3, 6 (failed, retried at 7), then every H from 7; the
	// deadline is never reached.
	s.wantLeadingSteps(a, s.at(sec(1)), s.at(sec(16)), stepAt(3, 6), stepAt(6, 7), stepAt(7, 10), stepAt(10, 13), stepAt(13, 16), stepAt(16, 19))
	if !strings.Contains(a.log.String(), "step_down_in=2s") {
		t.Fatalf("no failed heartbeat 2s before the step-down in a's log:\n%s", a.log.String())
	}
}

// A refusal between S and T makes the leader step down at S; since nobody
// took over, it resumes its lead once Consul answers again, before the
// follower's takeover would be due.
func TestSimRefusalBetweenSAndTLeaderResumes(t *testing.T) {
	s := newSim(t, "a", "b")
	a := s.nodes[0]
	s.runTo(s.at(sec(3.5)))
	a.proxy.Refuse()
	s.runTo(s.at(sec(9.5)))
	a.proxy.Restore()
	s.runTo(s.at(3 * simTiming.Takeover))
	// Down at 8; resume attempts every R fail until the one at 10.
	s.wantChanges(s.on("a", 0), s.off("a", sec(8)), s.on("a", sec(10)))
	if !strings.Contains(a.log.String(), "how=resume") {
		t.Fatalf("a did not resume:\n%s", a.log.String())
	}
}

// R: while Consul is away an instance tries to create its session every R.
// Once Consul answers, the lock is free, but another instance may have led
// while this one could not see: it acquires T after the last failed read.
func TestSimSessionRetriedEveryR(t *testing.T) {
	s := newSim(t, "a")
	a := s.nodes[0]
	a.proxy.Refuse()
	s.runTo(s.at(sec(3.5)))
	a.proxy.Restore()
	s.runTo(s.at(sec(13) - time.Nanosecond))
	s.wantChanges()
	s.runTo(s.at(sec(14)))
	s.wantChanges(s.on("a", sec(13)))
	var got []time.Duration
	for _, st := range a.steps {
		if st.at.Before(s.at(sec(4))) {
			if st.next.Sub(st.at) != simTiming.Retry {
				t.Fatalf("step at +%s looks again at +%s, want R later", s.since(st.at), s.since(st.next))
			}
			got = append(got, s.since(st.at))
		}
	}
	if len(got) != 4 {
		t.Fatalf("attempts at %v, want 0s, 1s, 2s, 3s", got)
	}
}

// An instance that cannot prepare to lead gives the lock back and does not
// campaign again for H; another instance may take the released lock at
// once.
func TestSimFailedPreparationBacksOffH(t *testing.T) {
	s := newSim(t, "a")
	a := s.nodes[0]
	var mu sync.Mutex
	fails := 1
	a.prepare = func() error {
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			return errors.New("cannot read the state")
		}
		return nil
	}
	s.runTo(s.at(sec(5)))
	s.wantChanges(s.on("a", simTiming.Heartbeat))
	if n := strings.Count(a.log.String(), "ha: acquired leadership"); n != 2 {
		t.Fatalf("acquired %d times, want 2:\n%s", n, a.log.String())
	}
	if !strings.Contains(a.log.String(), "ha: released leadership") {
		t.Fatalf("the lock was not given back:\n%s", a.log.String())
	}
}
