package tfc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	tfe "github.com/hashicorp/go-tfe"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/driver/terraform/tftext"
	"github.com/ctsync/ctsync/internal/store"
)

// ---- the run record ----

// record returns the task's run record.
func (d *Driver) record() (store.RemoteRun, bool) {
	if d.opts.Runs != nil {
		return d.opts.Runs.RemoteRun(d.opts.Spec.Name)
	}
	if d.mem == nil {
		return store.RemoteRun{}, false
	}
	return *d.mem, true
}

// recordRun replaces the task's run record.
func (d *Driver) recordRun(ctx context.Context, r store.RemoteRun) error {
	if d.opts.Runs != nil {
		return d.opts.Runs.SetRemoteRun(ctx, d.opts.Spec.Name, r)
	}
	d.mem = &r
	return nil
}

// done notes that the outcome of the recorded run id is being returned to
// the caller.
func (d *Driver) done(id string) { d.returned = id }

// recorded reports whether the outcome of remote run id was recorded as a
// success: an event of the task names the run (tfc_run_url) and succeeded.
// Such a run is history; a later apply of the same configuration (a
// schedule tick, a drift remediation, a re-run) queues a new run. Without
// a store (Options.Runs), the driver knows only what it returned itself.
func (d *Driver) recorded(id string) bool {
	if id == "" {
		return false
	}
	if d.opts.Runs == nil {
		return d.returned == id
	}
	suffix := "/runs/" + id
	for _, ev := range d.opts.Runs.Events(d.opts.Spec.Name) {
		if ev.Success && strings.HasSuffix(ev.TFCRunURL, suffix) {
			return true
		}
	}
	return false
}

// recordedRun returns the run the task's record names when it is of the
// same verb and configuration and its outcome was not recorded: the run
// an attempt queued before it failed, or before its instance stopped
// leading (crash, partition, SIGKILL). Nil otherwise.
func (d *Driver) recordedRun(ctx context.Context, op, digest string) (*tfe.Run, error) {
	rec, ok := d.record()
	if !ok || d.recorded(rec.ID) {
		return nil, nil
	}
	if rec.Op != op || rec.Digest != digest {
		// A run of an older configuration whose outcome nobody recorded:
		// one that waits for a confirmation would hold up the
		// workspace's queue (and the new run behind it) for ever.
		d.discardStale(ctx, rec.ID)
		return nil, nil
	}
	if rec.ID != "" {
		r, err := d.client.Runs.Read(ctx, rec.ID)
		switch {
		case errors.Is(err, tfe.ErrResourceNotFound):
			return nil, nil
		case err != nil:
			return nil, d.apiError(ctx, op, "reading run "+rec.ID, err)
		}
		return r, nil
	}
	// Recorded before the run was created: it may or may not exist.
	list, err := d.client.Runs.List(ctx, d.ws.ID, &tfe.RunListOptions{ListOptions: tfe.ListOptions{PageSize: 20}})
	if err != nil {
		return nil, d.apiError(ctx, op, fmt.Sprintf("listing the runs of workspace %q", d.name), err)
	}
	for _, r := range list.Items { // newest first
		if r.ConfigurationVersion != nil && r.ConfigurationVersion.ID == rec.ConfigurationVersion && r.IsDestroy == (op == "destroy") {
			d.log.Info("found the run of the recorded configuration version", "run_id", r.ID, "configuration_version", rec.ConfigurationVersion)
			return r, nil
		}
	}
	return nil, nil
}

func outcome(err error) string {
	if err != nil {
		return "failed"
	}
	return "done"
}

// runURL is the run's page in the server's UI.
func (d *Driver) runURL(id string) string {
	return fmt.Sprintf("%s/app/%s/workspaces/%s/runs/%s", d.opts.Config.Address, d.opts.Config.Organization, d.name, id)
}

