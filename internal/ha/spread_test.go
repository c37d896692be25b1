package ha

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/reconcile/reconciletest"
	"github.com/ctsync/ctsync/internal/testutil"
)

// The rules of spread mode on a fake clock: when a silent member may be
// expelled, what a blind instance may not do, which keys are acquired,
// taken over, drained and dropped.
func TestSpreadRules(t *testing.T) {
	clk := reconciletest.NewClock()
	t0 := clk.Now()
	T := 10 * time.Second
	sl := newSilence(T)
	self := Candidate{ID: "a", Weight: 1}
	tasks := taskNames(60)
	owners := Assign(tasks, []Candidate{{"a", 1}, {"b", 1}})
	var mineT, theirsT string
	for _, tk := range tasks {
		if owners[tk] == "a" && mineT == "" {
			mineT = tk
		}
		if owners[tk] == "b" && theirsT == "" {
			theirsT = tk
		}
	}
	snap := snapshot{known: true,
		members: map[string]memberKey{"a": {session: "sa", index: 10}, "b": {session: "sb", index: 11, rec: memberRec{Weight: 1}}},
		owners: map[string]ownerKey{
			mineT:   {session: "sb", index: 12}, // a's by the assignment, held by b (b was alone)
			theirsT: {session: "sa", index: 13}, // b's, held by a
			"gone":  {session: "sa", index: 14}, // no such task any more
		}}
	sl.observe(t0, snap)
	owned := map[string]bool{theirsT: true, "gone": true}
	p := decide(t0, self, "sa", snap, sl, tasks, owned, nil)
	if len(p.expel) != 0 || !p.next.Equal(t0.Add(T)) {
		t.Fatalf("b just seen: expel %v, next %v", p.expel, p.next.Sub(t0))
	}
	if !slices.Contains(p.drain, theirsT) || !slices.Equal(p.drop, []string{"gone"}) {
		t.Fatalf("drain %v drop %v", p.drain, p.drop)
	}
	if slices.Contains(p.acquire, mineT) || len(p.takeover) != 0 {
		t.Fatal("a key held by a live member was to be acquired or taken over")
	}
	for _, tk := range p.acquire {
		if owners[tk] != "a" {
			t.Fatalf("acquiring %s, which is b's", tk)
		}
	}
	nAcq := len(p.acquire)

	// b beats at t0+5s: not silent.
	clk.Advance(5 * time.Second)
	snap.members["b"] = memberKey{session: "sb", index: 20, rec: memberRec{Weight: 1}}
	sl.observe(clk.Now(), snap)
	clk.Advance(9 * time.Second) // 14s: 9s since b's last beat
	if p = decide(clk.Now(), self, "sa", snap, sl, tasks, owned, nil); len(p.expel) != 0 {
		t.Fatal("expelled a member silent for less than T")
	}
	clk.Advance(time.Second) // T since b's last beat
	p = decide(clk.Now(), self, "sa", snap, sl, tasks, owned, nil)
	if len(p.expel) != 1 || p.expel[0] != (expel{"b", 20}) {
		t.Fatalf("expel = %v", p.expel)
	}

	// b's member key is gone (expelled): its task keys are taken over,
	// and with b gone every task is a's.
	delete(snap.members, "b")
	sl.observe(clk.Now(), snap)
	p = decide(clk.Now(), self, "sa", snap, sl, tasks, owned, nil)
	if len(p.takeover) != 1 || p.takeover[0] != (takeover{mineT, "sb"}) {
		t.Fatalf("takeover = %v", p.takeover)
	}
	if len(p.acquire) <= nAcq || len(p.drain) != 0 {
		t.Fatalf("alone: acquire %d (was %d), drain %v", len(p.acquire), nAcq, p.drain)
	}

	// Blind (Consul error or data loss): no free key for T, no expel.
	sl.blind(clk.Now())
	p = decide(clk.Now(), self, "sa", snap, sl, tasks, owned, nil)
	if len(p.acquire) != 0 || !p.next.Equal(clk.Now().Add(T)) {
		t.Fatalf("blind: acquire %d, next %v", len(p.acquire), p.next.Sub(clk.Now()))
	}
	clk.Advance(T)
	if p = decide(clk.Now(), self, "sa", snap, sl, tasks, owned, nil); len(p.acquire) == 0 {
		t.Fatal("still blind T later")
	}
	// Not a member (no session): nothing at all.
	if p = decide(clk.Now(), self, "", snap, sl, tasks, owned, nil); len(p.acquire)+len(p.expel)+len(p.drain) != 0 {
		t.Fatal("an instance without a session plans")
	}
}

