package e2e

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	ctsapi "github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/reconcile/reconciletest"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/ui"
)

// TestDashboardRunPageShowsApproval drives the run page in headless
// Chromium (api_auth off): a run that applied a plan approved from the
// dashboard shows the approval (plan id, who, the hold time, the reason)
// and the plan it applied
// and is not "triggered by token dashboard": no token was used; a run
// approved with a token names it, and the approval's note (a plan made
// again after a restart); a targeted run says so; an audit event of the gates shows its
// decision. Screenshots go to $CTSYNC_ARTIFACTS/ui-audit.
func TestDashboardRunPageShowsApproval(t *testing.T) {
	skipShort(t)
	chromium := findChromium(t)
	shots := artifactsDir(t, "ui-audit")

	spec := task.Spec{Name: "firewall", Module: "./fw", Enabled: true, Providers: []string{}, BufferPeriod: &task.BufferPeriod{},
		Condition: task.Condition{Services: &task.ServicesCondition{ServicesSelector: task.ServicesSelector{Names: []string{"web"}}}}}
	st := store.NewMemory(0)
	now := time.Now().UTC()
	const targeted = "targeted 1 of 2,000 resource instances (device_object.instance); full check: no further changes"
	const reason = "plan destroys 1 of 4 resources; with the 2 destroyed within the window (1h): 3 of 4 (max_destroy_percent 50)"
	for _, ev := range []store.Event{
		{ID: "held1", TaskName: "firewall", Kind: store.KindGate, Success: true, StartTime: now.Add(-3 * time.Minute), EndTime: now.Add(-3 * time.Minute),
			Gate: &store.GateDecision{Action: "held", PlanID: "plan-1", Reason: reason, Rule: "max_destroy_percent"}},
		{ID: "run-dash", TaskName: "firewall", Kind: store.KindApply, Success: true, StartTime: now.Add(-time.Minute), EndTime: now,
			Plan: &store.PlanSummary{Destroy: 1}, PlanText: "  # local_file.rule[\"web-4\"] will be destroyed\n" + xssScript + "\nPlan: 0 to add, 0 to change, 1 to destroy.",
			Gate: &store.GateDecision{Action: "approved", PlanID: "plan-1", Reason: reason, Rule: "max_destroy_percent", By: "dashboard", HeldSeconds: 125}},
		{ID: "run-tok", TaskName: "firewall", Kind: store.KindApply, Success: true, StartTime: now, EndTime: now, Actor: "ops",
			Plan: &store.PlanSummary{Destroy: 1},
			Gate: &store.GateDecision{Action: "approved", PlanID: "plan-2", Reason: reason, By: "ops", HeldSeconds: 3, Note: reconcile.ReplannedSame}},
		{ID: "run-fast", TaskName: "firewall", Kind: store.KindApply, Success: true, StartTime: now, EndTime: now, Trigger: "health.service(web)",
			Plan: &store.PlanSummary{Change: 1}, Refresh: "skipped", Targeted: targeted},
	} {
		if err := st.AddEvent(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
	}
	ctrl := reconcile.New(reconcile.Options{Watcher: reconciletest.NewWatcher(), Store: st, MaxParallel: 1,
		NewDriver: func(task.Spec) (driver.Driver, error) { return idleDriver{}, nil }}, []task.Spec{spec})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = ctrl.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	srv, err := ctsapi.New(ctsapi.Options{Controller: ctrl})
	if err != nil {
		t.Fatal(err)
	}
	srv.Handle(ui.Path, ui.Handler())
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)

	b := newBrowser(t, chromium, shots)
	b.do("open the dashboard run approved from it", chromedp.Navigate(ts.URL+"/ui/#/runs/firewall/run-dash"))
	b.waitText("#run-gate-plan", "plan-1", 30*time.Second)
	if got := b.text("#run-actor"); strings.HasPrefix(got, "token") || !strings.HasPrefix(got, "dashboard") {
		t.Errorf("triggered by %q: want the dashboard, no token", got)
	}
	if got := b.text("#run-gate-action"); got != "approved by dashboard after 2m05s held" {
		t.Errorf("the approval %q", got)
	}
	if got := b.text("#run-gate-reason"); got != reason {
		t.Errorf("the reason %q", got)
	}
	if got := b.text("#run-plan-text"); !strings.Contains(got, "will be destroyed") || !strings.Contains(got, xssScript) {
		t.Errorf("the run's plan text %q: want the plan, shown as text", got)
	}
	if got := b.text("#run-log-note"); !strings.HasPrefix(got, "No log") && !strings.Contains(got, "log") {
		t.Errorf("the log note %q", got)
	}
	if got := b.text("#main"); strings.Contains(got, "[object ") {
		t.Errorf("the run page shows an element as a string: %q", got)
	}
	t.Logf("approved from the dashboard: %s", b.shot("01-run-approved"))

	b.do("the run approved with a token", chromedp.Navigate(ts.URL+"/ui/#/runs/firewall/run-tok"))
	b.waitText("#run-gate-plan", "plan-2", 30*time.Second)
	if got := b.text("#run-actor"); got != "token ops" {
		t.Errorf("triggered by %q, want token ops", got)
	}
	if got := b.text("#run-gate-note"); got != reconcile.ReplannedSame {
		t.Errorf("the approval's note %q, want %q", got, reconcile.ReplannedSame)
	}
	b.do("a targeted run", chromedp.Navigate(ts.URL+"/ui/#/runs/firewall/run-fast"))
	b.waitText("#run-targeted", targeted, 30*time.Second)
	b.do("the held audit event", chromedp.Navigate(ts.URL+"/ui/#/runs/firewall/held1"))
	b.waitText("#run-gate-action", "held", 30*time.Second)
	t.Logf("held: %s", b.shot("02-held"))
}
