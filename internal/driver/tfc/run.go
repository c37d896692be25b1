package tfc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	tfe "github.com/hashicorp/go-tfe"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/driver/terraform"
	"github.com/ctsync/ctsync/internal/redact"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

// ---- runs ----

// Plan uploads the task's configuration as a speculative configuration
// version and runs a plan-only run; nothing is applied.
func (d *Driver) Plan(ctx context.Context, run driver.Run, in *task.Inputs) (driver.Result, error) {
	return d.do(ctx, "plan", run, in)
}

// Apply uploads the task's configuration and runs it, applying the plan.
func (d *Driver) Apply(ctx context.Context, run driver.Run, in *task.Inputs) (driver.Result, error) {
	res, err := d.do(ctx, "apply", run, in)
	if err == nil && d.opts.Spec.ExportOutputs {
		res.Outputs, err = d.outputs(ctx)
	}
	return res, err
}

// outputs reads the module's outputs (the root output ctsync_outputs, see
// task.Spec.ExportOutputs) from the workspace's current state file: the
// API's output endpoints hide the values of sensitive outputs, and that one
// is sensitive.
func (d *Driver) outputs(ctx context.Context) (json.RawMessage, error) {
	raw, err := d.currentState(ctx, "apply", "the module's outputs")
	if err != nil {
		return nil, err
	}
	var st struct {
		Outputs map[string]struct {
			Value json.RawMessage `json:"value"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, &driver.Error{Op: "apply", Summary: "the workspace's state is not JSON: " + err.Error(), Err: err}
	}
	o, ok := st.Outputs[terraform.ExportOutput]
	if !ok || len(o.Value) == 0 || string(o.Value) == "null" {
		return json.RawMessage("{}"), nil
	}
	return o.Value, nil
}

// currentState downloads the workspace's current state file (for verb op,
// to read why).
func (d *Driver) currentState(ctx context.Context, op, why string) ([]byte, error) {
	sv, err := d.client.StateVersions.ReadCurrent(ctx, d.ws.ID)
	if err != nil {
		return nil, d.apiError(ctx, op, fmt.Sprintf("reading the current state of workspace %q for %s", d.name, why), err)
	}
	u := sv.DownloadURL
	if strings.HasPrefix(u, "/") { // some servers (OTF) answer a host-relative URL
		u = d.opts.Config.Address + u
	}
	raw, err := d.client.StateVersions.Download(ctx, u)
	if err != nil {
		return nil, d.apiError(ctx, op, "downloading the state for "+why, err)
	}
	return raw, nil
}

// Destroy queues a destroy run of the workspace's current configuration.
// Forget keeps the task's workspace: its (now empty) state and run history
// stay in HCP Terraform / Terraform Enterprise for the record.
func (d *Driver) Forget(context.Context) error { return nil }
func (d *Driver) Destroy(ctx context.Context, run driver.Run) (driver.Result, error) {
	return d.do(ctx, "destroy", run, nil)
}

func (d *Driver) do(ctx context.Context, op string, run driver.Run, in *task.Inputs) (driver.Result, error) {
	return d.logged(ctx, op, run, func(lg io.Writer, res driver.Result) (driver.Result, error) {
		return d.queueAndWait(ctx, op, run, in, lg, res, nil)
	})
}

// logged runs verb op of run (fn) with the run's log open: its header,
// its footer with the outcome and the number of API requests, and the
// result's log path and duration. The workspace is looked up first.
func (d *Driver) logged(ctx context.Context, op string, run driver.Run, fn func(lg io.Writer, res driver.Result) (driver.Result, error)) (res driver.Result, err error) {
	start := time.Now()
	calls := d.calls.Load()
	f, logPath, lerr := d.openRunLog(run)
	if lerr != nil {
		return driver.Result{}, &driver.Error{Op: op, Err: lerr}
	}
	lg := redact.NewWriter(f, d.opts.Redactor) // the secrets never reach the disk
	res.LogPath = logPath
	defer func() {
		res.Duration = time.Since(start)
		// A remote run always refreshes (refresh policies are the
		// terraform driver's): the driver queues none without it.
		if res.RunURL != "" {
			res.Refresh = driver.RefreshFull
		}
		n := d.calls.Load() - calls
		fmt.Fprintf(lg, "\n# %s: %s, %d API requests\n", op, outcome(err), n)
		_ = lg.Flush()
		f.Close()
		d.log.Info("remote run finished", "op", op, "run_url", res.RunURL, "duration", res.Duration.Round(time.Millisecond),
			"api_requests", n, "error", err)
	}()
	if d.ws == nil {
		if err := d.Init(ctx); err != nil {
			return res, err
		}
	}
	fmt.Fprintf(lg, "# ctsync task %s: %s in workspace %s/%s at %s\n", d.opts.Spec.Name, op, d.opts.Config.Organization, d.name, d.opts.Config.Address)
	return fn(lg, res)
}

// queueAndWait runs verb op: it finds the run of the same configuration
// already queued, or queues one, waits for it and reads its result. The
// run is also put in *got when got is set.
func (d *Driver) queueAndWait(ctx context.Context, op string, run driver.Run, in *task.Inputs, lg io.Writer, res driver.Result, got **tfe.Run) (driver.Result, error) {
	logPath := res.LogPath
	digest := "-"
	var (
		stage string
		r     *tfe.Run
		err   error
	)
	if op != "destroy" {
		if stage, digest, err = d.stage(in); err != nil {
			return res, &driver.Error{Op: op, Summary: err.Error(), Err: err, Terminal: true}
		}
	}
	message := fmt.Sprintf("%s%s %s %s", messagePrefix, d.opts.Spec.Name, op, digest)

	if op != "plan" {
		// The run this task recorded last, when it is of the same
		// configuration and its outcome was never recorded (see
		// recorded): wait for it, or take its result.
		if r, err = d.recordedRun(ctx, op, digest); err != nil {
			return res, err
		}
		if r != nil && final(r.Status) {
			res.RunURL = d.runURL(r.ID)
			// (A held plan is a run that waits for its confirmation: an
			// ended one is not held any more.)
			if applies(op) && (r.Status == tfe.RunApplied || r.Status == tfe.RunPlannedAndFinished) {
				fmt.Fprintf(lg, "# the recorded run %s of the same configuration has ended (%s): its result is this run's\n", r.ID, r.Status)
				out, ferr := d.finish(ctx, op, r, res, lg)
				if ferr == nil {
					if got != nil {
						*got = r
					}
					d.log.Info("the run recorded for this configuration has already ended: taking its result, not queuing another",
						"run_id", r.ID, "status", r.Status)
					d.done(r.ID)
					return out, nil
				}
				res = driver.Result{LogPath: logPath}
			}
			fmt.Fprintf(lg, "# the recorded run %s of the same configuration ended %s: queuing a new one\n", r.ID, r.Status)
			r = nil
		}
		if r != nil {
			d.log.Info("waiting for the run recorded for this configuration instead of queuing another", "run_id", r.ID, "status", r.Status)
			fmt.Fprintf(lg, "# found the recorded, unfinished run %s of the same configuration: waiting for it\n", r.ID)
		}
	}
	if r == nil {
		// Fallback: a run found by its message (a server that keeps run
		// messages; OTF v0.1.0 does not).
		if r, err = d.pending(ctx, op, message); err != nil {
			return res, err
		}
		if r != nil {
			d.log.Info("waiting for an unfinished run of the same configuration instead of queuing another", "run_id", r.ID, "status", r.Status)
			fmt.Fprintf(lg, "# found unfinished run %s of the same configuration: waiting for it\n", r.ID)
		}
	}
	if r == nil {
		if r, err = d.queue(ctx, op, run, digest, message, stage, lg); err != nil || r == nil {
			return res, err
		}
	}
	res.RunURL = d.runURL(r.ID)
	fmt.Fprintf(lg, "# run %s\n", res.RunURL)
	r, err = d.wait(ctx, op, r)
	if err != nil {
		return res, err
	}
	if got != nil {
		*got = r
	}
	res, err = d.finish(ctx, op, r, res, lg)
	if err == nil && applies(op) {
		d.done(r.ID)
	}
	return res, err
}

// applies reports whether verb op changes the workspace's state by itself
// (a held plan's run waits for its confirmation, see ApplyPlan).
func applies(op string) bool { return op == "apply" || op == "destroy" }

// queue uploads the configuration (or, for a destroy, picks the last
// applied one), records it and queues the run. It returns nil without an
// error when there is nothing to destroy.
//
// The record (recordRun) is written twice around Runs.Create: before it,
// with the configuration version, and after it, with the run's id. What a
// crash (or a lost lead) at each point leaves to the next attempt, here or
// on a new leader:
//
//   - before the first write: no run exists; the next attempt queues one.
//   - the first write fails (Consul unreachable, or the instance no longer
//     leads: the write is fenced): the run is not created; the verb fails
//     and is retried.
//   - between the first write and the creation: the record names a
//     configuration version no run uses; the next attempt finds none and
//     queues a run.
//   - the request to create the run was sent but its answer (or the second
//     write) was lost: the record has no run id; the next attempt lists the
//     workspace's runs and finds the run by its configuration version.
//   - after the second write: the next attempt reads the run by its id.
//
// So no duplicate comes from a crash. One remains possible: an old leader
// whose create request reaches the server after the new leader has looked
// at the workspace. The HA timing bounds that (a deposed leader's runs are
// cancelled before anyone can take over, docs/ha.md), and a duplicate run
// of the same configuration is idempotent: it plans no changes.
func (d *Driver) queue(ctx context.Context, op string, run driver.Run, digest, message, stage string, lg io.Writer) (*tfe.Run, error) {
	opts := tfe.RunCreateOptions{Workspace: d.ws, Message: tfe.String(message)}
	switch op {
	case "plan":
		opts.PlanOnly = tfe.Bool(true)
	case "apply":
		opts.AutoApply = tfe.Bool(true)
	case "hold":
		opts.AutoApply = tfe.Bool(false) // held: it waits for ApplyPlan's confirmation
	case "destroy":
		opts.IsDestroy = tfe.Bool(true)
		opts.AutoApply = tfe.Bool(true)
	}
	if op == "destroy" {
		// The configuration of the last apply: a speculative one (of a
		// later plan) cannot be applied.
		cvs, err := d.client.ConfigurationVersions.List(ctx, d.ws.ID, &tfe.ConfigurationVersionListOptions{ListOptions: tfe.ListOptions{PageSize: 50}})
		if err != nil {
			return nil, d.apiError(ctx, op, "listing configuration versions", err)
		}
		for _, cv := range cvs.Items {
			if !cv.Speculative && cv.Status == tfe.ConfigurationUploaded {
				opts.ConfigurationVersion = cv
				break
			}
		}
		if opts.ConfigurationVersion == nil {
			fmt.Fprintln(lg, "# the workspace has no applied configuration: nothing to destroy")
			return nil, nil
		}
	} else {
		cv, err := d.upload(ctx, op, stage)
		if err != nil {
			return nil, err
		}
		opts.ConfigurationVersion = cv
	}
	rec := store.RemoteRun{Op: op, Digest: digest, ConfigurationVersion: opts.ConfigurationVersion.ID, Run: run.ID, At: time.Now().UTC()}
	if op != "plan" {
		if err := d.recordRun(ctx, rec); err != nil {
			return nil, &driver.Error{Op: op, Err: err,
				Summary: fmt.Sprintf("not queuing a run in workspace %q: recording it for the task failed: %v", d.name, err)}
		}
	}
	r, err := d.client.Runs.Create(ctx, opts)
	if err != nil {
		return nil, d.apiError(ctx, op, fmt.Sprintf("queuing a run in workspace %q", d.name), err)
	}
	if op != "plan" {
		rec.ID = r.ID
		if err := d.recordRun(context.WithoutCancel(ctx), rec); err != nil {
			// The run is found by its configuration version instead.
			d.log.Warn("the queued run's id could not be recorded", "run_id", r.ID, "error", err)
		}
	}
	d.log.Info("queued a remote run", "op", op, "run_id", r.ID, "configuration_version", rec.ConfigurationVersion)
	return r, nil
}
