package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/ctsync/ctsync/internal/holddown"
	"github.com/ctsync/ctsync/internal/task"
)

// Update replaces a task's settings with spec (same name), keeping what
// the controller knows of it: its run state and history (the store), its
// held plan and the gate keeper's state. The task's queries follow the new
// settings; when its desired state changed, it runs as any change does
// (through its buffer period; a schedule task on its next tick); a held
// plan made from the old settings is superseded by the next plan. A run in
// progress finishes with the settings it started with: Update waits for it
// to end (or ctx). A task whose deletion with destroy waits for approval
// cannot be updated (ErrActive).
//
// The new settings reach the task as any other change does: through its
// lifecycle (replaceLocked: disabled, evStop; enabled, a change made due by
// markDirtyLocked), and the run that follows is a worker's job like any
// other, committed by the one applier (commitLocked). A queued run, or a
// request waiting for a worker, reads the new settings when a worker takes
// it (its job's snapshot).
//
// The reload of a changed task of the configuration files and PATCH
// /v1/tasks/{name} of a task created through the API call it.
func (c *Controller) Update(ctx context.Context, spec task.Spec) error {
	name := spec.Name
	c.mu.Lock()
	e := c.tasks[name]
	gone := func() bool { return c.tasks[name] != e || e.deletingLocked() }
	if e == nil || gone() {
		c.mu.Unlock()
		return fmt.Errorf("%w: a task with name '%s' does not exist or has not been initialized yet", ErrNotFound, name)
	}
	// The run in progress (a worker's, an API call's, a drift check's)
	// holds the task with the settings it started with.
	if err := c.awaitLocked(ctx, func() bool { return gone() || e.lc.phase != phaseRunning }); err != nil {
		c.mu.Unlock()
		return err
	}
	if gone() {
		c.mu.Unlock()
		return fmt.Errorf("%w: a task with name '%s' does not exist or has not been initialized yet", ErrNotFound, name)
	}
	if e.destroyHeldLocked() {
		c.mu.Unlock()
		return fmt.Errorf("%w: task '%s' cannot be updated: its deletion with destroy waits for approval of plan %s (reject it to keep the task)",
			ErrActive, name, e.lc.held.plan.ID)
	}
	others := make([]task.Spec, 0, len(c.tasks))
	for n, o := range c.tasks {
		if n != name && !o.deletingLocked() {
			others = append(others, o.spec)
		}
	}
	if err := task.CheckAdded(spec, others); err != nil {
		c.mu.Unlock()
		return err
	}
	old := c.replaceLocked(e, spec)
	qs := e.qs
	c.mu.Unlock()

	// The queries of the old settings that the new ones do not have go;
	// the new ones come (a query both have stays, with its data).
	keep := map[string]bool{}
	for _, q := range StaticQueries(&spec) {
		keep[q.Key()] = true
	}
	for _, q := range StaticQueries(&old) {
		if !keep[q.Key()] {
			c.opts.Watcher.Unsubscribe(name, q.Key())
		}
	}
	c.subscribe(name, qs)
	c.src.syncDynamic(name, e, qs)
	c.log.Info("task updated", "task_name", name, "enabled", spec.Enabled)
	return nil
}

// replaceLocked gives a task that no run holds the settings spec and moves
// it through its lifecycle: disabled, what was due is dropped (evStop);
// enabled, it is due as after a change (markDirtyLocked: the run skips when
// the desired state did not move). It returns the old settings. c.mu is
// held.
func (c *taskTable) replaceLocked(e *entry, spec task.Spec) task.Spec {
	old := e.spec
	e.spec = spec
	// What it watches is derived once per definition (queryset.go); its
	// removal hold-down keeps what is pending under a new delay, and goes
	// (what was pending applies with the next run) when the delay does.
	e.qs = newQuerySet(&e.spec)
	switch d := spec.Removal(); {
	case d <= 0:
		e.hd = nil
	case e.hd == nil:
		e.hd = holddown.New(d)
	default:
		e.hd.SetDelay(d)
	}
	e.run.drv = nil // built again from the new settings by the next job
	e.nextCron = time.Time{}
	e.lastNames, e.nameSeen = nil, false
	// Its variables' values are shown as written in its own text.
	c.opts.Redactor.Protect(spec.Name, spec.VariableStrings()...)
	// The tasks whose outputs it receives now expose them: their next
	// job builds their driver anew (a running one keeps its own).
	for _, up := range spec.OutputTasks() {
		if u := c.tasks[up]; u != nil && u.lc.phase != phaseRunning {
			u.run.drv = nil
		}
	}
	switch {
	case !spec.Enabled:
		if old.Enabled {
			c.stepLocked(e, evStop, wake{}) // off the queue, no timer
			c.wakeDependentsLocked(spec.Name)
		}
	default:
		c.markDirtyLocked(e, Due(TriggerChange)) // runs when its desired state moved
	}
	signal(c.driftKick) // drift checks and cron ticks follow the settings
	signal(c.cronKick)
	c.changedLocked()
	return old
}
