package notify

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/holddown"
)

// The steps of a task's removals reach a webhook that lists "removal",
// one notification per action with the removals (at most
// MaxRemovalsListed, and their count); a plan the window held carries
// the rule and the window's counts.
func TestRemovalAndWindowNotifications(t *testing.T) {
	if holddown.ActionPending == "" || config.NotifyRemoval != "removal" {
		t.Fatal("names")
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
	d := start(t, Options{Notifications: []config.Notification{webhook("all", raw.URL), webhook("runs", other.URL, "failed", "approval")}})

	since := t0
	var changes []holddown.Change
	for i := range MaxRemovalsListed + 2 {
		changes = append(changes, holddown.Change{Action: holddown.ActionPending, Removal: holddown.Removal{Query: "health/service/web",
			Kind: holddown.KindService, ID: fmt.Sprintf("web-%03d.n.dc1", i), Since: since, At: since.Add(30 * time.Second)}})
	}
	changes = append(changes, holddown.Change{Action: holddown.ActionApplied, Removal: holddown.Removal{Query: "health/service/web",
		Kind: holddown.KindService, ID: "web-x.n.dc1", Since: since.Add(-time.Minute), At: since.Add(-30 * time.Second)}})
	d.OnRemoval("fw", changes)
	d.OnRemoval("fw", nil)

	p := heldPlanFor("fw")
	v := gate.Verdict{Reason: "plan destroys 1 of 5 resources; with the 5 destroyed within the window (1h): 6 of 10 (max_destroy_percent 50)",
		Rule: gate.RuleMaxDestroyPercent, Window: true, Prior: 5, HighWater: 10, Span: time.Hour}
	v.Hold(&p)
	d.OnGate(gate.Event{Kind: gate.EventApproval, Action: gate.ActionHeld, Task: "fw", Plan: p})
	flush(t, d)

	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 3 {
		t.Fatalf("%d notifications, want 3", len(bodies))
	}
	var pending, applied, held Payload
	for i, dst := range []*Payload{&pending, &applied, &held} {
		if err := json.Unmarshal(bodies[i], dst); err != nil {
			t.Fatal(err)
		}
	}
	if pending.Type != "removal" || pending.Removal == nil || pending.Removal.Action != "pending" ||
		pending.Removal.Count != MaxRemovalsListed+2 || len(pending.Removal.Removals) != MaxRemovalsListed {
		t.Fatalf("pending: %s", bodies[0])
	}
	if want := `ctsync: task "fw" keeps 102 that left (web-000.n.dc1, web-001.n.dc1, web-002.n.dc1, web-003.n.dc1, web-004.n.dc1 and 97 more) until ` +
		since.Add(30*time.Second).Format(time.RFC3339) + ` (removal_delay)`; pending.Text != want {
		t.Errorf("text %q, want %q", pending.Text, want)
	}
	r := pending.Removal.Removals[0]
	if r.ID != "web-000.n.dc1" || r.Kind != "service" || r.Query != "health/service/web" || !r.At.Equal(since.Add(30*time.Second)) {
		t.Errorf("removal %+v", r)
	}
	if applied.Removal == nil || applied.Removal.Action != "applied" || applied.Removal.Count != 1 ||
		applied.Text != `ctsync: task "fw": 1 gone for removal_delay (web-x.n.dc1): the task runs without them` {
		t.Errorf("applied: %s", bodies[1])
	}
	w := held.Approval.Plan.Window
	if held.Approval.Plan.Rule != "max_destroy_percent" || w == nil || *w != (gate.WindowNote{Window: "1h", Destroyed: 5, HighWater: 10}) {
		t.Errorf("held by the window: %s", bodies[2])
	}
	if n := len(other.got()); n != 1 {
		t.Errorf("the webhook of failed and approval got %d notifications, want 1 (the held plan)", n)
	}
}
