package reconcile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/reconcile/reconciletest"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// holdDriver is the fake driver with held plans: one resource per service
// instance; a plan counts what it adds and destroys against what the last
// apply left.
type holdDriver struct {
	*fakeDriver
	mu       sync.Mutex
	inState  int
	plans    map[string]int // held plan id → the instances it leads to
	discards []string
	stale    bool   // ApplyPlan answers ErrPlanStale
	json     string // the plans' JSON ("": no resource changes)
	held     int    // PlanHeld calls
	durable  bool   // its plans outlive it (driver.HeldPlan.Durable), as a remote run does
	text     string // added to the plans' text
}

var _ driver.PlanHolder = (*holdDriver)(nil)

func (d *holdDriver) PlanHeld(_ context.Context, run driver.Run, in *task.Inputs) (driver.HeldPlan, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	if !run.Destroy {
		n = len(in.Services)
	}
	c := gate.Counts{Add: max(0, n-d.inState), Destroy: max(0, d.inState-n), InState: d.inState}
	d.plans[run.ID] = n
	d.held++
	js := d.json
	if js == "" {
		js = `{"resource_changes":[]}`
	}
	return driver.HeldPlan{ID: run.ID, Ref: run.ID, Counts: c, Changes: c.Add+c.Destroy > 0, Text: "plan " + run.ID + d.text,
		JSON: []byte(js), Durable: d.durable}, nil
}

func (d *holdDriver) ApplyPlan(ctx context.Context, run driver.Run, p driver.HeldPlan) (driver.Result, error) {
	d.mu.Lock()
	n, ok := d.plans[p.ID]
	delete(d.plans, p.ID)
	stale := d.stale
	d.mu.Unlock()
	if !ok || stale {
		return driver.Result{}, &driver.Error{Op: "apply", Err: driver.ErrPlanStale}
	}
	in := task.Inputs{Services: map[string]task.Service{}}
	for i := range n {
		in.Services[string(rune('a'+i))] = task.Service{}
	}
	res, err := d.fakeDriver.Apply(ctx, run, &in)
	d.mu.Lock()
	d.inState = n
	d.mu.Unlock()
	return res, err
}

func (d *holdDriver) DiscardPlan(_ context.Context, p driver.HeldPlan) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.plans, p.ID)
	d.discards = append(d.discards, p.ID)
	return nil
}

// gateHarness runs one task "fw" with the approval block a on held-plan
// fake drivers, recording the gate events.
type gateHarness struct {
	*harness
	mu     sync.Mutex
	events []gate.Event
	drv    *holdDriver
	json   string // the JSON of the plans of the drivers made from now on
	text   string // added to the text of their plans
	// remote, when set, are the held plans of every driver made from now
	// on (plans that outlive a driver: durable), shared.
	remote map[string]int
}

func startGates(t *testing.T, a *task.Approval) *gateHarness {
	spec := servicesTask("fw", "web")
	spec.Approval = a
	return startGatesWith(t, spec, nil)
}

// startGatesWith runs the task spec (named fw); more adjusts the options.
func startGatesWith(t *testing.T, spec task.Spec, more func(*Options)) *gateHarness {
	g := &gateHarness{}
	g.harness = start(t, 2, nil, spec, func(o *Options) {
		if more != nil {
			more(o)
		}
		o.OnGate = func(ev gate.Event) {
			g.mu.Lock()
			g.events = append(g.events, ev)
			g.mu.Unlock()
		}
		o.NewDriver = func(s task.Spec) (driver.Driver, error) {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.drv = &holdDriver{fakeDriver: &fakeDriver{name: s.Name, rec: g.rec}, plans: map[string]int{}, json: g.json, text: g.text}
			if g.remote != nil {
				g.drv.plans, g.drv.durable = g.remote, true
			}
			return g.drv, nil
		}
	})
	return g
}

func (g *gateHarness) actions() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, ev := range g.events {
		out = append(out, ev.Action)
	}
	return out
}

