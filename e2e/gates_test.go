package e2e

// The safety gates end to end (docs/safety.md): plan approval, the
// blast-radius guard and OPA policy on the plan, against the real daemon,
// a real Consul and real Terraform. The per_instance fixture module makes
// one file per service instance, so deregistering instances destroys
// resources.

import (
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/testutil"
)

// emptyCatalogReason is why max_destroy_percent = 50 holds the plan after
// web-2..web-4 of web-1..web-4 are deregistered.
const emptyCatalogReason = "plan destroys 3 of 4 resources (max_destroy_percent 50)"

// startEmptyCatalog starts a daemon whose task "web" (max_destroy_percent
// = 50, plus extra in its approval block) has applied web-1..web-4, then
// deregisters web-2..web-4 and waits for the plan that destroys them to be
// held; it returns the daemon, the module's folder and the held plan.
func startEmptyCatalog(t *testing.T, c *testutil.Consul, approvalExtra, more string) (*gated, string, gate.Plan) {
	t.Helper()
	dir, varFile := newTaskDir(t)
	registerWeb(t, c, 1, 2, 3, 4)
	g := startGated(t, c, more+gateTask("web", varFile, fmt.Sprintf(`
  approval {
    max_destroy_percent = 50
    %s
  }`, approvalExtra)))
	// The first run only adds: the guard lets it through.
	waitRules(t, dir, "web-1,web-2,web-3,web-4")
	g.waitQuiet("web")
	if code, _, body := g.plan("web"); code != http.StatusNotFound {
		t.Fatalf("GET plan with nothing held: %d %s, want 404", code, body)
	}
	// A catalog that looks empty for a moment.
	deregister(t, c, "web-2", "web-3", "web-4")
	p := g.waitPendingUnless("web", emptyCatalogReason, rulesChanged(dir, "web-1,web-2,web-3,web-4"))
	return g, dir, p
}

// (a) max_destroy_percent holds an "empty catalog": the task waits with the
// reason, nothing is destroyed, the held plan is served with its counts,
// text and Consul changes, a read token cannot approve it, a webhook of kind
// approval goes out; approving it (write token "ops") applies exactly that
// plan — a rule file removed behind Terraform's back after the plan was
// made is not re-created, as a new plan would — and the run records who
// approved.
func TestGateMaxDestroyPercentHoldsEmptyCatalog(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	hook := newHookSink(t)
	g, dir, p := startEmptyCatalog(t, c, "", hook.block("approval"))

	// The held plan: who, what, why.
	if p.Task != "web" || p.ID == "" || p.Created.IsZero() || p.Add != 0 || p.Change != 0 || p.Destroy != 3 || p.InState != 4 {
		t.Fatalf("held plan %+v: want task web, an id, a creation time, 0 add, 0 change, 3 destroy of 4", p)
	}
	for _, id := range []string{"web-2", "web-3", "web-4"} {
		if !strings.Contains(p.Text, id) {
			t.Errorf("the plan text does not show %s destroyed:\n%s", id, p.Text)
		}
	}
	if !strings.Contains(p.Text, "destroy") {
		t.Errorf("the plan text does not say it destroys:\n%s", p.Text)
	}
	if ch := strings.Join(p.Changes, "\n"); !strings.Contains(ch, "web-2") {
		t.Errorf("the plan's consul_changes do not name the deregistered instances: %q", p.Changes)
	}
	// The status: waiting, with the reason.
	st := g.waitStatus("web", "waiting", func(st gateStatus) bool { return st.Status == "waiting" })
	if st.Waiting != emptyCatalogReason || st.Held == nil || st.Held.ID != p.ID || st.Held.Reason != emptyCatalogReason {
		t.Errorf("status %s: want waiting %q and held plan %s", st.raw, emptyCatalogReason, p.ID)
	}
	hook.wait(t, "web", "plan held", approval("held", p.ID))
	g.waitMetric("ctsync_task_runs_held_total", "web", 1)
	// Nothing was destroyed.
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "while the plan is held")

	// Approving is a write: the read token is refused.
	if code, body := g.decide("web", p.ID, "approve", gateReadSecret); code != http.StatusForbidden {
		t.Fatalf("approve with a read token: %d %s, want 403", code, body)
	}
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "after a refused approval")

	// Drift that no new plan would ignore: web-1's file goes. The saved
	// plan does not re-create it; a fresh plan would.
	removeRule(t, dir, "web-1")
	before := g.eventIDs("web")
	if code, body := g.decide("web", p.ID, "approve", gateWriteSecret); code != http.StatusOK {
		t.Fatalf("approve: %d %s, want 200", code, body)
	}
	ev := g.waitNewEvent("web", before, "applied by the approval", func(ev store.Event) bool { return ev.Success })
	if ev.Actor != gateWriteName {
		t.Errorf("the approved run's actor is %q, want the token's name %q (%+v)", ev.Actor, gateWriteName, ev)
	}
	if ev.Plan == nil || ev.Plan.Destroy != 3 || ev.Plan.Add != 0 {
		t.Errorf("the approved run's plan summary %+v, want 3 to destroy, 0 to add", ev.Plan)
	}
	expectRules(t, dir, "", "after the approved plan was applied (web-1's file, removed behind Terraform's back, must not be re-created: a new plan would)")
	if n := hook.wait(t, "web", "plan approved", approval("approved", p.ID)); n.Approval.Plan.DecidedBy != gateWriteName {
		t.Errorf("the approval notification names %q as the approver, want %q", n.Approval.Plan.DecidedBy, gateWriteName)
	}
	g.waitMetric("ctsync_task_runs_approved_total", "web", 1)
	g.waitQuiet("web")
	if code, p2, _ := g.plan("web"); code == http.StatusOK && p2.State == gate.Pending {
		t.Fatalf("a plan is still pending after the approval: %+v", p2)
	} else if code == http.StatusOK && (p2.ID != p.ID || p2.State != gate.Approved || p2.DecidedBy != gateWriteName) {
		t.Errorf("after the approval GET plan shows %+v, want plan %s approved by %s (or 404)", p2, p.ID, gateWriteName)
	}
	// Approving it again does not apply it twice.
	if code, body := g.decide("web", p.ID, "approve", gateWriteSecret); code == http.StatusOK {
		t.Errorf("a second approval of the same plan answered 200: %s", body)
	}
}

