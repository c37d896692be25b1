package terraform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/terraform-exec/tfexec"
	tfjson "github.com/hashicorp/terraform-json"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/driver/terraform/tftext"
	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/task"
)

// heldPrefix and heldSuffix name a held plan's file in the plan folder:
// held-<run id>.tfplan; heldInputs is the suffix of the copy of the inputs
// file it was made with (held-<run id>.tfvars).
const (
	heldPrefix = "held-"
	heldSuffix = ".tfplan"
	heldInputs = ".tfvars"
)

var _ driver.PlanHolder = (*Driver)(nil)

// Plan writes the inputs and runs `terraform plan`. Result.Output is the
// readable plan.
func (d *Driver) Plan(ctx context.Context, run driver.Run, in *task.Inputs) (driver.Result, error) {
	held, err := d.plan(ctx, run, in, false)
	return held.Result, err
}

// PlanHeld writes the inputs and runs `terraform plan -out`, keeping the
// saved plan in the task's working directory (.ctsync-plan/held-<run
// id>.tfplan, a folder only the daemon's user can enter: the plan holds
// every value of the run, secrets included) until ApplyPlan or
// DiscardPlan. The held plan has the readable plan (`terraform show`), its
// JSON (`terraform show -json`) and its counts, with the managed resource
// instances of the state it starts from.
func (d *Driver) PlanHeld(ctx context.Context, run driver.Run, in *task.Inputs) (driver.HeldPlan, error) {
	return d.plan(ctx, run, in, true)
}

// ApplyPlan runs `terraform apply <saved plan>` of a plan PlanHeld made,
// with the inputs file it was made with back in place (OpenTofu refuses
// a saved plan whose variables differ from the ones the directory gives),
// then removes the plan. Terraform refuses a plan whose state changed
// since it was made ("Saved plan is stale"): that error, and a plan that
// is no longer there, match driver.ErrPlanStale.
func (d *Driver) ApplyPlan(ctx context.Context, run driver.Run, p driver.HeldPlan) (driver.Result, error) {
	path, err := d.heldPath(p)
	if err != nil {
		return driver.Result{}, &driver.Error{Op: "apply", Summary: err.Error(), Err: err}
	}
	defer d.dropHeld(path) // applied or refused, a saved plan is used once
	defer delete(d.refresh.held, path)
	inputs, err := os.ReadFile(strings.TrimSuffix(path, heldSuffix) + heldInputs)
	if err != nil || !fileExists(path) {
		err := fmt.Errorf("%w: plan %s is no longer held (its files in %s are gone)", driver.ErrPlanStale, p.ID, filepath.Dir(path))
		return driver.Result{}, &driver.Error{Op: "apply", Summary: err.Error(), Err: err}
	}
	if _, err := writeFileAtomic(filepath.Join(d.workDir, fileInputs), inputs, 0o640); err != nil {
		return driver.Result{}, &driver.Error{Op: "apply", Err: err}
	}
	return d.change(ctx, "apply", run, nil, path)
}

// DiscardPlan removes a held plan's files.
func (d *Driver) DiscardPlan(_ context.Context, p driver.HeldPlan) error {
	path, err := d.heldPath(p)
	if err != nil {
		return err
	}
	delete(d.refresh.held, path)
	if err := d.dropHeld(path); err != nil {
		return fmt.Errorf("discarding plan %s: %w", p.ID, err)
	}
	return nil
}