// pending returns an unfinished run of the workspace queued with the same
// message (the same task, verb and configuration), or nil. Unfinished
// runs of other ctsync messages that wait for a confirmation are stale (a
// previous attempt whose desired state has changed since): they are
// discarded, so that they do not hold up the queue.
func (d *Driver) pending(ctx context.Context, op, message string) (*tfe.Run, error) {
	list, err := d.client.Runs.List(ctx, d.ws.ID, &tfe.RunListOptions{ListOptions: tfe.ListOptions{PageSize: 20}})
	if err != nil {
		return nil, d.apiError(ctx, op, fmt.Sprintf("listing the runs of workspace %q", d.name), err)
	}
	var found *tfe.Run
	for _, r := range list.Items {
		if final(r.Status) || !strings.HasPrefix(r.Message, messagePrefix+d.opts.Spec.Name+" ") {
			continue
		}
		if r.Message == message {
			if found == nil {
				found = r
			}
			continue
		}
		if op != "plan" && r.Actions != nil && r.Actions.IsConfirmable {
			d.log.Info("discarding a stale run waiting for confirmation", "run_id", r.ID, "message", r.Message)
			if err := d.client.Runs.Discard(ctx, r.ID, tfe.RunDiscardOptions{Comment: tfe.String("superseded by a newer ctsync run")}); err != nil {
				d.log.Warn("discarding a stale run failed", "run_id", r.ID, "error", err)
			}
		}
	}
	return found, nil
}

// discardStale discards run id when it waits for a confirmation.
func (d *Driver) discardStale(ctx context.Context, id string) {
	if id == "" {
		return
	}
	r, err := d.client.Runs.Read(ctx, id)
	if err != nil || r.Actions == nil || !r.Actions.IsConfirmable {
		return
	}
	d.log.Info("discarding the recorded run of an older configuration: it waits for confirmation", "run_id", id)
	if err := d.client.Runs.Discard(ctx, id, tfe.RunDiscardOptions{Comment: tfe.String("superseded by a newer ctsync run")}); err != nil {
		d.log.Warn("discarding a stale run failed", "run_id", id, "error", err)
	}
}

// final reports whether a run status is one a run never leaves.
func final(s tfe.RunStatus) bool {
	switch s {
	case tfe.RunApplied, tfe.RunPlannedAndFinished, tfe.RunErrored, tfe.RunCanceled, tfe.RunDiscarded,
		tfe.RunPlannedAndSaved, "force_canceled", tfe.RunPolicySoftFailed:
		return true
	}
	return false
}

// wait polls the run until it is final, confirming it when it waits for
// a confirmation (a server that ignored auto-apply, or a held plan that
// ApplyPlan applies); a held plan's run (op "hold") is returned when it
// waits for its confirmation. The run is not
// cancelled when ctx ends: it finishes in the workspace, and the next
// attempt (here or on another instance) waits for it.
func (d *Driver) wait(ctx context.Context, op string, r *tfe.Run) (*tfe.Run, error) {
	confirmed := false
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		if final(r.Status) {
			return r, nil
		}
		if op == "hold" && r.Actions != nil && r.Actions.IsConfirmable {
			return r, nil // planned: held until ApplyPlan confirms it
		}
		if applies(op) && !confirmed && r.Actions != nil && r.Actions.IsConfirmable {
			if err := d.client.Runs.Apply(ctx, r.ID, tfe.RunApplyOptions{Comment: tfe.String("applied by ctsync")}); err != nil {
				return nil, d.apiError(ctx, op, "confirming run "+r.ID, err)
			}
			confirmed = true
		}
		t.Reset(d.opts.PollInterval)
		select {
		case <-ctx.Done():
			return nil, &driver.Error{Op: op, Summary: fmt.Sprintf("stopped waiting for run %s (%s): %v", r.ID, r.Status, ctx.Err()), Err: ctx.Err()}
		case <-t.C:
		}
		next, err := d.client.Runs.Read(ctx, r.ID)
		if err != nil {
			return nil, d.apiError(ctx, op, "reading run "+r.ID, err)
		}
		r = next
	}
}

