package e2e

import (
	"net/http"
	"testing"

	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/testutil"
)

// gateAudit returns the task's audit events of action for plan id (kind
// gate, newest first).
func (a gateAPI) gateAudit(name, action, id string) []store.Event {
	var out []store.Event
	for _, ev := range a.events(name) {
		if ev.Kind == store.KindGate && ev.Gate != nil && ev.Gate.Action == action && ev.Gate.PlanID == id {
			out = append(out, ev)
		}
	}
	return out
}

// waitAudit waits for the audit event of action for plan id.
func (a gateAPI) waitAudit(name, action, id string) store.Event {
	a.t.Helper()
	var got store.Event
	testutil.WaitFor(a.t, name+": the audit event "+action+" of plan "+id, func() bool {
		evs := a.gateAudit(name, action, id)
		if len(evs) == 1 {
			got = evs[0]
		}
		return len(evs) == 1
	})
	return got
}

// The audit trail with the real daemon, Consul and Terraform: a plan held
// (its reason), superseded by a newer plan, that one rejected by a token
// (who, after how long), the next one approved by a token: each decision is
// an event of kind gate in the task's history with the plan's id, the
// approved run names the token, the plan and the hold time, and none of the
// audit events counts as a run in the task's status.
func TestGateAuditTrail(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	g, dir, p1 := startEmptyCatalog(t, c, "", "")
	held := g.waitAudit("web", gate.ActionHeld, p1.ID)
	if held.Gate.Reason != emptyCatalogReason || held.Gate.Rule != gate.RuleMaxDestroyPercent || held.Plan == nil || held.Plan.Destroy != 3 {
		t.Errorf("the held audit event %+v (gate %+v)", held, held.Gate)
	}

	registerWeb(t, c, 5) // the desired state moves on: p1 is superseded
	p2 := g.waitPendingUnless("web", emptyCatalogReason, rulesChanged(dir, "web-1,web-2,web-3,web-4"), p1.ID)
	if sup := g.waitAudit("web", gate.ActionSuperseded, p1.ID); sup.Gate.SupersededBy != p2.ID {
		t.Errorf("the superseded audit event %+v, want superseded by %s", sup.Gate, p2.ID)
	}
	g.waitAudit("web", gate.ActionHeld, p2.ID)

	if code, body := g.decide("web", p2.ID, "reject", gateWriteSecret); code != http.StatusOK {
		t.Fatalf("reject: %d %s", code, body)
	}
	if rej := g.waitAudit("web", gate.ActionRejected, p2.ID); rej.Gate.By != gateWriteName || rej.Gate.HeldSeconds <= 0 {
		t.Errorf("the rejected audit event %+v: want by %s with its hold time", rej.Gate, gateWriteName)
	}
	g.waitQuiet("web")

	registerWeb(t, c, 6) // a new change: planned, held again
	p3 := g.waitPendingUnless("web", emptyCatalogReason, rulesChanged(dir, "web-1,web-2,web-3,web-4"), p1.ID, p2.ID)
	before := g.eventIDs("web")
	if code, body := g.decide("web", p3.ID, "approve", gateWriteSecret); code != http.StatusOK {
		t.Fatalf("approve: %d %s", code, body)
	}
	run := g.waitNewEvent("web", before, "applied by the approval", func(ev store.Event) bool { return ev.IsRun() && ev.Success })
	if run.Actor != gateWriteName || run.Gate == nil || run.Gate.Action != gate.ActionApproved || run.Gate.PlanID != p3.ID ||
		run.Gate.By != gateWriteName || run.Gate.HeldSeconds <= 0 || run.Gate.Reason != p3.Reason {
		t.Errorf("the approved run %+v (gate %+v): want the token %s, plan %s, its reason and hold time", run, run.Gate, gateWriteName, p3.ID)
	}
	if ap := g.waitAudit("web", gate.ActionApproved, p3.ID); ap.Gate.By != gateWriteName || ap.Gate.HeldSeconds <= 0 {
		t.Errorf("the approved audit event %+v", ap.Gate)
	}
	waitRules(t, dir, "web-1,web-5,web-6")
	g.waitQuiet("web")
	// Audit events are not runs: the task is successful (its last run).
	g.waitStatus("web", "successful", func(st gateStatus) bool { return st.Status == "successful" })
}