func (g *gateHarness) set(n int) {
	var svcs []task.Service
	for i := range n {
		svcs = append(svcs, inst(string(rune('1'+i)), "web"))
	}
	g.w.Set(healthKey("web"), svcs)
}

// waitHeld waits for a pending plan of fw other than not.
func (g *gateHarness) waitHeld(t *testing.T, not string) gate.Plan {
	t.Helper()
	var p gate.Plan
	testutil.WaitFor(t, "a held plan", func() bool {
		var err error
		p, err = g.ctrl.HeldPlan("fw")
		return err == nil && p.State == gate.Pending && p.ID != not
	})
	testutil.WaitFor(t, "the task held", func() bool {
		g.ctrl.mu.Lock()
		defer g.ctrl.mu.Unlock()
		return g.ctrl.tasks["fw"].lc.phase == phaseHeld
	})
	return p
}

func TestGateHoldsAndApprovalAppliesThatPlan(t *testing.T) {
	zero := 0
	g := startGates(t, &task.Approval{MaxDestroy: &zero})
	g.set(3)
	g.waitApplied(t, "fw") // adds only: let through
	g.set(1)
	p := g.waitHeld(t, "")
	if p.Reason != "plan destroys 2 of 3 resources (max_destroy 0)" || p.Destroy != 2 || p.Fingerprint == "" {
		t.Fatalf("held plan %+v", p)
	}
	g.noApply(t)
	ctx := context.Background()
	if err := g.ctrl.Approve(ctx, "fw", "other", "ops"); !errors.Is(err, gate.ErrStalePlan) {
		t.Fatalf("approve of another id: %v, want ErrStalePlan", err)
	}
	if err := g.ctrl.Approve(ctx, "nope", p.ID, "ops"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("approve of an unknown task: %v", err)
	}
	if err := g.ctrl.Approve(WithActor(ctx, "ops"), "fw", p.ID, "ops"); err != nil { // the token ops
		t.Fatal(err)
	}
	g.waitApplied(t, "fw")
	var evs []store.Event // the driver applied; the run is recorded after
	testutil.WaitFor(t, "the approved run recorded", func() bool { evs = runEvents(g.st.Events("fw")); return len(evs) == 2 })
	if evs[0].Actor != "ops" || evs[0].Plan == nil || evs[0].Plan.Destroy != 2 || !evs[0].Success {
		t.Fatalf("the approved run's event %+v", evs[0])
	}
	if evs[0].PlanText != p.Text || evs[1].PlanText != "" && evs[1].PlanText == p.Text {
		t.Fatalf("the runs' plan text %q, %q: want the approved plan's %q on the approved run", evs[0].PlanText, evs[1].PlanText, p.Text)
	}
	// The run names the approval: the plan, its reason, who, the hold time.
	if d := evs[0].Gate; d == nil || d.Action != gate.ActionApproved || d.PlanID != p.ID || d.Reason != p.Reason || d.By != "ops" || d.HeldSeconds <= 0 {
		t.Fatalf("the approved run's gate decision %+v", evs[0].Gate)
	}
	// The audit trail: held, then approved, each an event of kind gate
	// with the plan's id, not runs.
	audit := gateEvents(g.st.Events("fw"))
	if len(audit) != 2 || audit[1].Gate.Action != gate.ActionHeld || audit[0].Gate.Action != gate.ActionApproved ||
		audit[1].Gate.PlanID != p.ID || audit[0].Gate.PlanID != p.ID || audit[1].Gate.Reason != p.Reason ||
		audit[0].Gate.By != "ops" || audit[0].Gate.HeldSeconds <= 0 {
		t.Fatalf("audit events %+v", audit)
	}
	if st := store.Status(g.st.Events("fw")); st != "successful" {
		t.Fatalf("status %q with audit events, want successful", st)
	}
	got, _ := g.ctrl.HeldPlan("fw")
	if got.State != gate.Approved || got.DecidedBy != "ops" {
		t.Fatalf("after approval: %+v", got)
	}
	if err := g.ctrl.Approve(ctx, "fw", p.ID, "ops"); !errors.Is(err, gate.ErrStalePlan) {
		t.Fatalf("second approval: %v, want ErrStalePlan", err)
	}
	g.noApply(t)
	if a := g.actions(); len(a) != 2 || a[0] != gate.ActionHeld || a[1] != gate.ActionApproved {
		t.Fatalf("gate events %v", a)
	}
}

