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
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/google/uuid"
)

// outcome is what one reconcile did.
type outcome struct {
	failed   bool
	waiting  bool // not run: it waits (ErrWaiting); retried, not recorded
	terminal bool // the failure is terminal (driver.ErrTerminal)
	err      error
	plan     string
	held     string        // not run: an upstream task has something left to do (chain.go)
	dur      time.Duration // how long the run took (a worker's)
}

// unreadable is recorded as the failed fingerprint when a task's desired
// state could not be read: the task stays dirty, and no fingerprint can
// match it.
const unreadable = "unreadable"

// reconcile runs one task once: compute its desired state, decide whether
// it must run, drive Terraform, and record the outcome. A task runs when
// its desired state differs from the one last applied successfully, or
// when its last run failed (unless that failure was terminal and the
// desired state is still the same), or when req.Force is set. A plan
// (ModePlan) records nothing.
func (c *Controller) reconcile(ctx context.Context, e *entry, s *task.Spec, req Request) outcome {
	log := c.log.With("task_name", s.Name)
	inspect := req.Mode == ModePlan
	trigger := req.Trigger.String()
	// The desired state is taken before the inputs are built: if the data
	// changes in between, the inputs are newer than the fingerprint stored
	// as applied, and the next notification runs the task once more. The
	// other order could store a newer fingerprint than what was applied
	// and lose that change.
	want, ready, derr := c.desired(ctx, s)
	if !ready {
		log.Debug("waiting for watched data before running")
		return outcome{}
	}
	// From here on the task has run as far as buffering is concerned: a
	// change that arrives during this run waits out the buffer period.
	c.mu.Lock()
	c.startedLocked(e)
	c.mu.Unlock()
	if derr != nil && errors.Is(derr, ErrWaiting) && !inspect {
		c.mu.Lock()
		first := e.lc.waiting == ""
		c.waitLocked(e, derr.Error())
		c.mu.Unlock()
		if first {
			log.Warn("task waits before it can run", "reason", derr.Error())
		}
		return outcome{failed: true, waiting: true, err: derr}
	}
	c.mu.Lock()
	c.waitLocked(e, "")
	c.mu.Unlock()
	if derr != nil {
		return c.unreadableState(ctx, s, trigger, derr, inspect)
	}
	st := c.opts.Store.Run(s.Name)
	if !inspect && !req.Force {
		var run bool
		if trigger, run = c.mustRun(log, s.Name, st, want, req.Trigger); !run {
			c.supersedeHeld(ctx, e, "", want.Fingerprint) // the desired state is the one applied again (gates.go)
			return outcome{}
		}
		if c.gateSettled(e, want.Fingerprint) { // held, rejected or expired as it is (gates.go)
			c.skipped(s.Name)
			return outcome{}
		}
	}
	in, ready := c.inputs(s)
	if !ready { // a view went away in between (a regexp match left)
		return outcome{}
	}
	// Chained tasks: the upstream tasks are looked at after the inputs are
	// read, so that an upstream found up to date has applied data at least
	// as new as the inputs (chain.go).
	if !inspect && req.Trigger.Kind != TriggerOnce {
		if why := c.upstreamHold(ctx, s); why != "" {
			c.mu.Lock()
			first := c.waitLocked(e, why)
			c.mu.Unlock()
			if first {
				log.Info("task held: it runs after the tasks it depends on", "reason", why)
			}
			return outcome{held: why}
		}
		if want.Parts[driver.PartUpstream] != c.upstreamDigest(s) {
			// An upstream task applied since the desired state was read
			// (it was running then, idle now): decide again with what it
			// applied, rather than apply with a stale fingerprint and run
			// again to catch up.
			log.Debug("an upstream task applied meanwhile; reading the desired state again")
			return c.reconcile(ctx, e, s, req)
		}
	}
	c.mu.Lock()
	c.runsLocked(e, want.Fingerprint)
	c.mu.Unlock()

	r := &runRecord{id: uuid.NewString(), trigger: trigger, once: req.Trigger.Kind == TriggerOnce, kind: store.KindApply, want: want, before: st,
		actor: actorFrom(ctx), inputs: digest(&in)}
	c.mu.Lock()
	r.seen = req.Seen
	r.prev = e.prevInputs
	c.mu.Unlock()
	if gated(s) {
		return c.gatedRun(ctx, log, e, s, req, r, &in) // gates.go
	}
	if inspect {
		r.kind = store.KindPlan
	} else if err := c.opts.Store.StartRun(ctx, s.Name, r.id); err != nil {
		// The marker is in the store before Terraform starts: if this
		// instance dies or loses the lead during the run, the next
		// leader runs the task again.
		log.Error("not running task: its in-flight marker could not be stored", "error", err)
		return outcome{failed: true, err: fmt.Errorf("storing the in-flight marker: %w", err)}
	}
	if c.opts.Metrics != nil {
		c.opts.Metrics.RunStarted(s.Name)
	}
	log.Info("executing task", "run_id", r.id, "trigger", trigger, "mode", r.kind, "instances", len(in.Services))
	r.start = time.Now()
	r.res, r.err = c.drive(ctx, e, s, driver.Run{ID: r.id}, &in, req.Mode)
	r.end = time.Now()
	r.phases = eventPhases(e.initStart, e.initEnd, r.res.Phases, r.kind, r.start, r.end)
	e.initStart, e.initEnd = time.Time{}, time.Time{}
	if inspect {
		if c.opts.Metrics != nil {
			c.opts.Metrics.RunFinished(s.Name, r.kind, r.err == nil, r.end.Sub(r.start))
		}
		return outcome{failed: r.err != nil, err: r.err, plan: r.res.Output}
	}
	return c.recordRun(ctx, log, e, s, r)
}