// finish reads the run's plan and apply, writes their logs and builds the
// result.
func (d *Driver) finish(ctx context.Context, op string, r *tfe.Run, res driver.Result, lg io.Writer) (driver.Result, error) {
	var planLog, applyLog string
	if r.Plan != nil && r.Plan.ID != "" {
		p, err := d.client.Plans.Read(ctx, r.Plan.ID)
		if err != nil {
			return res, d.apiError(ctx, op, "reading the plan of run "+r.ID, err)
		}
		res.Changes = p.HasChanges
		res.Add, res.Change, res.Destroy = p.ResourceAdditions, p.ResourceChanges, p.ResourceDestructions
		planLog = d.readLog(ctx, func(c context.Context) (io.Reader, error) { return d.client.Plans.Logs(c, p.ID) })
		if res.Add+res.Change+res.Destroy == 0 {
			res.Add, res.Change, res.Destroy = tftext.PlanCounts(planLog)
		}
		fmt.Fprintf(lg, "\n# plan\n%s\n", planLog)
	}
	if r.Status == tfe.RunApplied && r.Apply != nil && r.Apply.ID != "" {
		a, err := d.client.Applies.Read(ctx, r.Apply.ID)
		applyLog = d.readLog(ctx, func(c context.Context) (io.Reader, error) { return d.client.Applies.Logs(c, r.Apply.ID) })
		switch {
		case err == nil && a.ResourceAdditions+a.ResourceChanges+a.ResourceDestructions > 0:
			res.Add, res.Change, res.Destroy = a.ResourceAdditions, a.ResourceChanges, a.ResourceDestructions
		default: // some servers (OTF) report no counts: the log has them
			if add, chg, del := tftext.SummaryCounts(applyLog, applyCounts); add+chg+del > 0 {
				res.Add, res.Change, res.Destroy = add, chg, del
			}
		}
		fmt.Fprintf(lg, "\n# apply\n%s\n", applyLog)
	}
	res.Output = planLog
	if op != "plan" && applyLog != "" {
		res.Output = applyLog
	}
	switch r.Status {
	case tfe.RunApplied:
		return res, nil
	case tfe.RunPlannedAndFinished:
		if !applies(op) || !res.Changes {
			return res, nil
		}
		// Changes planned, nothing applied: the server ran it as a plan.
		return res, &driver.Error{Op: op, Summary: fmt.Sprintf("run %s planned changes but ended without applying them", res.RunURL)}
	case tfe.RunPlanned, tfe.RunPlannedAndSaved:
		if !applies(op) {
			return res, nil
		}
	}
	if op == "hold" && r.Actions != nil && r.Actions.IsConfirmable {
		return res, nil // held, whatever the server's step (planned, cost estimated, policy checked)
	}
	text := planLog + "\n" + applyLog
	summary := tftext.Summarize(text)
	if summary == "" {
		summary = "the run ended " + string(r.Status)
	}
	return res, &driver.Error{Op: op, Summary: fmt.Sprintf("run %s %s: %s", res.RunURL, r.Status, summary),
		Err: fmt.Errorf("run %s: %s", r.ID, r.Status), Terminal: tftext.TerminalDiagnostic(text)}
}

var (
	applyCounts = regexp.MustCompile(`(?:Apply|Destroy) complete! Resources: (\d+) added, (\d+) changed, (\d+) destroyed`)
	ansi        = regexp.MustCompile("\x1b\\[[0-9;]*[A-Za-z]")
)

// readLog reads a finished phase's log (bounded in size and time), with
// terminal colour codes removed.
func (d *Driver) readLog(ctx context.Context, open func(context.Context) (io.Reader, error)) string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rd, err := open(ctx)
	if err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(rd, maxLog))
	return ansi.ReplaceAllString(string(b), "")
}
