package reconcile

import (
	"context"
	"fmt"
	"github.com/ctsync/ctsync/internal/holddown"
	"slices"

	"github.com/ctsync/ctsync/internal/task"
)

// Task chaining: a task runs after the tasks it depends on (depends_on and
// module_input "task-outputs", task.Spec.Upstreams) have applied the
// change, and receives the outputs of the ones it lists as module input.
//
// The rule is checked when the task is about to run (upstreamHold): a task
// whose upstream has something left to do (it is queued, running, waiting
// for a retry or a buffer period, its last run failed, or its desired state
// differs from what it applied) is held: it does not run, and its status
// says why. Whenever a run of a task ends, the tasks that depend on it are
// queued again (wakeDependentsLocked) and look again: a run that changed
// the upstream's outputs changes their desired state (driver.PartUpstream).

// upstreamView is an upstream task as a job's snapshot has it.
type upstreamView struct {
	exists bool
	phase  phase
	spec   task.Spec
	qs     *querySet
	hd     *holddown.Tracker
}

// kick is an upstream task a job needs to run: to record its outputs
// (outputs), or to apply a change its own notification may still be on
// its way for.
type kick struct {
	name    string
	outputs bool
	by      string // the task that needs it
}

// upstreamHold returns why the task of j cannot run yet because of a task
// it depends on ("" when it can), and the upstream tasks to make due.
func (r *reconciler) upstreamHold(ctx context.Context, j job) (string, []kick) {
	s := j.spec
	outputs := s.OutputTasks()
	for _, name := range s.Upstreams() {
		u := j.upstreams[name]
		if !u.exists {
			return fmt.Sprintf("upstream task %q does not exist", name), nil
		}
		if !u.spec.Enabled {
			// A disabled upstream holds nothing back (not even a failed
			// last run): the task uses what it applied last.
			continue
		}
		st := r.opts.Store.Run(name)
		switch {
		case st.Dirty():
			return fmt.Sprintf("upstream task %q failed; waiting for it to succeed", name), nil
		case u.phase != phaseIdle:
			return fmt.Sprintf("waiting for upstream task %q (%s)", name, u.phase), nil
		}
		if slices.Contains(outputs, name) && st.Outputs == nil {
			// Its outputs were never recorded (the dependency is new):
			// run it once more, exposing them.
			return fmt.Sprintf("waiting for the outputs of upstream task %q", name), []kick{{name: name, outputs: true, by: s.Name}}
		}
		if !u.spec.IsDynamic() {
			// A schedule upstream applies on its ticks only: a change of
			// its data does not hold the task back.
			continue
		}
		us := u.spec
		// Its data as its own runs see it (its hold-down applied), so
		// that a flap it keeps does not look like a change to apply.
		want, ready, err := r.obs.desiredIn(ctx, &us, r.obs.viewOf(r.opts.Clock.Now(), u.qs, u.hd))
		switch {
		case !ready:
			return fmt.Sprintf("waiting for upstream task %q to receive its data from Consul", name), nil
		case err != nil:
			return fmt.Sprintf("upstream task %q cannot run: %v", name, err), nil
		case want.Fingerprint != st.Applied:
			// It has a change to apply; its own notification may still
			// be on its way: make sure it is due.
			return fmt.Sprintf("waiting for upstream task %q to apply the change", name), []kick{{name: name, by: s.Name}}
		}
	}
	return "", nil
}

// kickLocked makes an upstream task due that a job needs to run (k).
// c.mu is held.
func (c *taskTable) kickLocked(k kick) {
	u := c.tasks[k.name]
	if u == nil {
		return
	}
	if k.outputs {
		if u.lc.phase != phaseRunning { // its next run builds its driver anew (ExportOutputs); a running task keeps it
			u.run.drv = nil
		}
		c.forceLocked(u, Trigger{Kind: TriggerOutputs, Detail: k.by}, false)
		return
	}
	c.markDirtyLocked(u, Due(TriggerChange))
}

// exportsOutputs reports whether another of the tasks receives the
// outputs of the task name. The table's lock is held.
func exportsOutputs(tasks map[string]*entry, name string) bool {
	for _, e := range tasks {
		if slices.Contains(e.spec.OutputTasks(), name) {
			return true
		}
	}
	return false
}

// wakeDependentsLocked queues, once a run of the task has ended, the
// enabled tasks that depend on it (a schedule task waits for its tick).
// c.mu is held.
func (c *taskTable) wakeDependentsLocked(name string) {
	if !c.started {
		return
	}
	for _, e := range c.tasks {
		if !e.spec.Enabled || !e.spec.IsDynamic() || e.lc.doomed || !slices.Contains(e.spec.Upstreams(), name) {
			continue
		}
		c.enqueueLocked(e, Trigger{Kind: TriggerUpstream, Detail: name})
	}
}

// ChainGroups returns, for every task that depends on another or that
// another depends on, the name of its group: the smallest task name of the
// tasks connected to it by dependencies. High availability's spread mode
// gives the tasks of a group one owner, so that a chain runs on one member.
func (c *Controller) ChainGroups() map[string]string {
	c.mu.Lock()
	parent := map[string]string{}
	var find func(string) string
	find = func(n string) string {
		p, ok := parent[n]
		if !ok || p == n {
			return n
		}
		r := find(p)
		parent[n] = r
		return r
	}
	union := func(a, b string) {
		ra, rb := find(a), find(b)
		if ra == rb {
			return
		}
		if rb < ra {
			ra, rb = rb, ra
		}
		parent[ra], parent[rb] = ra, ra
	}
	for name, e := range c.tasks {
		for _, up := range e.spec.Upstreams() {
			union(name, up)
		}
	}
	c.mu.Unlock()
	out := make(map[string]string, len(parent))
	for n := range parent {
		out[n] = find(n)
	}
	return out
}
