package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/ctsync/ctsync/internal/backoff"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/holddown"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/google/uuid"
)

// reconciler decides and drives one job of one task (Reconcile). It keeps
// no state and never asks the controller anything: the job is a snapshot
// of what it reads of the task's state (its spec, the request, its held
// plan, its upstream tasks as they were when the job was taken), which it
// reads through the table's one read-only function (snap); what lies
// outside the task it reads through the observer (the watched data, the
// store, the desired state's other parts). It returns what it decided (a
// Result), which the controller's one applier commits to the task's
// state under its lock (Controller.commitLocked). It never takes the
// controller's lock and never writes a task's state
// (TestReconcilerKeepsNoState).
type reconciler struct {
	opts *Options
	log  *slog.Logger
	obs  *observer
	// snap reads the snapshot of a task a worker took (workers.snapshot:
	// under the table's lock, changing nothing).
	snap func(name string) (job, error)
}

// job is one job of one task as a worker gives it to the reconciler: the
// request (an intent of a caller, or the run the task was due for) and a
// snapshot of the task's state.
type job struct {
	Request
	intent // zero for the run the task was due for (gen 0)
	spec   *task.Spec
	// drv is the task's driver: only the job holding the task uses it.
	drv *driverSlot
	// prev is the Consul data of the task's last recorded run.
	prev *inputsDigest
	// waiting is why the task was waiting when the job was taken.
	waiting string
	// exports: another task receives the task's outputs (chain.go).
	exports bool
	// upstreams are the tasks it depends on, as they were (chain.go).
	upstreams map[string]upstreamView
	// held is the task's newest held plan (gates.go).
	held heldView
	// orphans are held plans the controller dropped while the task did not
	// run them: the job discards them first.
	orphans []driver.HeldPlan
	// qs is the task's query set, hd its removal hold-down (nil: none);
	// view is what the job reads the task's data through (Reconcile sets
	// it once, for everything the job decides and runs).
	qs   *querySet
	hd   *holddown.Tracker
	view evalView
	// match is the approval of a plan restored without the driver's
	// plan that this job makes again (gates.go: again).
	match *approval
}

// driverSlot is a task's driver, and the times of the init of the run in
// progress: only the job that holds the task touches them; and the stop of
// the run's policy evaluation, which a deletion pulls (its own lock).
type driverSlot struct {
	drv                driver.Driver
	exports            bool // drv was built with ExportOutputs (chain.go)
	initStart, initEnd time.Time
	policyStop         evalStop
}

// Result is what one job of a task did and decided (Reconcile): whether
// it failed, the plan a gate now holds or the one it superseded, the
// desired state it applied and whether its run is recorded, the upstream
// tasks to make due, when to look again (the hold-down), a drift check's
// finding, the run Decide decided on. The worker hands it to the
// controller's one applier (commitLocked); a failed run is a Result, its
// run recorded in the store.
type Result struct {
	failed   bool
	waiting  bool // not run: it waits (ErrWaiting); retried, not recorded
	notReady bool // not run: a watched query has no value yet
	terminal bool // the failure is terminal (driver.ErrTerminal)
	err      error
	plan     string
	held     string        // not run: an upstream task has something left to do (chain.go)
	hold     *heldRun      // a safety gate holds the run's plan for approval (gates.go)
	dur      time.Duration // how long the run took (a worker's)

	// What the controller keeps of the job in the task's state
	// (commitLocked):
	readData    bool          // the run read complete data: buffer periods apply from now on
	setWait     bool          // waiting is why the task cannot run ("": it can)
	waitReason  string        //
	fingerprint string        // the desired state the run was for ("": none ran)
	recorded    bool          // the run's event is stored; inputs is its Consul data
	inputs      *inputsDigest //
	applied     bool          // the run succeeded and is recorded
	checkDue    bool          // the run was targeted and left its full check due (driver.Result.CheckDue)
	supersede   *supersession // the held plan was superseded (gates.go)
	kicks       []kick        // upstream tasks to make due (chain.go)
	drift       *driftFound   // a drift check's finding (drift.go)
	inspected   PlanResult    // the plan of an inspect
	removeTask  bool          // an approved deletion's destroy is done: the task goes
	matched     bool          // the plan made again after a restart had the approved changes, and was applied as approved (heldstore.go)
	// The removal hold-down after the job's evaluation (holdSeen): when
	// its first pending removal applies (zero: none is pending); the task
	// is evaluated again then.
	holdSeen bool
	holdNext time.Time
	// next is the run Decide decided on, for Execute (nil: none).
	next *runPlan
	// job is the snapshot of the task the Result was decided from: what
	// the applier and Execute read of it. discarded is how many of the
	// task's dropped plans the job discarded (job.orphans).
	job       job
	discarded int
}

