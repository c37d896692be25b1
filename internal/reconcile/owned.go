package reconcile

import (
	"slices"
	"strings"
)

// ownership is which tasks this instance may run in spread mode (high
// availability with spread_tasks): each task has one owner in the cluster,
// and only the owner runs it. Without it (nil) every task is this
// instance's, and high availability, if any, switches the whole controller
// (SetActive).
type ownership struct {
	owns func(task string) bool
	// was holds the tasks owned at the last SetOwned, to tell which are
	// newly owned at the next.
	was map[string]bool
}

// SetOwned restricts the tasks this controller runs to those owns reports
// (spread mode); nil lifts the restriction. It is called again, with a new
// predicate, every time the set changes; owns is called with c.mu held and
// must not block or call back into the controller.
//
// As SetActive does for a new leader, a newly owned task is reconciled at
// once: skipped when its desired state equals the one last applied (the
// store is shared), run when it differs, and run even when it does not if
// its in-flight marker is set (the previous owner stopped in the middle of
// a run). A task that is not owned starts no new run: it is taken off the
// run queue by the next worker that looks (its owner runs it), and a run in
// progress is not stopped here (the run's fence interrupts it when the
// ownership ends).
func (c *Controller) SetOwned(owns func(task string) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if owns == nil {
		c.owned = nil
		c.q.wake()
		return
	}
	prev := c.owned
	o := &ownership{owns: owns, was: map[string]bool{}}
	c.owned = o
	for name, e := range c.tasks {
		if !owns(name) {
			c.gk.forgetHeldLocked(e) // gates.go: its owner holds it
			continue
		}
		o.was[name] = true
		if prev != nil && prev.was[name] {
			continue
		}
		if c.standby || e.deletingLocked() {
			continue // SetActive reconciles it when the controller becomes active
		}
		// The first run of a new owner is not buffered.
		c.adoptLocked(e, Due(TriggerOwner), c.opts.Store.Run(name).InFlight != "")
	}
	c.q.wake()
	signal(c.driftKick)
}

// ownsLocked reports whether this member reconciles the task: the
// coordinator's predicate (SetOwned), or every task without one. It is
// asked in one place, where a worker takes a task off the queue
// (nextLocked): what is due for a task owned elsewhere is dropped there,
// its owner runs it. c.mu is held.
func (c *workers) ownsLocked(name string) bool {
	return c.owned == nil || c.owned.owns(name)
}

// TaskNames returns the names of the tasks that are not being deleted,
// sorted (spread mode assigns them to the cluster's members).
func (c *Controller) TaskNames() []string {
	c.mu.Lock()
	out := make([]string, 0, len(c.tasks))
	for name, e := range c.tasks {
		if !e.deletingLocked() {
			out = append(out, name)
		}
	}
	c.mu.Unlock()
	slices.SortFunc(out, strings.Compare)
	return out
}

// Busy reports whether a run of the task is in progress here (a worker's,
// an API call's or a drift check's), a request of it waits here for a
// worker, or its deletion is under way: a task that moves to another
// member is handed over only once it is not.
func (c *Controller) Busy(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.tasks[name]
	return e != nil && (e.lc.phase == phaseRunning || e.lc.phase == phaseDeleting || e.lc.intent != nil)
}
