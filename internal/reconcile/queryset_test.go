package reconcile

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/holddown"
	"github.com/ctsync/ctsync/internal/reconcile/reconciletest"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
	"github.com/ctsync/ctsync/internal/watch"
)

// countQuerySets counts the query sets built per task name until the test
// ends.
func countQuerySets(t *testing.T) func(name string) int {
	var mu sync.Mutex
	n := map[string]int{}
	f := func(name string) {
		mu.Lock()
		n[name]++
		mu.Unlock()
	}
	querySetBuilt.Store(&f)
	t.Cleanup(func() { querySetBuilt.Store(nil) })
	return func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return n[name]
	}
}

// A task's query set is built once, when it is defined: the subscriptions,
// the regexp selection following the catalog, the trigger rule of module
// inputs, the desired state, the inputs, the status all read that one.
func TestQuerySetBuiltOncePerDefinition(t *testing.T) {
	built := countQuerySets(t)
	re := "^web"
	s := task.Spec{Name: "a", Module: "./m", Enabled: true, BufferPeriod: &task.BufferPeriod{},
		Condition: task.Condition{Services: &task.ServicesCondition{
			ServicesSelector: task.ServicesSelector{Regexp: &re}, UseAsModuleInput: true}},
		ModuleInput: task.ModuleInputs{ConsulKV: &task.ConsulKVSelector{Path: "cfg"}}}
	h := start(t, 4, nil, s)
	catKey := watch.CatalogServices(watch.CatalogOptions{}).Key()
	kvKey := watch.KV("cfg", false, "", "").Key()
	h.w.Set(kvKey, map[string]string{"cfg": "1"})
	h.w.Set(healthKey("web-a"), []task.Service{inst("a1", "web-a")})
	h.w.Set(catKey, map[string][]string{"web-a": {}})
	h.waitApplied(t, "a")
	h.w.Set(healthKey("web-b"), []task.Service{inst("b1", "web-b")})
	h.w.Set(catKey, map[string][]string{"web-a": {}, "web-b": {}})
	h.waitApplied(t, "a")
	h.w.Set(kvKey, map[string]string{"cfg": "2"}) // a module input alone: no run
	h.noApply(t)
	if _, err := h.ctrl.Task("a"); err != nil {
		t.Fatal(err)
	}
	h.ctrl.Tasks()
	if n := built("a"); n != 1 {
		t.Fatalf("task a's query set was built %d times, want once", n)
	}
	// A task created through the API: once more, for its own definition.
	b := servicesTask("b", "db")
	h.w.Set(healthKey("db"), []task.Service{inst("d1", "db")})
	if err := h.ctrl.Create(context.Background(), b, false); err != nil {
		t.Fatal(err)
	}
	h.waitApplied(t, "b")
	h.w.Set(healthKey("db"), []task.Service{inst("d1", "db"), inst("d2", "db")})
	h.waitApplied(t, "b")
	if n := built("b"); n != 1 {
		t.Fatalf("task b's query set was built %d times, want once", n)
	}
}

func TestQuerySetKeys(t *testing.T) {
	re := "^web"
	s := task.Spec{Name: "a", Condition: task.Condition{Services: &task.ServicesCondition{
		ServicesSelector: task.ServicesSelector{Regexp: &re}}},
		ModuleInput: task.ModuleInputs{ConsulKV: &task.ConsulKVSelector{Path: "cfg"}}}
	qs := newQuerySet(&s)
	catKey := watch.CatalogServices(watch.CatalogOptions{}).Key()
	kvKey := watch.KV("cfg", false, "", "").Key()
	get := func(key string) (any, bool) {
		if key == catKey {
			return map[string][]string{"web-a": {}, "db": {}}, true
		}
		return nil, false
	}
	if len(qs.static) != 2 || !qs.staticKeys[catKey] || !qs.staticKeys[kvKey] {
		t.Fatalf("static: %v", qs.staticKeys)
	}
	cond := qs.conditionKeys(get)
	if !cond[catKey] || !cond[healthKey("web-a")] || cond[healthKey("db")] || cond[kvKey] || len(cond) != 2 {
		t.Fatalf("condition keys: %v", cond)
	}
	if !qs.inputOnly(kvKey, get) || qs.inputOnly(healthKey("web-a"), get) || qs.inputOnly("other", get) {
		t.Fatal("inputOnly")
	}
	if d := qs.dynamic(get); len(d) != 1 || d[0].Key() != healthKey("web-a") {
		t.Fatalf("dynamic: %v", d)
	}
}