// errNotTaken is the error of Reconcile for a task no worker of this member
// holds (it is not this member's to reconcile now).
var errNotTaken = errors.New("no worker of this member holds the task")

// Reconcile does the job a worker took of the task name (or of the
// throw-away task being inspected with that key): it reads the task's
// snapshot (snap: the request and what the job reads of the task's state)
// and does it — a run, a plan, a drift check, the apply of an approved
// plan, or the discard of dropped plans — and returns what it did and
// decided. The error is for a job it could not start: no such task, no
// worker of this member holds it, ctx ended; a run that failed is a Result
// (with its run recorded).
func (r *reconciler) Reconcile(ctx context.Context, name string) (out Result, err error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	j, err := r.snap(name)
	if err != nil {
		return Result{}, err
	}
	if j.qs == nil { // a job built without its entry's snapshot
		j.qs = newQuerySet(j.spec)
	}
	defer func() { out.job, out.discarded = j, len(j.orphans) }()
	j.view = r.obs.viewOf(r.opts.Clock.Now(), j.qs, j.hd)
	if j.hd != nil {
		defer holdDone(r.opts, j, &out)
	}
	if len(j.orphans) > 0 {
		log := r.log.With("task_name", j.spec.Name)
		for _, p := range j.orphans {
			discardPlan(ctx, log, j.drv, p)
		}
	}
	switch j.kind {
	case intentInspect:
		return r.inspect(ctx, j), nil
	case intentDrift:
		return r.checkDrift(ctx, j), nil // drift.go
	case intentApprove:
		return r.approve(ctx, j), nil // gates.go
	case intentDiscard:
		return Result{}, nil
	}
	return r.Decide(ctx, j), nil
}

// holdDone adds to the outcome of the job j of a task with a removal
// hold-down when its first pending removal applies (the task is evaluated
// again then), and hands the hold-down's steps to Options.OnRemoval.
func holdDone(opts *Options, j job, out *Result) {
	out.holdSeen = true
	out.holdNext, _ = j.hd.Next()
	if opts.OnRemoval != nil {
		if ch := j.hd.Drain(); len(ch) > 0 {
			opts.OnRemoval(j.spec.Name, ch, len(j.hd.Pending()))
		}
	}
}

// inspect plans the task as it is and changes nothing (the API's inspect).
func (r *reconciler) inspect(ctx context.Context, j job) Result {
	in, _ := BuildInputs(j.spec, j.view.get)
	res, err := r.drive(ctx, j.drv, j.spec, j.exports, driver.Run{ID: uuid.NewString()}, &in, ModePlan)
	if err != nil {
		return Result{failed: true, err: err}
	}
	return Result{inspected: PlanResult{Plan: res.Output, ChangesPresent: res.Changes, TFCRunURL: res.RunURL}}
}

// unreadable is recorded as the failed fingerprint when a task's desired
// state could not be read: the task stays dirty, and no fingerprint can
// match it.
const unreadable = "unreadable"

