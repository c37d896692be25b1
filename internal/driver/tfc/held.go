package tfc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	tfe "github.com/hashicorp/go-tfe"
	tfjson "github.com/hashicorp/terraform-json"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

// A held plan is the workspace's own: a run queued without auto-apply
// stops when its plan is done and waits for a confirmation. ApplyPlan
// confirms that run, DiscardPlan discards it. While it waits, the
// workspace runs nothing else (its later runs queue behind it), so the
// plan cannot go stale; a run that someone discarded or cancelled
// meanwhile is reported as driver.ErrPlanStale.

var _ driver.PlanHolder = (*Driver)(nil)

// PlanHeld uploads the task's configuration and queues a run that waits
// for its confirmation once planned. The held plan's Ref is the run's id;
// its text is the plan's log; its JSON is the plan's JSON output when the
// server serves it (HCP Terraform and Terraform Enterprise do; OTF v0.1.0
// does not: JSON is then nil and the run log says so); InState counts the
// managed resource instances of the workspace's current state.
func (d *Driver) PlanHeld(ctx context.Context, run driver.Run, in *task.Inputs) (driver.HeldPlan, error) {
	if run.Destroy {
		// Refused rather than planned otherwise: a destroy through the
		// gates must be the destroy it shows.
		err := errors.New(`driver "terraform-cloud" cannot hold a destroy plan for approval: delete the task without destroy and destroy the workspace's resources in Terraform Cloud`)
		return driver.HeldPlan{}, &driver.Error{Op: "plan", Summary: err.Error(), Err: err, Terminal: true}
	}
	var (
		held driver.HeldPlan
		r    *tfe.Run
	)
	res, err := d.logged(ctx, "hold", run, func(lg io.Writer, res driver.Result) (driver.Result, error) {
		res, err := d.queueAndWait(ctx, "hold", run, in, lg, res, &r)
		if err != nil || r == nil {
			return res, err
		}
		held = driver.HeldPlan{ID: run.ID, Ref: r.ID, Durable: true, Changes: res.Changes, Text: res.Output,
			Counts: gate.Counts{Add: res.Add, Change: res.Change, Destroy: res.Destroy}}
		if held.Counts.InState, err = d.inState(ctx); err != nil {
			return res, err
		}
		if r.Plan != nil && r.Plan.ID != "" {
			js, jerr := d.client.Plans.ReadJSONOutput(ctx, r.Plan.ID)
			switch {
			case jerr == nil && json.Valid(js):
				held.JSON = js
				held.Counts.Replace = replacements(js, held.Counts)
			case jerr == nil:
				fmt.Fprintf(lg, "# the server's JSON plan of run %s is not JSON: policies cannot read it\n", r.ID)
			default:
				fmt.Fprintf(lg, "# the server does not serve the JSON plan of run %s (%v): policies cannot read it\n", r.ID, jerr)
			}
		}
		return res, nil
	})
	held.Result = res
	if err == nil && r == nil {
		err = &driver.Error{Op: "plan", Summary: "no run was queued for the held plan"}
	}
	return held, err
}

