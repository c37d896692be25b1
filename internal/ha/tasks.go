package ha

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

// Persisting is the controller the API uses in a cluster: every task
// created, enabled, disabled or deleted through the API (and so through the
// CLI) is also saved in the shared store, so that the next leader applies
// the same change to its own configuration (ApplyStored). Everything else is
// the embedded controller's.
type Persisting struct {
	Controller
	Store store.Tasks
	// Configured holds the tasks of the configuration files: for those
	// only the enabled flag is saved, for the others the whole task.
	Configured *Configured
	Logger     *slog.Logger
	// Acquire, in spread mode, makes this instance the owner of a task
	// created with run=now before it runs (Spreader.Acquire); Changed is
	// told that the task list changed (Spreader.Kick).
	Acquire func(ctx context.Context, name string) error
	Changed func()
	// Mu, when set, is held while a change's record is saved and until
	// the controller has the change (Create, SetEnabled), and by whoever
	// applies the stored records to the controller (ApplyStored): a refresh
	// from Consul never sees a record without its change, or a change
	// without its record.
	Mu *sync.Mutex
	// Where names the store in messages: "consul" (the default) or, for
	// an instance alone, "the history database".
	Where string
	// Forget, for an instance alone, removes the record of a task created
	// through the API once it is deleted, instead of keeping the deletion
	// (which tells a cluster's other members to remove it): a task of that
	// name added to the configuration files later is not deleted at the
	// next start.
	Forget bool
}

// where is Where, "consul" by default.
func (p *Persisting) where() string {
	if p.Where == "" {
		return "consul"
	}
	return p.Where
}

// step saves rec as the task's record and runs do, holding Mu until the
// controller shows the change (applied, given what Controller.Task says of
// the task) or do returned. It returns do's error, or the save's (then do
// did not run).
func (p *Persisting) step(ctx context.Context, name string, rec store.TaskRecord, applied func(reconcile.TaskState, error) bool, do func() error) error {
	if p.Mu != nil {
		p.Mu.Lock()
	}
	unlock := func() {
		if p.Mu != nil {
			p.Mu.Unlock()
		}
	}
	if err := p.saveRecord(ctx, name, rec); err != nil {
		unlock()
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- do() }()
	for {
		changed := p.Controller.StateChanged()
		if st, err := p.Controller.Task(name); applied(st, err) {
			unlock()
			return <-errc
		}
		select {
		case err := <-errc:
			unlock()
			return err
		case <-changed:
		}
	}
}

// Create implements the API's Controller as one step: the task is saved
// in the shared store first, then created (and queued, or run with
// runNow). When the save fails (Consul unreachable, leadership lost, a
// record larger than Consul accepts) nothing has happened; when the
// creation fails (a query Consul refuses, a run=now run that failed) the
// record is put back as it was. Either the cluster has the task or it has
// no trace of it, and the same request can be sent again.
func (p *Persisting) Create(ctx context.Context, spec task.Spec, runNow bool) error {
	if _, err := p.Controller.Task(spec.Name); err == nil {
		return p.Controller.Create(ctx, spec, runNow) // the controller's exists (or being deleted) error
	}
	if runNow && p.Acquire != nil {
		if err := p.Acquire(ctx, spec.Name); err != nil {
			return fmt.Errorf("task %q cannot run here now: %w", spec.Name, err)
		}
	}
	prev, had := p.Store.TaskRecords()[spec.Name]
	saved := false
	err := p.step(ctx, spec.Name, p.recordFor(spec), func(_ reconcile.TaskState, err error) bool { return err == nil }, func() error {
		saved = true
		return p.Controller.Create(ctx, spec, runNow)
	})
	if saved {
		defer p.changed()
		if err != nil {
			p.restore(ctx, spec.Name, prev, had)
		}
	}
	return err
}

func (p *Persisting) changed() {
	if p.Changed != nil {
		p.Changed()
	}
}

