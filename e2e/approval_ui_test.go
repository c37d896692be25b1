package e2e

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	ctsapi "github.com/ctsync/ctsync/internal/api"
	ctsconfig "github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/gate/gatetest"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/reconcile/reconciletest"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
	"github.com/ctsync/ctsync/internal/ui"
)

// idleDriver never runs: the task's watched data never arrives.
type idleDriver struct{}

func (idleDriver) Init(context.Context) error { return nil }
func (idleDriver) Plan(context.Context, driver.Run, *task.Inputs) (driver.Result, error) {
	return driver.Result{}, nil
}
func (idleDriver) Apply(context.Context, driver.Run, *task.Inputs) (driver.Result, error) {
	return driver.Result{}, nil
}
func (idleDriver) Destroy(context.Context, driver.Run) (driver.Result, error) {
	return driver.Result{}, nil
}
func (idleDriver) Forget(context.Context) error { return nil }

// TestDashboardApprovesHeldPlan drives the dashboard in headless Chromium
// against the API with api_auth on and an in-memory stand-in for the
// controller's held plans (gatetest; the held plans of a real run come
// with the controller): the token form, the held task waiting in the list
// with its reason, the task page showing the plan (reason, counts, Consul
// changes, text; hostile text shown as text), Approve reaching the gates
// with the token's name through the same-origin write rules, a superseded
// plan answered with the newer one, and Reject. Screenshots go to
// $CTSYNC_ARTIFACTS/ui-approval.
func TestDashboardApprovesHeldPlan(t *testing.T) {
	skipShort(t)
	chromium := findChromium(t)
	shots := artifactsDir(t, "ui-approval")

	spec := task.Spec{Name: "firewall", Module: "./fw", Enabled: true, Providers: []string{}, BufferPeriod: &task.BufferPeriod{},
		Condition: task.Condition{Services: &task.ServicesCondition{ServicesSelector: task.ServicesSelector{Names: []string{"web"}}}}}
	// The task applied once before its plan was held.
	st := store.NewMemory(0)
	if err := st.AddEvent(t.Context(), store.Event{ID: "r1", TaskName: "firewall", Kind: store.KindApply, Success: true,
		StartTime: time.Now().Add(-time.Minute), EndTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	ctrl := reconcile.New(reconcile.Options{Watcher: reconciletest.NewWatcher(), Store: st, MaxParallel: 1,
		NewDriver: func(task.Spec) (driver.Driver, error) { return idleDriver{}, nil }}, []task.Spec{spec})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = ctrl.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	fa := gatetest.New()
	const secret = "ops-secret-0123456789abcdef"
	srv, err := ctsapi.New(ctsapi.Options{Controller: ctrl, Approvals: fa,
		Tokens: []ctsconfig.APIToken{{Name: "ops", Secret: secret, Access: ctsconfig.AccessWrite}}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Handle(ui.Path, ui.Handler())
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)

	p := fa.Hold(gate.Plan{Task: "firewall", Reason: "plan destroys 12 of 14 resources (max_destroy 5)",
		Expires: time.Now().Add(24 * time.Hour), Destroy: 12, InState: 14,
		Text:    "  # aws_security_group_rule.web[\"web-1\"] will be destroyed\n" + xssScript + "\nPlan: 0 to add, 0 to change, 12 to destroy.",
		Changes: []string{"web: 12 removed (web-1, web-2, ...)", xssImg}})

	b := newBrowser(t, chromium, shots)
	b.do("open the dashboard", chromedp.Navigate(ts.URL+"/ui/"))
	b.wait("the token form", `!!document.querySelector('#token-input')`, 30*time.Second)
	b.do("sign in", chromedp.SendKeys(chromedp.CSS("#token-input"), secret), chromedp.Click(chromedp.CSS("#token-submit")))

	// The list: waiting, with the reason.
	b.waitText(row("firewall")+" td.status", "waiting", 30*time.Second)
	if got := b.text(row("firewall") + " td.status .held-reason"); got != p.Reason {
		t.Errorf("the list's reason %q", got)
	}
	if got := b.text(row("firewall") + " td.next-run"); got != "awaiting approval" {
		t.Errorf("next run %q", got)
	}
	// The summary counts it as waiting, not successful.
	if got := b.text("#summary"); !strings.Contains(got, "0 successful") || !strings.Contains(got, "1 waiting") {
		t.Errorf("the summary with a held plan: %q", got)
	}
	t.Logf("list: %s", b.shot("01-list-waiting"))

	// The task page: the plan whole.
	b.click(row("firewall") + " td.name a")
	b.waitText("#held-plan #held-id", p.ID, 30*time.Second)
	for sel, want := range map[string]string{
		"#held-reason": p.Reason, "#held-counts": "+0 ~0 -12", "#held-changes": "web: 12 removed",
		"#held-plan-text": "will be destroyed", "#waiting-reason": p.Reason,
	} {
		if got := b.text(sel); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", sel, got, want)
		}
	}
	if got := b.text("#held-plan-text"); !strings.Contains(got, xssScript) {
		t.Errorf("the plan text is not shown as text: %q", got)
	}
	if got := b.text("#held-changes"); !strings.Contains(got, xssImg) {
		t.Errorf("a Consul change is not shown as text: %q", got)
	}
	t.Logf("task page: %s", b.shot("02-held-plan"))

	// Approve: the gates get it, with the token's name.
	b.click("#approve-plan")
	select {
	case d := <-fa.Decisions:
		if d != (gatetest.Decision{Task: "firewall", ID: p.ID, Who: "ops", Approve: true}) {
			t.Fatalf("decision %+v", d)
		}
	case <-time.After(testutil.Scale(30 * time.Second)):
		b.fail("the approval did not reach the gates; calls %q", fa.Calls())
	}
	b.waitText("#message", "Plan "+p.ID+" approved by ops", 30*time.Second)
	b.wait("the held plan gone", `!document.querySelector('#held-plan')`, 30*time.Second)
	t.Logf("approved: %s", b.shot("03-approved"))

	// A plan whose desired state moved on: refused, the newer one shown.
	p2 := fa.Hold(gate.Plan{Task: "firewall", Reason: "approval required", Add: 1, Text: "Plan: 1 to add, 0 to change, 0 to destroy."})
	fa.Move("firewall")
	b.do("reload", chromedp.Reload())
	b.waitText("#held-plan #held-id", p2.ID, 30*time.Second)
	b.click("#approve-plan")
	b.waitText("#message", "superseded by plan", 30*time.Second)
	newer, err := fa.HeldPlan("firewall")
	if err != nil || newer.ID == p2.ID || newer.State != gate.Pending {
		t.Fatalf("after the supersede: %+v %v", newer, err)
	}
	b.waitText("#held-plan #held-id", newer.ID, 30*time.Second)
	t.Logf("superseded: %s", b.shot("04-superseded"))

	// Reject the newer one.
	b.click("#reject-plan")
	select {
	case d := <-fa.Decisions:
		if d != (gatetest.Decision{Task: "firewall", ID: newer.ID, Who: "ops", Approve: false}) {
			t.Fatalf("decision %+v", d)
		}
	case <-time.After(testutil.Scale(30 * time.Second)):
		b.fail("the rejection did not reach the gates; calls %q", fa.Calls())
	}
	b.waitText("#message", "rejected by ops", 30*time.Second)
	if d := b.dialogCount(); len(d) > 0 {
		t.Errorf("dialogs opened: %q", d)
	}
}