// Decide computes the task's desired state and decides whether it must
// run: the outcome says why not, or, in next, the run to execute
// (Execute); the worker commits what Decide found (that the task read its
// data, why it waits) before the run starts. A task runs when its desired
// state differs from the one last applied successfully, or when its last
// run failed (unless that failure was terminal and the desired state is
// still the same), or when req.Force is set. A deletion's destroy is
// done here. A plan (ModePlan) records nothing.
func (r *reconciler) Decide(ctx context.Context, j job) Result {
	s, req := j.spec, j.Request
	if req.Mode == ModeDestroy {
		if gated(s) {
			return r.gatedDestroy(ctx, j) // gates.go
		}
		return Result{err: r.destroy(ctx, j.drv, s)}
	}
	log := r.log.With("task_name", s.Name)
	// The desired state is taken before the inputs are built: if the data
	// changes in between, the inputs are newer than the fingerprint stored
	// as applied, and the next notification runs the task once more. The
	// other order could store a newer fingerprint than what was applied
	// and lose that change.
	want, ready, derr := r.obs.desiredIn(ctx, s, j.view)
	if !ready {
		log.Debug("waiting for watched data before running")
		return Result{notReady: true}
	}
	// From here on the task has run as far as buffering is concerned: a
	// change that comes once this run ends waits out the buffer period.
	out := r.decide(ctx, log, j, want, derr)
	out.readData = true
	return out
}

// decide runs the task j whose desired state (want, or derr when a part of
// it cannot be read) was read with complete data: whether it runs, and
// the run.
func (r *reconciler) decide(ctx context.Context, log *slog.Logger, j job, want Desired, derr error) Result {
	s, req := j.spec, j.Request
	inspect := req.Mode == ModePlan
	trigger := req.Trigger.String()
	if derr != nil && errors.Is(derr, ErrWaiting) && !inspect {
		if j.waiting != derr.Error() {
			log.Warn("task waits before it can run", "reason", derr.Error())
		}
		return Result{failed: true, waiting: true, err: derr, setWait: true, waitReason: derr.Error()}
	}
	if derr != nil {
		out := r.unreadableState(ctx, s, trigger, derr, inspect)
		out.setWait = true
		return out
	}
	out := r.decideReadable(ctx, log, j, want, trigger)
	out.setWait = out.setWait || out.held == ""
	return out
}

// decideReadable is decide once the whole desired state is read.
func (r *reconciler) decideReadable(ctx context.Context, log *slog.Logger, j job, want Desired, trigger string) Result {
	s, req := j.spec, j.Request
	inspect := req.Mode == ModePlan
	st := r.opts.Store.Run(s.Name)
	check := req.Trigger.Kind == TriggerCheck && !inspect && !req.Force
	if check && (st.Dirty() || want.Fingerprint != st.Applied) {
		// The desired state changed since the targeted run: that change
		// runs first (targeted again), and the check stays due.
		check, req.Trigger = false, Due(TriggerChange)
	}
	if !inspect && !req.Force && !check {
		var run bool
		if trigger, run = r.mustRun(log, s.Name, st, want, req.Trigger); !run {
			// The desired state is the one applied again (gates.go).
			return Result{supersede: r.supersede(ctx, log, j, "", want.Fingerprint)}
		}
		if j.held.settled(want.Fingerprint) { // held, rejected or expired as it is (gates.go)
			r.skipped(s.Name)
			return Result{}
		}
	}
	in, ready := r.obs.inputs(s, j.view)
	if !ready { // a view went away in between (a regexp match left)
		return Result{notReady: true}
	}
	// Chained tasks: the upstream tasks are looked at after the inputs are
	// read, so that an upstream found up to date has applied data at least
	// as new as the inputs (chain.go).
	if !inspect && req.Trigger.Kind != TriggerOnce {
		if why, kicks := r.upstreamHold(ctx, j); why != "" { // chain.go
			if j.waiting != why {
				log.Info("task held: it runs after the tasks it depends on", "reason", why)
			}
			return Result{held: why, kicks: kicks, setWait: true, waitReason: why}
		}
		if want.Parts[driver.PartUpstream] != r.obs.upstreamDigest(s) {
			// An upstream task applied since the desired state was read
			// (it was running then, idle now): decide again with what it
			// applied, rather than apply with a stale fingerprint and run
			// again to catch up.
			log.Debug("an upstream task applied meanwhile; reading the desired state again")
			return r.Decide(ctx, j)
		}
	}
	id := req.ID
	if id == "" {
		id = uuid.NewString()
	}
	return Result{next: &runPlan{in: in, rec: &runRecord{id: id, trigger: trigger, once: req.Trigger.Kind == TriggerOnce,
		kind: store.KindApply, want: want, before: st, actor: actorFrom(ctx), inputs: digest(&in), seen: req.Seen, prev: j.prev,
		dataChange: dataChange(req, trigger), check: check}}}
}