// dropHeld removes a held plan's file and its inputs.
func (d *Driver) dropHeld(path string) error {
	var errs []error
	for _, p := range []string{path, strings.TrimSuffix(path, heldSuffix) + heldInputs} {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// heldPath returns the file of a held plan, refusing a reference that is
// not a held plan of this task (a plan record is data: it must not name
// any other file).
func (d *Driver) heldPath(p driver.HeldPlan) (string, error) {
	want := filepath.Join(d.workDir, planDirName, heldPrefix+p.ID+heldSuffix)
	if validRunID(p.ID) != nil || p.Ref != want {
		return "", fmt.Errorf("plan %q is not a plan held for task %q (file %q)", p.ID, d.opts.Spec.Name, p.Ref)
	}
	return want, nil
}

// plan runs `terraform plan -out` and reads the saved plan: a temporary
// file, or, to hold it (keep), the held plan's file.
func (d *Driver) plan(ctx context.Context, run driver.Run, in *task.Inputs, keep bool) (held driver.HeldPlan, err error) {
	defer d.running(ctx)()
	start := time.Now()
	res := &held.Result
	defer func() { res.Duration = time.Since(start) }()
	if res.LogPath, err = d.prepare(ctx, "plan", run, in); err != nil {
		return held, err
	}
	defer d.endRun()
	release, err := d.gate(ctx, "plan")
	if err != nil {
		return held, err
	}
	defer release()

	// The plan file holds every value of the run, provider secrets
	// included: it lives in a folder only the daemon's user can enter.
	planDir := filepath.Join(d.workDir, planDirName)
	if err := os.MkdirAll(planDir, 0o700); err != nil {
		return held, &driver.Error{Op: "plan", Err: err}
	}
	if err := os.Chmod(planDir, 0o700); err != nil {
		return held, &driver.Error{Op: "plan", Err: err}
	}
	planPath := filepath.Join(planDir, planFile)
	if keep {
		planPath = filepath.Join(planDir, heldPrefix+run.ID+heldSuffix)
	}
	defer func() {
		if !keep {
			os.Remove(planPath)
		} else if err != nil {
			delete(d.refresh.held, planPath)
			d.dropHeld(planPath)
		}
	}()
	began := time.Now()
	changes, err := d.runPlan(ctx, planPath, run.Destroy)
	planText, _ := d.sink.output()
	res.Refresh = driver.RefreshFull // a plan always refreshes (drift checks rely on it)
	if err != nil {
		res.Output = planText
		d.refreshFailed()
		return held, d.fail("plan", err)
	}
	res.Changes = changes
	switch {
	case keep:
		// Applying it is a refresh made now (run.go).
		if d.refresh.held == nil {
			d.refresh.held = map[string]time.Time{}
		}
		d.refresh.held[planPath] = began
	case changes:
		// Drift, or data not applied yet: the state is not what the
		// objects are, the next apply refreshes.
		d.refreshFailed()
	default:
		d.refreshed(began)
	}
	if keep {
		// Terraform creates it with the process's umask: a held plan is
		// the daemon's user's alone, like its folder.
		if err := os.Chmod(planPath, 0o600); err != nil {
			return held, &driver.Error{Op: "plan", Err: err}
		}
		inputs, err := os.ReadFile(filepath.Join(d.workDir, fileInputs))
		if err == nil {
			_, err = writeFileAtomic(strings.TrimSuffix(planPath, heldSuffix)+heldInputs, inputs, 0o600)
		}
		if err == nil {
			err = recordHolder(planDir) // heldsweep.go
		}
		if err != nil {
			return held, &driver.Error{Op: "plan", Err: fmt.Errorf("keeping the plan's inputs: %w", err)}
		}
	}

	// The plan command already logged the plan: keep the show output out of
	// the log file.
	d.sink.begin("show (readable plan)", true)
	text, err := d.tf.ShowPlanFileRaw(ctx, planPath)
	if err != nil {
		res.Output = planText
		return held, d.fail("plan", err)
	}
	res.Output = text

	d.sink.begin("show -json (plan summary)", true)
	plan, err := d.tf.ShowPlanFile(ctx, planPath)
	var counts gate.Counts
	switch {
	case err == nil:
		counts = countPlan(plan)
		res.Add, res.Change, res.Destroy = counts.Add, counts.Change, counts.Destroy
	case keep: // a held plan must have its JSON (policies read it)
		return held, d.fail("plan", err)
	default:
		d.sink.note("cannot read the plan as JSON (%v); counting from the text", err)
		res.Add, res.Change, res.Destroy = tftext.PlanCounts(text)
	}
	if !keep {
		return held, nil
	}
	raw, _ := d.sink.output() // show -json's stdout, kept out of the log
	held.ID, held.Ref, held.Changes, held.Text = run.ID, planPath, changes, text
	held.JSON = json.RawMessage(strings.TrimSpace(raw))
	held.Counts = gate.Counts{Add: res.Add, Change: res.Change, Destroy: res.Destroy, Replace: counts.Replace, InState: managedInstances(plan.PriorState)}
	return held, nil
}

// runPlan runs `terraform plan -out planPath` (with -destroy: the plan
// destroys everything in the task's state).
func (d *Driver) runPlan(ctx context.Context, planPath string, destroy bool) (bool, error) {
	opts := append([]tfexec.PlanOption{tfexec.Out(planPath), tfexec.Destroy(destroy)}, parallelism[tfexec.PlanOption](d.opts.Spec.Parallelism)...)
	if !d.ui {
		d.sink.begin("plan", false)
		return d.tf.Plan(ctx, opts...)
	}
	stdout := d.sink.writer("stdout")
	defer d.tf.SetStdout(stdout)
	d.sink.beginUI("plan")
	return d.tf.PlanJSON(ctx, stdout, opts...)
}

// managedInstances counts the managed resource instances of a state (data
// sources are not counted), in every module.
func managedInstances(st *tfjson.State) int {
	if st == nil || st.Values == nil {
		return 0
	}
	var count func(m *tfjson.StateModule) int
	count = func(m *tfjson.StateModule) int {
		if m == nil {
			return 0
		}
		n := 0
		for _, r := range m.Resources {
			if r != nil && r.Mode == tfjson.ManagedResourceMode {
				n++
			}
		}
		for _, c := range m.ChildModules {
			n += count(c)
		}
		return n
	}
	return count(st.Values.RootModule)
}

// staleSummaries are the summaries of Terraform's refusal to apply a saved
// plan made from another state than the current one.
var staleSummaries = []string{"Saved plan is stale", "Saved plan does not match the given state"}

// stalePlan reports whether diags refuse a saved plan as stale.
func stalePlan(diags driver.Diagnostics) bool {
	for _, d := range diags.Errors() {
		for _, s := range staleSummaries {
			if strings.HasPrefix(d.Summary, s) {
				return true
			}
		}
	}
	return false
}

// errStale wraps err so that it matches driver.ErrPlanStale.
func errStale(err error) error {
	if errors.Is(err, driver.ErrPlanStale) {
		return err
	}
	return fmt.Errorf("%w: %w", driver.ErrPlanStale, err)
}
