package api

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/ctsync/ctsync/internal/task"
)

// fakeSpread is a spread cluster whose owners a test sets.
type fakeSpread struct {
	fakeCluster
	self   string
	mu     sync.Mutex
	owners map[string]string // task -> member id ("" none)
	addrs  map[string]string // member id -> address
}

func (f *fakeSpread) Spread() bool { return true }
func (f *fakeSpread) Self() string { return f.self }

func (f *fakeSpread) Owner(task string) (string, string, bool, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.owners[task]
	if !ok {
		id = f.self // a new task: here
	}
	return id, f.addrs[id], id == f.self, id != ""
}

func (f *fakeSpread) Holder(task string) string {
	id, _, _, _ := f.Owner(task)
	return id
}

func (f *fakeSpread) Status(context.Context) (ClusterStatus, error) {
	return ClusterStatus{ClusterName: "prod", SpreadTasks: true, Members: []ClusterMember{
		{ID: "a", ServiceName: "consul-terraform-sync", Healthy: true, Address: "10.0.0.1:8558", Tasks: []string{"t1"}, Weight: 1},
		{ID: "b", ServiceName: "consul-terraform-sync", Healthy: true, Address: "10.0.0.2:8558", Weight: 2},
	}}, nil
}

// Spread mode: every member serves reads; a write of a task owned by
// another member is forwarded to it and its answer returned; no owner is a
// 503 with Retry-After; an owner without an address is named; statuses
// carry the owner; the cluster status lists what each member owns.
func TestSpreadForwardsWritesToTheOwner(t *testing.T) {
	specs := []task.Spec{servicesTask("web-task", "web")}
	var a, b *fakeSpread
	b = &fakeSpread{self: "b"}
	hb := newHarness(t, specs, func(o *Options) { o.Cluster = b })
	a = &fakeSpread{self: "a"}
	ha := newHarness(t, specs, func(o *Options) { o.Cluster = a })
	addrs := map[string]string{"a": strings.TrimPrefix(ha.ts.URL, "http://"), "b": strings.TrimPrefix(hb.ts.URL, "http://")}
	a.owners, a.addrs = map[string]string{"web-task": "b"}, addrs
	b.owners, b.addrs = map[string]string{"web-task": "b"}, addrs

	// Reads on a non-owner: served there, with the owner.
	var sts map[string]TaskStatus
	ha.do("GET", "/v1/status/tasks", "").expect(t, 200).json(t, &sts)
	if o := sts["web-task"].Owner; o == nil || *o != "b" {
		t.Fatalf("status on a: %+v", sts["web-task"])
	}
	ha.do("GET", "/v1/tasks/web-task", "").expect(t, 200)

	// A write on a: carried out by b.
	r := ha.do("PATCH", "/v1/tasks/web-task", `{"enabled":false}`).expect(t, 200)
	if r.header.Get(OwnerHeader) != addrs["b"] {
		t.Fatalf("%s = %q", OwnerHeader, r.header.Get(OwnerHeader))
	}
	if st, _ := hb.ctrl.Task("web-task"); st.Spec.Enabled {
		t.Fatal("the owner's task is still enabled")
	}
	if st, _ := ha.ctrl.Task("web-task"); !st.Spec.Enabled {
		t.Fatal("the non-owner changed its own copy (the cluster's records do that)")
	}
	// A create on a whose name the assignment gives to b: created on b.
	a.mu.Lock()
	a.owners["new-task"] = "b"
	a.mu.Unlock()
	b.mu.Lock()
	b.owners["new-task"] = "b"
	b.mu.Unlock()
	ha.do("POST", "/v1/tasks", `{"task":{"name":"new-task","module":"./m","condition":{"services":{"names":["api"]}}}}`).expect(t, 201)
	if _, err := hb.ctrl.Task("new-task"); err != nil {
		t.Fatal("the create did not reach the owner")
	}
	if _, err := ha.ctrl.Task("new-task"); err == nil {
		t.Fatal("the create ran on the member it was sent to")
	}

	// No owner right now: 503 with Retry-After, nothing done.
	a.mu.Lock()
	a.owners["web-task"] = ""
	a.mu.Unlock()
	r = rawDo(t, ha, "PATCH", "/v1/tasks/web-task")
	if r.status != 503 || r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), "has no owner right now") {
		t.Fatalf("no owner: %d %s", r.status, r.body)
	}
	// An owner without an address: named, as the leader is.
	a.mu.Lock()
	a.owners["web-task"] = "c"
	a.mu.Unlock()
	r = rawDo(t, ha, "DELETE", "/v1/tasks/web-task")
	if r.status != 400 || r.header.Get(OwnerHeader) != "c" || !strings.Contains(string(r.body), "redirect requests to owner 'c'") {
		t.Fatalf("owner without address: %d %s %v", r.status, r.body, r.header)
	}
	// Members that disagree: a forwards to b, which thinks a owns it: no
	// second hop.
	a.mu.Lock()
	a.owners["web-task"] = "b"
	a.mu.Unlock()
	b.mu.Lock()
	b.owners["web-task"] = "a"
	b.mu.Unlock()
	r = rawDo(t, ha, "POST", "/v1/tasks/web-task/run")
	if r.status != 503 || !strings.Contains(string(r.body), "is moving") {
		t.Fatalf("disagreeing members: %d %s", r.status, r.body)
	}

	var cr ClusterResponse
	ha.do("GET", "/v1/status/cluster", "").expect(t, 200).json(t, &cr)
	if !cr.SpreadTasks || len(cr.Members) != 2 || len(cr.Members[0].Tasks) != 1 || cr.Members[1].Weight != 2 {
		t.Fatalf("cluster status: %+v", cr)
	}
}