// SetEnabled implements the API's Controller as one step, as Create: the
// new flag is saved first, then applied; a change the controller refuses
// (the task is running, or gone) puts the record back. With run=now the
// flag changes even when the run fails (the record says so too); inspect
// changes nothing.
func (p *Persisting) SetEnabled(ctx context.Context, name string, enabled bool, mode reconcile.EnableMode) (reconcile.PlanResult, error) {
	st, err := p.Controller.Task(name)
	if mode == reconcile.EnableInspect || err != nil || st.Deleting {
		return p.Controller.SetEnabled(ctx, name, enabled, mode) // inspect, or the controller's not-found error
	}
	prev, had := p.Store.TaskRecords()[name]
	spec := st.Spec
	spec.Enabled = enabled
	var res reconcile.PlanResult
	err = p.step(ctx, name, p.recordFor(spec), func(st reconcile.TaskState, err error) bool { return err == nil && st.Spec.Enabled == enabled }, func() error {
		var err error
		res, err = p.Controller.SetEnabled(ctx, name, enabled, mode)
		return err
	})
	if errors.Is(err, reconcile.ErrNotFound) || errors.Is(err, reconcile.ErrActive) {
		p.restore(ctx, name, prev, had) // nothing changed
	}
	return res, err
}

// Update implements the API's Updater as one step, as Create: the task's
// new settings are saved first, then applied by the controller's Update;
// a change the controller refuses puts the record back. A controller
// without Update refuses every change but enabled.
func (p *Persisting) Update(ctx context.Context, spec task.Spec) error {
	up, ok := p.Controller.(updater)
	if !ok {
		return errors.New("this controller changes only the enabled flag of a task")
	}
	if _, err := p.Controller.Task(spec.Name); err != nil {
		return err
	}
	prev, had := p.Store.TaskRecords()[spec.Name]
	saved := false
	err := p.step(ctx, spec.Name, p.recordFor(spec), func(reconcile.TaskState, error) bool { return false }, func() error {
		saved = true
		return up.Update(ctx, spec)
	})
	if saved {
		defer p.changed()
		if err != nil {
			p.restore(ctx, spec.Name, prev, had)
		}
	}
	return err
}

// recordFor is the record of a task: for a configured task its enabled
// flag only, for the others the whole task.
func (p *Persisting) recordFor(spec task.Spec) store.TaskRecord {
	if p.Configured.Has(spec.Name) {
		on := spec.Enabled
		return store.TaskRecord{Enabled: &on}
	}
	return store.TaskRecord{Spec: &spec}
}

// restore puts a task's record back as it was before a change that did
// not happen: the previous record, or none. It is written even when ctx
// (the request's) was cancelled.
func (p *Persisting) restore(ctx context.Context, name string, prev store.TaskRecord, had bool) {
	ctx = context.WithoutCancel(ctx)
	var err error
	if had {
		err = p.Store.SaveTask(ctx, name, prev)
	} else {
		err = p.Store.RemoveTaskRecord(ctx, name)
	}
	if err != nil && p.Logger != nil {
		p.Logger.Error("ha: a change that failed could not be undone in "+p.where()+"; the next leader (or the next start) may apply it", "task_name", name, "error", err)
	}
}