// dataChange reports whether a run the task was due for applies a change
// of its Consul data and nothing else (driver.Run.DataChange): a catalog or
// KV change triggered it, nothing forces it, and the change of its desired
// state that mustRun found is the data's alone (trigger is the change's,
// not "module changed" or the like). Retries, start, drift, API and
// upstream runs are not.
func dataChange(req Request, trigger string) bool {
	return req.Trigger.Kind == TriggerChange && !req.Force && trigger == req.Trigger.String()
}

// runPlan is a run Decide decided on: its inputs and its record.
type runPlan struct {
	in  task.Inputs
	rec *runRecord
}

// Execute drives the run p that Decide decided on for the task of j and
// records it.
func (r *reconciler) Execute(ctx context.Context, j job, p *runPlan) Result {
	out := r.run(ctx, r.log.With("task_name", j.spec.Name), j, &p.in, p.rec)
	out.fingerprint = p.rec.want.Fingerprint // its failures do not count against another desired state
	return out
}

// run drives the run rec of the task, decided to run with the inputs in,
// and records it (not a plan).
func (r *reconciler) run(ctx context.Context, log *slog.Logger, j job, in *task.Inputs, rec *runRecord) Result {
	e, s, req, inspect := j.drv, j.spec, j.Request, j.Mode == ModePlan
	if gated(s) {
		return r.gatedRun(ctx, log, j, rec, in) // gates.go
	}
	if inspect {
		rec.kind = store.KindPlan
	} else if err := r.opts.Store.StartRun(ctx, s.Name, rec.id); err != nil {
		// The marker is in the store before Terraform starts: if this
		// instance dies or loses the lead during the run, the next
		// leader runs the task again.
		log.Error("not running task: its in-flight marker could not be stored", "error", err)
		return Result{failed: true, err: fmt.Errorf("storing the in-flight marker: %w", err)}
	}
	if r.opts.Metrics != nil {
		r.opts.Metrics.RunStarted(s.Name)
	}
	log.Info("executing task", "run_id", rec.id, "trigger", rec.trigger, "mode", rec.kind, "instances", len(in.Services))
	rec.start = time.Now()
	// A data change leaves the full check of a targeted apply to a run of
	// its own (TriggerCheck), so that a newer change need not wait for it.
	rec.res, rec.err = r.drive(ctx, e, s, j.exports, driver.Run{ID: rec.id, DataChange: rec.dataChange, DeferCheck: rec.dataChange,
		Check: rec.check}, in, req.Mode)
	rec.end = time.Now()
	rec.phases = eventPhases(e.initStart, e.initEnd, rec.res.Phases, rec.kind, rec.start, rec.end)
	e.initStart, e.initEnd = time.Time{}, time.Time{}
	if inspect {
		if r.opts.Metrics != nil {
			r.opts.Metrics.RunFinished(s.Name, rec.kind, rec.err == nil, rec.end.Sub(rec.start))
		}
		return Result{failed: rec.err != nil, err: rec.err, plan: rec.res.Output}
	}
	return r.recordRun(ctx, log, e, s, rec)
}

// mustRun decides whether a task runs, from its desired state and the run
// state in the store, and returns the run's trigger: what changed since
// its last success (the watched key, or the parts of the desired state).
func (r *reconciler) mustRun(log *slog.Logger, name string, st store.RunState, want Desired, due Trigger) (string, bool) {
	trigger := due.String()
	switch {
	case st.Dirty() && st.Terminal && st.Failed == want.Fingerprint:
		log.Debug("last run failed with a terminal error and the desired state has not changed since: not running")
		r.skipped(name)
		return trigger, false
	case st.Dirty():
		if due.Kind != TriggerRetry {
			changed := changedParts(st.Parts, want.Parts)
			trigger = changeTrigger(due, changed)
			if (due.Kind == TriggerStart || due.Kind == TriggerLeader) && trigger == due.String() {
				trigger = "previous run failed"
			}
		}
	case want.Fingerprint == st.Applied:
		log.Debug("desired state unchanged since last apply, skipping run", "fingerprint", short(want.Fingerprint))
		r.skipped(name)
		return trigger, false
	default:
		trigger = changeTrigger(due, changedParts(st.Parts, want.Parts))
	}
	return trigger, true
}

