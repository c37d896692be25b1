// Package dev is the development driver, selected with client_type =
// "development" or `start -client-type=development` (CTS's development
// client): it runs no Terraform and changes nothing, and logs, for each
// run, what the Terraform driver would have done and with which inputs.
// Everything above the driver (conditions, buffer periods, the desired
// state, the API, events) works as usual, so a configuration can be tried
// against a real Consul without touching any infrastructure.
package dev

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/task"
)

// Driver is the development driver of one task. It implements driver.Driver
// and driver.PlanHolder.
type Driver struct {
	spec task.Spec
	log  *slog.Logger
	held map[string]bool // the ids of the plans held
}

var (
	_ driver.Driver     = (*Driver)(nil)
	_ driver.PlanHolder = (*Driver)(nil)
)

// emptyPlanJSON is the JSON of a plan that changes nothing, what a policy
// reads for a development client's plan.
const emptyPlanJSON = `{"format_version":"1.2","resource_changes":[]}`

// New returns the development driver of a task, logging to log.
func New(spec task.Spec, log *slog.Logger) *Driver {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Driver{spec: spec, log: log.With("task_name", spec.Name, "client_type", "development")}
}

// Init logs what `terraform init` would prepare.
func (d *Driver) Init(context.Context) error {
	d.log.Info("development client: would write the root module and run terraform init",
		"module", d.spec.Module, "version", d.spec.Version, "providers", d.spec.Providers)
	return nil
}

// Plan logs the inputs a plan would receive; it reports no changes.
func (d *Driver) Plan(_ context.Context, run driver.Run, in *task.Inputs) (driver.Result, error) {
	return d.would("plan", run, in), nil
}

// Apply logs the inputs an apply would receive; it changes nothing.
func (d *Driver) Apply(_ context.Context, run driver.Run, in *task.Inputs) (driver.Result, error) {
	return d.would("apply", run, in), nil
}

// Destroy logs that the task's resources would be destroyed.
// Forget has nothing to remove: the development client writes nothing.
func (d *Driver) Forget(context.Context) error { return nil }
func (d *Driver) Destroy(_ context.Context, run driver.Run) (driver.Result, error) {
	d.log.Info("development client: would run terraform destroy", "run_id", run.ID)
	return driver.Result{Output: "development client: nothing destroyed"}, nil
}

// PlanHeld logs the inputs a plan would receive and holds a plan without
// changes.
func (d *Driver) PlanHeld(_ context.Context, run driver.Run, in *task.Inputs) (driver.HeldPlan, error) {
	if in == nil { // a destroy plan keeps the inputs last written
		in = &task.Inputs{}
	}
	op := "plan"
	if run.Destroy {
		op = "plan -destroy"
	}
	res := d.would(op, run, in)
	if d.held == nil {
		d.held = map[string]bool{}
	}
	d.held[run.ID] = true
	return driver.HeldPlan{ID: run.ID, Ref: run.ID, Text: res.Output, JSON: json.RawMessage(emptyPlanJSON), Result: res}, nil
}

// ApplyPlan logs that the held plan would be applied; a plan that is not
// held (applied or discarded already) is refused as driver.ErrPlanStale.
func (d *Driver) ApplyPlan(_ context.Context, run driver.Run, p driver.HeldPlan) (driver.Result, error) {
	if !d.held[p.Ref] {
		return driver.Result{}, &driver.Error{Op: "apply", Summary: "plan " + p.ID + " is not held", Err: driver.ErrPlanStale}
	}
	delete(d.held, p.Ref)
	d.log.Info("development client: would run terraform apply of the held plan", "run_id", run.ID, "plan_id", p.ID)
	return driver.Result{Output: "development client: terraform apply of plan " + p.ID + " not run"}, nil
}

// DiscardPlan forgets a held plan.
func (d *Driver) DiscardPlan(_ context.Context, p driver.HeldPlan) error {
	delete(d.held, p.Ref)
	return nil
}

func (d *Driver) would(op string, run driver.Run, in *task.Inputs) driver.Result {
	start := time.Now()
	ids := slices.Sorted(maps.Keys(in.Services))
	attrs := []any{"run_id", run.ID, "services", ids,
		"catalog_services", slices.Sorted(maps.Keys(in.CatalogServices)),
		"consul_kv_keys", slices.Sorted(maps.Keys(in.ConsulKV)),
		"variables", slices.Sorted(maps.Keys(d.spec.Variables))}
	if in.Nodes != nil {
		nodes := make([]string, len(in.Nodes))
		for i, n := range in.Nodes {
			nodes[i] = n.Node
		}
		attrs = append(attrs, "nodes", nodes)
	}
	if in.Intentions != nil {
		ints := make([]string, len(in.Intentions))
		for i, it := range in.Intentions {
			ints[i] = it.SourceName + "->" + it.DestinationName + ":" + it.Action
		}
		attrs = append(attrs, "intentions", ints)
	}
	if in.TaskOutputs != nil {
		attrs = append(attrs, "task_outputs_of", slices.Sorted(maps.Keys(in.TaskOutputs)))
	}
	d.log.Info("development client: would run terraform "+op, attrs...)
	if d.log.Enabled(context.Background(), slog.LevelDebug) {
		if b, err := json.Marshal(in); err == nil {
			d.log.Debug("development client: inputs", "run_id", run.ID, "inputs", string(b))
		}
	}
	return driver.Result{Output: "development client: terraform " + op + " not run", Duration: time.Since(start)}
}