// spreadCluster runs spreaders in one process against a real Consul, each
// through its own fault proxy, and fails the test if a task is ever owned
// by two of them at once (checked each time one is told what it owns).
type spreadCluster struct {
	t      *testing.T
	consul *testutil.Consul
	mu     sync.Mutex
	tasks  []string
	owned  map[string]map[string]bool // node -> owned set as last told
	nodes  map[string]*spreadNode
	moves  int // tasks that became owned by a node, after the first full spread
}

type spreadNode struct {
	id     string
	proxy  *testutil.FaultProxy
	sp     *Spreader
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	log    *logBuf
}

func newSpreadCluster(t *testing.T) *spreadCluster {
	c := &spreadCluster{t: t, consul: startConsul(t), tasks: taskNames(60), owned: map[string]map[string]bool{}, nodes: map[string]*spreadNode{}}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range c.nodes {
				t.Logf("log of %s:\n%s", n.id, n.log.String())
			}
		}
	})
	return c
}

func (c *spreadCluster) setOwned(id string, owns func(string) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	set := map[string]bool{}
	for _, tk := range c.tasks {
		if owns(tk) {
			set[tk] = true
		}
	}
	for tk := range set {
		if !c.owned[id][tk] {
			c.moves++
		}
		for other, os := range c.owned {
			if other != id && os[tk] {
				c.t.Errorf("task %s owned by %s and %s at once", tk, other, id)
			}
		}
	}
	c.owned[id] = set
}

