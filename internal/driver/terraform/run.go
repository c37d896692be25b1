package terraform

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/terraform-exec/tfexec"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/driver/terraform/tftext"
	"github.com/ctsync/ctsync/internal/task"
)

// --- runs --------------------------------------------------------------------

// startRun opens the run's log file and points the output at it.
func (d *Driver) startRun(run driver.Run) (string, error) {
	if err := validRunID(run.ID); err != nil {
		return "", err
	}
	name := run.ID + ".log"
	f, p, err := openLog(d.workDir, name)
	if err != nil {
		return "", err
	}
	d.sink.attach(f)
	if err := rotateLogs(d.workDir, name, d.opts.KeepRunLogs); err != nil {
		d.log.Warn("cannot remove old run logs", "error", err)
	}
	return p, nil
}

func (d *Driver) endRun() {
	if err := d.sink.detach(); err != nil {
		d.log.Warn("cannot close run log", "error", err)
	}
}

// fail builds a *driver.Error from the failed command's diagnostics.
func (d *Driver) fail(op string, err error) error {
	err = usableErr(err)
	diags, text, stderr := d.diagnostics()
	sum := diags.Summary()
	if sum == "" {
		sum = tftext.Summarize(stderr)
	}
	if sum == "" && err != nil {
		sum = tftext.Summarize(err.Error())
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if sum == "" {
			sum = "interrupted: " + err.Error()
		}
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ProcessState != nil && ctxErr(err) == nil {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			// Killed from outside (a crash, the OOM killer, kill -9): stderr
			// has nothing, and "signal: killed" alone does not say whose.
			msg := fmt.Sprintf("terraform was terminated by signal %q before it finished (it crashed or was killed)", ws.Signal().String())
			if sum != "" && sum != tftext.Summarize(err.Error()) {
				msg += "; " + sum
			}
			sum = msg
		}
	}
	if holder, ok := stateLockHolder(text); ok {
		sum = "the Terraform state is locked by another process" + holder + "; " +
			strings.TrimSuffix(strings.TrimSpace(sum), ": Lock Info:")
		err = fmt.Errorf("%w: %w", driver.ErrStateLocked, err)
	}
	if stalePlan(diags) {
		err = errStale(err)
	}
	d.sink.note("%s failed: %s", op, sum)
	terminal := ctxErr(err) == nil && diags.Terminal()
	return &driver.Error{Op: op, Summary: sum, Headline: diags.Headline(), Err: err, Terminal: terminal}
}

// writeInputs writes terraform.tfvars atomically.
func (d *Driver) writeInputs(in *task.Inputs) error {
	data, err := d.mod.inputsTFVars(in)
	if err != nil {
		return fmt.Errorf("encoding inputs: %w", err)
	}
	_, err = writeFileAtomic(filepath.Join(d.workDir, fileInputs), data, 0o640)
	return err
}

// prepare runs Init if needed, opens the run log and writes the inputs.
func (d *Driver) prepare(ctx context.Context, op string, run driver.Run, in *task.Inputs) (string, error) {
	if err := d.ensureInit(ctx); err != nil {
		return "", err
	}
	logPath, err := d.startRun(run)
	if err != nil {
		return "", &driver.Error{Op: op, Err: err}
	}
	// A state lock left by a Terraform the fence stopped on an earlier
	// owner does not wait for Consul to expire it (statelock.go).
	d.clearStaleLock(ctx)
	// A state an earlier run could not save goes to the backend first: a
	// run on the backend's older state would redo what that run did.
	if _, err := d.pushErrored(ctx, pushBound); err != nil {
		d.endRun()
		return "", &driver.Error{Op: op, Summary: err.Error(), Err: err}
	}
	if in != nil {
		if err := d.writeInputs(in); err != nil {
			d.endRun()
			return "", &driver.Error{Op: op, Err: err}
		}
	} else if !fileExists(filepath.Join(d.workDir, fileInputs)) {
		// Terraform needs a value for every variable without a default.
		if err := d.writeInputs(&task.Inputs{}); err != nil {
			d.endRun()
			return "", &driver.Error{Op: op, Err: err}
		}
	}
	return logPath, nil
}

// gate waits for the task's share of the memory budget, if there is one;
// release gives it back and records the command's peak RSS.
func (d *Driver) gate(ctx context.Context, op string) (release func(), err error) {
	if d.opts.Memory == nil {
		return func() {}, nil
	}
	r, err := d.opts.Memory.acquire(ctx, d.opts.Spec.Name, d.realDir)
	if err != nil {
		d.sink.note("%s interrupted while waiting for memory: %v", op, err)
		return nil, &driver.Error{Op: op, Summary: "interrupted while waiting for memory (driver \"terraform\" max_memory)", Err: err}
	}
	return r.release, nil
}