// (b) Supersede: the catalog changes again while a plan is held. A newer
// plan is held (same reason: it still destroys 3 of 4); approving the old
// one answers 409 naming the newer plan and applies nothing; approving the
// newer one applies it.
func TestGateSupersede(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	hook := newHookSink(t)
	g, dir, old := startEmptyCatalog(t, c, "", hook.block("approval"))

	registerWeb(t, c, 5)
	newer := g.waitPendingUnless("web", emptyCatalogReason, rulesChanged(dir, "web-1,web-2,web-3,web-4"), old.ID)
	if n := hook.wait(t, "web", "old plan superseded", approval("superseded", old.ID)); n.Approval.NewerPlan != newer.ID {
		t.Errorf("the superseded notification names newer plan %q, want %q", n.Approval.NewerPlan, newer.ID)
	}
	if newer.Add != 1 || newer.Destroy != 3 || newer.InState != 4 {
		t.Errorf("newer plan %+v: want 1 add, 3 destroy of 4", newer)
	}
	code, body := g.decide("web", old.ID, "approve", gateWriteSecret)
	if code != http.StatusConflict || !strings.Contains(body, newer.ID) {
		t.Fatalf("approve of the superseded plan: %d %s; want 409 naming plan %s", code, body, newer.ID)
	}
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "after the superseded plan's approval")
	// The newer plan is still the one held.
	if code, cur, body := g.plan("web"); code != http.StatusOK || cur.ID != newer.ID || cur.State != gate.Pending {
		t.Fatalf("after the 409, GET plan: %d %s; want plan %s pending", code, body, newer.ID)
	}
	if code, body := g.decide("web", newer.ID, "approve", gateWriteSecret); code != http.StatusOK {
		t.Fatalf("approve of the newer plan: %d %s", code, body)
	}
	waitRules(t, dir, "web-1,web-5")
	g.waitQuiet("web")
}

// The empty catalog comes back: the deregistered instances register again
// while the plan is held. The desired state moved on, so the held plan is
// superseded (webhook approval/superseded); the new plan has no changes, so
// nothing is held and the task is successful again with nothing destroyed;
// an approval of the old plan gets 409.
func TestGateEmptyCatalogRecovers(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	hook := newHookSink(t)
	g, dir, p := startEmptyCatalog(t, c, "", hook.block("approval"))

	registerWeb(t, c, 2, 3, 4)
	hook.wait(t, "web", "the held plan superseded", approval("superseded", p.ID))
	// The desired state is the one last applied again: whether the task
	// plans (no changes) or skips, it ends successful with nothing held.
	st := g.waitStatus("web", "successful, nothing held", func(st gateStatus) bool {
		return st.Status == "successful" && st.Held == nil && !st.Active
	})
	if st.Waiting != "" {
		t.Errorf("status after recovery: %s", st.raw)
	}
	if code, cur, body := g.plan("web"); code == http.StatusOK && cur.State == gate.Pending {
		t.Fatalf("a plan is pending after the catalog came back: %s", body)
	}
	if code, body := g.decide("web", p.ID, "approve", gateWriteSecret); code != http.StatusConflict {
		t.Errorf("approve of the superseded plan: %d %s, want 409", code, body)
	}
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "after the catalog came back")
}

