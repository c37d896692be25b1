package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/task"
)

// DesiredFunc returns the digests of what, besides its spec and its Consul
// data, determines the result of a task's run: driver.PartModule, driver.PartProviders,
// driver.PartBackend, driver.PartRequiredProviders and driver.PartBinary (a driver may give
// fewer, or others). It is called each time the controller decides whether
// a task must run, so it should be cheap; an error (a module directory that
// cannot be read) fails that decision, naming what could not be read.
type DesiredFunc func(ctx context.Context, spec task.Spec) (map[string]string, error)

// ErrWaiting is wrapped by a DesiredFunc error that says the task cannot run
// yet for a reason that will pass by itself (a provider block waiting for
// Vault to answer): the task is not run and not marked failed; its status
// shows the reason (TaskState.Waiting), and it is looked at again when it
// is notified (the waiting part resolved) and, to be safe, with backoff.
var ErrWaiting = errors.New("waiting")

// Desired is a task's desired state: everything a run depends on.
type Desired struct {
	// Fingerprint is one hash over the parts that trigger the task (all
	// but the non-trigger ones, see triggers): the task runs when it
	// differs from the one of its last successful run.
	Fingerprint string
	// Used is one hash over every part: what a run with this desired
	// state uses (recorded with its event). It equals Fingerprint for a
	// task without module inputs.
	Used string
	// Parts holds the digest of each part, by name (Part* constants).
	Parts map[string]string
}

// triggers reports whether a part of the desired state triggers a run: the
// data of module inputs does not (CTS semantics), it is read by the run
// that the condition, or another part, triggers; nor does the module
// version `terraform init` resolved, which the first run only learns (the
// constraint it resolves, in the task and the module parts, does).
func triggers(part string) bool {
	return part != driver.PartModuleInputs && part != driver.PartModuleResolved
}

// fingerprintOf hashes the parts in name order: those keep selects, or all
// of them when keep is nil.
func fingerprintOf(parts map[string]string, keep func(string) bool) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(parts)) {
		if keep != nil && !keep(k) {
			continue
		}
		fmt.Fprintf(h, "%d:%s%d:%s", len(k), k, len(parts[k]), parts[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// changedParts names the parts that trigger a run whose digest differs
// from the ones recorded with the last successful run, in a stable order;
// nil when nothing was recorded (the task never ran here).
func changedParts(old, now map[string]string) []string {
	if len(old) == 0 {
		return nil
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(now)) {
		if old[k] != now[k] && triggers(k) {
			out = append(out, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(old)) {
		if _, ok := now[k]; !ok && triggers(k) {
			out = append(out, k)
		}
	}
	return out
}

// inputsMoved reports whether the data of the task's module inputs differs
// from what its last successful run used (recorded in old).
func inputsMoved(old, now map[string]string) bool {
	return old[driver.PartModuleInputs] != now[driver.PartModuleInputs]
}

// changeTrigger is a run's trigger when its desired state changed: the
// watched key that fired when only the Consul data changed, else the parts
// that changed ("module changed, provider config changed").
func changeTrigger(due Trigger, changed []string) string {
	if len(changed) == 0 || (len(changed) == 1 && changed[0] == driver.PartData) {
		return due.String()
	}
	words := make([]string, 0, len(changed))
	for _, p := range changed {
		if p == driver.PartData && due.Kind == TriggerChange && strings.Contains(due.Detail, "/") {
			words = append(words, due.Detail) // the watched key (a query's) says more
			continue
		}
		words = append(words, p+" changed")
	}
	return strings.Join(words, ", ")
}
