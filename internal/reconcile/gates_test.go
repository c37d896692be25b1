package reconcile

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/gate"
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
	stale    bool // ApplyPlan answers ErrPlanStale
}

var _ driver.PlanHolder = (*holdDriver)(nil)

func (d *holdDriver) PlanHeld(_ context.Context, run driver.Run, in *task.Inputs) (driver.HeldPlan, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := len(in.Services)
	c := gate.Counts{Add: max(0, n-d.inState), Destroy: max(0, d.inState-n), InState: d.inState}
	d.plans[run.ID] = n
	return driver.HeldPlan{ID: run.ID, Ref: run.ID, Counts: c, Changes: c.Add+c.Destroy > 0, Text: "plan " + run.ID,
		JSON: []byte(`{"resource_changes":[]}`)}, nil
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
}

func startGates(t *testing.T, a *task.Approval) *gateHarness {
	g := &gateHarness{}
	spec := servicesTask("fw", "web")
	spec.Approval = a
	g.harness = start(t, 2, nil, spec, func(o *Options) {
		o.OnGate = func(ev gate.Event) {
			g.mu.Lock()
			g.events = append(g.events, ev)
			g.mu.Unlock()
		}
		o.NewDriver = func(s task.Spec) (driver.Driver, error) {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.drv = &holdDriver{fakeDriver: &fakeDriver{name: s.Name, rec: g.rec}, plans: map[string]int{}}
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
	if err := g.ctrl.Approve(ctx, "fw", p.ID, "ops"); err != nil {
		t.Fatal(err)
	}
	g.waitApplied(t, "fw")
	evs := g.st.Events("fw")
	if evs[0].Actor != "ops" || evs[0].Plan == nil || evs[0].Plan.Destroy != 2 || !evs[0].Success {
		t.Fatalf("the approved run's event %+v", evs[0])
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
	g.ctrl.tasks["fw"].gates.plan.Fingerprint = "older"
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
	if err := g.ctrl.Approve(context.Background(), "fw", third.ID, "ops"); !errors.As(err, &se) || se.Newer == third.ID {
		t.Fatalf("approve of a stale plan: %v", err)
	}
	g.noApply(t)
	g.drv.mu.Lock()
	g.drv.stale = false
	g.drv.mu.Unlock()
	fourth := g.waitHeld(t, third.ID)
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