// An approval is answered once it is recorded, not after the apply: the
// apply goes on on a worker, and the task is not free until it ends.
func TestGateApproveAnswersBeforeTheApply(t *testing.T) {
	zero := 0
	g := startGates(t, &task.Approval{MaxDestroy: &zero})
	g.set(3)
	g.waitApplied(t, "fw")
	g.set(1)
	p := g.waitHeld(t, "")
	g.drv.mu.Lock()
	g.drv.gate = make(chan struct{}) // the apply blocks until closed
	gateCh := g.drv.gate
	g.drv.mu.Unlock()
	answered := make(chan error, 1)
	go func() { answered <- g.ctrl.Approve(context.Background(), "fw", p.ID, "ops") }()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testutil.Scale(30 * time.Second)):
		close(gateCh)
		t.Fatal("Approve did not answer while the apply was blocked")
	}
	got, _ := g.ctrl.HeldPlan("fw")
	if got.State != gate.Approved || got.DecidedBy != "ops" {
		t.Fatalf("after the answer: %+v, want approved by ops", got)
	}
	if st, _ := g.ctrl.Task("fw"); !st.Active {
		t.Errorf("the task is not active while the approved plan is applied: %+v", st)
	}
	close(gateCh)
	g.waitApplied(t, "fw")
	testutil.WaitFor(t, "the task free again", func() bool {
		st, _ := g.ctrl.Task("fw")
		return !st.Active
	})
}

func TestGateChangeSupersedesHeldPlan(t *testing.T) {
	g := startGates(t, &task.Approval{Required: true})
	g.set(2)
	first := g.waitHeld(t, "")
	g.set(3)
	second := g.waitHeld(t, first.ID)
	var se *gate.SupersededError
	if err := g.ctrl.Approve(context.Background(), "fw", first.ID, "ops"); !errors.As(err, &se) || se.Newer != second.ID {
		t.Fatalf("approve of the superseded plan: %v, want SupersededError naming %s", err, second.ID)
	}
	g.noApply(t)
	// The desired state moves without a notification having run yet: the
	// approval supersedes the plan and holds a new one.
	g.ctrl.mu.Lock()
	g.ctrl.gk.plans[g.ctrl.tasks["fw"]].plan.Fingerprint = "older"
	g.ctrl.tasks["fw"].lc.held.plan.Fingerprint = "older"
	g.ctrl.mu.Unlock()
	err := g.ctrl.Approve(context.Background(), "fw", second.ID, "ops")
	if !errors.As(err, &se) || se.Newer == "" || se.Newer == second.ID {
		t.Fatalf("approve of a plan whose desired state moved: %v", err)
	}
	third := g.waitHeld(t, second.ID)
	if third.ID != se.Newer {
		t.Fatalf("held %s, the error names %s", third.ID, se.Newer)
	}
	// A plan the driver finds stale is superseded too.
	g.drv.mu.Lock()
	g.drv.stale = true
	g.drv.mu.Unlock()
	// The approval is answered once recorded: Terraform finds the plan
	// stale after the answer, and a new plan supersedes it.
	if err := g.ctrl.Approve(context.Background(), "fw", third.ID, "ops"); err != nil {
		t.Fatalf("approve of a plan the driver finds stale: %v, want it recorded", err)
	}
	fourth := g.waitHeld(t, third.ID)
	g.noApply(t)
	if err := g.ctrl.Approve(context.Background(), "fw", third.ID, "ops"); !errors.As(err, &se) || se.Newer != fourth.ID {
		t.Fatalf("approve of the stale plan again: %v, want SupersededError naming %s", err, fourth.ID)
	}
	g.drv.mu.Lock()
	g.drv.stale = false
	g.drv.mu.Unlock()
	if err := g.ctrl.Approve(context.Background(), "fw", fourth.ID, "ops"); err != nil {
		t.Fatal(err)
	}
	g.waitApplied(t, "fw")
}