func (c *spreadCluster) start(id string) *spreadNode {
	t := c.t
	n := &spreadNode{id: id, proxy: testutil.StartFaultProxy(t, c.consul.Addr), done: make(chan struct{}), log: &logBuf{}}
	client, err := api.NewClient(&api.Config{Address: n.proxy.Addr})
	if err != nil {
		t.Fatal(err)
	}
	n.sp, err = NewSpreader(SpreadOptions{
		Client: client, Prefix: "consul-terraform-sync/spread", ID: id, Address: id + ":8558", Weight: 1,
		Timing: fastTiming, Logger: slog.New(slog.NewTextHandler(n.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Tasks:    func() []string { return c.tasks },
		SetOwned: func(owns func(string) bool) { c.setOwned(id, owns) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { _ = n.sp.Run(ctx); close(n.done) }()
	c.mu.Lock()
	c.nodes[id] = n
	c.mu.Unlock()
	t.Cleanup(func() {
		n.sp.Resign()
		cancel()
		<-n.done
	})
	return n
}

// spread waits until every task is owned by the member of ids the
// assignment gives it to, and returns the owners.
func (c *spreadCluster) spread(what string, ids ...string) map[string]string {
	c.t.Helper()
	var cands []Candidate
	for _, id := range ids {
		cands = append(cands, Candidate{id, 1})
	}
	want := Assign(c.tasks, cands)
	var owners map[string]string
	testutil.Eventually(c.t, 20*time.Second, what, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		owners = map[string]string{}
		for _, id := range ids {
			for tk := range c.owned[id] {
				owners[tk] = id
			}
		}
		for id, os := range c.owned {
			if !slices.Contains(ids, id) && len(os) > 0 {
				return false
			}
		}
		return maps.Equal(owners, want)
	})
	return owners
}

func (c *spreadCluster) movesSince(n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.moves - n
}

// Three members spread 60 tasks by the assignment; a fourth joins and takes
// only its share; a member that leaves gracefully hands its tasks over at
// once; one cut from Consul stops owning within S and its tasks move after
// T; one that crashes likewise; a task is never owned by two at once.
func TestSpreadOwnership(t *testing.T) {
	c := newSpreadCluster(t)
	a, b := c.start("a"), c.start("b")
	c.start("c")
	owners := c.spread("60 tasks spread over a, b, c", "a", "b", "c")
	want := Assign(c.tasks, []Candidate{{"a", 1}, {"b", 1}, {"c", 1}})
	if !maps.Equal(owners, want) {
		t.Fatalf("owners differ from the assignment: %v", owners)
	}
	if id, _, self, ok := a.sp.Owner(c.tasks[0]); !ok || (id == "a") != self || id != want[c.tasks[0]] {
		t.Fatalf("Owner(%s) = %s self=%v ok=%v", c.tasks[0], id, self, ok)
	}
	testutil.Eventually(t, 10*time.Second, "members with their tasks", func() bool {
		ms := b.sp.Members()
		n := 0
		for _, m := range ms {
			n += len(m.Tasks)
		}
		return len(ms) == 3 && n == 60
	})

	// Join: d takes about a quarter, nothing else moves.
	m0 := c.movesSince(0)
	start := time.Now()
	c.start("d")
	owners = c.spread("60 tasks over a, b, c, d", "a", "b", "c", "d")
	want4 := Assign(c.tasks, []Candidate{{"a", 1}, {"b", 1}, {"c", 1}, {"d", 1}})
	if !maps.Equal(owners, want4) {
		t.Fatal("owners differ from the assignment after the join")
	}
	moved := c.movesSince(m0)
	t.Logf("join: %d of 60 tasks moved in %s", moved, time.Since(start).Round(time.Millisecond))
	if moved != len(c.tasks)-countSame(want, want4) {
		t.Fatalf("join moved %d tasks, the assignment moves %d", moved, len(c.tasks)-countSame(want, want4))
	}

	// Graceful leave of d: its tasks go back at once (no T wait).
	m0 = c.movesSince(0)
	start = time.Now()
	c.nodes["d"].sp.Resign()
	<-c.nodes["d"].done
	c.spread("tasks back over a, b, c after d left", "a", "b", "c")
	if d := time.Since(start); d > fastTiming.Takeover {
		t.Errorf("graceful leave took %s: not faster than a takeover", d)
	}
	t.Logf("leave: tasks moved in %s", time.Since(start).Round(time.Millisecond))

	// Partition of b: it stops owning within S of its last heartbeat; a
	// and c take its tasks over after T.
	start = time.Now()
	b.proxy.Cut()
	testutil.Eventually(t, 5*time.Second, "b stops owning", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.owned["b"]) == 0
	})
	stopped := time.Since(start)
	c.spread("b's tasks over a and c", "a", "c")
	t.Logf("partition: b stopped after %s, tasks moved after %s", stopped.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if stopped > fastTiming.StepDown+fastTiming.Heartbeat {
		t.Errorf("b stopped %s after the cut, later than H+S", stopped)
	}
	// b's link heals: it was expelled, joins again and gets its share.
	b.proxy.Restore()
	c.spread("back over a, b, c", "a", "b", "c")

	// Crash of c (no resign: its session and keys stay until expelled).
	start = time.Now()
	c.nodes["c"].proxy.Cut()
	c.nodes["c"].cancel()
	c.spread("c's tasks over a and b", "a", "b")
	t.Logf("crash: tasks moved after %s", time.Since(start).Round(time.Millisecond))
}

func countSame(a, b map[string]string) int {
	n := 0
	for k, v := range a {
		if b[k] == v {
			n++
		}
	}
	return n
}