// (c) Reject: the plan is dropped, nothing is applied, and the task makes
// no plan again for the same desired state: it waits for the next change,
// whose plan is held anew.
func TestGateReject(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	hook := newHookSink(t)
	g, dir, p := startEmptyCatalog(t, c, "", hook.block("approval"))

	// An id that is not the pending plan is refused.
	if code, body := g.decide("web", "no-such-plan", "reject", gateWriteSecret); code != http.StatusConflict {
		t.Errorf("reject of an unknown plan: %d %s, want 409", code, body)
	}
	if code, body := g.decide("web", p.ID, "reject", gateWriteSecret); code != http.StatusOK {
		t.Fatalf("reject: %d %s", code, body)
	}
	if code, cur, body := g.plan("web"); code == http.StatusOK && (cur.ID != p.ID || cur.State != gate.Rejected || cur.DecidedBy != gateWriteName) {
		t.Fatalf("after reject, GET plan: %s; want 404 or plan %s rejected by %s", body, p.ID, gateWriteName)
	} else if code != http.StatusOK && code != http.StatusNotFound {
		t.Fatalf("after reject, GET plan: %d %s", code, body)
	}
	// A rejected plan cannot be approved.
	if code, body := g.decide("web", p.ID, "approve", gateWriteSecret); code == http.StatusOK {
		t.Fatalf("approve of a rejected plan answered 200: %s", body)
	}
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "after reject")
	hook.wait(t, "web", "plan rejected", approval("rejected", p.ID))
	g.waitMetric("ctsync_task_runs_rejected_total", "web", 1)
	if st := g.status("web"); st.Waiting == emptyCatalogReason {
		t.Errorf("after reject the status still waits for approval: %s", st.raw)
	}

	// The next change: a new plan, held again.
	registerWeb(t, c, 5)
	next := g.waitPendingUnless("web", emptyCatalogReason, rulesChanged(dir, "web-1,web-2,web-3,web-4"), p.ID)
	if next.Add != 1 || next.Destroy != 3 {
		t.Errorf("plan after the next change %+v: want 1 add, 3 destroy", next)
	}
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "after the next change was held")
}

// (d) Expire: a plan not approved within approval.expire is dropped; the
// status says so; approving it afterwards applies nothing; the task stays
// held until the next change, whose plan is held anew.
func TestGateExpire(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	hook := newHookSink(t)
	g, dir, p := startEmptyCatalog(t, c, `expire = "10s"`, hook.block("approval"))
	if d := p.Expires.Sub(p.Created); d < 10*time.Second || d > 11*time.Second {
		t.Errorf("held plan expires %v (created %v), want 10s after its creation", p.Expires, p.Created)
	}
	st := g.waitStatus("web", "saying the plan expired", func(st gateStatus) bool {
		return strings.Contains(st.Waiting, "expired") || strings.Contains(st.raw, "expired")
	})
	if code, cur, body := g.plan("web"); code == http.StatusOK && cur.State == gate.Pending {
		t.Fatalf("status says expired (%s) but the plan is still pending: %s", st.raw, body)
	}
	if code, body := g.decide("web", p.ID, "approve", gateWriteSecret); code == http.StatusOK {
		t.Fatalf("approve of an expired plan answered 200: %s", body)
	}
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "after the plan expired")
	hook.wait(t, "web", "plan expired", approval("expired", p.ID))
	g.waitMetric("ctsync_task_runs_expired_total", "web", 1)
	if ex := g.waitAudit("web", gate.ActionExpired, p.ID); ex.Gate.Reason != emptyCatalogReason || ex.Gate.HeldSeconds < 9 {
		t.Errorf("the expired audit event %+v: want the reason and about 10s held", ex.Gate)
	}

	registerWeb(t, c, 5)
	next := g.waitPlan("web", "made after the next change", func(n gate.Plan) bool {
		return n.ID != p.ID && n.Reason == emptyCatalogReason
	})
	if next.Add != 1 || next.Destroy != 3 {
		t.Errorf("plan after the next change %+v: want 1 add, 3 destroy", next)
	}
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "after the next change")
}