// Delete implements the API's Controller. The deletion is saved first, so
// that a leader that dies while waiting for the task's run to end does not
// lose it, holding Mu until the controller has the task deleting or gone:
// a refresh from Consul does not carry out (and so answer for) the
// deletion in its place. A delete that fails puts the previous record
// back.
func (p *Persisting) Delete(ctx context.Context, name string, destroy bool) error {
	if _, err := p.Controller.Task(name); err != nil {
		return p.Controller.Delete(ctx, name, destroy) // the controller's not-found error
	}
	prev, had := p.Store.TaskRecords()[name]
	rec := store.TaskRecord{Deleted: true, Destroy: destroy}
	if destroy && !p.Configured.Has(name) {
		if st, err := p.Controller.Task(name); err == nil {
			spec := st.Spec
			rec.Spec = &spec // a new leader needs the task to finish the destroy
		}
	}
	saved := false
	err := p.step(ctx, name, rec, func(st reconcile.TaskState, err error) bool { return err != nil || st.Deleting }, func() error {
		saved = true
		return p.Controller.Delete(ctx, name, destroy)
	})
	if !saved {
		return fmt.Errorf("saving the deletion of task %q in %s: %w", name, p.where(), errors.Unwrap(err))
	}
	defer p.changed()
	ctx = context.WithoutCancel(ctx) // what is left to record is recorded whatever became of the request
	var held *reconcile.DestroyHeldError
	switch {
	case errors.As(err, &held):
		// A safety gate holds the destroy plan: the deletion stays
		// recorded with its destroy pending. A new leader plans the
		// destroy again, and its gates hold it again: nothing is
		// destroyed without an approval. A rejection or an expiry puts
		// the task's record back (Kept).
	case err != nil && !errors.Is(err, reconcile.ErrNotFound):
		var rerr error
		if had {
			rerr = p.Store.SaveTask(ctx, name, prev)
		} else {
			rerr = p.save(ctx, name)
		}
		if rerr != nil && p.Logger != nil {
			p.Logger.Error("ha: the failed deletion could not be undone in "+p.where(), "task_name", name, "error", rerr)
		}
	case p.forget(ctx, name):
		// Alone: a deleted task created through the API leaves no record.
	case destroy:
		// Destroyed: what remains to record is the deletion alone.
		if serr := p.Store.SaveTask(ctx, name, store.TaskRecord{Deleted: true}); serr != nil && p.Logger != nil {
			p.Logger.Warn("ha: the finished destroy could not be recorded; the next leader will destroy the (empty) state again", "task_name", name, "error", serr)
		}
	}
	return err
}

// forget removes the record of a deleted task created through the API
// when Forget is set, and reports whether it did.
func (p *Persisting) forget(ctx context.Context, name string) bool {
	if !p.Forget || p.Configured.Has(name) {
		return false
	}
	if err := p.Store.RemoveTaskRecord(ctx, name); err != nil {
		if p.Logger != nil {
			p.Logger.Warn("the record of a deleted task could not be removed; the deletion stays recorded", "task_name", name, "error", err)
		}
		return false
	}
	return true
}

// Kept records a task whose deletion with destroy was not carried out: its
// destroy plan, held for approval, was rejected or expired (the deletion
// was saved with its destroy pending, see Delete). The task's record is
// the task as the controller has it again, so that a new leader keeps it
// rather than planning its destroy again.
func (p *Persisting) Kept(ctx context.Context, name string) {
	if p.Mu != nil {
		p.Mu.Lock()
		defer p.Mu.Unlock()
	}
	if st, err := p.Controller.Task(name); err != nil || st.Deleting {
		return // gone, or deleted since
	}
	if err := p.save(context.WithoutCancel(ctx), name); err == nil {
		p.changed()
	}
}

// Destroyed records the deletion of a task done: its held destroy plan was
// approved and applied, and the controller has deleted the task (the
// deletion was saved with its destroy pending, see Delete).
func (p *Persisting) Destroyed(ctx context.Context, name string) {
	if p.Mu != nil {
		p.Mu.Lock()
		defer p.Mu.Unlock()
	}
	if _, err := p.Controller.Task(name); err == nil {
		return // a task of that name again
	}
	if p.forget(context.WithoutCancel(ctx), name) {
		return
	}
	if err := p.saveRecord(context.WithoutCancel(ctx), name, store.TaskRecord{Deleted: true}); err == nil {
		p.changed()
	}
}

// save writes the record that describes the task as the controller has it
// now.
func (p *Persisting) save(ctx context.Context, name string) error {
	return p.saveRecord(ctx, name, recordOf(p.Controller, name, p.Configured))
}

// saveRecord writes a task's record.
func (p *Persisting) saveRecord(ctx context.Context, name string, rec store.TaskRecord) error {
	if err := p.Store.SaveTask(ctx, name, rec); err != nil {
		if p.Logger != nil {
			p.Logger.Error("ha: task record not saved in "+p.where(), "task_name", name, "error", err)
		}
		return fmt.Errorf("saving task %q in %s: %w", name, p.where(), err)
	}
	return nil
}

