package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/holddown"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/watch"
)

// observer reads what a task's runs depend on outside the task's own
// state: the watched Consul data (Options.Watcher), the store's run state
// of the task and of its upstream tasks, and the parts of the desired state
// outside Consul (Options.Desired). It keeps nothing and takes no lock of
// the controller: the reconciler, the note loop and the API's callers read
// through it.
type observer struct {
	opts *Options
	log  *slog.Logger
	// entries gives a task's query set and removal hold-down by name
	// (false: no such task), for desired: it takes the controller's lock
	// for that read only.
	entries func(name string) (*querySet, *holddown.Tracker, bool)
}

// desired computes a task's desired state now, outside a job (a held
// plan's approval checks it), through the view of the task's query set and
// hold-down, so that it matches what the task's jobs compute; a spec of
// no task is read raw (see desiredIn). The caller must not hold the
// controller's lock.
func (o *observer) desired(ctx context.Context, s *task.Spec) (d Desired, ready bool, err error) {
	if o.entries != nil {
		if qs, hd, ok := o.entries(s.Name); ok {
			return o.desiredIn(ctx, s, o.viewOf(o.opts.Clock.Now(), qs, hd))
		}
	}
	return o.desiredIn(ctx, s, o.rawView(s))
}

// desiredIn computes a task's desired state from the data of the view v
// (one evaluation's). ready is false while a watched query has no value
// yet; err is set when a part outside Consul cannot be read.
func (o *observer) desiredIn(ctx context.Context, s *task.Spec, v evalView) (d Desired, ready bool, err error) {
	data, ready := ConditionDigest(s, v.get, v.digest)
	if !ready {
		return Desired{}, false, nil
	}
	o.catchUpInputs(ctx, s, v.qs, data)
	inputs, ready := ModuleInputDigest(s, v.get, v.digest)
	if !ready {
		return Desired{}, false, nil
	}
	parts := map[string]string{driver.PartTask: SpecDigest(s), driver.PartData: data}
	if inputs != "" {
		parts[driver.PartModuleInputs] = inputs
	}
	if up := o.upstreamDigest(s); up != "" {
		parts[driver.PartUpstream] = up
	}
	if o.opts.Desired != nil {
		more, err := o.opts.Desired(ctx, *s)
		if err != nil {
			return Desired{}, true, err
		}
		for k, v := range more {
			if _, clash := parts[k]; !clash {
				parts[k] = v
			}
		}
	}
	return Desired{Fingerprint: fingerprintOf(parts, triggers), Used: fingerprintOf(parts, nil), Parts: parts}, true, nil
}

// inputs builds what the task's module receives: its Consul data, as the
// view v shows it, and the outputs of the tasks it receives them from.
func (o *observer) inputs(s *task.Spec, v evalView) (task.Inputs, bool) {
	in, ready := BuildInputs(s, v.get)
	if !ready {
		return in, false
	}
	if outs, _ := o.upstreamOutputs(s); outs != nil {
		in.TaskOutputs = make(map[string]json.RawMessage, len(outs))
		for k, v := range outs {
			in.TaskOutputs[k] = v
		}
	}
	return in, true
}