// (e) approval { required = true } holds any run with changes (the first
// run included) and never a plan without changes; a task whose rules let a
// plan through (destroys within max_destroy) applies it without holding.
func TestGateRequiredAndRulesLetThrough(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	strictDir, strictVars := newTaskDir(t)
	lenientDir, lenientVars := newTaskDir(t)
	registerWeb(t, c, 1, 2)
	g := startGated(t, c, gateTask("strict", strictVars, `
  approval {
    required = true
  }`)+gateTask("lenient", lenientVars, `
  approval {
    max_destroy = 1
  }`))

	// The first run: strict waits, lenient applies.
	first := g.waitPendingUnless("strict", "approval required", rulesChanged(strictDir, ""))
	if first.Add != 2 || first.Destroy != 0 || first.InState != 0 {
		t.Errorf("strict's first plan %+v: want 2 add, nothing in state", first)
	}
	waitRules(t, lenientDir, "web-1,web-2")
	g.waitQuiet("lenient")
	expectRules(t, strictDir, "", "strict before approval")
	if st := g.status("strict"); st.Status != "waiting" || st.Waiting != "approval required" {
		t.Errorf("strict's status: %s; want waiting, approval required", st.raw)
	}
	if code, body := g.decide("strict", first.ID, "approve", gateWriteSecret); code != http.StatusOK {
		t.Fatalf("approve: %d %s", code, body)
	}
	waitRules(t, strictDir, "web-1,web-2")
	g.waitQuiet("strict")

	// A change the module ignores (web-1's port): the plans have no
	// changes, so even strict applies without holding.
	seen := map[string]map[string]bool{"strict": g.eventIDs("strict"), "lenient": g.eventIDs("lenient")}
	c.RegisterService(t, reg("web-1", "web", 9001), api.HealthPassing)
	for _, name := range []string{"strict", "lenient"} {
		ev := g.waitNewEvent(name, seen[name], "after the port change", func(ev store.Event) bool { return ev.Success })
		if ev.Plan != nil && ev.Plan.Add+ev.Plan.Change+ev.Plan.Destroy != 0 {
			t.Errorf("%s: the port change planned changes: %+v", name, ev.Plan)
		}
	}
	if code, cur, body := g.plan("strict"); code == http.StatusOK && cur.State == gate.Pending {
		t.Fatalf("a plan without changes was held: %s", body)
	}

	// One destroy: within lenient's max_destroy, so applied at once;
	// strict holds it.
	deregister(t, c, "web-2")
	waitRules(t, lenientDir, "web-1")
	held := g.waitPendingUnless("strict", "approval required", rulesChanged(strictDir, "web-1,web-2"), first.ID)
	if held.Destroy != 1 || held.InState != 2 {
		t.Errorf("strict's plan %+v: want 1 destroy of 2", held)
	}
	expectRules(t, strictDir, "web-1,web-2", "strict while held")
	if code, _, body := g.plan("lenient"); code != http.StatusNotFound {
		t.Errorf("lenient has a held plan: %d %s", code, body)
	}
}

// denyOpenRego forbids a rule that opens 0.0.0.0/0: every planned
// local_file whose content is 0.0.0.0/0 yields a deny message. The input
// is {plan: <terraform show -json>, task: {name, ...}, trigger}.
const denyOpenRego = `package ctsync

deny contains msg if {
	some rc in input.plan.resource_changes
	rc.change.after.content == "0.0.0.0/0"
	msg := sprintf("%s opens 0.0.0.0/0 (task %s)", [rc.address, input.task.name])
}
`

