package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/holddown"
	"github.com/ctsync/ctsync/internal/testutil"
)

// pendingRemovals reads the task's pending_removals from its status.
func (a gateAPI) pendingRemovals(name string) ([]holddown.Removal, bool) {
	a.t.Helper()
	code, body := a.do("GET", "/v1/status/tasks/"+name, a.read)
	var m map[string]struct {
		PendingRemovals []holddown.Removal `json:"pending_removals"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &m) != nil {
		return nil, false
	}
	return m[name].PendingRemovals, true
}

// The removal hold-down (issue 37) with the real Consul and Terraform: a
// flap of every instance within removal_delay runs nothing (no event), a
// real removal is shown pending, then applied once it has lasted the
// delay, and an addition applies at once; each step reaches the webhook.
func TestRemovalDelayFlapAndRemoval(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	dir, varFile := newTaskDir(t)
	hook := newHookSink(t)
	registerWeb(t, c, 1, 2)
	g := startGated(t, c, hook.block("removal")+gateTask("web", varFile, `  removal_delay = "45s"`))
	waitRules(t, dir, "web-1,web-2")
	g.waitQuiet("web")
	runs := len(g.events("web"))

	// A flap: every instance leaves; the hold-down keeps them (pending),
	// then they come back within the delay.
	deregister(t, c, "web-1", "web-2")
	testutil.Eventually(t, 2*time.Minute, "both removals pending", func() bool {
		p, _ := g.pendingRemovals("web")
		return len(p) == 2
	})
	expectRules(t, dir, "web-1,web-2", "during the flap")
	registerWeb(t, c, 1, 2)
	testutil.Eventually(t, 2*time.Minute, "the removals cancelled", func() bool {
		p, ok := g.pendingRemovals("web")
		return ok && len(p) == 0
	})
	hook.wait(t, "web", "removals cancelled", func(n hookNote) bool {
		return n.Type == "removal" && n.Removal != nil && n.Removal.Action == "cancelled"
	})
	g.waitQuiet("web")
	expectRules(t, dir, "web-1,web-2", "after the flap")
	if n := len(g.events("web")); n != runs {
		t.Fatalf("the flap ran the task: %d events, had %d", n, runs)
	}

	// A real removal: pending with when it applies, then applied.
	deregister(t, c, "web-2")
	var at time.Time
	testutil.Eventually(t, 2*time.Minute, "web-2's removal pending", func() bool {
		p, _ := g.pendingRemovals("web")
		if len(p) == 1 && p[0].Kind == holddown.KindService {
			at = p[0].At
			return true
		}
		return false
	})
	expectRules(t, dir, "web-1,web-2", "while web-2's removal is pending")
	waitRules(t, dir, "web-1")
	if now := time.Now(); now.Before(at) {
		t.Fatalf("web-2 removed at %s, before its removal applied (%s)", now, at)
	}
	hook.wait(t, "web", "removal applied", func(n hookNote) bool { return n.Type == "removal" && n.Removal != nil && n.Removal.Action == "applied" })
	g.waitQuiet("web")
	if p, _ := g.pendingRemovals("web"); len(p) != 0 {
		t.Fatalf("pending after the removal applied: %+v", p)
	}

	// An addition applies at once, while a removal is pending: web-3
	// comes as web-1 leaves; web-1 is kept until its delay is over.
	deregister(t, c, "web-1")
	registerWeb(t, c, 3)
	waitRules(t, dir, "web-1,web-3")
	if p, _ := g.pendingRemovals("web"); len(p) != 1 || p[0].ID == "" {
		t.Fatalf("pending with web-3 applied: %+v, want web-1's removal", p)
	}
}
