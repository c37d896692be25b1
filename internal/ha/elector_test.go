package ha

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/testutil"
)

// fastTiming keeps Consul's minimum session TTL but runs the election fast:
// H + C <= S < T as the real timing.
var fastTiming = Timing{SessionTTL: 10 * time.Second, Heartbeat: 300 * time.Millisecond,
	StepDown: time.Second, Takeover: 2 * time.Second, CallTimeout: 300 * time.Millisecond, Retry: 100 * time.Millisecond,
	Kill: 500 * time.Millisecond}

func startConsul(t *testing.T) *testutil.Consul {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a Consul agent")
	}
	return testutil.StartConsul(t)
}

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// cluster is several electors in one process, each talking to Consul
// through its own fault proxy, with a checker that fails the test if two of
// them are ever active at once.
type cluster struct {
	t      *testing.T
	consul *testutil.Consul
	mu     sync.Mutex
	active map[string]bool
	// changes records every activation and deactivation, in order.
	changes []change
	nodes   map[string]*node
}

type change struct {
	id     string
	active bool
	at     time.Time
}

type node struct {
	id     string
	proxy  *testutil.FaultProxy
	el     *Elector
	cancel context.CancelFunc
	done   chan error
	log    *logBuf
	once   sync.Once
}

func newCluster(t *testing.T) *cluster {
	return &cluster{t: t, consul: startConsul(t), active: map[string]bool{}, nodes: map[string]*node{}}
}

func (c *cluster) setActive(id string, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.active[id] = on
	c.changes = append(c.changes, change{id, on, time.Now()})
	n := 0
	for _, a := range c.active {
		if a {
			n++
		}
	}
	if n > 1 {
		c.t.Errorf("two instances active at once: %v", c.active)
	}
}

