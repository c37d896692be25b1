package notify

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/gate"
)

func heldPlanFor(task string) gate.Plan {
	return gate.Plan{ID: "p1", Task: task, Created: t0, Expires: t0.Add(24 * 60 * 60 * 1e9), State: gate.Pending,
		Reason: "plan destroys 12 of 14 resources (max_destroy 5)", Destroy: 12, InState: 14,
		Text: "the plan text is not sent", Changes: []string{"web: 12 removed", "token s3cr3t"}}
}

// Each approval action and a policy denial reach a webhook that wants
// them, with the plan's summary (not its text) or the deny messages,
// secrets redacted; a webhook that lists other events gets none.
func TestGateNotifications(t *testing.T) {
	if gate.EventApproval != config.NotifyApproval || gate.EventPolicy != config.NotifyPolicy {
		t.Fatal("the gates' event kinds are not the notification blocks' event names")
	}
	var mu sync.Mutex
	var bodies [][]byte
	raw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
	}))
	t.Cleanup(raw.Close)
	other := newReceiver(t, nil)
	d := start(t, Options{Notifications: []config.Notification{webhook("gates", raw.URL, "approval", "policy"), webhook("runs", other.URL, "failed")},
		Redact: func(s string) string { return strings.ReplaceAll(s, "s3cr3t", "[redacted]") }})

	p := heldPlanFor("fw")
	d.OnGate(gate.Event{Kind: gate.EventApproval, Action: gate.ActionHeld, Task: "fw", Plan: p})
	sup := p
	sup.State = gate.Superseded
	d.OnGate(gate.Event{Kind: gate.EventApproval, Action: gate.ActionSuperseded, Task: "fw", Plan: sup, Newer: "p2"})
	dec := p
	dec.ID, dec.State, dec.DecidedBy, dec.DecidedAt = "p2", gate.Approved, "ops", t0
	d.OnGate(gate.Event{Kind: gate.EventApproval, Action: gate.ActionApproved, Task: "fw", Plan: dec})
	dec.State = gate.Rejected
	d.OnGate(gate.Event{Kind: gate.EventApproval, Action: gate.ActionRejected, Task: "fw", Plan: dec})
	exp := p
	exp.State = gate.Expired
	d.OnGate(gate.Event{Kind: gate.EventApproval, Action: gate.ActionExpired, Task: "fw", Plan: exp})
	d.OnGate(gate.Event{Kind: gate.EventPolicy, Action: gate.ActionDenied, Task: "fw", Trigger: "health/service/web",
		Messages: []string{"rule fw-web opens port 22 to 0.0.0.0/0", "s3cr3t in a tag"}})
	flush(t, d)

	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 6 {
		t.Fatalf("%d notifications, want 6", len(bodies))
	}
	wantText := []string{
		`ctsync: task "fw" waits for approval: plan destroys 12 of 14 resources (max_destroy 5) (plan p1: 0 to add, 0 to change, 12 to destroy)`,
		`ctsync: plan p1 of task "fw" superseded by plan p2: the desired state changed since it was made`,
		`ctsync: plan p2 of task "fw" approved by ops: applying it (0 to add, 0 to change, 12 to destroy)`,
		`ctsync: plan p2 of task "fw" rejected by ops: nothing applied`,
		`ctsync: plan p1 of task "fw" expired without approval: nothing applied`,
		`ctsync: task "fw" denied by policy: nothing applied: rule fw-web opens port 22 to 0.0.0.0/0; [redacted] in a tag`,
	}
	for i, b := range bodies {
		var pl Payload
		if err := json.Unmarshal(b, &pl); err != nil {
			t.Fatal(err)
		}
		var keys map[string]json.RawMessage
		_ = json.Unmarshal(b, &keys)
		if _, ok := keys["event"]; ok {
			t.Errorf("notification %d has an event: %s", i, b)
		}
		if pl.Text != wantText[i] || pl.Task != "fw" || pl.Time.IsZero() {
			t.Errorf("notification %d: text %q, want %q", i, pl.Text, wantText[i])
		}
		if strings.Contains(string(b), "s3cr3t") || strings.Contains(string(b), "the plan text") {
			t.Errorf("notification %d sends a secret or the plan text: %s", i, b)
		}
	}
	var held, approved, policy Payload
	_ = json.Unmarshal(bodies[0], &held)
	_ = json.Unmarshal(bodies[2], &approved)
	_ = json.Unmarshal(bodies[5], &policy)
	if a := held.Approval; held.Type != "approval" || a == nil || a.Action != "held" || a.Plan.ID != "p1" || a.Plan.Destroy != 12 ||
		a.Plan.InState != 14 || !a.Plan.Expires.Equal(p.Expires) || a.Plan.State != "pending" || len(a.Plan.Changes) != 2 {
		t.Errorf("held: %s", bodies[0])
	}
	if a := approved.Approval; a == nil || a.Plan.DecidedBy != "ops" || a.Plan.State != "approved" {
		t.Errorf("approved: %s", bodies[2])
	}
	if pp := policy.Policy; policy.Type != "policy" || pp == nil || pp.Action != "denied" || len(pp.Messages) != 2 ||
		pp.Trigger != "health/service/web" || policy.Approval != nil {
		t.Errorf("policy: %s", bodies[5])
	}
	if got := other.got(); len(got) != 0 {
		t.Errorf("the failed-only webhook got %+v", got)
	}
}