// mustRun decides whether a task runs, from its desired state and the run
// state in the store, and returns the run's trigger: what changed since
// its last success (the watched key, or the parts of the desired state).
func (c *Controller) mustRun(log *slog.Logger, name string, st store.RunState, want Desired, due Trigger) (string, bool) {
	trigger := due.String()
	switch {
	case st.Dirty() && st.Terminal && st.Failed == want.Fingerprint:
		log.Debug("last run failed with a terminal error and the desired state has not changed since: not running")
		c.skipped(name)
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
		c.skipped(name)
		return trigger, false
	default:
		trigger = changeTrigger(due, changedParts(st.Parts, want.Parts))
	}
	return trigger, true
}

// inputs builds what the task's module receives: its Consul data and the
// outputs of the tasks it receives them from.
func (c *Controller) inputs(s *task.Spec) (task.Inputs, bool) {
	in, ready := BuildInputs(s, c.get)
	if !ready {
		return in, false
	}
	if outs, _ := c.upstreamOutputs(s); outs != nil {
		in.TaskOutputs = make(map[string]json.RawMessage, len(outs))
		for k, v := range outs {
			in.TaskOutputs[k] = v
		}
	}
	return in, true
}

// runRecord is one run of a task (not a plan), from its start to its
// record in the store.
type runRecord struct {
	id, trigger string
	once        bool // a run of -once, which logs its tasks in order itself
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
}

// recordRun records a run's outcome: its event and the task's next run
// state, in one write (finish); a run is not a success until recorded.
func (c *Controller) recordRun(ctx context.Context, log *slog.Logger, e *entry, s *task.Spec, r *runRecord) outcome {
	res, err, st := r.res, r.err, r.before
	terminal := driver.IsTerminal(err)
	ev := store.Event{ID: r.id, TaskName: s.Name, Success: err == nil, StartTime: r.start, EndTime: r.end,
		Kind: r.kind, Trigger: r.trigger, InputsHash: r.want.Used, Config: eventConfig(s), LogPath: res.LogPath,
		LogTail: c.redact(tail(res.LogPath, 4096)), Terminal: terminal, TFCRunURL: res.RunURL,
		ErrorSummary: c.redact(driver.ErrorSummary(err)), Actor: r.actor, Phases: r.phases, Changes: changes(r.prev, r.inputs)}
	if !r.seen.IsZero() {
		ev.DetectedAt = &r.seen
	}
	if res.Add+res.Change+res.Destroy > 0 || err == nil {
		ev.Plan = &store.PlanSummary{Add: res.Add, Change: res.Change, Destroy: res.Destroy}
	}
	next := store.RunState{Applied: r.want.Fingerprint, Parts: r.want.Parts, Outputs: st.Outputs}
	if err == nil && e.drv != nil && e.exports {
		next.Outputs = res.Outputs
		if next.Outputs == nil {
			log.Warn("the driver reported no outputs: tasks that receive this task's outputs get an empty object")
			next.Outputs = json.RawMessage("{}")
		}
	}
	if err != nil {
		ev.Error = &store.EventError{Message: c.redact(err.Error())}
		// The last success stays recorded (what changed is told against
		// it); the failure makes the task dirty until a run succeeds.
		next = store.RunState{Applied: st.Applied, Parts: st.Parts, Failed: r.want.Fingerprint, Terminal: terminal, Outputs: st.Outputs}
		log.Error("error applying task", "run_id", r.id, "error", c.redact(err.Error()), "terminal", terminal, "log", res.LogPath)
	}
	recErr := c.finish(ctx, s.Name, next, &ev)
	if recErr == nil {
		c.mu.Lock()
		e.prevInputs = r.inputs
		c.mu.Unlock()
	}
	if recErr != nil && err == nil {
		// Applied but not recorded: not reported as a success. The task
		// stays dirty here, and the in-flight marker (still set in the
		// store) makes the next leader run it again.
		err = fmt.Errorf("the run succeeded but could not be recorded: %w", recErr)
	}
	if c.opts.Metrics != nil {
		c.opts.Metrics.RunFinished(s.Name, r.kind, err == nil, r.end.Sub(r.start))
	}
	if err != nil {
		return outcome{failed: true, terminal: terminal, err: err}
	}
	if !r.once { // -once logs its tasks in order (RunOnce)
		log.Info("task completed", "run_id", r.id, "added", res.Add, "changed", res.Change,
			"destroyed", res.Destroy, "duration", r.end.Sub(r.start).Round(time.Millisecond))
	}
	c.mu.Lock()
	e.drifted = false // just applied: matches the configuration again
	c.succeededLocked(e)
	c.mu.Unlock()
	return outcome{}
}

