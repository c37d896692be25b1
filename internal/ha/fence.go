package ha

import (
	"context"
	"fmt"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/task"
)

// Fencer gives out run contexts only to the leader; *Elector implements it.
type Fencer interface {
	RunContext(ctx context.Context) (context.Context, context.CancelFunc, error)
}

// FenceDriver wraps a task's driver so that Terraform only plans, applies or
// destroys while this instance leads, and a run in progress is interrupted
// (its context is cancelled: Terraform gets an interrupt) as soon as the
// instance stops leading, for whatever reason. This is what makes the
// step-down rule hold for runs that had already started, including runs the
// API started (run=now) and drift checks. Init is not fenced: it changes no
// infrastructure.
func FenceDriver(d driver.Driver, f Fencer) driver.Driver {
	return &fenced{d: d, f: f}
}

// fenceFactory wraps the driver of each task with the run fence
// fencer(task) gives (FenceDriver).
func fenceFactory(factory reconcile.DriverFactory, fencer func(task string) Fencer) reconcile.DriverFactory {
	return func(spec task.Spec) (driver.Driver, error) {
		d, err := factory(spec)
		if err != nil {
			return nil, err
		}
		return FenceDriver(d, fencer(spec.Name)), nil
	}
}

type fenced struct {
	d driver.Driver
	f Fencer
}

var _ driver.Driver = (*fenced)(nil)

func (x *fenced) Init(ctx context.Context) error { return x.d.Init(ctx) }

func (x *fenced) Plan(ctx context.Context, run driver.Run, in *task.Inputs) (driver.Result, error) {
	return x.do(ctx, "plan", func(ctx context.Context) (driver.Result, error) { return x.d.Plan(ctx, run, in) })
}

func (x *fenced) Apply(ctx context.Context, run driver.Run, in *task.Inputs) (driver.Result, error) {
	return x.do(ctx, "apply", func(ctx context.Context) (driver.Result, error) { return x.d.Apply(ctx, run, in) })
}

func (x *fenced) Destroy(ctx context.Context, run driver.Run) (driver.Result, error) {
	return x.do(ctx, "destroy", func(ctx context.Context) (driver.Result, error) { return x.d.Destroy(ctx, run) })
}

// Forget removes the task's state (task delete with destroy), fenced like a
// run.
func (x *fenced) Forget(ctx context.Context) error {
	_, err := x.do(ctx, "forget", func(ctx context.Context) (driver.Result, error) { return driver.Result{}, x.d.Forget(ctx) })
	return err
}

func (x *fenced) do(ctx context.Context, op string, fn func(context.Context) (driver.Result, error)) (driver.Result, error) {
	rctx, cancel, err := x.f.RunContext(ctx)
	if err != nil {
		return driver.Result{}, &driver.Error{Op: op, Summary: "not run: " + err.Error(), Err: err}
	}
	defer cancel()
	res, err := fn(rctx)
	if err != nil && rctx.Err() != nil && ctx.Err() == nil {
		// The lead was lost during the run and the run failed: say why,
		// whatever Terraform said. A run that succeeded all the same (the
		// driver finished before the interrupt could stop it, which the
		// kill bound keeps before any other instance may lead) has
		// applied, and is reported so.
		err = &driver.Error{Op: op, Summary: "interrupted: this instance stopped leading", Err: err}
	}
	return res, err
}

var _ driver.PlanHolder = (*fenced)(nil)

// errNoHold is the error of a held-plan verb on a driver that cannot hold
// plans.
func errNoHold(op string) error {
	err := fmt.Errorf("the task's driver cannot hold a plan")
	return &driver.Error{Op: op, Summary: err.Error(), Err: err, Terminal: true}
}

// PlanHeld makes a held plan, fenced like Plan.
func (x *fenced) PlanHeld(ctx context.Context, run driver.Run, in *task.Inputs) (driver.HeldPlan, error) {
	ph, ok := x.d.(driver.PlanHolder)
	if !ok {
		return driver.HeldPlan{}, errNoHold("plan")
	}
	var held driver.HeldPlan
	_, err := x.do(ctx, "plan", func(ctx context.Context) (driver.Result, error) {
		var err error
		held, err = ph.PlanHeld(ctx, run, in)
		return held.Result, err
	})
	return held, err
}

// ApplyPlan applies a held plan, fenced like Apply.
func (x *fenced) ApplyPlan(ctx context.Context, run driver.Run, p driver.HeldPlan) (driver.Result, error) {
	ph, ok := x.d.(driver.PlanHolder)
	if !ok {
		return driver.Result{}, errNoHold("apply")
	}
	return x.do(ctx, "apply", func(ctx context.Context) (driver.Result, error) { return ph.ApplyPlan(ctx, run, p) })
}

// DiscardPlan drops a held plan; it changes no infrastructure, so it is
// not fenced.
func (x *fenced) DiscardPlan(ctx context.Context, p driver.HeldPlan) error {
	if ph, ok := x.d.(driver.PlanHolder); ok {
		return ph.DiscardPlan(ctx, p)
	}
	return nil
}
