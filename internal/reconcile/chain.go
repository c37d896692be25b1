package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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

// upstreamHold returns why the task cannot run yet because of a task it
// depends on, or "" when it can.
func (c *Controller) upstreamHold(ctx context.Context, s *task.Spec) string {
	outputs := s.OutputTasks()
	for _, name := range s.Upstreams() {
		c.mu.Lock()
		u := c.tasks[name]
		var (
			ph phase
			us task.Spec
		)
		if u != nil {
			ph, us = u.lc.phase, u.spec
		}
		c.mu.Unlock()
		if u == nil {
			return fmt.Sprintf("upstream task %q does not exist", name)
		}
		if !us.Enabled {
			// A disabled upstream holds nothing back (not even a failed
			// last run): the task uses what it applied last.
			continue
		}
		st := c.opts.Store.Run(name)
		switch {
		case st.Dirty():
			return fmt.Sprintf("upstream task %q failed; waiting for it to succeed", name)
		case ph != phaseIdle:
			return fmt.Sprintf("waiting for upstream task %q (%s)", name, ph)
		}
		if slices.Contains(outputs, name) && st.Outputs == nil {
			// Its outputs were never recorded (the dependency is new):
			// run it once more, exposing them.
			c.mu.Lock()
			c.dropDriverLocked(u)
			c.forceLocked(u, Trigger{Kind: TriggerOutputs, Detail: s.Name}, false)
			c.mu.Unlock()
			return fmt.Sprintf("waiting for the outputs of upstream task %q", name)
		}
		if !us.IsDynamic() {
			// A schedule upstream applies on its ticks only: a change of
			// its data does not hold the task back.
			continue
		}
		want, ready, err := c.desired(ctx, &us)
		switch {
		case !ready:
			return fmt.Sprintf("waiting for upstream task %q to receive its data from Consul", name)
		case err != nil:
			return fmt.Sprintf("upstream task %q cannot run: %v", name, err)
		case want.Fingerprint != st.Applied:
			// It has a change to apply; its own notification may still
			// be on its way: make sure it is due.
			c.mu.Lock()
			c.markDirtyLocked(u, Due(TriggerChange))
			c.mu.Unlock()
			return fmt.Sprintf("waiting for upstream task %q to apply the change", name)
		}
	}
	return ""
}

// dropDriverLocked makes the task's next run build its driver anew (its
// spec's ExportOutputs may have changed). c.mu is held; a running task
// keeps its driver.
func (c *Controller) dropDriverLocked(e *entry) {
	if e.lc.phase != phaseRunning {
		e.drv = nil
	}
}

// exportsOutputs reports whether another task receives the task's outputs.
// c.mu is held.
func (c *Controller) exportsOutputs(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exportsOutputsLocked(name)
}

// exportsOutputsLocked is exportsOutputs with c.mu held.
func (c *Controller) exportsOutputsLocked(name string) bool {
	for _, e := range c.tasks {
		if slices.Contains(e.spec.OutputTasks(), name) {
			return true
		}
	}
	return false
}

// wakeDependentsLocked queues, once a run of the task has ended, the
// enabled tasks that depend on it (a schedule task waits for its tick).
// c.mu is held.
func (c *Controller) wakeDependentsLocked(name string) {
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

// upstreamDigest is the task's driver.PartUpstream: the digest of the
// outputs it receives (module_input "task-outputs"); for a task without a
// condition, whose only trigger is its upstream tasks, also what each of
// them last applied, so that every change an upstream applies runs it
// after. "" when there is nothing to cover.
func (c *Controller) upstreamDigest(s *task.Spec) string {
	_, outs := c.upstreamOutputs(s)
	if s.Condition.Type() != "" || len(s.Upstreams()) == 0 {
		return outs
	}
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s", len(outs), outs)
	for _, n := range s.Upstreams() { // sorted
		a := c.opts.Store.Run(n).Applied
		fmt.Fprintf(h, "%d:%s%d:%s", len(n), n, len(a), a)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// upstreamOutputs returns the recorded outputs of the tasks whose outputs
// the task receives, and their digest (driver.PartUpstream).
func (c *Controller) upstreamOutputs(s *task.Spec) (map[string][]byte, string) {
	names := s.OutputTasks()
	if len(names) == 0 {
		return nil, ""
	}
	out := make(map[string][]byte, len(names))
	h := sha256.New()
	for _, n := range slices.Sorted(slices.Values(names)) {
		o := c.opts.Store.Run(n).Outputs
		if o == nil {
			o = []byte("{}")
		}
		out[n] = o
		fmt.Fprintf(h, "%d:%s%d:%s", len(n), n, len(o), o)
	}
	return out, hex.EncodeToString(h.Sum(nil))
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
