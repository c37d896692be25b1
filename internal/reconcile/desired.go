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
	// Fingerprint is one hash over every part.
	Fingerprint string
	// Parts holds the digest of each part, by name (Part* constants).
	Parts map[string]string
}

// desired computes a task's desired state. ready is false while a watched
// query has no value yet; err is set when a part outside Consul cannot be
// read.
func (c *Controller) desired(ctx context.Context, s *task.Spec) (d Desired, ready bool, err error) {
	data, ready := DataDigest(s, c.get, c.digest)
	if !ready {
		return Desired{}, false, nil
	}
	parts := map[string]string{driver.PartTask: SpecDigest(s), driver.PartData: data}
	if _, up := c.upstreamOutputs(s); up != "" {
		parts[driver.PartUpstream] = up
	}
	if c.opts.Desired != nil {
		more, err := c.opts.Desired(ctx, *s)
		if err != nil {
			return Desired{}, true, err
		}
		for k, v := range more {
			if _, clash := parts[k]; !clash {
				parts[k] = v
			}
		}
	}
	return Desired{Fingerprint: fingerprintOf(parts), Parts: parts}, true, nil
}

// fingerprintOf hashes the parts in name order.
func fingerprintOf(parts map[string]string) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(parts)) {
		fmt.Fprintf(h, "%d:%s%d:%s", len(k), k, len(parts[k]), parts[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// changedParts names the parts whose digest differs from the ones recorded
// with the last successful run, in a stable order; nil when nothing was
// recorded (the task never ran here).
func changedParts(old, now map[string]string) []string {
	if len(old) == 0 {
		return nil
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(now)) {
		if old[k] != now[k] {
			out = append(out, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(old)) {
		if _, ok := now[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}

// changeTrigger is a run's trigger when its desired state changed: the
// watched key that fired when only the Consul data changed, else the parts
// that changed ("module changed, provider config changed").
func changeTrigger(trigger string, changed []string) string {
	if len(changed) == 0 || (len(changed) == 1 && changed[0] == driver.PartData) {
		return trigger
	}
	words := make([]string, 0, len(changed))
	for _, p := range changed {
		if p == driver.PartData && trigger != "" && strings.Contains(trigger, "/") {
			words = append(words, trigger) // the watched key says more
			continue
		}
		words = append(words, p+" changed")
	}
	return strings.Join(words, ", ")
}