// (f) policy { files } with a Rego file forbidding 0.0.0.0/0: a change
// whose plan opens it is denied — nothing applied, status errored with the
// message, a run event of kind policy, a webhook of kind policy; after the
// policy file is edited to allow it, the restarted daemon plans again and
// applies.
func TestGatePolicyDeniesOpenRule(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	hook := newHookSink(t)
	dir, varFile := newTaskDir(t)
	registerWeb(t, c, 1)
	work := t.TempDir()
	port := testutil.FreePort(t)
	writeFile(t, mkdir(t, work, "policies"), "fw.rego", denyOpenRego)
	g := &gated{gateAPI: gateAPI{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port), read: gateReadSecret, write: gateWriteSecret}, work: work}
	g.cfg = daemonConfig(t, work, port, c.Addr, gateAuth+hook.block("policy")+gateTask("fw", varFile, `
  policy {
    files = ["policies/fw.rego"]
  }`))
	g.p = startCtsync(t, work, "start", "-config-file", g.cfg)
	g.waitUp()
	waitRules(t, dir, "web-1")
	g.waitQuiet("fw")

	// An instance asking for the world.
	before := g.eventIDs("fw")
	c.RegisterService(t, &api.AgentServiceRegistration{ID: "web-open", Name: "web", Address: "127.0.0.1", Port: 8080,
		Meta: map[string]string{"cidr": "0.0.0.0/0"}}, api.HealthPassing)
	const msg = `local_file.instance["web-open.node-1.dc1"] opens 0.0.0.0/0 (task fw)`
	ev := g.waitNewEvent("fw", before, "denied by policy", func(ev store.Event) bool { return !ev.Success })
	if ev.Kind != "policy" || ev.Error == nil || !strings.Contains(ev.Error.Message, msg) {
		t.Fatalf("the denied run: kind %q, error %+v; want kind policy and the message %q", ev.Kind, ev.Error, msg)
	}
	// The audit trail: the denied run carries the decision, the plan's id
	// (the run's), the messages and the plan.
	if d := ev.Gate; d == nil || d.Action != "denied" || d.PlanID != ev.ID || !slices.ContainsFunc(d.Messages, func(m string) bool { return strings.HasSuffix(m, msg) }) ||
		!strings.Contains(ev.PlanText, "web-open") {
		t.Errorf("the denied run's gate decision %+v, plan text %q", ev.Gate, ev.PlanText)
	}
	st := g.waitStatus("fw", "errored", func(st gateStatus) bool { return st.Status == "errored" })
	if !strings.Contains(st.raw, "opens 0.0.0.0/0") {
		t.Errorf("the status does not carry the policy's message: %s", st.raw)
	}
	hook.wait(t, "fw", "denied by policy", func(n hookNote) bool {
		// The plan's addresses are the generated root module's:
		// module.fw.local_file...
		return n.Type == "policy" && n.Policy != nil && n.Policy.Action == "denied" &&
			slices.ContainsFunc(n.Policy.Messages, func(m string) bool { return strings.HasSuffix(m, msg) })
	})
	g.waitMetric("ctsync_task_runs_denied_total", "fw", 1)
	expectRules(t, dir, "web-1", "after the policy denied the run")
	if code, cur, body := g.plan("fw"); code == http.StatusOK && cur.State == gate.Pending {
		t.Errorf("a denied plan is held for approval: %s", body)
	}

	// The policy is edited to allow it (it now forbids only ::/0): the
	// policy is part of the desired state, so the restarted daemon plans
	// the task again and applies the rule.
	before = g.eventIDs("fw") // while the daemon still answers
	must(t, g.p.cmd.Process.Signal(syscall.SIGTERM))
	if code := g.p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	writeFile(t, filepath.Join(work, "policies"), "fw.rego", strings.ReplaceAll(denyOpenRego, "0.0.0.0/0", "::/0"))
	g.p = startCtsync(t, work, "start", "-config-file", g.cfg)
	// The daemon keeps its run state over a restart: the run's trigger
	// names what changed since the last success, the policy among them.
	ev = g.waitNewEvent("fw", before, "applied after the policy edit", func(ev store.Event) bool { return ev.Success })
	if !strings.Contains(ev.Trigger, "policy changed") {
		t.Errorf("the run after the policy edit has the trigger %q, want it to name the policy", ev.Trigger)
	}
	waitRules(t, dir, "web-1,web-open")
}