// inState counts the managed resource instances of the workspace's
// current state (0 without a state).
func (d *Driver) inState(ctx context.Context) (int, error) {
	raw, err := d.currentState(ctx, "plan", "the number of resources it manages")
	if errors.Is(err, tfe.ErrResourceNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var st struct {
		Resources []struct {
			Mode      string            `json:"mode"`
			Instances []json.RawMessage `json:"instances"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return 0, &driver.Error{Op: "plan", Summary: "the workspace's state is not JSON: " + err.Error(), Err: err}
	}
	n := 0
	for _, r := range st.Resources {
		if r.Mode == "managed" {
			n += len(r.Instances)
		}
	}
	return n, nil
}

// ApplyPlan confirms the held plan's run and waits for it to apply. A run
// that no longer waits for its confirmation (discarded, cancelled, errored,
// or applied already) is refused with driver.ErrPlanStale; a held plan
// without changes has nothing to apply and succeeds.
func (d *Driver) ApplyPlan(ctx context.Context, run driver.Run, p driver.HeldPlan) (driver.Result, error) {
	res, err := d.logged(ctx, "apply", run, func(lg io.Writer, res driver.Result) (driver.Result, error) {
		r, err := d.client.Runs.Read(ctx, p.Ref)
		switch {
		case errors.Is(err, tfe.ErrResourceNotFound):
			return res, stale(p, "run "+p.Ref+" does not exist")
		case err != nil:
			return res, d.apiError(ctx, "apply", "reading run "+p.Ref, err)
		}
		res.RunURL = d.runURL(r.ID)
		fmt.Fprintf(lg, "# held plan %s: run %s (%s)\n", p.ID, res.RunURL, r.Status)
		if r.Status == tfe.RunPlannedAndFinished || r.Status == tfe.RunApplied {
			// No changes: nothing to confirm; or confirmed already (an
			// earlier attempt of this apply): its result.
			return d.finish(ctx, "apply", r, res, lg)
		}
		if r.Actions == nil || !r.Actions.IsConfirmable {
			return res, stale(p, fmt.Sprintf("run %s is %s, it no longer waits for a confirmation", r.ID, r.Status))
		}
		// Recorded as the task's apply before it is confirmed: after a
		// crash or a failover, the next apply of the same configuration
		// waits for this run instead of queuing another.
		rec, ok := d.record()
		if !ok || rec.ID != r.ID { // the held plan's record was replaced (or lost)
			rec = store.RemoteRun{ID: r.ID}
		}
		rec.Op, rec.Run, rec.At = "apply", run.ID, time.Now().UTC()
		if err := d.recordRun(ctx, rec); err != nil {
			return res, &driver.Error{Op: "apply", Err: err,
				Summary: fmt.Sprintf("not confirming run %s: recording it for the task failed: %v", r.ID, err)}
		}
		if r, err = d.wait(ctx, "apply", r); err != nil { // confirms it
			return res, err
		}
		res, err = d.finish(ctx, "apply", r, res, lg)
		if err == nil {
			d.done(r.ID)
		}
		return res, err
	})
	if err == nil && d.opts.Spec.ExportOutputs {
		res.Outputs, err = d.outputs(ctx)
	}
	return res, err
}

// DiscardPlan discards the held plan's run when it still waits for its
// confirmation.
func (d *Driver) DiscardPlan(ctx context.Context, p driver.HeldPlan) error {
	if d.ws == nil {
		if err := d.Init(ctx); err != nil {
			return err
		}
	}
	r, err := d.client.Runs.Read(ctx, p.Ref)
	switch {
	case errors.Is(err, tfe.ErrResourceNotFound):
		return nil
	case err != nil:
		return d.apiError(ctx, "discard", "reading run "+p.Ref, err)
	}
	if r.Actions == nil || !r.Actions.IsConfirmable {
		return nil
	}
	if err := d.client.Runs.Discard(ctx, r.ID, tfe.RunDiscardOptions{Comment: tfe.String("held plan rejected in ctsync")}); err != nil {
		return d.apiError(ctx, "discard", "discarding run "+r.ID, err)
	}
	d.log.Info("discarded the run of a held plan", "run_id", r.ID, "plan_id", p.ID)
	return nil
}

// stale is ApplyPlan's refusal of a plan that can no longer be applied.
func stale(p driver.HeldPlan, why string) error {
	err := fmt.Errorf("%w: held plan %s: %s", driver.ErrPlanStale, p.ID, why)
	return &driver.Error{Op: "apply", Summary: err.Error(), Err: err}
}

// replacements counts the replacements of the run's JSON plan
// (gate.CountPlan), at most the adds and destroys the run counted; 0 when
// the JSON cannot be read as a plan: every destroy is then judged as one.
func replacements(js []byte, c gate.Counts) int {
	var p tfjson.Plan
	if json.Unmarshal(js, &p) != nil {
		return 0
	}
	return min(gate.CountPlan(&p).Replace, c.Add, c.Destroy)
}