// runRecord is one run of a task (not a plan), from its start to its
// record in the store.
type runRecord struct {
	id, trigger string
	once        bool // a run of -once, which logs its tasks in order itself
	dataChange  bool // it applies a change of the Consul data alone (driver.Run.DataChange)
	check       bool // it is the full check a targeted run left due (driver.Run.Check)
	kind        string
	want        Desired
	before      store.RunState // the run state when it started
	start, end  time.Time
	res         driver.Result
	err         error
	// what the operator sees of it (runinfo.go)
	actor        string
	seen         time.Time
	inputs, prev *inputsDigest
	phases       []store.Phase
	gate         *store.GateDecision // the approval it applies, the policy's deny
	planText     string              // the saved plan it applied or was denied (redacted)
}

// recordRun records a run's outcome: its event and the task's next run
// state, in one write (finish); a run is not a success until recorded.
func (r *reconciler) recordRun(ctx context.Context, log *slog.Logger, e *driverSlot, s *task.Spec, rec *runRecord) Result {
	res, err, st := rec.res, rec.err, rec.before
	terminal := driver.IsTerminal(err)
	ev := store.Event{ID: rec.id, TaskName: s.Name, Success: err == nil, StartTime: rec.start, EndTime: rec.end,
		Kind: rec.kind, Trigger: rec.trigger, InputsHash: rec.want.Used, Config: eventConfig(s), LogPath: res.LogPath,
		LogTail: r.opts.redact(s.Name, tail(res.LogPath, 4096)), Terminal: terminal, TFCRunURL: res.RunURL, Refresh: res.Refresh, Targeted: res.Targeted,
		ErrorSummary: r.opts.redact(s.Name, driver.ErrorSummary(err)), Actor: rec.actor, Phases: rec.phases, Changes: changes(rec.prev, rec.inputs), Gate: rec.gate,
		PlanText: store.ClipPlanText(rec.planText)}
	if !rec.seen.IsZero() {
		// A copy: the stored event must not keep the run record (and its
		// input digests) alive.
		seen := rec.seen
		ev.DetectedAt = &seen
	}
	if res.Add+res.Change+res.Destroy > 0 || err == nil {
		ev.Plan = &store.PlanSummary{Add: res.Add, Change: res.Change, Destroy: res.Destroy}
	}
	next := store.RunState{Applied: rec.want.Fingerprint, Parts: rec.want.Parts, Outputs: st.Outputs}
	if err == nil && e.drv != nil && e.exports {
		next.Outputs = res.Outputs
		if next.Outputs == nil {
			log.Warn("the driver reported no outputs: tasks that receive this task's outputs get an empty object")
			next.Outputs = json.RawMessage("{}")
		}
	}
	if err != nil {
		ev.Error = &store.EventError{Message: r.opts.redact(s.Name, err.Error())}
		// The last success stays recorded (what changed is told against
		// it); the failure makes the task dirty until a run succeeds.
		next = store.RunState{Applied: st.Applied, Parts: st.Parts, Failed: rec.want.Fingerprint, Terminal: terminal, Outputs: st.Outputs}
		log.Error("error applying task", "run_id", rec.id, "error", r.opts.redact("", err.Error()), "terminal", terminal, "log", res.LogPath)
	}
	recErr := r.finish(ctx, s.Name, next, &ev)
	out := Result{recorded: recErr == nil, inputs: rec.inputs}
	if recErr != nil && err == nil {
		// Applied but not recorded: not reported as a success. The task
		// stays dirty here, and the in-flight marker (still set in the
		// store) makes the next leader run it again.
		err = fmt.Errorf("the run succeeded but could not be recorded: %w", recErr)
	}
	if r.opts.Metrics != nil {
		r.opts.Metrics.RunFinished(s.Name, rec.kind, err == nil, rec.end.Sub(rec.start))
	}
	if err != nil {
		out.failed, out.terminal, out.err = true, terminal, err
		return out
	}
	if !rec.once { // -once logs its tasks in order (RunOnce)
		log.Info("task completed", "run_id", rec.id, "added", res.Add, "changed", res.Change,
			"destroyed", res.Destroy, "duration", rec.end.Sub(rec.start).Round(time.Millisecond))
	}
	out.applied, out.checkDue = true, res.CheckDue
	return out
}