func TestGateRejectWaitsForTheNextChange(t *testing.T) {
	g := startGates(t, &task.Approval{Required: true})
	g.set(2)
	p := g.waitHeld(t, "")
	if err := g.ctrl.Reject(context.Background(), "fw", p.ID, "ops"); err != nil {
		t.Fatal(err)
	}
	got, _ := g.ctrl.HeldPlan("fw")
	if got.State != gate.Rejected || got.DecidedBy != "ops" {
		t.Fatalf("after reject: %+v", got)
	}
	g.drv.mu.Lock()
	discards := len(g.drv.discards)
	g.drv.mu.Unlock()
	if discards != 1 {
		t.Fatalf("%d plans discarded, want 1", discards)
	}
	// The same desired state again: not planned again.
	g.set(2)
	g.noApply(t)
	if got, _ := g.ctrl.HeldPlan("fw"); got.ID != p.ID {
		t.Fatalf("the rejected desired state was planned again: %+v", got)
	}
	g.set(3)
	next := g.waitHeld(t, p.ID)
	if next.Add != 3 {
		t.Fatalf("next plan %+v", next)
	}
	if a := g.actions(); len(a) != 3 || a[1] != gate.ActionRejected {
		t.Fatalf("gate events %v", a)
	}
}

func TestGateExpiryDropsThePlan(t *testing.T) {
	clk := reconciletest.NewClock()
	spec := servicesTask("fw", "web")
	spec.Approval = &task.Approval{Required: true, Expire: task.Duration(time.Hour)}
	g := startGatesWith(t, spec, func(o *Options) { o.Clock = clk })
	g.set(2)
	p := g.waitHeld(t, "")
	if p.Expires.Sub(p.Created) != time.Hour {
		t.Fatalf("held plan expires %v, created %v", p.Expires, p.Created)
	}
	if !clk.WaitPending(1, 10*time.Second) {
		t.Fatal("no expiry timer")
	}
	clk.Advance(time.Hour)
	testutil.WaitFor(t, "the plan expired, the task idle", func() bool {
		got, _ := g.ctrl.HeldPlan("fw")
		g.ctrl.mu.Lock()
		defer g.ctrl.mu.Unlock()
		e := g.ctrl.tasks["fw"]
		return got.State == gate.Expired && e.lc.phase == phaseIdle && strings.Contains(e.lc.waiting, "expired")
	})
	if err := g.ctrl.Approve(context.Background(), "fw", p.ID, "ops"); !errors.Is(err, gate.ErrStalePlan) {
		t.Fatalf("approve of an expired plan: %v", err)
	}
	g.set(2) // the same desired state: not planned again
	g.noApply(t)
	g.set(3)
	g.waitHeld(t, p.ID)
	if a := g.actions(); len(a) != 3 || a[1] != gate.ActionExpired {
		t.Fatalf("gate events %v", a)
	}
	var expired []store.Event
	for _, ev := range gateEvents(g.st.Events("fw")) {
		if ev.Gate.Action == gate.ActionExpired {
			expired = append(expired, ev)
		}
	}
	if len(expired) != 1 || expired[0].Gate.PlanID != p.ID || expired[0].Gate.Reason != p.Reason {
		t.Fatalf("the expired audit events %+v", expired)
	}
}

