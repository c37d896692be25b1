package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/ctsync/ctsync/internal/task"
)

type fakeCluster struct {
	mu       sync.Mutex
	leader   bool
	id, addr string
	err      error
}

func (f *fakeCluster) set(leader bool, id, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leader, f.id, f.addr = leader, id, addr
}

func (f *fakeCluster) IsLeader() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.leader
}

func (f *fakeCluster) Leader() (string, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.id, f.addr
}

func (f *fakeCluster) Status(context.Context) (ClusterStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return ClusterStatus{}, f.err
	}
	return ClusterStatus{ClusterName: "prod", Members: []ClusterMember{
		{ID: "cts-01", ServiceName: "consul-terraform-sync", Healthy: true, Leader: true, Address: "10.0.0.1:8558"},
		{ID: "cts-02", ServiceName: "consul-terraform-sync", Healthy: false},
	}}, nil
}

// rawDo sends a request without checking it against the spec operation
// (for routes whose documentation is not this test's concern).
func rawDo(t *testing.T, h *harness, method, path string) response {
	t.Helper()
	req, _ := http.NewRequest(method, h.ts.URL+path, strings.NewReader(`{"enabled":true}`))
	resp, err := h.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func TestFollowerRefusesTaskAndStatusEndpoints(t *testing.T) {
	fc := &fakeCluster{}
	h := newHarness(t, []task.Spec{servicesTask("web-task", "web")}, func(o *Options) { o.Cluster = fc })

	// Documented operations, checked against the spec.
	fc.set(false, "cts-01", "10.0.0.1:8558")
	r := h.do("GET", "/v1/status", "").expect(t, 400)
	if got := r.errMsg(t); got != "redirect requests to leader 'cts-01' at 10.0.0.1:8558" {
		t.Fatalf("message = %q", got)
	}
	if r.header.Get(LeaderHeader) != "10.0.0.1:8558" {
		t.Fatalf("%s = %q", LeaderHeader, r.header.Get(LeaderHeader))
	}
	h.do("GET", "/v1/tasks", "").expect(t, 400)
	h.do("GET", "/v1/tasks/web-task", "").expect(t, 400)
	h.do("GET", "/v1/tasks/web-task/events", "").expect(t, 400)
	h.do("POST", "/v1/tasks/web-task/run", "").expect(t, 400)
	h.do("GET", "/v1/status/tasks", "").expect(t, 400)

	// Every route under /v1/status and /v1/tasks but the cluster status.
	for _, rt := range h.srv.routeTable() {
		path := strings.NewReplacer("{name}", "web-task", "{id}", "x").Replace(rt.path)
		r := rawDo(t, h, rt.method, path)
		gated := strings.HasPrefix(path, "/v1/status") || strings.HasPrefix(path, "/v1/tasks")
		switch {
		case path == "/v1/status/cluster" || path == "/v1/health":
			if r.status != 200 {
				t.Errorf("%s %s on a follower: %d %s", rt.method, path, r.status, r.body)
			}
		case gated:
			var e ErrorResponse
			if r.status != 400 || json.Unmarshal(r.body, &e) != nil || !strings.HasPrefix(e.Error.Message, "redirect requests to leader") || e.RequestID == "" {
				t.Errorf("%s %s on a follower: %d %s", rt.method, path, r.status, r.body)
			}
		}
	}

	// Shorter messages when less is known; no header when nothing is.
	fc.set(false, "cts-01", "")
	r = h.do("GET", "/v1/tasks", "").expect(t, 400)
	if got := r.errMsg(t); got != "redirect requests to leader 'cts-01'" || r.header.Get(LeaderHeader) != "cts-01" {
		t.Fatalf("message = %q, header %q", got, r.header.Get(LeaderHeader))
	}
	fc.set(false, "", "")
	r = h.do("GET", "/v1/tasks", "").expect(t, 400)
	if got := r.errMsg(t); got != "redirect requests to leader" || r.header.Get(LeaderHeader) != "" {
		t.Fatalf("message = %q, header %q", got, r.header.Get(LeaderHeader))
	}

	// ?stale reads are answered by the follower itself and say so; writes
	// with ?stale are still refused.
	fc.set(false, "cts-01", "10.0.0.1:8558")
	for _, path := range []string{"/v1/status?stale", "/v1/status/tasks?include=events&stale", "/v1/tasks?stale", "/v1/tasks/web-task?stale", "/v1/tasks/web-task/events?stale"} {
		r = h.do("GET", path, "")
		if r.status != 200 || r.header.Get(StaleHeader) != "true" {
			t.Errorf("GET %s on a follower: %d %s %v", path, r.status, r.body, r.header)
		}
	}
	r = h.do("PATCH", "/v1/tasks/web-task?stale", `{"enabled":false}`).expect(t, 400)
	if !strings.HasPrefix(r.errMsg(t), "redirect requests to leader") {
		t.Fatalf("PATCH ?stale on a follower: %s", r.body)
	}

	// The cluster status is served on every member, as the spec says.
	var cr ClusterResponse
	h.do("GET", "/v1/status/cluster", "").expect(t, 200).json(t, &cr)
	if cr.ClusterName != "prod" || len(cr.Members) != 2 || !cr.Members[0].Leader || cr.Members[1].Address != "" || cr.RequestID == "" {
		t.Fatalf("cluster status = %+v", cr)
	}
	if body := string(h.do("GET", "/v1/status/cluster", "").body); strings.Contains(body, `"address":""`) {
		t.Fatalf("empty address serialised: %s", body)
	}

	// The leader serves everything.
	fc.set(true, "cts-02", "")
	h.do("GET", "/v1/tasks", "").expect(t, 200)
	h.do("GET", "/v1/status", "").expect(t, 200)
	h.do("GET", "/v1/status/cluster", "").expect(t, 200)

	fc.mu.Lock()
	fc.err = errors.New("consul down")
	fc.mu.Unlock()
	h.do("GET", "/v1/status/cluster", "").expect(t, 500)
}