func (c *cluster) start(id string) *node {
	t := c.t
	n := &node{id: id, proxy: testutil.StartFaultProxy(t, c.consul.Addr), done: make(chan error, 1), log: &logBuf{}}
	client, err := api.NewClient(&api.Config{Address: n.proxy.Addr})
	if err != nil {
		t.Fatal(err)
	}
	n.el, err = New(Options{
		Client: client, Prefix: "consul-terraform-sync/test", ID: id, Address: id + ".example:8558",
		Timing: fastTiming, Logger: slog.New(slog.NewTextHandler(n.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		SetActive: func(on bool) { c.setActive(id, on) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { n.done <- n.el.Run(ctx) }()
	c.mu.Lock()
	c.nodes[id] = n
	c.mu.Unlock()
	t.Cleanup(func() {
		n.stop(t)
		if t.Failed() {
			t.Logf("log of %s:\n%s", id, n.log.String())
		}
	})
	return n
}

// stop is the daemon's shutdown: stop campaigning, then resign.
func (n *node) stop(t *testing.T) {
	n.once.Do(func() {
		n.cancel()
		n.el.Resign()
		select {
		case <-n.done:
		case <-time.After(testutil.Scale(5 * time.Second)):
			t.Errorf("%s: Run did not return after Resign", n.id)
		}
	})
}

// leader waits until exactly one node is active and returns it.
func (c *cluster) leader(timeout time.Duration) *node {
	c.t.Helper()
	var id string
	testutil.Eventually(c.t, timeout, "one active instance", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		id = ""
		for k, a := range c.active {
			if a {
				id = k
			}
		}
		return id != ""
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// seen returns the leader id and heartbeat counter n last read in the key.
func (n *node) seen() (id string, beat uint64) {
	n.el.mu.Lock()
	defer n.el.mu.Unlock()
	return n.el.view.rec.ID, n.el.view.rec.Beat
}

// waitBeats waits until n has seen leader beat k more times than now.
func (c *cluster) waitBeats(n *node, leader string, k uint64) {
	c.t.Helper()
	_, from := n.seen()
	testutil.Eventually(c.t, 10*time.Second, fmt.Sprintf("%s to see %d heartbeats of %s", n.id, k, leader), func() bool {
		id, b := n.seen()
		return id == leader && b >= from+k
	})
}

func (c *cluster) numChanges() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.changes)
}

func (c *cluster) lastChange(id string, active bool) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.changes) - 1; i >= 0; i-- {
		if ch := c.changes[i]; ch.id == id && ch.active == active {
			return ch.at
		}
	}
	return time.Time{}
}

func TestOneLeaderThenGracefulHandOver(t *testing.T) {
	c := newCluster(t)
	a, b, d := c.start("a"), c.start("b"), c.start("d")
	l := c.leader(10 * time.Second)
	for _, n := range []*node{a, b, d} {
		testutil.Eventually(t, 5*time.Second, n.id+" sees the leader", func() bool {
			id, addr := n.el.Leader()
			return id == l.id && addr == l.id+".example:8558"
		})
		if n != l && n.el.IsLeader() {
			t.Fatalf("%s says it leads too", n.id)
		}
	}
	if !l.el.IsLeader() || !strings.Contains(l.log.String(), "ha: acquired leadership") {
		t.Fatalf("leader %s: IsLeader=%v, log:\n%s", l.id, l.el.IsLeader(), l.log.String())
	}
	// Heartbeats reach the followers, and nobody else takes over (the
	// timing of these rules is tested on a fake clock: elector_sim_test.go).
	for _, n := range []*node{a, b, d} {
		if n != l {
			c.waitBeats(n, l.id, 2)
		}
	}
	if n := c.numChanges(); n != 1 {
		t.Fatalf("the lead changed without a fault: %+v", c.changes)
	}

	// Graceful hand-over: released with the marker, taken at once (no
	// lock-delay, no waiting for T).
	start := time.Now()
	l.stop(t)
	next := c.leader(5 * time.Second)
	took := c.lastChange(next.id, true).Sub(start)
	t.Logf("hand-over from %s to %s: %s", l.id, next.id, took)
	if took > time.Second {
		t.Fatalf("hand-over took %s, want well under 1s", took)
	}
	if !strings.Contains(l.log.String(), "ha: released leadership") {
		t.Fatalf("no release in the old leader's log:\n%s", l.log.String())
	}
}

// A leader cut from Consul (its calls hang until the call timeout) steps
// down on its own clock S after its last heartbeat; a follower takes over no
// earlier than T after the last heartbeat it saw; when the link heals the
// old leader follows. The same rules to the instant, on a fake clock:
// TestSimPartitionedLeaderStepsDownBeforeTakeover.
func TestPartitionedLeaderStepsDownBeforeTakeover(t *testing.T) {
	c := newCluster(t)
	a, b := c.start("a"), c.start("b")
	l := c.leader(10 * time.Second)
	f := a
	if f == l {
		f = b
	}
	c.waitBeats(f, l.id, 2)
	cut := time.Now()
	l.proxy.Cut()
	var next *node
	testutil.Eventually(t, 10*time.Second, "another leader", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for id, on := range c.active {
			if on && id != l.id {
				next = c.nodes[id]
				return true
			}
		}
		return false
	})
	down, up := c.lastChange(l.id, false), c.lastChange(next.id, true)
	t.Logf("cut at 0; old leader stepped down at %s; new leader at %s", down.Sub(cut), up.Sub(cut))
	if down.IsZero() || !down.Before(up) {
		t.Fatalf("the old leader did not step down before the new one started (down %v, up %v)", down, up)
	}
	if d := down.Sub(cut); d > fastTiming.StepDown+fastTiming.CallTimeout {
		t.Fatalf("step-down %s after the cut, want <= S (+ a call timeout of slack)", d)
	}
	if gap := up.Sub(down); gap < fastTiming.Takeover-fastTiming.StepDown-fastTiming.Heartbeat {
		t.Fatalf("only %s between step-down and takeover", gap)
	}
	if !strings.Contains(next.log.String(), `how=takeover`) {
		t.Fatalf("the new leader did not take over:\n%s", next.log.String())
	}
	l.proxy.Restore()
	// The old leader follows: it sees the new leader's heartbeats go on and
	// does not take the lead back.
	c.waitBeats(l, next.id, 2)
	if n := c.numChanges(); n != 3 {
		t.Fatalf("the lead changed again after the link healed: %+v", c.changes)
	}
}

// A Consul dev agent restart loses sessions and keys: the cluster elects a
// leader again (without two at once).
func TestConsulRestartReelects(t *testing.T) {
	c := newCluster(t)
	c.start("a")
	c.start("b")
	l := c.leader(10 * time.Second)
	restarted := time.Now()
	c.consul.Restart()
	testutil.Eventually(t, 10*time.Second, "a leader after the restart", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, ch := range c.changes {
			if ch.active && ch.at.After(restarted) {
				return true
			}
		}
		return false
	})
	nl := c.leader(time.Second)
	t.Logf("before: %s, after the restart: %s; changes: %+v", l.id, nl.id, c.changes)
	kv, _, err := c.consul.Client.KV().Get("consul-terraform-sync/test/leader", nil)
	if err != nil || kv == nil || kv.Session == "" {
		t.Fatalf("no lock in the new consul: %v %v", kv, err)
	}
}

// OnElected errors give the lock back; a failing preparation never makes
// the controller active.
func TestFailedPreparationGivesTheLockBack(t *testing.T) {
	c := startConsul(t)
	var mu sync.Mutex
	calls := 0
	var actives []bool
	client, _ := api.NewClient(&api.Config{Address: c.Addr})
	el, err := New(Options{Client: client, Prefix: "p/c", ID: "a", Timing: fastTiming,
		OnElected: func(ctx context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls == 1 {
				return fmt.Errorf("cannot read the state")
			}
			return nil
		},
		SetActive: func(on bool) {
			mu.Lock()
			actives = append(actives, on)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	// stopped: Run handled the shutdown signal and waits again.
	stopped := make(chan struct{}, 1)
	el.waiting = func(time.Time) {
		el.mu.Lock()
		s := el.stopping
		el.mu.Unlock()
		if s {
			signal(stopped)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	testutil.Eventually(t, 10*time.Second, "leading after a second attempt", el.IsLeader)
	mu.Lock()
	if calls != 2 || len(actives) != 1 || !actives[0] {
		t.Fatalf("calls=%d actives=%v", calls, actives)
	}
	mu.Unlock()
	if _, _, ok := el.LockSession(); !ok {
		t.Fatal("LockSession not ok while leading")
	}
	rctx, rcancel, err := el.RunContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-stopped:
	case <-time.After(testutil.Scale(10 * time.Second)):
		t.Fatal("Run did not handle the shutdown signal")
	}
	if rctx.Err() != nil {
		t.Fatal("run context cancelled by the shutdown signal alone: runs in progress must finish under the lead")
	}
	el.Resign()
	<-done
	rcancel()
	if rctx.Err() == nil {
		t.Fatal("run context alive after resigning")
	}
	if _, _, err := el.RunContext(context.Background()); err != ErrNotLeader {
		t.Fatalf("RunContext after resign: %v", err)
	}
	// Released with the marker, session destroyed.
	kv, _, _ := c.Client.KV().Get("p/c/leader", nil)
	if kv == nil || kv.Session != "" || !strings.Contains(string(kv.Value), `"released":true`) {
		t.Fatalf("lock key after resign: %+v", kv)
	}
	if ss, _, _ := c.Client.Session().List(nil); len(ss) != 0 {
		t.Fatalf("sessions left: %d", len(ss))
	}
}

func newTextLogger(w *logBuf) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