// unreadableState records that a task's desired state could not be read (a
// module directory or file that vanished): an error event naming what, and
// the task stays dirty, retried with backoff like a failed run.
func (r *reconciler) unreadableState(ctx context.Context, s *task.Spec, trigger string, derr error, inspect bool) Result {
	err := fmt.Errorf("reading the task's desired state: %w", derr)
	if inspect {
		return Result{failed: true, err: err}
	}
	r.log.Error("task not run: its desired state cannot be read", "task_name", s.Name, "error", err)
	st := r.opts.Store.Run(s.Name)
	now := time.Now()
	ev := store.Event{ID: uuid.NewString(), TaskName: s.Name, StartTime: now, EndTime: now, Kind: store.KindApply,
		Trigger: trigger, Config: eventConfig(s), Error: &store.EventError{Message: r.opts.redact(s.Name, err.Error())}}
	next := store.RunState{Applied: st.Applied, Parts: st.Parts, Failed: unreadable}
	_ = r.finish(ctx, s.Name, next, &ev) // logged there; the task is retried either way
	return Result{failed: true, err: err}
}

func (r *reconciler) skipped(name string) {
	if r.opts.Metrics != nil {
		r.opts.Metrics.RunSkipped(name)
	}
}

// redact removes secrets from text that reaches events and logs: the text
// of the task named task (its view: its variables' values are shown as
// written), or, with task "", text of no task (the daemon's log).
func (o *Options) redact(task, text string) string {
	return o.Redactor.ForTask(task).Redact(text)
}

// Recording a run's outcome is retried: the run is not over until the
// store has it.
const (
	finishAttempts  = 8
	finishRetryBase = 250 * time.Millisecond
	finishRetryMax  = 5 * time.Second
)

// finish records a run's outcome (run state and event, one write) and hands
// the event to the event hook. A failed write is retried with backoff; a
// write refused because this instance no longer leads is not (the new
// leader runs the task again, its in-flight marker still being set).
func (r *reconciler) finish(ctx context.Context, name string, st store.RunState, ev *store.Event) error {
	for attempt := 1; ; attempt++ {
		err := r.opts.Store.FinishRun(context.WithoutCancel(ctx), name, st, ev) // the outcome is recorded even when the run was cancelled
		if err == nil {
			if ev != nil && r.opts.OnEvent != nil {
				r.opts.OnEvent(*ev)
			}
			return nil
		}
		if errors.Is(err, store.ErrNotLeader) {
			r.log.Warn("run outcome not recorded: this instance no longer leads or owns the task; the new leader or owner runs the task again",
				"task_name", name, "error", err)
			return err
		}
		if attempt == finishAttempts || ctx.Err() != nil {
			r.log.Error("run outcome not recorded in the store", "task_name", name, "attempts", attempt, "error", err)
			return err
		}
		delay := retryPolicy(finishRetryBase, finishRetryMax).Delay(attempt)
		r.log.Warn("recording the run outcome failed; retrying", "task_name", name, "attempt", attempt,
			"delay", delay.Round(time.Millisecond), "error", err)
		backoff.Sleep(ctx, delay)
	}
}

// drive creates and initialises the task's driver when needed, then plans
// or applies.
func (r *reconciler) drive(ctx context.Context, e *driverSlot, s *task.Spec, exports bool, run driver.Run, in *task.Inputs, mode Mode) (driver.Result, error) {
	if err := r.ensureDriver(ctx, e, s, exports); err != nil {
		return driver.Result{}, err
	}
	if mode == ModePlan {
		return e.drv.Plan(ctx, run, in)
	}
	return e.drv.Apply(ctx, run, in)
}