// A member that stops leading drops the plan in memory, not its record:
// leading again, it holds the same plan (same id) and plans nothing.
func TestGateStepDownKeepsHeldPlanRecord(t *testing.T) {
	g := startGates(t, &task.Approval{Required: true})
	g.set(2)
	p := g.waitHeld(t, "")
	testutil.WaitFor(t, "the held plan's record", func() bool { r, ok := g.st.HeldPlan("fw"); return ok && r.ID == p.ID })
	g.ctrl.SetActive(false)
	if _, err := g.ctrl.HeldPlan("fw"); !errors.Is(err, gate.ErrNoPlan) {
		t.Fatalf("a follower shows a held plan: %v", err)
	}
	g.ctrl.SetActive(true)
	got := g.waitHeld(t, "")
	g.noApply(t)
	if got.ID != p.ID || got.Reason != p.Reason || got.Text != p.Text {
		t.Fatalf("after leading again: %+v, want plan %s", got, p.ID)
	}
	if r, ok := g.st.HeldPlan("fw"); !ok || r.ID != p.ID {
		t.Fatalf("the record after leading again: %+v %v", r, ok)
	}
	if a := g.actions(); len(a) != 1 || a[0] != gate.ActionHeld {
		t.Fatalf("gate events %v: want only the first hold", a)
	}
}

