package e2e

// More of the safety gates end to end (docs/safety.md): a held plan over a
// restart, an approval racing a change.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	ctsapi "github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/testutil"
)

// A held plan over a restart (no high availability): `ctsync status` lists
// it under "Waiting for approval"; after SIGTERM the restarted daemon holds
// the same plan again (same id, from the history database's record of it),
// planning and applying nothing at start; `ctsync task approve` of that id
// makes the plan again (its plan file is not kept over a restart), finds
// the same changes and applies them as the approved plan.
func TestGateRestartHoldsTheSamePlan(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	g, dir, p := startEmptyCatalog(t, c, "", "")

	o, code := runCLI(ctsyncBin, []string{"CTS_ADDRESS=" + g.base, "CTS_TOKEN=" + gateReadSecret}, "", "status")
	want := fmt.Sprintf("web: plan %s (+0 ~0 -3): %s", p.ID, emptyCatalogReason)
	if code != 0 || !strings.Contains(o, "Waiting for approval:") || !strings.Contains(o, want) {
		t.Errorf("ctsync status (exit %d) does not list the held plan (%q):\n%s", code, want, o)
	}
	// The summary (GET /v1/status, the dashboard's counts) says waiting,
	// as the task's row does, not successful: the task applied once, and
	// what it should apply now is not applied.
	expectCounts := func(when string) {
		t.Helper()
		code, body := g.do("GET", "/v1/status", gateReadSecret)
		var sum ctsapi.StatusResponse
		if err := json.Unmarshal([]byte(body), &sum); code != http.StatusOK || err != nil {
			t.Fatalf("GET /v1/status: %d %v %s", code, err, body)
		}
		if got := sum.TaskSummary.Status; got != (ctsapi.StatusCounts{Waiting: 1}) {
			t.Errorf("%s: the status counts with a held plan: %+v", when, got)
		}
		if st := g.status("web"); st.Status != "waiting" {
			t.Errorf("%s: the task's status %q", when, st.Status)
		}
	}
	expectCounts("the plan held")
	before := g.eventIDs("web")

	must(t, g.p.cmd.Process.Signal(syscall.SIGTERM))
	if code := g.p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "after the held daemon stopped")
	g.p = startCtsync(t, g.work, "start", "-config-file", g.cfg)
	g.p.waitOutput(t, 60*time.Second, "held plan restored from the store", "plan="+p.ID)
	again := g.waitPendingUnless("web", emptyCatalogReason, rulesChanged(dir, "web-1,web-2,web-3,web-4"))
	if again.ID != p.ID || again.Destroy != 3 || again.InState != 4 || !again.Created.Equal(p.Created) || again.Text != p.Text {
		t.Errorf("the plan held after the restart %+v: want the plan %s held before (3 destroy of 4)", again, p.ID)
	}
	expectCounts("the plan held again after the restart")
	out, code := runCLI(ctsyncBin, []string{"CTS_ADDRESS=" + g.base, "CTS_TOKEN=" + gateWriteSecret}, "",
		"task", "approve", "-auto-approve", "-plan", p.ID, "web")
	if code != 0 || !strings.Contains(out, p.ID) {
		t.Fatalf("ctsync task approve -plan %s web after the restart: exit %d\n%s", p.ID, code, out)
	}
	waitRules(t, dir, "web-1")
	ev := g.waitNewEvent("web", before, "the approved run", func(ev store.Event) bool { return ev.IsRun() && ev.Gate != nil })
	if !ev.Success || ev.Gate.Action != "approved" || ev.Gate.PlanID != p.ID || ev.Gate.Note != reconcile.ReplannedSame || ev.Plan == nil || ev.Plan.Destroy != 3 {
		t.Errorf("the approved run after the restart %+v (gate %+v)", ev, ev.Gate)
	}
	// Nothing ran at start: the approval (which waits for the task to be
	// free) made the one run of the restarted daemon, and no plan was
	// held again.
	if n, held := g.p.runs("web"), g.p.lines("task held:"); n != 1 || len(held) != 0 {
		t.Errorf("the restarted daemon ran the task %d times (want the approved run alone) and held %q", n, held)
	}
	for _, e := range g.events("web") {
		if !before[e.ID] && e.ID != ev.ID && (e.Gate == nil || e.Gate.Action != "approved" || e.Gate.PlanID != p.ID) {
			t.Errorf("the restarted daemon recorded %+v (gate %+v)", e, e.Gate)
		}
	}
}

// An approval that races a change: the catalog changes while a plan is
// held, and the operator approves the held plan as soon as the daemon has
// read the change from Consul (its watch has started its next read), most
// often while the change waits out the task's buffer period, before the
// task plans again. The held plan is not applied: the approval finds the
// desired state moved on, a new plan is made and held, and the answer is
// 409 naming it. (Approved a little later, once the new plan is under way,
// the answer is the same.)
func TestGateApproveRightAfterChange(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	g, dir, old := startEmptyCatalog(t, c, "", "")
	reads := g.series("ctsync_watch_fetches_total")
	registerWeb(t, c, 5)
	testutil.Eventually(t, 60*time.Second, "the watch to read the change", func() bool {
		return g.series("ctsync_watch_fetches_total") > reads
	})
	code, body := g.decide("web", old.ID, "approve", gateWriteSecret)
	if code != http.StatusConflict || !strings.Contains(body, "superseded by plan") {
		t.Fatalf("approve right after the change: %d %s; want 409 naming the newer plan", code, body)
	}
	newer := g.waitPendingUnless("web", emptyCatalogReason, rulesChanged(dir, "web-1,web-2,web-3,web-4"), old.ID)
	if !strings.Contains(body, newer.ID) {
		t.Errorf("the 409 does not name the plan held now (%s): %s", newer.ID, body)
	}
	if newer.Add != 1 || newer.Destroy != 3 {
		t.Errorf("newer plan %+v: want 1 add, 3 destroy", newer)
	}
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "after the approval that raced the change")
}