// Apply writes the inputs and runs `terraform apply`.
func (d *Driver) Apply(ctx context.Context, run driver.Run, in *task.Inputs) (driver.Result, error) {
	return d.change(ctx, "apply", run, in, "")
}

// Destroy runs `terraform destroy` with the current inputs file (an empty
// one if the task never ran).
func (d *Driver) Destroy(ctx context.Context, run driver.Run) (driver.Result, error) {
	return d.change(ctx, "destroy", run, nil, "")
}

// change runs an apply (of planPath, a saved plan, when set) or a destroy
// (op): with the machine-readable UI when the binary has it, read from its
// text otherwise.
func (d *Driver) change(ctx context.Context, op string, run driver.Run, in *task.Inputs, planPath string) (driver.Result, error) {
	defer d.running(ctx)()
	start := time.Now()
	logPath, err := d.prepare(ctx, op, run, in)
	if err != nil {
		return driver.Result{Duration: time.Since(start)}, err
	}
	defer d.endRun()
	release, err := d.gate(ctx, op)
	if err != nil {
		return driver.Result{LogPath: logPath, Duration: time.Since(start)}, err
	}
	defer release()
	began := time.Now()
	noRefresh := false
	var tp targetPlan
	check := op == "apply" && planPath == "" && run.Check
	switch {
	case check:
		// The full check a targeted run left due: everything, without
		// refresh when a data change could skip it.
		var why string
		noRefresh, why = d.skipRefresh(driver.Run{DataChange: true}, began)
		d.sink.note("full check of the targeted runs before: %s", why)
	case op == "apply" && planPath == "":
		var why string
		noRefresh, why = d.skipRefresh(run, began)
		d.sink.note("%s", why)
		if noRefresh {
			if tp = d.planTargets(in); tp.targets == nil {
				d.sink.note("%s", tp.why)
			}
		}
	}
	var tr targetedRun
	targeted := tp.targets != nil
	if targeted {
		tr, err = d.runTargeted(ctx, tp, began, run.DeferCheck)
	} else {
		err = d.runChange(ctx, op, planPath, noRefresh)
	}
	if err != nil && noRefresh && d.retryRefreshed(err) {
		targeted = false
		// The state the apply planned from was stale (an object changed
		// or deleted outside Terraform): once more, now, reading every
		// object first.
		d.sink.note("apply without refresh failed (%s): applying again now with a full refresh", d.failSummary(err))
		d.log.Info("apply without refresh failed; applying again with a full refresh", "run_id", run.ID)
		if _, perr := d.pushErrored(ctx, pushBound); perr != nil {
			d.sink.note("%v", perr)
		} else {
			noRefresh = false
			err = d.runChange(ctx, op, planPath, false)
		}
	}
	out, _ := d.sink.output()
	res := driver.Result{LogPath: logPath, Output: out, Refresh: driver.RefreshFull}
	if noRefresh {
		res.Refresh = driver.RefreshSkipped
	}
	res.Add, res.Change, res.Destroy = d.counts(op, err != nil)
	if targeted && err == nil {
		res.Add, res.Change, res.Destroy = tr.add, tr.change, tr.destroy
		res.Targeted, res.CheckDue = tr.note, tr.checkDue
	}
	if check && err == nil {
		res.Targeted = "full check: " + checkFound(res.Add+res.Change+res.Destroy)
		d.sink.note("%s", res.Targeted)
	}
	if op == "apply" {
		res.Phases = applyPhases(began, d.sink.plannedAt(), time.Now())
		if targeted && err == nil {
			res.Phases = tr.phases
		}
		res.Changes = res.Add+res.Change+res.Destroy > 0
	} else {
		res.Changes = res.Destroy > 0
	}
	if err != nil && ctxErr(err) != nil && d.finished(op) {
		// Interrupted (a step-down, a shutdown) after Terraform had already
		// finished: it printed its closing summary, which it does only once
		// the changes are made and the state is saved. The run has applied.
		d.sink.note("%s was interrupted after terraform had finished it (the changes are made and the state is saved): the run has applied", op)
		d.log.Info("terraform finished before the interrupt reached it", "op", op, "run_id", run.ID)
		err = nil
	}
	if err != nil {
		diags, _, _ := d.diagnostics()
		err = d.fail(op, err)
		// The infrastructure changed but Terraform could not save the state:
		// once the state is pushed back, the run has applied.
		pushed, perr := d.pushErrored(ctx, pushBound)
		switch {
		case perr != nil:
			d.sink.note("%v", perr)
			d.log.Warn("the state of the run is not saved in the backend; the next run pushes it first", "run_id", run.ID, "error", perr)
		case pushed && onlySaveErrors(diags):
			d.sink.note("%s: the state is saved now, the run has applied", op)
			err = nil
		}
	}
	switch {
	case err != nil:
		d.refreshFailed()
	case planPath != "":
		// A held plan refreshed when it was made.
		if at, ok := d.refresh.held[planPath]; ok {
			d.refreshed(at)
		}
	case !noRefresh:
		d.refreshed(began)
	}
	if planPath != "" {
		delete(d.refresh.held, planPath)
	}
	if err == nil && op == "apply" && planPath == "" {
		d.recordApplied(ctx, in)
	} else {
		d.target = targetState{}
	}
	switch {
	case err == nil && tr.checkDue:
		if d.checkDue.IsZero() {
			d.checkDue = began // the oldest targeted change not checked yet
		}
	case err == nil && op == "apply" && planPath == "":
		d.checkDue = time.Time{} // everything planned: the check is done
	}
	if err == nil && op == "apply" && d.opts.Spec.ExportOutputs {
		res.Outputs, err = d.readOutputs(ctx)
	}
	res.Duration = time.Since(start)
	return res, err
}