// (g) -once and -inspect report what a gate would do and exit non-zero
// when a gate holds a run; nothing is applied.
func TestGateOnceAndInspect(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	dir, varFile := newTaskDir(t)
	registerWeb(t, c, 1, 2, 3, 4)
	work := t.TempDir()
	cfgFor := func(approval string) string {
		return daemonConfig(t, work, testutil.FreePort(t), c.Addr, gateTask("web", varFile, approval))
	}
	// Without a gate, -once applies everything.
	plain := cfgFor("")
	if p := startCtsync(t, work, "start", "-once", "-config-file", plain); p.wait(t, 3*time.Minute) != 0 {
		t.Fatalf("-once without a gate failed:\n%s", p.out.String())
	}
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "-once without a gate")

	deregister(t, c, "web-2", "web-3", "web-4")
	gatedCfg := cfgFor(`
  approval {
    max_destroy_percent = 50
  }`)
	// -once: the run is held; the exit code and the output say so.
	p := startCtsync(t, work, "start", "-once", "-config-file", gatedCfg)
	if code := p.wait(t, 3*time.Minute); code == 0 {
		t.Fatalf("-once with a held run exited 0:\n%s", p.out.String())
	}
	if !strings.Contains(p.out.String(), emptyCatalogReason) {
		t.Fatalf("-once does not say why the run is held (%q):\n%s", emptyCatalogReason, p.out.String())
	}
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "-once with a held run")

	// -inspect: the plan and the gate's verdict, non-zero exit.
	p = startCtsync(t, work, "start", "-inspect", "-config-file", gatedCfg)
	if code := p.wait(t, 3*time.Minute); code == 0 {
		t.Fatalf("-inspect of a plan a gate holds exited 0:\n%s", p.out.String())
	}
	if out := p.out.String(); !strings.Contains(out, emptyCatalogReason) || !strings.Contains(out, "3 to destroy") {
		t.Fatalf("-inspect does not show the plan and the gate's verdict:\n%s", out)
	}
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "-inspect")

	// A plan the gate lets through: -once exits 0.
	registerWeb(t, c, 2, 3, 4)
	if p := startCtsync(t, work, "start", "-once", "-config-file", gatedCfg); p.wait(t, 3*time.Minute) != 0 {
		t.Fatalf("-once with a plan the gate lets through failed:\n%s", p.out.String())
	}
}

