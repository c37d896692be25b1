package reconcile

import (
	"context"
	"errors"
	"fmt"
	"github.com/ctsync/ctsync/internal/holddown"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

// Errors of task management, mapped to HTTP statuses by the API.
var (
	ErrNotFound = errors.New("task not found")
	ErrExists   = errors.New("task already exists")
	ErrActive   = errors.New("task is active")
	// ErrDeleting is the error of a create whose name is the name of a
	// task marked for deletion that is not gone yet (its last run is
	// still ending).
	ErrDeleting = errors.New("task is being deleted")
)

// syncWait bounds how long a synchronous run (API run=now, inspect) waits for
// the task's Consul data.
const syncWait = 30 * time.Second

// createProbe bounds how long creating a task without running it waits for
// Consul's first answers, to refuse a task whose queries Consul refuses.
const createProbe = 5 * time.Second

// TaskState is a task as the API shows it.
type TaskState struct {
	Spec task.Spec
	// Active is true while the task runs or waits in the run queue.
	Active bool
	// Deleting is true for a task marked for deletion that has not gone yet.
	Deleting bool
	// NextRun is the next schedule tick (schedule tasks only).
	NextRun time.Time
	// Drifted is true when the last drift check found changes made
	// outside Terraform (and no apply has happened since).
	Drifted bool
	// LastDriftCheck is when drift was last checked (zero: never).
	LastDriftCheck time.Time
	// Dirty is true when the task's last run failed: it has not converged
	// and is retried (see Terminal).
	Dirty bool
	// Terminal is true when that failure is terminal: the task waits for
	// its desired state to change.
	Terminal bool
	// QueryError is Consul's answer when it refuses one of the task's
	// queries for good (the query is retried meanwhile); "" otherwise.
	QueryError string
	// Waiting says why the task cannot run yet (a provider waiting for
	// Vault); "" otherwise.
	Waiting string
	// Retry is the pending retry of a failed run; nil when none waits.
	Retry *Retry
	// Removals are what its removal hold-down keeps in its data until
	// each has been gone removal_delay (docs/safety.md), by when each
	// applies; nil when none is pending.
	Removals []holddown.Removal

	qs *querySet // what the task watches (QueryError)
}

// Tasks returns every task, sorted by name.
func (c *Controller) Tasks() []TaskState {
	c.mu.Lock()
	out := make([]TaskState, 0, len(c.tasks))
	for _, e := range c.tasks {
		out = append(out, e.stateLocked(c.opts.Store))
	}
	c.mu.Unlock()
	for i := range out {
		addQueryError(c.obs, &out[i])
	}
	slices.SortFunc(out, func(a, b TaskState) int { return strings.Compare(a.Spec.Name, b.Spec.Name) })
	return out
}

// addQueryError fills QueryError; the watcher is asked without c.mu held.
func addQueryError(obs *observer, st *TaskState) {
	if err := obs.refused(st.Spec.Name, st.qs); err != nil {
		st.QueryError = err.Error()
	}
}

// Task returns one task.
func (c *Controller) Task(name string) (TaskState, error) {
	c.mu.Lock()
	e := c.tasks[name]
	if e == nil {
		c.mu.Unlock()
		return TaskState{}, ErrNotFound
	}
	st := e.stateLocked(c.opts.Store)
	c.mu.Unlock()
	addQueryError(c.obs, &st)
	return st, nil
}

func (e *entry) stateLocked(st store.Store) TaskState {
	rs := st.Run(e.spec.Name)
	return TaskState{Spec: e.spec, Active: e.lc.phase == phaseRunning || e.lc.phase == phaseQueued,
		Deleting: e.deletingLocked(), NextRun: e.nextCron,
		Drifted: e.drifted, LastDriftCheck: e.lastDriftCheck, Dirty: rs.Dirty(), Terminal: rs.Dirty() && rs.Terminal,
		Waiting: e.lc.waiting, Retry: e.retryLocked(), Removals: e.removals(), qs: e.qs}
}

// removals are the task's pending removals (TaskState.Removals).
func (e *entry) removals() []holddown.Removal {
	if e.hd == nil {
		return nil
	}
	return e.hd.Pending()
}

// PlanResult is the outcome of an inspect (plan-only) run.
type PlanResult struct {
	Plan           string
	ChangesPresent bool
	TFCRunURL      string // the remote run (terraform-cloud driver)
}

// Create adds a task. With runNow it applies the task before returning and
// keeps it only if the run succeeded; otherwise an enabled task runs as soon
// as its data is there.
func (c *Controller) Create(ctx context.Context, spec task.Spec, runNow bool) error {
	c.mu.Lock()
	if e := c.tasks[spec.Name]; e != nil {
		deleting := e.deletingLocked() || e.destroyHeldLocked()
		c.mu.Unlock()
		if deleting {
			return fmt.Errorf("%w: task '%s' is being deleted: create it again once it is gone", ErrDeleting, spec.Name)
		}
		return fmt.Errorf("%w: a task named %q already exists", ErrExists, spec.Name)
	}
	others := make([]task.Spec, 0, len(c.tasks))
	for _, o := range c.tasks {
		if !o.deletingLocked() {
			others = append(others, o.spec)
		}
	}
	if err := task.CheckAdded(spec, others); err != nil {
		c.mu.Unlock()
		return err
	}
	e := newEntry(spec, "")
	started := c.started // before Run (tasks restored at start), nothing waits for data: Run reads it
	if runNow {
		c.stepLocked(e, evReserve, wake{}) // nothing else runs it meanwhile
	}
	// Its variables' values are shown as written in its own text from
	// its first run on; remove drops them.
	c.opts.Redactor.Protect(spec.Name, spec.VariableStrings()...)
	c.tasks[spec.Name] = e
	signal(c.driftKick) // schedule its drift checks
	signal(c.cronKick)  // and its cron ticks
	c.mu.Unlock()
	c.subscribe(spec.Name, e.qs)
	if !runNow {
		// A query Consul refuses for good (an unknown datacenter) makes
		// the task useless: refuse it now, with Consul's answer, rather
		// than keep a task that can never run. A Consul that is merely
		// slow does not hold the request up for long.
		if _, ok := c.opts.Watcher.(Refusals); ok && started {
			if err := c.obs.waitReady(ctx, e.changed, &spec, e.qs, createProbe); err != nil && errors.Is(err, ErrRefused) {
				c.remove(ctx, spec.Name)
				return err
			}
		}
		c.mu.Lock()
		c.markDirtyLocked(e, Due(TriggerAPI))
		c.mu.Unlock()
		return nil
	}
	_, err := c.runReserved(ctx, e, intent{kind: intentRun, req: Request{Name: spec.Name, Trigger: Due(TriggerAPI)}})
	if err != nil {
		c.remove(ctx, spec.Name)
		return err
	}
	return nil
}

// Inspect plans a task that is not (yet) configured, in a throw-away
// working directory, and forgets it.
func (c *Controller) Inspect(ctx context.Context, spec task.Spec) (PlanResult, error) {
	dir, err := os.MkdirTemp("", "ctsync-inspect-")
	if err != nil {
		return PlanResult{}, err
	}
	defer os.RemoveAll(dir)
	spec.WorkingDir = dir
	sub := "inspect:" + uuid.NewString()
	e := newEntry(spec, sub)
	c.mu.Lock()
	c.inspecting[sub] = e
	c.stepLocked(e, evReserve, wake{})
	c.mu.Unlock()
	defer func() {
		c.opts.Watcher.UnsubscribeAll(sub)
		c.mu.Lock()
		delete(c.inspecting, sub)
		c.mu.Unlock()
	}()
	c.subscribe(sub, e.qs)
	return c.plan(ctx, e)
}

// plan waits for the reserved task's data and has a worker plan it
// (intentInspect).
func (c *Controller) plan(ctx context.Context, e *entry) (PlanResult, error) {
	res, err := c.request(ctx, e, intent{kind: intentInspect})
	if err != nil {
		return PlanResult{}, err
	}
	if res.err != nil {
		return PlanResult{}, res.err
	}
	return res.inspected, nil
}

// SetEnabled enables or disables a task; mode says what it does besides
// changing the flag (EnableMode).
func (c *Controller) SetEnabled(ctx context.Context, name string, enabled bool, mode EnableMode) (PlanResult, error) {
	c.mu.Lock()
	e := c.tasks[name]
	if e == nil || e.deletingLocked() {
		c.mu.Unlock()
		return PlanResult{}, fmt.Errorf("%w: a task with name '%s' does not exist or has not been initialized yet", ErrNotFound, name)
	}
	// A follower (standby, high availability) queues tasks but runs none,
	// so there a queued task is not active: a new leader applies the
	// cluster's enabled flags to it before becoming active.
	if e.destroyHeldLocked() {
		c.mu.Unlock()
		return PlanResult{}, fmt.Errorf("%w: task '%s' cannot be updated: its deletion with destroy waits for approval of plan %s (reject it to keep the task)",
			ErrActive, name, e.lc.held.plan.ID)
	}
	standbyFlag := c.standby && mode == EnableFlag
	if e.lc.phase == phaseRunning || (e.lc.phase == phaseQueued && !standbyFlag) {
		c.mu.Unlock()
		return PlanResult{}, fmt.Errorf("%w: task '%s' is active and cannot be updated at this time", ErrActive, name)
	}
	if mode == EnableInspect {
		c.stepLocked(e, evReserve, wake{})
		c.mu.Unlock()
		return c.plan(ctx, e)
	}
	e.spec.Enabled = enabled
	signal(c.driftKick) // drift checks follow the flag
	signal(c.cronKick)  // and so do cron ticks
	if !enabled {
		c.stepLocked(e, evStop, wake{}) // off the queue (standby only, above), no timer
		e.nextCron = time.Time{}
		c.wakeDependentsLocked(name) // a disabled upstream holds nothing back (chain.go)
		c.mu.Unlock()
		return PlanResult{}, nil
	}
	if mode != EnableRun {
		// Re-enabled: run if the inputs moved while it was off.
		c.markDirtyLocked(e, Due(TriggerEnable))
		c.mu.Unlock()
		return PlanResult{}, nil
	}
	c.stepLocked(e, evReserve, wake{})
	c.mu.Unlock()
	_, err := c.runReserved(ctx, e, intent{kind: intentRun, req: Request{Name: name, Trigger: Due(TriggerAPI), Force: true}})
	return PlanResult{}, err
}

// RunNow applies a task at once, even if its inputs did not change. The
// run's id is the one WithRunID put in ctx, if any. When a safety gate
// holds the run's plan, nothing is applied and the error is a *HeldError
// naming the plan (whose id is the run's).
func (c *Controller) RunNow(ctx context.Context, name string) error {
	c.mu.Lock()
	e := c.tasks[name]
	if e == nil || e.deletingLocked() {
		c.mu.Unlock()
		return fmt.Errorf("%w: a task with name '%s' does not exist or has not been initialized yet", ErrNotFound, name)
	}
	if e.destroyHeldLocked() {
		c.mu.Unlock()
		return fmt.Errorf("%w: task '%s' cannot be run: its deletion with destroy waits for approval of plan %s", ErrActive, name, e.lc.held.plan.ID)
	}
	if !c.stepLocked(e, evReserve, wake{}) { // queued or running
		c.mu.Unlock()
		return fmt.Errorf("%w: task '%s' is active and cannot be run at this time", ErrActive, name)
	}
	c.mu.Unlock()
	res, err := c.runReserved(ctx, e, intent{kind: intentRun, req: Request{Name: name, ID: RunIDFrom(ctx), Trigger: Due(TriggerAPI), Force: true}})
	if err == nil && res.hold != nil {
		return &HeldError{Reason: res.hold.plan.Reason, Plan: res.hold.plan.ID}
	}
	return err
}

// runReserved has a worker run a task the caller has reserved (the
// request in), and waits for the run. The run is an API call's: it does
// not end when the caller goes away, only with the daemon's runs.
func (c *Controller) runReserved(ctx context.Context, e *entry, in intent) (Result, error) {
	ctx, done, err := c.apiRun(ctx)
	if err != nil {
		c.mu.Lock()
		c.releaseLocked(e)
		c.mu.Unlock()
		return Result{}, err
	}
	defer done()
	res, err := c.request(ctx, e, in)
	if err != nil {
		return Result{}, err
	}
	if res.held != "" {
		return res, fmt.Errorf("%w: task '%s' cannot run now: %s", ErrActive, e.spec.Name, res.held)
	}
	return res, res.err
}

// request waits for the data of a task the caller has reserved, then
// records the request in on it (submitLocked), and waits until a worker
// has done it: it returns what the job did. The task is released when the
// data does not come.
func (c *Controller) request(ctx context.Context, e *entry, in intent) (Result, error) {
	c.mu.Lock()
	s := e.spec
	c.mu.Unlock()
	if err := c.obs.waitReady(ctx, e.changed, &s, e.qs, syncWait); err != nil {
		c.mu.Lock()
		c.releaseLocked(e)
		c.mu.Unlock()
		return Result{}, err
	}
	in.actor = actorFrom(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	gen, err := c.submitLocked(e, in)
	if err != nil {
		return Result{}, err
	}
	return c.awaitIntentLocked(ctx, e, gen)
}

// Delete removes a task. It is marked at once and removed when it is not
// running; with destroy, `terraform destroy` runs first and its state and
// working directory are removed. It returns when the task is gone.
//
// The destroy of a task with safety gates is a plan like any other
// (gatedDestroy): when the approval rules hold it, nothing is destroyed,
// the task is kept, disabled and held, and the error is a
// *DestroyHeldError naming the plan; approving the plan destroys and
// deletes the task (Approve). A deletion with destroy of a task whose
// destroy is held answers the same plan again; one without destroy drops
// it and deletes the task.
func (c *Controller) Delete(ctx context.Context, name string, destroy bool) error {
	c.mu.Lock()
	e := c.tasks[name]
	if e == nil || e.deletingLocked() {
		c.mu.Unlock()
		return fmt.Errorf("%w: a task with name '%s' does not exist or has not been initialized yet", ErrNotFound, name)
	}
	if destroy && e.destroyHeldLocked() {
		p := clonePlan(e.lc.held.plan)
		c.mu.Unlock()
		return &DestroyHeldError{Plan: p}
	}
	enabled := e.spec.Enabled
	if e.destroyHeldLocked() {
		enabled = e.lc.held.enabled // the flag it had before its destroy was held
	}
	e.spec.Enabled = false
	c.stepLocked(e, evDelete, wake{}) // deleting now, or once the run in progress ends
	e.run.policyStop.stop()           // a policy evaluation in progress ends now: nothing is applied
	// Wait until the run in progress (if any) has finished and recorded
	// its outcome, as CTS does.
	if err := c.awaitLocked(ctx, func() bool { return e.lc.phase == phaseDeleting }); err != nil {
		e.run.policyStop.resume()
		c.stepLocked(e, evAbandon, wake{}) // the task stays as it was
		e.spec.Enabled = enabled
		c.markDirtyLocked(e, Due(TriggerChange)) // a change its timer waited for is not lost
		c.mu.Unlock()
		return err
	}
	c.mu.Unlock()
	if destroy {
		c.mu.Lock()
		gen, err := c.submitLocked(e, intent{kind: intentRun, actor: actorFrom(ctx), wasEnabled: enabled,
			req: Request{Name: name, ID: RunIDFrom(ctx), Trigger: Due(TriggerAPI), Mode: ModeDestroy}})
		var res Result
		if err == nil {
			res, err = c.awaitIntentLocked(ctx, e, gen)
		}
		c.mu.Unlock()
		if err == nil {
			err = res.err
		}
		if err == nil && res.hold != nil {
			c.mu.Lock()
			c.stepLocked(e, evDone, wake{}) // held: the task stays, disabled
			c.mu.Unlock()
			return &DestroyHeldError{Plan: clonePlan(res.hold.plan)}
		}
		if err != nil {
			c.mu.Lock()
			c.stepLocked(e, evDone, wake{}) // the task stays, disabled
			c.mu.Unlock()
			return fmt.Errorf("destroying the infrastructure of task %q: %w", name, err)
		}
	}
	c.remove(ctx, name)
	return nil
}

// remove forgets a task: its watches, events and state, and the plan it
// held (its files).
func (c *taskTable) remove(ctx context.Context, name string) {
	c.opts.Watcher.UnsubscribeAll(name)
	c.mu.Lock()
	e := c.tasks[name]
	var held []driver.HeldPlan
	if e != nil {
		e.lc.halt()
		if h := e.lc.held; h != nil {
			held = append(held, h.drv)
			c.gk.endHeldLocked(e, gate.Superseded, "", evDrop)
		}
		held = append(held, c.gk.forgetLocked(e)...)
		if in := e.lc.intent; in != nil && !in.taken {
			c.q.remove(name)
			c.endIntentLocked(e, Result{}, fmt.Errorf("task %q: %w", name, ErrNotFound))
		}
	}
	delete(c.tasks, name)
	if e != nil {
		c.opts.Redactor.Protect(name) // a task created again under this name sets its own
	}
	c.mu.Unlock()
	if e != nil { // nothing runs it any more: its plans' files go
		for _, p := range held {
			discardPlan(ctx, c.log.With("task_name", name), &e.run, p)
		}
	}
	if err := c.opts.Store.DeleteTask(context.WithoutCancel(ctx), name); err != nil {
		// The task is gone here; what the store keeps of it (events, run
		// state) is orphaned until a task of that name is recorded again.
		c.log.Warn("the deleted task's events and run state could not be removed from the store", "task_name", name, "error", err)
	}
}

// Events returns a task's run history, newest first.
func (c *Controller) Events(name string) []store.Event {
	return c.opts.Store.Events(name)
}