// catchUpInputs makes the module input data a run reads at least as new as
// the change of its condition that triggers the run. Each query has its
// own blocking read: when a change touches both (a new service appears in
// the catalog a catalog-services condition watches, and in the health of
// that service a services module_input reads), the condition's answer can
// come first, and the run would render the module input as it was before
// the change, and would not run again for it (module inputs do not
// trigger). So, when the condition's data (data, its digest) differs from
// the one of the task's last successful run, the module input queries whose
// answers are older than the condition's newest one are read again at once
// before the desired state and the inputs are taken. Without a change of
// the condition, or with a watcher that cannot do it, nothing is read.
func (o *observer) catchUpInputs(ctx context.Context, s *task.Spec, qs *querySet, data string) {
	r, ok := o.opts.Watcher.(Refresher)
	if !ok || o.opts.Store.Run(s.Name).Parts[driver.PartData] == data {
		return
	}
	cond := qs.conditionKeys(o.get)
	var keys []string
	for _, q := range qs.all(o.get) {
		if !cond[q.Key()] {
			keys = append(keys, q.Key())
		}
	}
	if len(keys) == 0 {
		return
	}
	var at uint64
	for k := range cond {
		if _, idx, ok := o.opts.Watcher.Get(k); ok && idx > at {
			at = idx
		}
	}
	if n := r.Refresh(ctx, keys, at); n > 0 {
		o.log.Debug("module inputs read again up to the condition's change", "task_name", s.Name, "queries", n, "index", at)
	}
}

// upstreamDigest is the task's driver.PartUpstream: the digest of the
// outputs it receives (module_input "task-outputs"); for a task without a
// condition, whose only trigger is its upstream tasks, also what each of
// them last applied, so that every change an upstream applies runs it
// after. "" when there is nothing to cover.
func (o *observer) upstreamDigest(s *task.Spec) string {
	_, outs := o.upstreamOutputs(s)
	if s.Condition.Type() != "" || len(s.Upstreams()) == 0 {
		return outs
	}
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s", len(outs), outs)
	for _, n := range s.Upstreams() { // sorted
		a := o.opts.Store.Run(n).Applied
		fmt.Fprintf(h, "%d:%s%d:%s", len(n), n, len(a), a)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// upstreamOutputs returns the recorded outputs of the tasks whose outputs
// the task receives, and their digest (driver.PartUpstream).
func (o *observer) upstreamOutputs(s *task.Spec) (map[string][]byte, string) {
	names := s.OutputTasks()
	if len(names) == 0 {
		return nil, ""
	}
	out := make(map[string][]byte, len(names))
	h := sha256.New()
	for _, n := range slices.Sorted(slices.Values(names)) {
		o := o.opts.Store.Run(n).Outputs
		if o == nil {
			o = []byte("{}")
		}
		out[n] = o
		fmt.Fprintf(h, "%d:%s%d:%s", len(n), n, len(o), o)
	}
	return out, hex.EncodeToString(h.Sum(nil))
}

// digest returns the digest of a watched value.
func (o *observer) digest(key string) (watch.Digest, bool) {
	if d, ok := o.opts.Watcher.(Digester); ok {
		return d.Digest(key)
	}
	v, _, ok := o.opts.Watcher.Get(key)
	if !ok {
		return watch.Digest{}, false
	}
	d, err := watch.DigestOf(v)
	return d, err == nil
}

// get adapts the watcher to a Getter.
func (o *observer) get(key string) (any, bool) {
	v, _, ok := o.opts.Watcher.Get(key)
	return v, ok
}

// refused returns an error naming the task, the query and Consul's answer
// when Consul refuses one of the task's queries (its query set qs) for
// good.
func (o *observer) refused(name string, qs *querySet) error {
	r, ok := o.opts.Watcher.(Refusals)
	if !ok || qs == nil {
		return nil
	}
	for _, q := range qs.all(o.get) {
		if err := r.RefusedError(q.Key()); err != nil {
			return fmt.Errorf("%w %q: query %s: %w", ErrRefused, name, q.Key(), err)
		}
	}
	return nil
}

// waitReady blocks until every query the task needs has a result (changed
// is signalled at each notification of the task). It fails at once when
// Consul refuses one of them for good.
func (o *observer) waitReady(ctx context.Context, changed <-chan struct{}, s *task.Spec, qs *querySet, wait time.Duration) error {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		if _, ready := Fingerprint(s, o.get, o.digest); ready {
			return nil
		}
		if err := o.refused(s.Name, qs); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return fmt.Errorf("timed out after %s waiting for data from Consul", wait)
		case <-changed:
		}
	}
}