// The removal hold-down: an instance that leaves and comes back within
// removal_delay runs nothing; one gone for the delay is removed then (the
// task's timer makes it due); additions apply at once. The status shows
// what is pending, and the hook gets each step.
func TestRemovalHoldDown(t *testing.T) {
	clk := reconciletest.NewClock()
	var mu sync.Mutex
	var steps []string
	pendingNow := -1
	s := servicesTask("a", "web")
	d := task.Duration(30 * time.Second)
	s.RemovalDelay = &d
	h := start(t, 4, nil, s, func(o *Options) {
		o.Clock = clk
		o.OnRemoval = func(name string, ch []holddown.Change, pending int) {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range ch {
				steps = append(steps, c.Action+" "+c.Removal.ID)
			}
			pendingNow = pending
		}
	})
	two := []task.Service{inst("web-1", "web"), inst("web-2", "web")}
	one := []task.Service{inst("web-1", "web")}
	h.w.Set(healthKey("web"), two)
	h.waitApplied(t, "a")

	// A flap: gone, then back within the delay. Nothing runs.
	h.w.Set(healthKey("web"), one)
	testutil.WaitFor(t, "web-2's removal pending", func() bool {
		st, _ := h.ctrl.Task("a")
		return len(st.Removals) == 1 && st.Removals[0].ID == "web-2.n1.dc1" && st.Removals[0].At.Equal(clk.Now().Add(30*time.Second))
	})
	h.noApply(t)
	h.w.Set(healthKey("web"), two)
	testutil.WaitFor(t, "the removal cancelled", func() bool {
		st, _ := h.ctrl.Task("a")
		mu.Lock()
		defer mu.Unlock()
		return len(st.Removals) == 0 && len(steps) == 2
	})
	h.noApply(t)

	// A real removal: pending, then applied once it has lasted the delay.
	h.w.Set(healthKey("web"), one)
	testutil.WaitFor(t, "web-2's removal pending again", func() bool {
		st, _ := h.ctrl.Task("a")
		return len(st.Removals) == 1
	})
	h.noApply(t)
	clk.Advance(31 * time.Second)
	h.waitApplied(t, "a")
	if got := h.rec.last("a").Services; len(got) != 1 {
		t.Fatalf("after the delay the run saw %d instances, want 1", len(got))
	}
	// An addition applies at once.
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web"), inst("web-3", "web")})
	h.waitApplied(t, "a")
	if got := h.rec.last("a").Services; len(got) != 2 {
		t.Fatalf("the addition's run saw %d instances, want 2", len(got))
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"pending web-2.n1.dc1", "cancelled web-2.n1.dc1", "pending web-2.n1.dc1", "applied web-2.n1.dc1"}
	if len(steps) != len(want) || pendingNow != 0 {
		t.Fatalf("steps %v (pending %d), want %v", steps, pendingNow, want)
	}
	for i := range want {
		if steps[i] != want[i] {
			t.Fatalf("steps %v, want %v", steps, want)
		}
	}
}

// A plan held while a removal is pending is approved as it is: the
// approval compares it with the task's data as its jobs see it (the
// hold-down applied), not with the raw data, which would supersede it
// with a plan of the same effective data again and again.
func TestRemovalHoldDownApprovalWhilePending(t *testing.T) {
	clk := reconciletest.NewClock()
	spec := servicesTask("fw", "web")
	spec.Approval = &task.Approval{Required: true}
	d := task.Duration(time.Minute)
	spec.RemovalDelay = &d
	g := startGatesWith(t, spec, func(o *Options) { o.Clock = clk })
	ctx := context.Background()
	g.w.Set(healthKey("web"), []task.Service{inst("web-1", "web"), inst("web-2", "web")})
	p := g.waitHeld(t, "")
	if err := g.ctrl.Approve(ctx, "fw", p.ID, "ops"); err != nil {
		t.Fatal(err)
	}
	g.waitApplied(t, "fw")
	g.waitIdle(t)
	// web-2 leaves (kept: pending) and web-3 arrives: the run adds web-3
	// and keeps web-2; its plan is held.
	g.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	testutil.WaitFor(t, "web-2's removal pending", func() bool {
		st, _ := g.ctrl.Task("fw")
		return len(st.Removals) == 1
	})
	g.w.Set(healthKey("web"), []task.Service{inst("web-1", "web"), inst("web-3", "web")})
	p2 := g.waitHeld(t, p.ID)
	if p2.Add != 1 || p2.Destroy != 0 {
		t.Fatalf("held plan %+v: want +1 (web-3), web-2 kept", p2)
	}
	if err := g.ctrl.Approve(ctx, "fw", p2.ID, "ops"); err != nil {
		t.Fatalf("approve while a removal is pending: %v", err)
	}
	g.waitApplied(t, "fw")
	if n := len(g.rec.last("fw").Services); n != 3 {
		t.Fatalf("the approved apply had %d instances, want 3 (web-2 kept)", n)
	}
}