// (h) High availability, leader mode with two members: the leader is
// killed while a plan is held. The new leader holds the same plan (same
// id: its record is in Consul KV), planning and applying nothing
// meanwhile; approving it on the new leader (which plans it again, the
// plan file having stayed with the killed leader, and finds the same
// changes) applies it.
func TestGateHAFailoverKeepsHold(t *testing.T) {
	skipShort(t)
	c, dir, leader := startGatedHACluster(t, "  buffer_period {\n    enabled = true\n    min = \"2s\"\n    max = \"8s\"\n  }\n")

	for _, id := range []string{"web-2", "web-3", "web-4"} {
		c.deregister(id)
	}
	api1 := gateAPI{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", leader.port)}
	held := api1.waitPendingUnless("web-task", emptyCatalogReason, rulesChanged(dir, "web-1,web-2,web-3,web-4"))

	kill := time.Now()
	must(t, leader.proc().cmd.Process.Kill())
	leader.kills = append(leader.kills, kill)
	next, _ := c.leaderSince(kill, 60*time.Second)
	if next == leader {
		t.Fatalf("the killed leader %s leads again", leader.id)
	}
	api2 := gateAPI{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", next.port)}
	again := api2.waitPendingUnless("web-task", emptyCatalogReason, rulesChanged(dir, "web-1,web-2,web-3,web-4"))
	if again.ID != held.ID || again.Destroy != 3 || again.InState != 4 || !again.Created.Equal(held.Created) {
		t.Errorf("the new leader's plan %+v: want the plan %s held by the old leader (3 destroy of 4)", again, held.ID)
	}
	if len(haLines(next.proc(), "held plan restored from the store", "plan="+held.ID)) == 0 {
		t.Errorf("the new leader %s did not log the restored plan %s", next.id, held.ID)
	}
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "after the failover, before approval")
	out, code := runCLI(ctsyncBin, []string{"CTS_ADDRESS=" + api2.base}, "", "task", "approve", "-auto-approve", "-plan", held.ID, "web-task")
	if code != 0 {
		t.Fatalf("ctsync task approve -plan %s on the new leader: exit %d\n%s", held.ID, code, out)
	}
	waitRules(t, dir, "web-1")
	waitIdle(t, next)
	// The new leader ran the task once: the approved plan, made again.
	if runs, heldAgain := len(haLines(next.proc(), "executing task", "task_name=web-task")), haLines(next.proc(), "task held:"); runs != 1 || len(heldAgain) != 0 {
		t.Errorf("the new leader ran the task %d times (want the approved run alone) and held %v", runs, heldAgain)
	}
	c.noOverlap()
}

// (i) The CLI: `ctsync task reject -auto-approve NAME` drops the held
// plan; approving a task with nothing pending fails with a clear message;
// `task approve NAME` answered "no" changes nothing; `task approve
// -auto-approve NAME` applies the held plan and the run records the
// token's name (CTS_TOKEN).
func TestGateCLIApproveReject(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	dir, varFile := newTaskDir(t)
	registerWeb(t, c, 1, 2)
	g := startGated(t, c, gateTask("web", varFile, `
  approval {
    required = true
  }`))
	cli := func(stdin string, args ...string) (string, int) {
		t.Helper()
		return runCLI(ctsyncBin, []string{"CTS_ADDRESS=" + g.base, "CTS_TOKEN=" + gateWriteSecret}, stdin, args...)
	}
	first := g.waitPendingUnless("web", "approval required", rulesChanged(dir, ""))
	if o, code := cli("", "task", "reject", "-auto-approve", "web"); code != 0 || !strings.Contains(o, first.ID) {
		t.Fatalf("task reject (exit %d), want 0 and the plan's id %s:\n%s", code, first.ID, o)
	}
	if code, cur, _ := g.plan("web"); code == http.StatusOK && cur.State == gate.Pending {
		t.Fatalf("task reject left the plan pending: %+v", cur)
	}
	expectRules(t, dir, "", "after task reject")
	if o, code := cli("", "task", "approve", "-auto-approve", "web"); code == 0 ||
		!(strings.Contains(o, "nothing to approve") || strings.Contains(o, "no held plan")) {
		t.Fatalf("task approve with nothing held (exit %d), want non-zero and a message:\n%s", code, o)
	}

	registerWeb(t, c, 3)
	second := g.waitPendingUnless("web", "approval required", rulesChanged(dir, ""), first.ID)
	// Asked, the operator answers no: nothing happens.
	if o, code := cli("no\n", "task", "approve", "web"); code != 0 || !strings.Contains(o, second.ID) || !strings.Contains(o, "approval required") {
		t.Fatalf("task approve answered no (exit %d), want 0 and the plan shown:\n%s", code, o)
	}
	if code, cur, body := g.plan("web"); code != http.StatusOK || cur.ID != second.ID || cur.State != gate.Pending {
		t.Fatalf("after task approve answered no, GET plan: %d %s; want plan %s pending", code, body, second.ID)
	}
	expectRules(t, dir, "", "after task approve answered no")
	o, code := cli("", "task", "approve", "-auto-approve", "web")
	if code != 0 || !strings.Contains(o, second.ID) {
		t.Fatalf("task approve -auto-approve (exit %d), want 0 and the plan's id %s:\n%s", code, second.ID, o)
	}
	waitRules(t, dir, "web-1,web-2,web-3")
	g.waitQuiet("web")
	if evs := g.events("web"); len(evs) == 0 || evs[0].Actor != gateWriteName {
		t.Errorf("the run approved from the CLI does not record the token's name %q: %+v", gateWriteName, evs)
	}
}

// The dashboard's Approve button end to end: headless Chromium signed in
// with the write token shows the task held by max_destroy_percent
// (waiting, with its reason) and its held plan; Approve makes the real
// daemon apply that plan (the deregistered instances' files go) and the
// run records the token's name. Screenshots go to
// $CTSYNC_ARTIFACTS/gate-approve.
func TestGateDashboardApprove(t *testing.T) {
	skipShort(t)
	chromium := findChromium(t)
	shots := artifactsDir(t, "gate-approve")
	c := testutil.StartConsul(t)
	g, dir, p := startEmptyCatalog(t, c, "", "")

	b := newBrowser(t, chromium, shots)
	b.do("open the dashboard", chromedp.Navigate(g.base+"/ui/"))
	b.wait("the token form", `!!document.querySelector('#token-input')`, 30*time.Second)
	b.do("sign in", chromedp.SendKeys(chromedp.CSS("#token-input"), gateWriteSecret), chromedp.Click(chromedp.CSS("#token-submit")))
	b.waitText(row("web")+" td.status", "waiting", 30*time.Second)
	if got := b.text(row("web") + " td.status .held-reason"); got != emptyCatalogReason {
		t.Errorf("the list's reason %q, want %q", got, emptyCatalogReason)
	}
	b.click(row("web") + " td.name a")
	b.waitText("#held-plan #held-id", p.ID, 30*time.Second)
	for sel, want := range map[string]string{"#held-reason": emptyCatalogReason, "#held-counts": "+0 ~0 -3", "#held-plan-text": "web-2"} {
		if got := b.text(sel); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", sel, got, want)
		}
	}
	t.Logf("held: %s", b.shot("01-held"))
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "before the dashboard's approval")

	before := g.eventIDs("web")
	b.click("#approve-plan")
	b.waitText("#message", "Plan "+p.ID+" approved by "+gateWriteName, 30*time.Second)
	waitRules(t, dir, "web-1")
	ev := g.waitNewEvent("web", before, "applied by the dashboard's approval", func(ev store.Event) bool { return ev.Success })
	if ev.Actor != gateWriteName {
		t.Errorf("the run approved from the dashboard records actor %q, want %q", ev.Actor, gateWriteName)
	}
	b.wait("the held plan gone", `!document.querySelector('#held-plan')`, 30*time.Second)
	t.Logf("approved: %s", b.shot("02-approved"))
}