func recordOf(c Controller, name string, configured *Configured) store.TaskRecord {
	st, err := c.Task(name)
	switch {
	case err != nil || st.Deleting:
		return store.TaskRecord{Deleted: true}
	case configured.Has(name):
		on := st.Spec.Enabled
		return store.TaskRecord{Enabled: &on}
	default:
		spec := st.Spec
		return store.TaskRecord{Spec: &spec}
	}
}

// ApplyStored makes the controller's task set what the cluster agreed on:
// the configured tasks, plus the tasks created through the API, minus the
// ones deleted through it, with the enabled flags set through it. It runs on
// a new leader before its controller becomes active; deletions remove the
// task from this instance only (the previous leader destroyed what was asked
// to be destroyed). Tasks this instance created in an earlier term that the
// records no longer hold (another leader ran with -reset-storage) are
// removed too.
//
// A deletion whose destroy was not confirmed is not applied here: the task
// is kept (created from its record when it is not known here) and its name
// returned in destroys, for the new leader to delete it with destroy once
// it leads (ResumeDestroys).
//
// configEnabled holds the enabled flag of each configured task as its
// configuration file says: a configured task with no record of its flag
// (never changed through the API, or the records were reset) gets it back,
// whatever an earlier application of other records did to it.
func ApplyStored(ctx context.Context, c Controller, recs map[string]store.TaskRecord, configured, configEnabled map[string]bool, log *slog.Logger) (destroys []string, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	names := make([]string, 0, len(recs))
	for n := range recs {
		names = append(names, n)
	}
	slices.Sort(names)
	var errs []error
	exists := func(name string) (reconcile.TaskState, bool) {
		st, err := c.Task(name)
		return st, err == nil && !st.Deleting
	}
	for _, name := range names {
		rec := recs[name]
		st, ok := exists(name)
		switch {
		case rec.Deleted && rec.Destroy:
			if !ok && rec.Spec != nil && !configured[name] {
				spec := *rec.Spec
				spec.Enabled = false // nothing but the destroy runs
				if err := c.Create(ctx, spec, false); err != nil && !errors.Is(err, reconcile.ErrExists) {
					errs = append(errs, fmt.Errorf("creating task %q to finish its destroy: %w", name, err))
					continue
				}
				ok = true
			}
			if !ok {
				log.Error("ha: a task deleted with destroy cannot be destroyed here: it is neither configured nor recorded", "task_name", name)
				continue
			}
			destroys = append(destroys, name)
		case rec.Deleted:
			if ok {
				if err := c.Delete(ctx, name, false); err != nil && !errors.Is(err, reconcile.ErrNotFound) {
					errs = append(errs, fmt.Errorf("deleting task %q: %w", name, err))
					continue
				}
				log.Info("ha: task deleted through the api removed", "task_name", name)
			}
		case rec.Spec != nil:
			if !ok {
				spec := *rec.Spec
				if err := c.Create(ctx, spec, false); err != nil && !errors.Is(err, reconcile.ErrExists) {
					errs = append(errs, fmt.Errorf("creating task %q: %w", name, err))
					continue
				}
				log.Info("ha: task created through the api added", "task_name", name, "enabled", spec.Enabled)
				continue
			}
			if configured[name] {
				log.Warn("ha: a task created through the api has the name of a task of the configuration files, which wins: the stored task is ignored", "task_name", name)
				continue
			}
			if up, ok := c.(updater); ok && !sameSettings(st.Spec, *rec.Spec) {
				// Its settings were changed through the API (PATCH)
				// since this instance created it.
				if err := up.Update(ctx, *rec.Spec); err != nil {
					errs = append(errs, fmt.Errorf("updating task %q: %w", name, err))
					continue
				}
				log.Info("ha: task changed through the api updated", "task_name", name)
				continue
			}
			if st.Spec.Enabled != rec.Spec.Enabled {
				if err := setEnabled(ctx, c, name, rec.Spec.Enabled); err != nil {
					errs = append(errs, err)
				}
			}
		case rec.Enabled != nil:
			if ok && st.Spec.Enabled != *rec.Enabled {
				if err := setEnabled(ctx, c, name, *rec.Enabled); err != nil {
					errs = append(errs, err)
					continue
				}
				log.Info("ha: enabled flag set through the api applied", "task_name", name, "enabled", *rec.Enabled)
			}
		}
	}
	for name, on := range configEnabled {
		if rec, ok := recs[name]; ok && (rec.Enabled != nil || rec.Deleted) {
			continue
		}
		if st, ok := exists(name); ok && st.Spec.Enabled != on {
			if err := setEnabled(ctx, c, name, on); err != nil {
				errs = append(errs, err)
				continue
			}
			log.Info("ha: enabled flag of the configuration restored", "task_name", name, "enabled", on)
		}
	}
	for _, st := range c.Tasks() {
		name := st.Spec.Name
		if st.Deleting || configured[name] {
			continue
		}
		if rec, ok := recs[name]; ok && (rec.Spec != nil || (rec.Deleted && rec.Destroy)) {
			continue
		}
		if err := c.Delete(ctx, name, false); err != nil && !errors.Is(err, reconcile.ErrNotFound) {
			errs = append(errs, fmt.Errorf("removing task %q: %w", name, err))
			continue
		}
		log.Info("ha: task no longer in the cluster's records removed", "task_name", name)
	}
	return destroys, errors.Join(errs...)
}

