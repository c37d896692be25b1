package terraform

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/terraform-exec/tfexec"

	"github.com/ctsync/ctsync/internal/backoff"
	"github.com/ctsync/ctsync/internal/driver"
)

// When an apply or a destroy has changed the infrastructure but cannot
// save the state to the backend (the consul backend while Consul
// restarts), Terraform writes the state into errored.tfstate in the task's
// directory. Left there, the backend's state lacks the apply and the next
// run would create again what this one created. The driver pushes it back
// (`terraform state push`) with retries, right after the failed command
// and, when that did not succeed (the backend stayed away, or the daemon
// stopped), before the next run of the task. A run whose only errors were
// the failed save is then reported as applied.

const erroredState = "errored.tfstate"

// pushBound bounds how long a push is retried after a command (then the
// next run tries again first). It outlasts the lock that the failed
// command could not release when the backend went away: the consul
// backend's lock session expires within twice its 15 s TTL, and its lock
// delay follows (a push waits for it; a forced unlock is no way out: the
// consul backend takes the lock to load the state even for force-unlock).
// A variable for the tests.
var pushBound = 2 * time.Minute

// pushPolicy spaces the push attempts.
var pushPolicy = backoff.Policy{Base: time.Second, Max: 10 * time.Second, Jitter: backoff.Around10}

// saveSummaries are the error diagnostics of a command that changed the
// infrastructure but could not save the state (or release its lock) in the
// backend: once the state is pushed back, they are resolved.
var saveSummaries = []string{"Failed to save state", "Failed to persist state to backend", "Error releasing the state lock"}

// onlySaveErrors reports whether every error diagnostic is one of
// saveSummaries (and there is at least one).
func onlySaveErrors(diags driver.Diagnostics) bool {
	errs := diags.Errors()
	for _, d := range errs {
		found := false
		for _, s := range saveSummaries {
			found = found || strings.HasPrefix(d.Summary, s)
		}
		if !found {
			return false
		}
	}
	return len(errs) > 0
}

// pushErrored pushes errored.tfstate back to the backend when there is
// one, retrying for at most bound, and removes it once pushed; pushed says
// it was. A push Terraform refuses for good (the backend holds a newer
// state or another lineage: someone applied since) moves the file aside
// (errored.tfstate.<unix time>.refused) with a warning, so that it does not
// stop every later run. An empty file (no state: Terraform had none to
// save) is removed, and a file Terraform cannot read (damaged) is moved
// aside (errored.tfstate.<unix time>.unreadable): no attempt could ever
// push either, and retrying them failed every later run of the task.
// Without a file it does nothing.
func (d *Driver) pushErrored(ctx context.Context, bound time.Duration) (pushed bool, err error) {
	path := filepath.Join(d.workDir, erroredState)
	if !fileExists(path) {
		return false, nil
	}
	if fi, err := os.Stat(path); err == nil && fi.Size() == 0 {
		// An empty file holds no state: `state push` refuses it ("no
		// state") at every attempt.
		if rmErr := os.Remove(path); rmErr != nil {
			return false, fmt.Errorf("%s is empty (no state to push back) and cannot be removed: %w", path, rmErr)
		}
		d.sink.note("%s is empty: there is no state to push back; removed", erroredState)
		d.log.Warn("removed an empty "+erroredState+": Terraform left no state to push back", "file", path)
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	d.sink.note("%s is in the task's directory: Terraform could not save a run's state to the backend; pushing it back", erroredState)
	for attempt := 1; ; attempt++ {
		d.sink.begin("state push "+erroredState, false)
		err := d.tf.StatePush(ctx, path, tfexec.Lock(true), tfexec.LockTimeout("5s"))
		_, stderr := d.sink.output()
		if err == nil {
			if rmErr := os.Remove(path); rmErr != nil {
				d.log.Warn("the state was pushed back but "+erroredState+" cannot be removed", "error", rmErr)
			}
			d.sink.note("the state in %s is saved to the backend", erroredState)
			d.log.Info("pushed the state Terraform could not save back to the backend", "attempts", attempt)
			return true, nil
		}
		if unreadablePush(stderr + "\n" + err.Error()) {
			aside, mvErr := moveAside(path, "unreadable")
			if mvErr != nil {
				return false, fmt.Errorf("terraform cannot read the state in %s and it cannot be moved aside: %w", path, mvErr)
			}
			d.sink.note("terraform cannot read %s (damaged): moved aside to %s", erroredState, filepath.Base(aside))
			d.log.Warn("terraform cannot read the state it could not save (the file is damaged): moved aside; "+
				"the resources of the run that wrote it may have to be imported", "file", aside, "error", usableErr(err))
			return false, nil
		}
		if refusedPush(stderr + "\n" + err.Error()) {
			aside, mvErr := moveAside(path, "refused")
			if mvErr != nil {
				return false, fmt.Errorf("the backend refuses the state in %s and it cannot be moved aside: %w", path, mvErr)
			}
			d.log.Warn("the backend refuses the state Terraform could not save (it holds a newer state or another lineage): moved aside; "+
				"the resources of the run that wrote it may have to be imported", "file", aside, "error", usableErr(err))
			return false, nil
		}
		wait := pushPolicy.Delay(attempt)
		d.sink.note("state push failed (attempt %d), retrying in %s: %s", attempt, wait.Round(time.Millisecond), firstLine(usableErr(err).Error()))
		if !backoff.Sleep(ctx, wait) {
			return false, fmt.Errorf("the state Terraform could not save is still in %s: pushing it back failed %d times, last: %w", path, attempt, usableErr(err))
		}
	}
}

// refusedPush reports whether a failed push's output says the backend
// refuses that state for good.
func refusedPush(out string) bool {
	return strings.Contains(out, "cannot import state") || strings.Contains(out, "cannot overwrite existing state")
}

// unreadablePush reports whether a failed push's output says Terraform
// cannot read the file it was asked to push (not a state, or a damaged
// one): no later attempt pushes it.
func unreadablePush(out string) bool {
	return strings.Contains(out, "Error reading source state")
}

// moveAside renames path to path.<unix time>.<why> and returns the new
// name.
func moveAside(path, why string) (string, error) {
	aside := fmt.Sprintf("%s.%d.%s", path, time.Now().Unix(), why)
	return aside, os.Rename(path, aside)
}
