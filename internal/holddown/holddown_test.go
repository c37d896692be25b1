package holddown_test

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/holddown"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/watch"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

// inst is an instance of web as a health query returns it.
func inst(node, id string) task.Service {
	return task.Service{ID: id, Name: "web", Address: "10.0.0." + id[len(id)-1:], Port: 80, Status: "passing",
		Node: node, NodeDatacenter: "dc1", Tags: []string{}, Meta: map[string]string{},
		NodeTaggedAddresses: map[string]string{}, NodeMeta: map[string]string{}}
}

var all = []task.Service{inst("a", "web-1"), inst("b", "web-2"), inst("c", "web-3")}

// without returns the instances of all but the ones of these ids, in the
// watch's order (a new slice, as the watch makes one per answer).
func without(ids ...string) []task.Service {
	return slices.DeleteFunc(slices.Clone(all), func(s task.Service) bool { return slices.Contains(ids, s.ID) })
}

func digestOf(t *testing.T, v any) watch.Digest {
	t.Helper()
	d, err := watch.DigestOf(v)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A flap: every instance leaves and comes back within the delay. The
// effective result never changes, nor does its digest; the removals are
// pending, each with when it would apply, until they return.
func TestFlap(t *testing.T) {
	tr := holddown.New(30 * time.Second)
	const key = "health/service/web"
	if eff, ok := tr.Observe(at(0), key, all, true); !ok || !reflect.DeepEqual(eff, all) {
		t.Fatalf("first: %v %v", eff, ok)
	}
	if _, ok := tr.Next(); ok {
		t.Fatal("pending removals before any left")
	}
	// All gone (an agent restarted with its data lost).
	eff, ok := tr.Observe(at(5), key, []task.Service{}, true)
	if !ok || !reflect.DeepEqual(eff, all) || digestOf(t, eff) != digestOf(t, all) {
		t.Fatalf("all gone: effective %v %v, want every instance as last seen", eff, ok)
	}
	p := tr.Pending()
	if len(p) != 3 || p[0].Kind != holddown.KindService || p[0].ID != "web-1.a.dc1" || !p[0].Since.Equal(at(5)) || !p[0].At.Equal(at(35)) {
		t.Fatalf("pending %+v", p)
	}
	if next, ok := tr.Next(); !ok || !next.Equal(at(35)) {
		t.Fatalf("next %v %v, want %v", next, ok, at(35))
	}
	// Half back, then all back, within the delay.
	if eff, _ := tr.Observe(at(20), key, without("web-2"), true); !reflect.DeepEqual(eff, all) {
		t.Fatalf("partly back: %v", eff)
	}
	if p := tr.Pending(); len(p) != 1 || p[0].ID != "web-2.b.dc1" || !p[0].At.Equal(at(35)) {
		t.Fatalf("pending when partly back: %+v", p)
	}
	back := slices.Clone(all)
	if eff, _ := tr.Observe(at(34), key, back, true); !reflect.DeepEqual(eff, all) {
		t.Fatalf("all back: %v", eff)
	}
	if p := tr.Pending(); len(p) != 0 {
		t.Fatalf("pending after all came back: %+v", p)
	}
	if _, ok := tr.Next(); ok {
		t.Fatal("a deadline after all came back")
	}
	// What the webhook and the metrics are fed: three removals pending,
	// then each cancelled.
	var steps []string
	for _, c := range tr.Drain() {
		steps = append(steps, c.Action+" "+c.Removal.ID)
	}
	want := []string{"pending web-1.a.dc1", "pending web-2.b.dc1", "pending web-3.c.dc1",
		"cancelled web-1.a.dc1", "cancelled web-3.c.dc1", "cancelled web-2.b.dc1"}
	if !reflect.DeepEqual(steps, want) {
		t.Fatalf("changes %q, want %q", steps, want)
	}
	if c := tr.Drain(); len(c) != 0 {
		t.Fatalf("changes after a drain: %+v", c)
	}
	// Long after: nothing applies (their removals were cancelled).
	if eff, _ := tr.Observe(at(100), key, back, true); !reflect.DeepEqual(eff, all) {
		t.Fatalf("later: %v", eff)
	}
}

// A real removal applies once it has lasted the delay; additions and
// changes pass at once, also while a removal is pending.
func TestRemovalAfterDelayAndChangesAtOnce(t *testing.T) {
	tr := holddown.New(30 * time.Second)
	const key = "health/service/web"
	tr.Observe(at(0), key, all, true)
	cur := without("web-3")
	if eff, _ := tr.Observe(at(10), key, cur, true); !reflect.DeepEqual(eff, all) {
		t.Fatalf("web-3 just left: %v", eff)
	}
	// An instance added and another changed while web-3 is pending.
	added := inst("d", "web-4")
	changed := inst("a", "web-1")
	changed.Status = "warning"
	cur2 := []task.Service{changed, inst("b", "web-2"), added}
	eff, _ := tr.Observe(at(15), key, cur2, true)
	want := []task.Service{changed, inst("b", "web-2"), inst("c", "web-3"), added}
	if !reflect.DeepEqual(eff, want) {
		t.Fatalf("add and change while web-3 is pending:\n%v\nwant\n%v", eff, want)
	}
	// Just before the delay, still kept; at the delay, gone.
	if eff, _ := tr.Observe(at(39), key, cur2, true); !reflect.DeepEqual(eff, want) {
		t.Fatalf("just before the delay: %v", eff)
	}
	if eff, _ := tr.Observe(at(40), key, cur2, true); !reflect.DeepEqual(eff, cur2) {
		t.Fatalf("at the delay: %v, want %v", eff, cur2)
	}
	if p := tr.Pending(); len(p) != 0 {
		t.Fatalf("pending after the removal applied: %+v", p)
	}
	ch := tr.Drain()
	if len(ch) != 2 || ch[0].Action != holddown.ActionPending || ch[1].Action != holddown.ActionApplied ||
		ch[1].Removal.ID != "web-3.c.dc1" || !ch[1].Removal.At.Equal(at(40)) {
		t.Fatalf("changes %+v", ch)
	}
	// It comes back later: an addition, at once.
	back := []task.Service{changed, inst("b", "web-2"), inst("c", "web-3"), added}
	if eff, _ := tr.Observe(at(50), key, back, true); !reflect.DeepEqual(eff, back) {
		t.Fatalf("back after its removal: %v", eff)
	}
}

// A query that has no value any more (a regexp selector whose service left
// the catalog: its health query is dropped) keeps its last instances for
// the delay, then has no value.
func TestQueryGone(t *testing.T) {
	tr := holddown.New(time.Minute)
	const key = "health/service/api"
	tr.Observe(at(0), key, all, true)
	if eff, ok := tr.Observe(at(1), key, nil, false); !ok || !reflect.DeepEqual(eff, all) {
		t.Fatalf("query gone: %v %v", eff, ok)
	}
	if eff, ok := tr.Observe(at(61), key, nil, false); ok || eff != nil {
		t.Fatalf("after the delay: %v %v", eff, ok)
	}
	if p := tr.Pending(); len(p) != 0 {
		t.Fatalf("pending: %+v", p)
	}
	// A key never seen passes as it is.
	if eff, ok := tr.Observe(at(62), "other", nil, false); ok || eff != nil {
		t.Fatalf("unknown key: %v %v", eff, ok)
	}
}

func TestCatalogAndNodes(t *testing.T) {
	tr := holddown.New(10 * time.Second)
	cat := map[string][]string{"web": {"a"}, "api": {}, "db": {"primary"}}
	tr.Observe(at(0), "catalog", cat, true)
	eff, _ := tr.Observe(at(1), "catalog", map[string][]string{"web": {"a", "b"}}, true)
	want := map[string][]string{"web": {"a", "b"}, "api": {}, "db": {"primary"}}
	if !reflect.DeepEqual(eff, want) {
		t.Fatalf("catalog: %v, want %v", eff, want)
	}
	if p := tr.Pending(); len(p) != 2 || p[0].Kind != holddown.KindCatalogService || p[0].ID != "api" || p[1].ID != "db" {
		t.Fatalf("pending %+v", p)
	}
	if eff, _ := tr.Observe(at(11), "catalog", map[string][]string{"web": {"a", "b"}}, true); !reflect.DeepEqual(eff, map[string][]string{"web": {"a", "b"}}) {
		t.Fatalf("catalog after the delay: %v", eff)
	}

	nodes := []task.Node{{Node: "n1", ID: "1", Address: "10.0.0.1"}, {Node: "n2", ID: "2", Address: "10.0.0.2"}, {Node: "n3", ID: "3"}}
	tr.Observe(at(0), "nodes", nodes, true)
	eff2, _ := tr.Observe(at(2), "nodes", []task.Node{nodes[0]}, true)
	if !reflect.DeepEqual(eff2, nodes) || digestOf(t, eff2) != digestOf(t, nodes) {
		t.Fatalf("nodes: %v", eff2)
	}
	if next, ok := tr.Next(); !ok || !next.Equal(at(12)) {
		t.Fatalf("next %v %v", next, ok)
	}
}

// A delay of 0 passes everything at once; a shorter delay applies the
// pending removals sooner.
func TestDelayChanges(t *testing.T) {
	tr := holddown.New(time.Minute)
	const key = "health/service/web"
	tr.Observe(at(0), key, all, true)
	tr.Observe(at(1), key, without("web-1"), true)
	tr.SetDelay(10 * time.Second)
	if next, _ := tr.Next(); !next.Equal(at(11)) {
		t.Fatalf("next after a shorter delay: %v", next)
	}
	tr.SetDelay(0)
	if eff, _ := tr.Observe(at(2), key, without("web-1"), true); !reflect.DeepEqual(eff, without("web-1")) {
		t.Fatalf("delay 0: %v", eff)
	}
	if p := tr.Pending(); len(p) != 0 {
		t.Fatalf("pending with delay 0: %+v", p)
	}
	off := holddown.New(0)
	off.Observe(at(0), key, all, true)
	if eff, _ := off.Observe(at(1), key, []task.Service{}, true); len(eff.([]task.Service)) != 0 {
		t.Fatalf("no delay: %v", eff)
	}
}

// fakeWatch holds the values of watched queries and their digests, as the
// watch registry does.
type fakeWatch map[string]any

func (w fakeWatch) get(key string) (any, bool) { v, ok := w[key]; return v, ok }

func (w fakeWatch) digest(key string) (watch.Digest, bool) {
	v, ok := w[key]
	if !ok {
		return watch.Digest{}, false
	}
	d, _ := watch.DigestOf(v)
	return d, true
}

// Through View, the reconciler's own fingerprint and module inputs: a flap
// of every instance shorter than the delay leaves the task's fingerprint
// as it was (nothing runs), and the inputs the module would receive keep
// every instance; once a removal has lasted the delay the fingerprint
// changes and the inputs lose it.
func TestViewKeepsFingerprint(t *testing.T) {
	delay := task.Duration(30 * time.Second)
	spec := &task.Spec{Name: "fw", Module: "m", RemovalDelay: &delay,
		Condition: task.Condition{Services: &task.ServicesCondition{ServicesSelector: task.ServicesSelector{Names: []string{"web"}}, UseAsModuleInput: true}}}
	key := reconcile.StaticQueries(spec)[0].Key()
	w := fakeWatch{key: all}
	tr := holddown.New(spec.Removal())
	eval := func(now time.Time) (string, task.Inputs) {
		t.Helper()
		track := func(k string) bool { return reconcile.ConditionKeys(spec, w.get)[k] }
		get, digest := tr.View(now, track, w.get, w.digest)
		fp, ok := reconcile.Fingerprint(spec, get, digest)
		in, ready := reconcile.BuildInputs(spec, get)
		if !ok || !ready {
			t.Fatalf("not ready at %v", now)
		}
		return fp, in
	}
	fp0, in0 := eval(at(0))
	if len(in0.Services) != 3 {
		t.Fatalf("inputs %v", in0.Services)
	}
	w[key] = []task.Service{} // every instance deregistered
	fp1, in1 := eval(at(3))
	if fp1 != fp0 || !reflect.DeepEqual(in1, in0) {
		t.Fatalf("the flap changed the fingerprint or the inputs")
	}
	w[key] = slices.Clone(all) // back within the delay
	if fp2, _ := eval(at(20)); fp2 != fp0 {
		t.Fatal("the return changed the fingerprint")
	}
	if fp3, _ := eval(at(200)); fp3 != fp0 {
		t.Fatal("the fingerprint changed after the delay of a cancelled removal")
	}
	// A real removal: the same fingerprint until it has lasted the delay.
	w[key] = without("web-2")
	if fp, in := eval(at(300)); fp != fp0 || len(in.Services) != 3 {
		t.Fatal("a removal applied before its delay")
	}
	if next, ok := tr.Next(); !ok || !next.Equal(at(330)) {
		t.Fatalf("next %v %v", next, ok)
	}
	fp4, in4 := eval(at(330))
	if fp4 == fp0 || len(in4.Services) != 2 {
		t.Fatalf("after the delay: fingerprint unchanged or inputs %v", in4.Services)
	}
	// Without a hold-down the same data gives the same fingerprint as the
	// watch's own values.
	want, _ := reconcile.Fingerprint(spec, w.get, w.digest)
	if fp4 != want {
		t.Fatal("after the removal applied, the fingerprint differs from the watch's own")
	}
}

// The same for a catalog-services condition (the set of names triggers
// it) and a nodes condition.
func TestViewCatalogServicesAndNodes(t *testing.T) {
	for _, spec := range []*task.Spec{
		{Name: "lb", Module: "m", Condition: task.Condition{CatalogServices: &task.CatalogServicesCondition{Regexp: "^web", UseAsModuleInput: true}}},
		{Name: "nd", Module: "m", Condition: task.Condition{Nodes: &task.NodesCondition{UseAsModuleInput: true}}},
	} {
		key := reconcile.StaticQueries(spec)[0].Key()
		full := any(map[string][]string{"web-a": {}, "web-b": {"x"}, "db": {}})
		gone := any(map[string][]string{"web-b": {"x"}, "db": {}})
		if spec.Condition.Nodes != nil {
			full = []task.Node{{Node: "n1", ID: "1"}, {Node: "n2", ID: "2"}}
			gone = []task.Node{{Node: "n2", ID: "2"}}
		}
		w := fakeWatch{key: full}
		tr := holddown.New(time.Minute)
		track := func(k string) bool { return reconcile.ConditionKeys(spec, w.get)[k] }
		fp := func(now time.Time) string {
			get, digest := tr.View(now, track, w.get, digest(w))
			f, ok := reconcile.Fingerprint(spec, get, digest)
			if !ok {
				t.Fatalf("%s: not ready", spec.Name)
			}
			return f
		}
		fp0 := fp(at(0))
		w[key] = gone
		if fp(at(10)) != fp0 {
			t.Errorf("%s: a removal changed the fingerprint before its delay", spec.Name)
		}
		if fp(at(70)) == fp0 {
			t.Errorf("%s: the removal did not apply after its delay", spec.Name)
		}
	}
}

func digest(w fakeWatch) holddown.DigestGetter { return w.digest }

// The reconciler reads a task's data from several goroutines (its runs,
// the API's status): the Tracker is safe for that (run with -race).
func TestConcurrentUse(t *testing.T) {
	tr := holddown.New(time.Second)
	w := fakeWatch{"a": all, "b": without("web-1")}
	track := func(string) bool { return true }
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 200 {
				get, digest := tr.View(at(g+i), track, w.get, w.digest)
				get("a")
				digest("b")
				tr.Pending()
				tr.Next()
				tr.Drain()
			}
		}()
	}
	for range 4 {
		<-done
	}
}