// unreadableState records that a task's desired state could not be read (a
// module directory or file that vanished): an error event naming what, and
// the task stays dirty, retried with backoff like a failed run.
func (c *Controller) unreadableState(ctx context.Context, s *task.Spec, trigger string, derr error, inspect bool) outcome {
	err := fmt.Errorf("reading the task's desired state: %w", derr)
	if inspect {
		return outcome{failed: true, err: err}
	}
	c.log.Error("task not run: its desired state cannot be read", "task_name", s.Name, "error", err)
	st := c.opts.Store.Run(s.Name)
	now := time.Now()
	ev := store.Event{ID: uuid.NewString(), TaskName: s.Name, StartTime: now, EndTime: now, Kind: store.KindApply,
		Trigger: trigger, Config: eventConfig(s), Error: &store.EventError{Message: c.redact(err.Error())}}
	next := store.RunState{Applied: st.Applied, Parts: st.Parts, Failed: unreadable}
	_ = c.finish(ctx, s.Name, next, &ev) // logged there; the task is retried either way
	return outcome{failed: true, err: err}
}

func (c *Controller) skipped(name string) {
	if c.opts.Metrics != nil {
		c.opts.Metrics.RunSkipped(name)
	}
}

// redact removes secrets from text that reaches events and logs.
func (c *Controller) redact(text string) string {
	if c.opts.Redact == nil {
		return text
	}
	return c.opts.Redact(text)
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
func (c *Controller) finish(ctx context.Context, name string, st store.RunState, ev *store.Event) error {
	for attempt := 1; ; attempt++ {
		err := c.opts.Store.FinishRun(context.WithoutCancel(ctx), name, st, ev) // the outcome is recorded even when the run was cancelled
		if err == nil {
			if ev != nil && c.opts.OnEvent != nil {
				c.opts.OnEvent(*ev)
			}
			return nil
		}
		if errors.Is(err, store.ErrNotLeader) {
			c.log.Warn("run outcome not recorded: this instance no longer leads or owns the task; the new leader or owner runs the task again",
				"task_name", name, "error", err)
			return err
		}
		if attempt == finishAttempts || ctx.Err() != nil {
			c.log.Error("run outcome not recorded in the store", "task_name", name, "attempts", attempt, "error", err)
			return err
		}
		delay := retryPolicy(finishRetryBase, finishRetryMax).Delay(attempt)
		c.log.Warn("recording the run outcome failed; retrying", "task_name", name, "attempt", attempt,
			"delay", delay.Round(time.Millisecond), "error", err)
		backoff.Sleep(ctx, delay)
	}
}

// drive creates and initialises the task's driver when needed, then plans
// or applies.
func (c *Controller) drive(ctx context.Context, e *entry, s *task.Spec, run driver.Run, in *task.Inputs, mode Mode) (driver.Result, error) {
	if err := c.ensureDriver(ctx, e, s); err != nil {
		return driver.Result{}, err
	}
	if mode == ModePlan {
		return e.drv.Plan(ctx, run, in)
	}
	return e.drv.Apply(ctx, run, in)
}

// ensureDriver creates and initialises the task's driver when needed.
func (c *Controller) ensureDriver(ctx context.Context, e *entry, s *task.Spec) error {
	if e.drv == nil {
		spec := *s
		c.mu.Lock()
		spec.ExportOutputs = c.exportsOutputsLocked(s.Name)
		c.mu.Unlock()
		d, err := c.opts.NewDriver(spec)
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
