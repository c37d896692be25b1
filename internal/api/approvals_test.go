package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/gate/gatetest"
	"github.com/ctsync/ctsync/internal/notify"
	"github.com/ctsync/ctsync/internal/redact"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

func withApprovals(a Approvals) harnessOpt { return func(o *Options) { o.Approvals = a } }

func heldPlan(name string) gate.Plan {
	return gate.Plan{Task: name, Reason: "plan destroys 12 of 14 resources (max_destroy 5)",
		Expires: time.Now().Add(24 * time.Hour).UTC().Truncate(time.Second),
		Destroy: 12, InState: 14, Text: "Plan: 0 to add, 0 to change, 12 to destroy.\npassword = s3cr3t\n",
		Changes: []string{"web: 12 removed (web-1, web-2, ...)", "token s3cr3t"}}
}

func bearer(secret string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + secret}
}

// A held plan: shown whole (redacted) by GET .../plan and at a glance in
// the task's status (waiting, with the reason); approved with a write
// token, recorded under the token's name; a stale id, a read token or a
// page of another site refused; a plan whose desired state moved on
// superseded by a newer one (409 naming it); rejected.
func TestHeldPlanApproveAndReject(t *testing.T) {
	fa := gatetest.New()
	h := newHarness(t, []task.Spec{servicesTask("fw", "web"), servicesTask("other", "api")},
		withApprovals(fa), withTokens(testTokens...),
		func(o *Options) {
			o.Redactor = redact.NewRedactor([]string{"s3cr3t"})
		})
	read, write := bearer(readSecret), bearer(writeSecret)

	h.send("GET", "/v1/tasks/nope/plan", "", read).expect(t, 404)
	if msg := h.send("GET", "/v1/tasks/fw/plan", "", read).expect(t, 404).errMsg(t); msg != "task 'fw' has no held plan: no run of it waits for approval" {
		t.Fatalf("no plan: %q", msg)
	}
	// Both tasks applied once; then a plan of fw is held.
	for _, name := range []string{"fw", "other"} {
		if err := h.st.AddEvent(t.Context(), store.Event{ID: name + "-1", TaskName: name, Kind: store.KindApply, Success: true}); err != nil {
			t.Fatal(err)
		}
	}
	p := fa.Hold(heldPlan("fw"))

	// GET /v1/status counts fw as waiting, not as successful.
	var sum StatusResponse
	h.send("GET", "/v1/status", "", read).expect(t, 200).json(t, &sum)
	if got := sum.TaskSummary.Status; got != (StatusCounts{Successful: 1, Waiting: 1}) {
		t.Fatalf("status counts with a held plan: %+v", got)
	}

	var pr PlanResponse
	h.send("GET", "/v1/tasks/fw/plan", "", read).expect(t, 200).json(t, &pr)
	if pr.Plan.ID != p.ID || pr.Plan.State != gate.Pending || pr.Plan.Destroy != 12 || pr.Plan.InState != 14 || pr.Plan.Reason != p.Reason {
		t.Fatalf("plan: %+v", pr.Plan)
	}
	if strings.Contains(pr.Plan.Text, "s3cr3t") || strings.Contains(strings.Join(pr.Plan.Changes, "\n"), "s3cr3t") || !strings.Contains(pr.Plan.Text, "[redacted]") {
		t.Fatalf("not redacted: %q %q", pr.Plan.Text, pr.Plan.Changes)
	}

	var sts map[string]TaskStatus
	h.send("GET", "/v1/status/tasks?status=WAITING", "", read).expect(t, 200).json(t, &sts)
	st, ok := sts["fw"]
	if !ok || len(sts) != 1 || st.Status != StatusWaiting || st.Waiting != p.Reason || st.Held == nil || st.Held.ID != p.ID ||
		st.Held.Destroy != 12 || st.Held.Expires == nil || !st.Held.Expires.Equal(p.Expires) {
		t.Fatalf("status: %+v", sts)
	}

	// Refused: a read token, a cross-site page, an id that is not the
	// pending plan's.
	h.send("POST", "/v1/tasks/fw/plan/"+p.ID+"/approve", "", read).expect(t, 403)
	h.send("POST", "/v1/tasks/fw/plan/"+p.ID+"/approve", "", map[string]string{"Authorization": "Bearer " + writeSecret,
		"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}).expect(t, 403)
	if msg := h.send("POST", "/v1/tasks/fw/plan/old/approve", "", write).expect(t, 409).errMsg(t); !strings.Contains(msg, "plan 'old' is not the task's pending plan") {
		t.Fatalf("stale id: %q", msg)
	}
	h.send("POST", "/v1/tasks/nope/plan/x/approve", "", write).expect(t, 404)
	h.send("POST", "/v1/tasks/other/plan/x/reject", "", write).expect(t, 404)
	if calls := fa.Calls(); len(calls) != 1 || calls[0] != "approve fw old by ops" {
		t.Fatalf("calls: %q", calls)
	}

	// The desired state moved on: superseded, the newer plan held.
	fa.Move("fw")
	msg := h.send("POST", "/v1/tasks/fw/plan/"+p.ID+"/approve", "", write).expect(t, 409).errMsg(t)
	h.send("GET", "/v1/tasks/fw/plan", "", read).expect(t, 200).json(t, &pr)
	if pr.Plan.ID == p.ID || pr.Plan.State != gate.Pending || !strings.Contains(msg, "superseded by plan "+pr.Plan.ID) {
		t.Fatalf("superseded: %q, held %+v", msg, pr.Plan)
	}

	// Approved, by the token's name.
	newer := pr.Plan.ID
	h.send("POST", "/v1/tasks/fw/plan/"+newer+"/approve", "", write).expect(t, 200).json(t, &pr)
	if pr.Plan.ID != newer || pr.Plan.State != gate.Approved || pr.Plan.DecidedBy != "ops" || pr.Plan.DecidedAt.IsZero() {
		t.Fatalf("approved: %+v", pr.Plan)
	}
	if d := <-fa.Decisions; d != (gatetest.Decision{Task: "fw", ID: newer, Who: "ops", Approve: true}) {
		t.Fatalf("decision %+v", d)
	}
	h.send("GET", "/v1/status/tasks/fw", "", read).expect(t, 200).json(t, &sts)
	if st := sts["fw"]; st.Held != nil || st.Status == StatusWaiting || st.Waiting != "" {
		t.Fatalf("still held after approval: %+v", st)
	}
	h.send("GET", "/v1/status", "", read).expect(t, 200).json(t, &sum)
	if got := sum.TaskSummary.Status; got != (StatusCounts{Successful: 2}) {
		t.Fatalf("status counts after the approval: %+v", got)
	}
	// Decided already: no second decision.
	h.send("POST", "/v1/tasks/fw/plan/"+newer+"/reject", "", write).expect(t, 409)

	// Rejected.
	p = fa.Hold(heldPlan("fw"))
	h.send("POST", "/v1/tasks/fw/plan/"+p.ID+"/reject", "", write).expect(t, 200).json(t, &pr)
	if pr.Plan.State != gate.Rejected || pr.Plan.DecidedBy != "ops" {
		t.Fatalf("rejected: %+v", pr.Plan)
	}
	// Expired: shown with its state, not waiting, not approvable.
	p = fa.Hold(heldPlan("fw"))
	fa.Expire("fw")
	h.send("GET", "/v1/tasks/fw/plan", "", read).expect(t, 200).json(t, &pr)
	if pr.Plan.State != gate.Expired {
		t.Fatalf("expired: %+v", pr.Plan)
	}
	h.send("POST", "/v1/tasks/fw/plan/"+p.ID+"/approve", "", write).expect(t, 409)
	if !strings.Contains(h.logs.String(), "plan approved through the api") {
		t.Error("the approval was not logged")
	}
}

// Without api_auth the approver is the client that says who it is (the
// CLI, the dashboard), else "api"; without gates there is never a plan.
func TestPlanApproverWithoutAuthAndWithoutGates(t *testing.T) {
	fa := gatetest.New()
	h := newHarness(t, []task.Spec{servicesTask("fw", "web")}, withApprovals(fa))
	for client, want := range map[string]string{"cli": "cli", "dashboard": "dashboard", "": "api", "someone-else": "api"} {
		p := fa.Hold(heldPlan("fw"))
		var pr PlanResponse
		h.send("POST", "/v1/tasks/fw/plan/"+p.ID+"/approve", "", map[string]string{ClientHeader: client}).expect(t, 200).json(t, &pr)
		if pr.Plan.DecidedBy != want {
			t.Errorf("client %q: decided by %q, want %q", client, pr.Plan.DecidedBy, want)
		}
	}

	h2 := newHarness(t, []task.Spec{servicesTask("fw", "web")})
	h2.do("GET", "/v1/tasks/fw/plan", "").expect(t, 404)
	h2.do("POST", "/v1/tasks/fw/plan/x/approve", "").expect(t, 404)
	h2.do("GET", "/v1/tasks/fw/plan?x=1&x=2", "").expect(t, 400)
}

// Spread mode: the task's owner holds its plan; a member that does not
// own the task forwards the read and the decision to it.
func TestSpreadForwardsHeldPlanToTheOwner(t *testing.T) {
	specs := []task.Spec{servicesTask("fw", "web")}
	fb := gatetest.New()
	b := &fakeSpread{self: "b"}
	hb := newHarness(t, specs, func(o *Options) { o.Cluster = b }, withApprovals(fb))
	a := &fakeSpread{self: "a"}
	ha := newHarness(t, specs, func(o *Options) { o.Cluster = a }, withApprovals(gatetest.New()))
	addrs := map[string]string{"a": strings.TrimPrefix(ha.ts.URL, "http://"), "b": strings.TrimPrefix(hb.ts.URL, "http://")}
	a.owners, a.addrs = map[string]string{"fw": "b"}, addrs
	b.owners, b.addrs = map[string]string{"fw": "b"}, addrs
	p := fb.Hold(heldPlan("fw"))

	var pr PlanResponse
	r := ha.do("GET", "/v1/tasks/fw/plan", "").expect(t, 200)
	r.json(t, &pr)
	if pr.Plan.ID != p.ID || r.header.Get(OwnerHeader) != addrs["b"] {
		t.Fatalf("read on a: %+v %v", pr.Plan, r.header)
	}
	ha.send("POST", "/v1/tasks/fw/plan/"+p.ID+"/approve", "", map[string]string{ClientHeader: "cli"}).expect(t, 200)
	if calls := fb.Calls(); len(calls) != 1 || calls[0] != "approve fw "+p.ID+" by cli" {
		t.Fatalf("the owner's calls: %q", calls)
	}
}

// With high availability (leader mode) a follower refuses the plan
// endpoints as the other task endpoints, naming the leader.
func TestFollowerRefusesPlanEndpoints(t *testing.T) {
	fc := &fakeCluster{}
	fa := gatetest.New()
	h := newHarness(t, []task.Spec{servicesTask("fw", "web")}, func(o *Options) { o.Cluster = fc }, withApprovals(fa))
	fc.set(false, "cts-01", "10.0.0.1:8558")
	p := fa.Hold(heldPlan("fw"))
	h.do("GET", "/v1/tasks/fw/plan", "").expect(t, 400)
	if msg := h.do("POST", "/v1/tasks/fw/plan/"+p.ID+"/approve", "").expect(t, 400).errMsg(t); msg != "redirect requests to leader 'cts-01' at 10.0.0.1:8558" {
		t.Fatalf("message %q", msg)
	}
	if len(fa.Calls()) != 0 {
		t.Fatalf("a follower decided: %q", fa.Calls())
	}
}

func TestPlanDecisionPaths(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/tasks/fw/plan/p1/approve": "fw", "/v1/tasks/fw/plan/p1/reject": "fw",
		"/v1/tasks/fw/plan/p1/other": "", "/v1/tasks/fw/plan//approve": "", "/v1/tasks/fw/x/p1/approve": "",
	} {
		got, _ := planDecision(strings.TrimPrefix(path, "/v1/tasks/"))
		if got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
}

// The chain an operator sees: a plan held, approved through the API with a
// write token, and the webhooks that say so, naming the token; the gates
// report through the notifiers' OnGate, as the controller's hook will.
func TestApprovalThroughTheAPIReachesWebhooks(t *testing.T) {
	var mu sync.Mutex
	var got []notify.Payload
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p notify.Payload
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	d := notify.New(notify.Options{Notifications: []config.Notification{{Type: "webhook", Name: "ops", URL: hook.URL,
		Events: []string{config.NotifyApproval}, Timeout: 5 * time.Second}}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	fa := gatetest.New()
	fa.OnGate = d.OnGate
	h := newHarness(t, []task.Spec{servicesTask("fw", "web")}, withApprovals(fa), withTokens(testTokens...))
	p := fa.Hold(heldPlan("fw"))
	h.send("POST", "/v1/tasks/fw/plan/"+p.ID+"/approve", "", bearer(writeSecret)).expect(t, 200)
	fctx, fcancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
	defer fcancel()
	d.Flush(fctx)

	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0].Approval == nil || got[0].Approval.Action != gate.ActionHeld ||
		got[1].Approval == nil || got[1].Approval.Action != gate.ActionApproved || got[1].Approval.Plan.DecidedBy != "ops" ||
		!strings.Contains(got[1].Text, "approved by ops") {
		t.Fatalf("webhooks: %+v", got)
	}
}