// Spread mode with two members: the task's owner holds its plan; a member
// that does not own the task forwards the held plan's read and its
// approval to the owner, which applies it.
func TestGateSpreadOwnerHolds(t *testing.T) {
	skipShort(t)
	c := newHACluster(t)
	out := t.TempDir()
	for _, id := range []string{"cts-a", "cts-b"} {
		c.add(&haInstance{id: id}, func(in *haInstance) string {
			return spreadHeader(in, c.consul.Addr, "DEBUG", "e2e") + fmt.Sprintf(`
task {
  name      = "gated"
  module    = %q
  variables = { dir = %q }
  approval {
    required = true
  }
  condition "services" {
    names = ["svc-0"]
  }
}
`, module("services_file"), out)
		})
	}
	for _, in := range c.insts {
		in.start(t)
	}
	// Both members up and agreeing on the owner (the task has no instance
	// yet: nothing to hold), then the change.
	var owners map[string]string
	testutil.Eventually(t, 60*time.Second, "both members seeing each other and the same owner", func() bool {
		for _, in := range c.insts {
			code, _, body := haGet(in.port, "/v1/status/cluster")
			if code != http.StatusOK || strings.Count(string(body), `"healthy":true`) != 2 {
				return false
			}
		}
		a, okA := spreadOwners(c.insts[0].port, 1)
		b, okB := spreadOwners(c.insts[1].port, 1)
		owners = a
		return okA && okB && a["gated"] == b["gated"]
	})
	c.register("svc-0-1", "svc-0", 9000)
	var owner, other *haInstance
	for _, in := range c.insts {
		if owners["gated"] == in.id {
			owner = in
		} else {
			other = in
		}
	}
	if owner == nil || other == nil {
		t.Fatalf("owners %v", owners)
	}
	api := gateAPI{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", other.port)}
	p := api.waitPlanUnless("gated", "pending with svc-0-1", func(p gate.Plan) bool {
		return p.State == gate.Pending && p.Reason == "approval required" && strings.Contains(p.Text, "svc-0-1")
	}, func() string {
		if got := haReadServices(out); got != nil && ids(got) == "svc-0-1" {
			return "applied instead of held"
		}
		return ""
	})
	if len(haLines(owner.proc(), "task held: its plan waits for approval", "task_name=gated", "run_id="+p.ID)) == 0 {
		t.Errorf("the plan %s served by %s was not held by the owner %s", p.ID, other.id, owner.id)
	}
	if len(haLines(other.proc(), "task held", "run_id="+p.ID)) != 0 {
		t.Errorf("%s, which does not own the task, held plan %s", other.id, p.ID)
	}
	if code, body := api.decide("gated", p.ID, "approve", ""); code != http.StatusOK {
		t.Fatalf("approve through %s: %d %s", other.id, code, body)
	}
	waitFile(t, out, "svc-0-1", 60*time.Second)
}

// startGatedHACluster starts two members in leader mode whose task has
// approval { max_destroy_percent = 50 } (and extra, HCL put before its
// condition), with web-1..web-4 registered; it returns once the leader
// applied all four and is idle.
func startGatedHACluster(t *testing.T, extra string) (*haCluster, string, *haInstance) {
	t.Helper()
	c := newHACluster(t)
	dir, varFile := newTaskDir(t)
	for _, id := range []string{"cts-a", "cts-b"} {
		c.add(&haInstance{id: id, mod: "per_instance"}, func(in *haInstance) string {
			return strings.Replace(haConfig(in, varFile), "  condition \"services\" {",
				"  approval {\n    max_destroy_percent = 50\n  }\n"+extra+"  condition \"services\" {", 1)
		})
	}
	for _, n := range []int{1, 2, 3, 4} {
		c.register(fmt.Sprintf("web-%d", n), "web", 8000+n)
	}
	for _, in := range c.insts {
		in.start(t)
	}
	leader := c.leading(60 * time.Second)
	waitRules(t, dir, "web-1,web-2,web-3,web-4")
	waitIdle(t, leader)
	return c, dir, leader
}