func TestGatePolicyDenies(t *testing.T) {
	dir := t.TempDir()
	rego := filepath.Join(dir, "fw.rego")
	if err := os.WriteFile(rego, []byte("package ctsync\n\ndeny contains msg if {\n\tinput.task.name == \"fw\"\n\tmsg := sprintf(\"no changes to %s (%s)\", [input.task.name, input.trigger])\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := servicesTask("fw", "web")
	spec.Policy = &task.Policy{Files: []string{rego}}
	g := startGatesWith(t, spec, nil)
	g.set(1)
	var evs []store.Event
	testutil.WaitFor(t, "the denied run recorded", func() bool { evs = g.st.Events("fw"); return len(evs) == 1 })
	ev := evs[0]
	if ev.Success || ev.Kind != store.KindPolicy || ev.Error == nil || !strings.Contains(ev.Error.Message, "no changes to fw") || !ev.Terminal {
		t.Fatalf("denied run %+v (error %+v)", ev, ev.Error)
	}
	if d := ev.Gate; d == nil || d.Action != gate.ActionDenied || d.PlanID != ev.ID || len(d.Messages) != 1 || !strings.Contains(d.Messages[0], "no changes to fw") {
		t.Fatalf("the denied run's gate decision %+v", ev.Gate)
	}
	g.noApply(t)
	if _, err := g.ctrl.HeldPlan("fw"); !errors.Is(err, gate.ErrNoPlan) {
		t.Fatalf("a denied plan is held: %v", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.events) != 1 || g.events[0].Kind != gate.EventPolicy || g.events[0].Action != gate.ActionDenied || len(g.events[0].Messages) != 1 {
		t.Fatalf("gate events %+v", g.events)
	}
	g.drv.mu.Lock()
	defer g.drv.mu.Unlock()
	if len(g.drv.plans) != 0 || len(g.drv.discards) != 1 {
		t.Fatalf("the denied plan was not discarded: %v held, %v discarded", g.drv.plans, g.drv.discards)
	}
}

func TestGateOnceReportsHeldRun(t *testing.T) {
	w := newFakeWatcher()
	w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	spec := servicesTask("fw", "web")
	spec.Approval = &task.Approval{Required: true}
	rec := newRecorder()
	var drv *holdDriver
	c := New(Options{Watcher: w, Store: store.NewMemory(0), MaxParallel: 1, NewDriver: func(s task.Spec) (driver.Driver, error) {
		drv = &holdDriver{fakeDriver: &fakeDriver{name: s.Name, rec: rec}, plans: map[string]int{}}
		return drv, nil
	}}, []task.Spec{spec})
	w.Notify = c.Notify
	for _, inspect := range []bool{false, true} {
		var out bytes.Buffer
		err := c.RunOnce(context.Background(), nil, inspect, 10*time.Second, &out)
		var held *HeldError
		if !errors.As(err, &held) && !strings.Contains(fmtErr(err), "held for approval: approval required") {
			t.Fatalf("inspect %v: %v, want the held run's error", inspect, err)
		}
		if !strings.Contains(out.String(), "fw      held") && !strings.Contains(out.String(), "fw    held") {
			t.Errorf("inspect %v: the summary does not say held:\n%s", inspect, out.String())
		}
		if inspect && !strings.Contains(out.String(), "==> Plan for task \"fw\"") {
			t.Errorf("-inspect does not show the held plan:\n%s", out.String())
		}
	}
	if n := rec.count("fw"); n != 0 {
		t.Fatalf("%d applies", n)
	}
	if len(drv.plans) != 0 {
		t.Fatalf("plans left held: %v", drv.plans)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// waitIdle waits until fw is neither queued nor running.
func (g *gateHarness) waitIdle(t *testing.T) {
	t.Helper()
	testutil.WaitFor(t, "fw idle", func() bool {
		st, err := g.ctrl.Task("fw")
		return err == nil && !st.Active
	})
}

func (g *gateHarness) inState() int {
	g.drv.mu.Lock()
	defer g.drv.mu.Unlock()
	return g.drv.inState
}

// A deletion with destroy goes through the approval rules: its destroy plan
// is held (the task kept, disabled, not deleted) until approved, and only
// the approval destroys and deletes the task.
func TestGateDestroyHeldUntilApproved(t *testing.T) {
	pct := 50
	spec := servicesTask("fw", "web")
	spec.Approval = &task.Approval{MaxDestroyPercent: &pct}
	destroyed := make(chan string, 1)
	g := startGatesWith(t, spec, func(o *Options) { o.OnDestroyed = func(name string) { destroyed <- name } })
	g.set(3)
	g.waitApplied(t, "fw")
	g.waitIdle(t)
	ctx := context.Background()
	var dh *DestroyHeldError
	if err := g.ctrl.Delete(ctx, "fw", true); !errors.As(err, &dh) {
		t.Fatalf("delete with destroy: %v, want DestroyHeldError", err)
	}
	p := dh.Plan
	if !p.DeletesTask || p.Destroy != 3 || p.State != gate.Pending ||
		p.Reason != "task deletion with destroy: plan destroys 3 of 3 resources (max_destroy_percent 50)" {
		t.Fatalf("held destroy plan %+v", p)
	}
	if g.inState() != 3 {
		t.Fatal("the held destroy destroyed")
	}
	st, err := g.ctrl.Task("fw")
	if err != nil || st.Spec.Enabled || st.Deleting {
		t.Fatalf("task while its destroy is held: %+v %v; want kept, disabled", st, err)
	}
	if err := g.ctrl.RunNow(ctx, "fw"); !errors.Is(err, ErrActive) {
		t.Errorf("run while the destroy is held: %v, want ErrActive", err)
	}
	if err := g.ctrl.Delete(ctx, "fw", true); !errors.As(err, &dh) || dh.Plan.ID != p.ID {
		t.Errorf("second delete with destroy: %v, want the same held plan %s", err, p.ID)
	}
	if err := g.ctrl.Approve(ctx, "fw", p.ID, "ops"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the task deleted", func() bool {
		_, err := g.ctrl.Task("fw")
		return errors.Is(err, ErrNotFound)
	})
	if g.inState() != 0 {
		t.Fatal("the approved destroy did not destroy")
	}
	select {
	case name := <-destroyed:
		if name != "fw" {
			t.Fatalf("OnDestroyed(%q)", name)
		}
	case <-time.After(testutil.Scale(30 * time.Second)):
		t.Fatal("OnDestroyed not called")
	}
}

// A rejected destroy keeps the task and its infrastructure, enabled again.
func TestGateDestroyRejectedKeepsTheTask(t *testing.T) {
	g := startGates(t, &task.Approval{Required: true})
	g.set(2)
	p := g.waitHeld(t, "")
	if err := g.ctrl.Approve(context.Background(), "fw", p.ID, "ops"); err != nil {
		t.Fatal(err)
	}
	g.waitApplied(t, "fw")
	g.waitIdle(t)
	var dh *DestroyHeldError
	if err := g.ctrl.Delete(context.Background(), "fw", true); !errors.As(err, &dh) || dh.Plan.Reason != "task deletion with destroy: approval required" {
		t.Fatalf("delete with destroy under approval.required: %v", err)
	}
	if err := g.ctrl.Reject(context.Background(), "fw", dh.Plan.ID, "ops"); err != nil {
		t.Fatal(err)
	}
	st, err := g.ctrl.Task("fw")
	if err != nil || !st.Spec.Enabled {
		t.Fatalf("after the rejection: %+v %v; want the task kept, enabled", st, err)
	}
	if g.inState() != 2 {
		t.Fatal("the rejected destroy destroyed")
	}
	// Deleted without destroy, the task goes and its infrastructure stays.
	if err := g.ctrl.Delete(context.Background(), "fw", false); err != nil {
		t.Fatal(err)
	}
	if g.inState() != 2 {
		t.Fatal("a deletion without destroy destroyed")
	}
}

// RunNow on a task whose plan is held plans again: the new plan, whose id
// is the run's (WithRunID), is held and RunNow says so (HeldError), never
// that the run applied.
func TestGateRunNowHeldNamesTheRun(t *testing.T) {
	g := startGates(t, &task.Approval{Required: true})
	g.set(2)
	first := g.waitHeld(t, "")
	ctx := WithRunID(context.Background(), "run-from-api")
	var held *HeldError
	if err := g.ctrl.RunNow(ctx, "fw"); !errors.As(err, &held) || held.Plan != "run-from-api" || held.Reason != "approval required" {
		t.Fatalf("RunNow of a held task: %v, want HeldError naming plan run-from-api", err)
	}
	p := g.waitHeld(t, first.ID)
	if p.ID != "run-from-api" {
		t.Fatalf("held plan %s, want the run's id", p.ID)
	}
	g.noApply(t)
}

// The policy judges a deletion's destroy plan too: a denied destroy
// destroys nothing, fails the deletion and keeps the task.
func TestGatePolicyDeniesDestroy(t *testing.T) {
	dir := t.TempDir()
	rego := filepath.Join(dir, "fw.rego")
	if err := os.WriteFile(rego, []byte("package ctsync\n\ndeny contains \"no destroy through the api\" if input.trigger == \"api\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := servicesTask("fw", "web")
	spec.Policy = &task.Policy{Files: []string{rego}}
	g := startGatesWith(t, spec, nil)
	g.set(2)
	g.waitApplied(t, "fw")
	g.waitIdle(t)
	err := g.ctrl.Delete(context.Background(), "fw", true)
	if err == nil || !strings.Contains(err.Error(), "no destroy through the api") {
		t.Fatalf("delete with destroy denied by the policy: %v", err)
	}
	if _, err := g.ctrl.Task("fw"); err != nil {
		t.Fatalf("the task is gone after a denied destroy: %v", err)
	}
	if g.inState() != 2 {
		t.Fatal("the denied destroy destroyed")
	}
	if ev := g.st.Events("fw")[0]; ev.Kind != store.KindDestroy || ev.Success {
		t.Fatalf("the denied destroy's event %+v", ev)
	}
}

// The trickle of issue 37: instances leaving one at a time, each applied
// before the next leaves, are judged with the destroys applied within
// approval.window: max_destroy_percent 50 holds the 6th of 10, not the
// 10th, and the held plan names the window's counts.
func TestGateWindowHoldsTheTrickle(t *testing.T) {
	half := 50
	g := startGates(t, &task.Approval{MaxDestroyPercent: &half}) // the default window, 1h
	g.set(10)
	g.waitApplied(t, "fw")
	for n := 9; n >= 5; n-- {
		g.set(n)
		testutil.WaitFor(t, fmt.Sprintf("%d instances applied", n), func() bool { return g.inState() == n })
		g.waitIdle(t)
	}
	g.set(4) // the 6th to leave: 6 of 10 within the window
	p := g.waitHeld(t, "")
	if p.Rule != gate.RuleMaxDestroyPercent || p.Window == nil || p.Window.Destroyed != 5 || p.Window.HighWater != 10 || p.Destroy != 1 {
		t.Fatalf("held plan %+v (window %+v)", p, p.Window)
	}
	if g.inState() != 5 {
		t.Fatalf("in state %d, want 5: the held plan was applied", g.inState())
	}
	// Approved, the window starts again from what that apply left.
	if err := g.ctrl.Approve(context.Background(), "fw", p.ID, "ops"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the approved plan applied", func() bool { return g.inState() == 4 })
	g.waitIdle(t)
	// Approved without a token (api_auth off): the run names no token, its
	// gate decision names who approved.
	var run store.Event
	testutil.WaitFor(t, "the approved run recorded", func() bool {
		evs := runEvents(g.st.Events("fw"))
		run = evs[0]
		return run.Gate != nil
	})
	if run.Actor != "" || run.Gate.By != "ops" || run.Gate.PlanID != p.ID || run.Gate.Rule != gate.RuleMaxDestroyPercent {
		t.Fatalf("the approved run %+v, gate %+v: want no actor, approved by ops", run, run.Gate)
	}
	g.set(3)
	testutil.WaitFor(t, "3 instances applied", func() bool { return g.inState() == 3 })
}

// runEvents are the events that are runs (newest first).
func runEvents(evs []store.Event) []store.Event {
	var out []store.Event
	for _, ev := range evs {
		if ev.IsRun() {
			out = append(out, ev)
		}
	}
	return out
}

// gateEvents are the gates' audit events (newest first).
func gateEvents(evs []store.Event) []store.Event {
	var out []store.Event
	for _, ev := range evs {
		if ev.Kind == store.KindGate && ev.Gate != nil {
			out = append(out, ev)
		}
	}
	return out
}

// Every approval decision is in the task's history with the plan's id:
// rejected (by whom, after how long), expired, superseded (by which plan);
// a policy's deny is its run's gate decision.
func TestGateAuditTrail(t *testing.T) {
	zero := 0
	g := startGates(t, &task.Approval{MaxDestroy: &zero})
	g.set(3)
	g.waitApplied(t, "fw")
	g.set(1)
	p1 := g.waitHeld(t, "")
	g.set(2) // a change: a new plan supersedes p1
	p2 := g.waitHeld(t, p1.ID)
	if err := g.ctrl.Reject(context.Background(), "fw", p2.ID, "ops"); err != nil {
		t.Fatal(err)
	}
	var audit []store.Event
	testutil.WaitFor(t, "held, superseded, held, rejected", func() bool {
		audit = gateEvents(g.st.Events("fw"))
		return len(audit) == 4
	})
	want := []struct{ action, plan string }{{gate.ActionRejected, p2.ID}, {gate.ActionHeld, p2.ID}, {gate.ActionSuperseded, p1.ID}, {gate.ActionHeld, p1.ID}}
	for i, w := range want {
		if d := audit[i].Gate; d.Action != w.action || d.PlanID != w.plan {
			t.Fatalf("audit event %d: %+v, want %s of %s (all: %+v)", i, d, w.action, w.plan, audit)
		}
	}
	if d := audit[0].Gate; d.By != "ops" || d.HeldSeconds <= 0 || d.Reason != p2.Reason {
		t.Fatalf("the rejection %+v", d)
	}
	if d := audit[2].Gate; d.SupersededBy != p2.ID {
		t.Fatalf("the supersession %+v, want superseded by %s", d, p2.ID)
	}
	if st := store.Status(g.st.Events("fw")); st != "successful" {
		t.Fatalf("status %q with audit events, want successful (they are not runs)", st)
	}
}