// runChange runs the command of an apply (of planPath when set; with
// -refresh=false when noRefresh) or a destroy.
func (d *Driver) runChange(ctx context.Context, op, planPath string, noRefresh bool) error {
	stdout := d.sink.writer("stdout")
	defer d.tf.SetStdout(stdout) // the -json commands of terraform-exec replace it
	p := d.opts.Spec.Parallelism
	applyOpts := parallelism[tfexec.ApplyOption](p)
	if planPath != "" {
		applyOpts = append(applyOpts, tfexec.DirOrPlan(planPath))
	}
	if noRefresh {
		applyOpts = append(applyOpts, tfexec.Refresh(false))
	}
	switch {
	case op == "destroy" && d.ui:
		d.sink.beginUI(op)
		return d.tf.DestroyJSON(ctx, stdout, parallelism[tfexec.DestroyOption](p)...)
	case op == "destroy":
		d.sink.begin(op, false)
		return d.tf.Destroy(ctx, parallelism[tfexec.DestroyOption](p)...)
	case d.ui:
		d.sink.beginUI(op)
		return d.tf.ApplyJSON(ctx, stdout, applyOpts...)
	default:
		d.sink.begin(op, false)
		return d.tf.Apply(ctx, applyOpts...)
	}
}

// retryRefreshed reports whether an apply without refresh that failed
// with err is worth applying again at once with a refresh: not when it
// was interrupted, when the state is locked (a refresh does not unlock
// it), nor when the configuration itself is wrong (terminal: it fails the
// same way).
func (d *Driver) retryRefreshed(err error) bool {
	if ctxErr(usableErr(err)) != nil {
		return false
	}
	diags, text, _ := d.diagnostics()
	_, locked := stateLockHolder(text)
	return !locked && !diags.Terminal()
}

// failSummary is the one-line summary of the current command's failure,
// for a note in the run log.
func (d *Driver) failSummary(err error) string {
	diags, _, stderr := d.diagnostics()
	if sum := diags.Summary(); sum != "" {
		return sum
	}
	if sum := tftext.Summarize(stderr); sum != "" {
		return sum
	}
	return tftext.Summarize(usableErr(err).Error())
}

// parallelism is the task's -parallelism as the options of a command (none
// when it is not set).
func parallelism[O any](p int) []O {
	if p <= 0 {
		return nil
	}
	o, _ := any(tfexec.Parallelism(p)).(O)
	return []O{o}
}

// usableErr works around terraform-exec: when a command's context is
// cancelled and terraform still exits 0 (it stopped gracefully after the
// interrupt), the error it returns panics in Error(). That error is replaced
// by one that says what happened.
func usableErr(err error) (out error) {
	if err == nil {
		return nil
	}
	defer func() {
		if recover() != nil {
			cause := ctxErr(err)
			if cause == nil {
				cause = context.Canceled
			}
			out = fmt.Errorf("terraform stopped after an interrupt: %w", cause)
		}
	}()
	_ = err.Error()
	return err
}

// ctxErr returns the context error a command failed with, if any.
func ctxErr(err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return context.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return context.DeadlineExceeded
	}
	return nil
}