// updater is a controller that replaces a task's settings
// (reconcile.Controller.Update).
type updater interface {
	Update(ctx context.Context, spec task.Spec) error
}

// sameSettings reports whether two specs of a task differ at most in their
// enabled flag, as their JSON says (a record holds the task as JSON).
func sameSettings(a, b task.Spec) bool {
	a.Enabled, b.Enabled = false, false
	ja, erra := stableJSON(a)
	jb, errb := stableJSON(b)
	return erra == nil && errb == nil && bytes.Equal(ja, jb)
}

// stableJSON is the JSON of a spec as read back from its JSON (a stored
// record): what the JSON does not keep, or keeps in another form, does
// not count.
func stableJSON(s task.Spec) ([]byte, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var back task.Spec
	if err := json.Unmarshal(b, &back); err != nil {
		return nil, err
	}
	return json.Marshal(back)
}

// ResumeDestroys finishes, once this instance leads, the deletions with
// destroy that a previous leader started and did not finish (ApplyStored
// lists them): each task is deleted with destroy through p, which records
// the outcome. It returns when they are done or ctx ends.
func ResumeDestroys(ctx context.Context, p *Persisting, names []string, log *slog.Logger) {
	if len(names) == 0 {
		return
	}
	if err := p.Controller.WaitActive(ctx); err != nil {
		return
	}
	for _, name := range names {
		log.Info("ha: finishing the destroy of a task deleted during the previous leader's term", "task_name", name)
		var held *reconcile.DestroyHeldError
		switch err := p.Delete(ctx, name, true); {
		case errors.As(err, &held):
			// Expected of a task with safety gates: its destroy plan is
			// held again, and approving it destroys and deletes the task.
			log.Info("ha: the destroy of the deleted task waits for approval; nothing destroyed", "task_name", name,
				"plan", held.Plan.ID, "reason", held.Plan.Reason)
		case err != nil && !errors.Is(err, reconcile.ErrNotFound):
			log.Error("ha: finishing the destroy of a deleted task failed; the next leader tries again", "task_name", name, "error", err)
		}
	}
}

// setEnabled changes a task's flag, waiting for a run this instance still
// has in progress (from an earlier term) to end.
func setEnabled(ctx context.Context, c Controller, name string, enabled bool) error {
	for {
		changed := c.StateChanged()
		_, err := c.SetEnabled(ctx, name, enabled, "")
		if !errors.Is(err, reconcile.ErrActive) {
			if err != nil {
				return fmt.Errorf("setting enabled=%t on task %q: %w", enabled, name, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed: // the run ended, or the task moved on: try again
		}
	}
}