// ensureDriver creates and initialises the task's driver when needed.
func (r *reconciler) ensureDriver(ctx context.Context, e *driverSlot, s *task.Spec, exports bool) error {
	if e.drv == nil {
		spec := *s
		spec.ExportOutputs = exports
		d, err := r.opts.NewDriver(spec)
		if err != nil {
			// The task's configuration cannot make a driver (a name
			// Terraform refuses, a provider that is not configured):
			// the same desired state would fail the same way.
			return &driver.Error{Op: "prepare", Summary: err.Error(), Err: err, Terminal: true}
		}
		e.initStart = time.Now()
		err = d.Init(ctx)
		e.initEnd = time.Now()
		if err != nil {
			return err
		}
		e.drv, e.exports = d, spec.ExportOutputs
	}
	return nil
}

// destroy runs terraform destroy for the task (ModeDestroy: a deletion
// with destroy), records it as an event of the task, and removes its
// working directory.
func (r *reconciler) destroy(ctx context.Context, e *driverSlot, s *task.Spec) error {
	if e.drv == nil {
		d, err := r.opts.NewDriver(*s)
		if err != nil {
			return err
		}
		if err := d.Init(ctx); err != nil {
			return err
		}
		e.drv = d
	}
	start := time.Now()
	var (
		res driver.Result
		id  string
		err error
	)
	// A state lock held by someone else (a previous leader's Terraform that
	// was killed: its lock lives until Consul expires its session) always
	// ends: wait for it, as runs do (LockRetryCap), for as long as ctx.
	for attempt := 1; ; attempt++ {
		id = uuid.NewString()
		res, err = e.drv.Destroy(ctx, driver.Run{ID: id})
		if !errors.Is(err, driver.ErrStateLocked) || ctx.Err() != nil {
			break
		}
		delay := lockPolicy(r.opts.RetryBase).Step(attempt)
		r.log.Info("destroy waits: the task's Terraform state is locked by another process", "task_name", s.Name,
			"attempt", attempt, "retry_in", delay)
		backoff.Sleep(ctx, delay)
	}
	r.recordDestroy(ctx, s, id, start, res, err)
	if err != nil {
		return err
	}
	return e.drv.Forget(ctx)
}

// recordDestroy logs a destroy of the task's infrastructure and records it
// as an event of the task: a failed one stays in its history (the task is
// kept), where task delete -destroy reads it.
func (r *reconciler) recordDestroy(ctx context.Context, s *task.Spec, id string, start time.Time, res driver.Result, err error) {
	r.log.Info("destroyed task infrastructure", "task_name", s.Name, "run_id", id, "destroyed", res.Destroy, "error", err,
		"duration", time.Since(start).Round(time.Millisecond))
	ev := store.Event{ID: id, TaskName: s.Name, Success: err == nil, StartTime: start, EndTime: time.Now(),
		Kind: store.KindDestroy, Trigger: Due(TriggerAPI).String(), Config: eventConfig(s), LogPath: res.LogPath,
		LogTail: r.opts.redact(s.Name, tail(res.LogPath, 4096)), Plan: &store.PlanSummary{Destroy: res.Destroy}, Actor: actorFrom(ctx)}
	if err != nil {
		ev.Error = &store.EventError{Message: r.opts.redact(s.Name, err.Error())}
		ev.ErrorSummary = r.opts.redact(s.Name, driver.ErrorSummary(err))
	}
	r.record(ctx, ev)
}

// record stores an event that is not a run's outcome (a drift check, a
// destroy) and hands it to the event hook.
func (r *reconciler) record(ctx context.Context, ev store.Event) {
	if err := r.opts.Store.AddEvent(context.WithoutCancel(ctx), ev); err != nil {
		r.log.Warn("event not recorded in the store", "task_name", ev.TaskName, "kind", ev.Kind, "error", err)
	}
	if r.opts.OnEvent != nil {
		r.opts.OnEvent(ev)
	}
}

func eventConfig(s *task.Spec) *store.EventConfig {
	cfg := &store.EventConfig{Providers: append([]string{}, s.Providers...), Services: []string{}, Source: s.Module}
	if sel, _ := servicesSource(s); sel != nil {
		cfg.Services = append(cfg.Services, sel.Names...)
	}
	return cfg
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// tail returns at most n bytes from the end of a file, starting at a line.
func tail(path string, n int64) string {
	if path == "" {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	if off > 0 {
		if i := strings.IndexByte(string(b), '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}
