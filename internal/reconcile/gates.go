package reconcile

// The safety gates (docs/safety.md): a task with an approval or a policy
// block runs as plan → policy → approval rules → apply. A plan the policy
// denies is never applied nor held; a plan the approval rules hold waits,
// exactly as planned, for an operator's decision (Approve, Reject) or its
// expiry; any other plan is applied at once, that plan and no new one.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/policy"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/google/uuid"
)

// gateState is what the operator sees of a task's held plans, and what
// the gates remember of them; the plan pending now is part of the task's
// lifecycle (lifecycle.held). Guarded by c.mu.
type gateState struct {
	// plan is the newest plan a gate held, whatever its state (zero ID:
	// none): what GET /v1/tasks/{name}/plan shows. Its state is Pending
	// exactly while it is the task's held plan (lifecycle.held).
	plan gate.Plan
	// settled is the fingerprint of a desired state whose plan was held,
	// rejected or expired: it is not planned again until it changes.
	settled string
	// newer maps a superseded plan's id to the plan that replaced it (""
	// when none did: the desired state went back to the applied one).
	newer map[string]string
	// orphans are driver plans dropped while nothing ran the task; its
	// next job discards them (the driver's calls are never concurrent).
	orphans []driver.HeldPlan
}

// stateLocked is the gate keeper's state of the task. c.mu is held.
func (c *gateKeeper) stateLocked(e *entry) *gateState {
	g := c.plans[e]
	if g == nil {
		g = &gateState{}
		c.plans[e] = g
	}
	return g
}

// forgetLocked drops the gate keeper's state of a task that is removed,
// and returns the plans whose files are to be discarded. c.mu is held.
func (c *gateKeeper) forgetLocked(e *entry) []driver.HeldPlan {
	g := c.plans[e]
	delete(c.plans, e)
	c.hs.dropLocked(e.spec.Name, "")
	if g == nil {
		return nil
	}
	return g.orphans
}

// orphansLocked returns the plans of the task whose files are to be
// discarded (by its next job, which says how many it discarded:
// discardedLocked). c.mu is held.
func (c *gateKeeper) orphansLocked(e *entry) []driver.HeldPlan {
	g := c.plans[e]
	if g == nil {
		return nil
	}
	return slices.Clone(g.orphans)
}

// discardedLocked forgets the first n plans of the task whose files were
// to be discarded: a job discarded them. c.mu is held.
func (c *gateKeeper) discardedLocked(e *entry, n int) {
	if g := c.plans[e]; g != nil {
		g.orphans = g.orphans[min(n, len(g.orphans)):]
	}
}

// maxSuperseded bounds gateState.newer.
const maxSuperseded = 32

func (g *gateState) pending() bool { return g.plan.ID != "" && g.plan.State == gate.Pending }

// destroyHeldLocked reports whether the task's held plan is a deletion's
// destroy. c.mu is held.
func (e *entry) destroyHeldLocked() bool { return e.lc.held != nil && e.lc.held.destroy }

// DestroyHeldError is the answer of a deletion with destroy (Delete) whose
// destroy plan a safety gate holds for approval: nothing was destroyed, the
// task is kept (disabled) until the plan is approved (then destroyed and
// deleted), rejected or expired (then kept, its enabled flag given back).
type DestroyHeldError struct{ Plan gate.Plan }

func (e *DestroyHeldError) Error() string {
	return fmt.Sprintf("the destroy of task %q is held for approval: plan %s: %s (nothing destroyed; the task is deleted once the plan is approved)",
		e.Plan.Task, e.Plan.ID, e.Plan.Reason)
}

// gated reports whether a task's runs go through the safety gates.
func gated(s *task.Spec) bool { return s.Approval != nil || s.Policy != nil }

// HeldError is the error of a run that a gate held for approval: in -once
// and -inspect, where nobody can approve it, and of a run an API call
// started (RunNow), whose plan waits for approval (Plan: its id). Nothing
// was applied.
type HeldError struct {
	Reason string
	Plan   string // the held plan's id ("": not kept, -once and -inspect)
}

func (e *HeldError) Error() string {
	if e.Plan != "" {
		return "held for approval: plan " + e.Plan + ": " + e.Reason + " (nothing applied)"
	}
	return "held for approval: " + e.Reason + " (nothing applied)"
}

// gateEvent hands what a gate did to the gate hook.
func (c *gateKeeper) gateEvent(ev gate.Event) { emitGate(c.opts, ev) }

// emitGate records what a gate did in the task's history (recordGate)
// and hands it to the gate hook of opts.
func emitGate(opts *Options, ev gate.Event) {
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	recordGate(opts, ev)
	if opts.OnGate != nil {
		opts.OnGate(ev)
	}
}

// gateWriteTimeout bounds the write of a gate's audit event.
const gateWriteTimeout = 30 * time.Second

// recordGate adds the audit event of an approval decision (a plan held,
// approved, rejected, expired, superseded) to the task's history: an
// event of kind "gate", which is not a run (store.Event.IsRun). A policy
// deny is not recorded here: it is the denied run's own event (its Gate
// set by the run). A failed write is logged; the decision stands.
func recordGate(opts *Options, ev gate.Event) {
	if ev.Kind != gate.EventApproval || opts.Store == nil {
		return
	}
	p := ev.Plan
	d := &store.GateDecision{Action: ev.Action, PlanID: p.ID, Reason: p.Reason, Rule: p.Rule, SupersededBy: ev.Newer}
	if ev.Action == gate.ActionApproved || ev.Action == gate.ActionRejected {
		d.By = p.DecidedBy
	}
	if ev.Action != gate.ActionHeld {
		d.HeldSeconds = heldSeconds(p, ev.Time)
	}
	start := ev.Time
	if ev.Action == gate.ActionHeld && !p.Created.IsZero() {
		start = p.Created
	}
	se := store.Event{ID: uuid.NewString(), TaskName: ev.Task, Success: true, StartTime: start, EndTime: ev.Time,
		Kind: store.KindGate, Trigger: ev.Trigger, Gate: d,
		Plan: &store.PlanSummary{Add: p.Add, Change: p.Change, Destroy: p.Destroy}}
	ctx, cancel := context.WithTimeout(context.Background(), gateWriteTimeout)
	defer cancel()
	if err := opts.Store.AddEvent(ctx, se); err != nil && opts.Logger != nil {
		opts.Logger.Error("the safety gate's decision could not be recorded in the task's history",
			"task_name", ev.Task, "plan", p.ID, "action", ev.Action, "error", err)
	}
}

// heldSeconds is how long the plan p waited until its decision (at when
// it has none recorded).
func heldSeconds(p gate.Plan, at time.Time) float64 {
	if !p.DecidedAt.IsZero() {
		at = p.DecidedAt
	}
	if p.Created.IsZero() || at.Before(p.Created) {
		return 0
	}
	return at.Sub(p.Created).Seconds()
}

// approvedDecision is the approval of the plan p, as the run that applies
// it records it (store.Event.Gate).
func approvedDecision(p gate.Plan) *store.GateDecision {
	return &store.GateDecision{Action: gate.ActionApproved, PlanID: p.ID, Reason: p.Reason, Rule: p.Rule,
		By: p.DecidedBy, HeldSeconds: heldSeconds(p, time.Time{})}
}

// heldView is the task's held plan as a job's snapshot has it.
type heldView struct {
	plan      gate.Plan
	drv       driver.HeldPlan
	settledFP string
}

// viewLocked is the snapshot of the task's held plan a job reads. c.mu is
// held.
func (c *gateKeeper) viewLocked(e *entry) heldView {
	var v heldView
	if g := c.plans[e]; g != nil {
		v = heldView{plan: gate.Plan{ID: g.plan.ID, State: g.plan.State, Fingerprint: g.plan.Fingerprint}, settledFP: g.settled}
	}
	if h := e.lc.held; h != nil {
		v.drv = h.drv
	}
	return v
}

func (h *heldView) pending() bool { return h.plan.ID != "" && h.plan.State == gate.Pending }

// settled reports whether the desired state fingerprint was already
// gated: its plan is held now, or was rejected or expired. Only a change
// plans again.
func (h *heldView) settled(fingerprint string) bool {
	return (h.pending() && h.plan.Fingerprint == fingerprint) || (!h.pending() && h.settledFP == fingerprint)
}

// supersession is a held plan superseded by a job: by plan newer ("": by
// no plan, the desired state being the one applied again).
type supersession struct {
	id, newer string
}

// supersede discards the task's pending plan, superseded by plan newer
// ("": by no plan), unless it was made from fingerprint (not ""); the
// controller records it (supersedeLocked). nil when nothing is superseded.
func (r *reconciler) supersede(ctx context.Context, log *slog.Logger, j job, newer, fingerprint string) *supersession {
	h := &j.held
	if !h.pending() || (fingerprint != "" && h.plan.Fingerprint == fingerprint) {
		return nil
	}
	discardPlan(ctx, log, j.drv, h.drv)
	return &supersession{id: h.plan.ID, newer: newer}
}

// supersedeLocked records that a job superseded the task's plan sp.id,
// pending (or approved, when the approved plan was stale): it returns
// the gate event. c.mu is held.
func (c *gateKeeper) supersedeLocked(e *entry, sp *supersession) []gate.Event {
	g := c.stateLocked(e)
	if g.plan.ID != sp.id || (!g.pending() && g.plan.State != gate.Approved) {
		return nil
	}
	p := c.endHeldLocked(e, gate.Superseded, "", evDrop)
	if g.newer == nil || len(g.newer) >= maxSuperseded {
		g.newer = map[string]string{}
	}
	g.newer[p.ID] = sp.newer
	c.log.Info("held plan superseded: the task's desired state changed", "task_name", e.spec.Name, "plan", p.ID, "newer_plan", sp.newer)
	return []gate.Event{{Kind: gate.EventApproval, Action: gate.ActionSuperseded, Task: p.Task, Plan: p, Newer: sp.newer}}
}

// endHeldLocked ends the task's plan in state st (decided by who) and
// returns it; the held plan, if it is the one, is dropped from the
// lifecycle by ev (evDrop, or evExpire). c.mu is held.
func (c *gateKeeper) endHeldLocked(e *entry, st gate.State, who string, ev event) gate.Plan {
	g := c.stateLocked(e)
	g.plan.State = st
	c.hs.dropLocked(e.spec.Name, g.plan.ID) // heldstore.go
	if who != "" {
		g.plan.DecidedBy, g.plan.DecidedAt = who, time.Now().UTC()
	}
	c.stepLocked(e, ev, wake{})
	c.changedLocked()
	return clonePlan(g.plan)
}

func clonePlan(p gate.Plan) gate.Plan {
	p.Changes = slices.Clone(p.Changes)
	return p
}

// discardPlan drops the driver's plan p of the task whose driver is e
// (logged on failure: the plan is no longer held either way).
func discardPlan(ctx context.Context, log *slog.Logger, e *driverSlot, p driver.HeldPlan) {
	ph, ok := e.drv.(driver.PlanHolder)
	if p.ID == "" || !ok {
		return
	}
	if err := ph.DiscardPlan(context.WithoutCancel(ctx), p); err != nil {
		log.Warn("discarding a held plan failed", "plan", p.ID, "error", err)
	}
}

// heldRun is a plan a gate holds, as a run's outcome gives it to the
// controller (holdLocked), and as the task's lifecycle keeps it
// (lifecycle.held) until a decision, a newer plan or its expiry
// (plan.Expires; zero: never).
type heldRun struct {
	plan    gate.Plan
	drv     driver.HeldPlan
	run     *runRecord
	destroy bool // the plan of a deletion with destroy (gatedDestroy)
	// enabled is the task's enabled flag before its deletion with
	// destroy: given back when the plan is rejected or expires.
	enabled bool
	// expireAt is when the plan expires on the controller's clock (zero:
	// never); set when it is held.
	expireAt time.Time
	// digest is the digest of the plan's changes as the operator sees them
	// (gate.ChangesDigest; "": the driver gave no JSON plan).
	digest string
	// restored: the plan was held before this process (or this member)
	// ran the task, and restored from the store (heldstore.go); drv is
	// zero unless the driver's plan outlives the process (Durable).
	restored bool
}

// holdLocked makes the plan a run held the task's held plan (evHold: its
// expiry is on the task's timer), and returns the gate event. c.mu is
// held.
func (c *gateKeeper) holdLocked(e *entry, h *heldRun) gate.Event {
	g := c.stateLocked(e)
	g.plan = h.plan
	g.settled = ""
	if !h.plan.Expires.IsZero() {
		h.expireAt = c.opts.Clock.Now().Add(h.plan.Expires.Sub(h.plan.Created))
	}
	c.stepLocked(e, evHold, wake{hold: h})
	c.hs.saveLocked(e.spec.Name, heldRecord(h)) // heldstore.go
	return gate.Event{Kind: gate.EventApproval, Action: gate.ActionHeld, Task: e.spec.Name, Plan: clonePlan(h.plan), Trigger: h.run.trigger}
}

// gatedRun is a run of a task with safety gates (reconcile decided it
// runs): it makes and keeps a plan, checks the policy on it, then the
// approval rules, and holds it or applies exactly it. In -inspect and
// -once, where nobody can approve, a plan the gates hold or deny fails the
// run, saying why, and nothing is applied.
//
// A plan the approval rules hold is returned in the outcome (hold), and
// the controller keeps it (holdLocked), as it records the plan this run
// superseded (supersede).
func (rc *reconciler) gatedRun(ctx context.Context, log *slog.Logger, j job, r *runRecord, in *task.Inputs) Result {
	var sp *supersession
	if j.Mode != ModePlan && j.Trigger.Kind != TriggerOnce {
		sp = rc.supersede(ctx, log, j, r.id, "") // this run replaces it
	}
	out := rc.gatedRunOf(ctx, log, j, r, in)
	if !out.matched {
		out.supersede = sp
	}
	return out
}

// gatedRunOf is gatedRun but for the plan it supersedes.
func (rc *reconciler) gatedRunOf(ctx context.Context, log *slog.Logger, j job, r *runRecord, in *task.Inputs) Result {
	e, s, req := j.drv, j.spec, j.Request
	dry := req.Mode == ModePlan || req.Trigger.Kind == TriggerOnce
	if req.Mode == ModePlan {
		r.kind = store.KindPlan
	}

	if rc.opts.Metrics != nil {
		rc.opts.Metrics.RunStarted(s.Name)
	}
	log.Info("executing task", "run_id", r.id, "trigger", r.trigger, "mode", r.kind, "instances", len(in.Services), "gates", true)
	r.start = time.Now()
	hp, err := rc.planHeld(ctx, e, s, j.exports, driver.Run{ID: r.id}, in)
	r.res = hp.Result
	fail := func(err error) Result {
		r.err, r.end = err, time.Now()
		r.phases = eventPhases(e.initStart, e.initEnd, r.res.Phases, r.kind, r.start, r.end)
		e.initStart, e.initEnd = time.Time{}, time.Time{}
		if dry && req.Mode == ModePlan {
			if rc.opts.Metrics != nil {
				rc.opts.Metrics.RunFinished(s.Name, r.kind, false, r.end.Sub(r.start))
			}
			return Result{failed: true, err: err, plan: hp.Text}
		}
		return rc.recordRun(ctx, log, e, s, r)
	}
	if err != nil {
		return fail(err)
	}
	counts := hp.Counts
	r.res.Add, r.res.Change, r.res.Destroy, r.res.Changes = counts.Add, counts.Change, counts.Destroy, hp.Changes
	plan := gate.Plan{ID: r.id, Task: s.Name, Created: r.start.UTC(), State: gate.Pending,
		Add: counts.Add, Change: counts.Change, Destroy: counts.Destroy, Replace: counts.Replace, InState: counts.InState,
		Text: rc.opts.redact(s.Name, hp.Text), Changes: changeLines(changes(r.prev, r.inputs)), Fingerprint: r.want.Fingerprint}

	// Policy: a deny is final for this desired state; an evaluation
	// error leaves the verdict unknown, so nothing is applied either. A
	// plan without changes passes.
	if s.Policy != nil && hp.Changes {
		pctx, endEval := e.policyStop.begin(ctx) // a deletion does not wait for it
		msgs, perr := checkPolicy(pctx, s, hp, r.trigger)
		endEval()
		if perr != nil || len(msgs) > 0 {
			discardPlan(ctx, log, e, hp)
			if perr != nil {
				log.Error("policy could not be evaluated: nothing applied", "run_id", r.id, "error", perr)
				// The same plan and policy fail the same way (a runtime
				// error, files that do not compile), unless the evaluation
				// was stopped from outside or the helper failed.
				terminal := len(hp.JSON) > 0 && !policyRetried(perr)
				return fail(&driver.Error{Op: "policy", Summary: "the policy could not be evaluated; nothing applied: " + perr.Error(), Err: perr, Terminal: terminal})
			}
			denied := &policy.DeniedError{Messages: msgs}
			log.Warn("policy denied the plan: nothing applied", "run_id", r.id, "messages", strings.Join(msgs, "; "))
			if req.Mode != ModePlan {
				r.kind = store.KindPolicy
				r.gate = &store.GateDecision{Action: gate.ActionDenied, PlanID: plan.ID, Messages: msgs}
				r.planText = plan.Text
				plan.State = ""
				emitGate(rc.opts, gate.Event{Kind: gate.EventPolicy, Action: gate.ActionDenied, Task: s.Name, Plan: plan, Messages: msgs, Trigger: r.trigger})
			}
			return fail(&driver.Error{Op: "policy", Summary: denied.Error(), Err: denied, Terminal: true})
		}
	}

	digest := planDigest(rc.opts, s.Name, hp)
	if a := j.match; a != nil && !dry {
		if digest != "" && digest == a.digest {
			// The approved plan, made again after a restart: the same
			// changes, so the approval holds for it.
			log.Info("the approved plan was made again after a restart with the same changes: applying it", "plan", a.id, "run_id", r.id)
			r.gate = approvedDecision(a.plan)
			r.gate.Note = ReplannedSame
			r.actor = a.token
			if a.run != nil && a.run.trigger != "" {
				r.trigger = a.run.trigger
			}
			out := rc.applyHeld(ctx, log, e, s, r, hp, true)
			out.matched = true
			return out
		}
		log.Warn("the approved plan was made again after a restart and its changes differ: it is superseded, nothing approved is applied",
			"plan", a.id, "newer_plan", r.id)
	}

	// The approval rules: the plan alone, then with the destroys applied
	// within the task's approval.window (kept in the store).
	if v := gate.Judge(s.Approval, counts, gate.WindowOf(rc.opts.Store, s), time.Now()); v.Held() {
		reason := v.Reason
		if dry {
			discardPlan(ctx, log, e, hp)
			log.Warn("a safety gate would hold the plan for approval: nothing applied", "run_id", r.id, "reason", reason)
			return fail(&HeldError{Reason: reason})
		}
		v.Hold(&plan)
		if d := s.Approval.Expire.D(); d > 0 {
			plan.Expires = plan.Created.Add(d)
		}
		r.end = time.Now()
		if rc.opts.Metrics != nil { // a plan: nothing changed yet
			rc.opts.Metrics.RunFinished(s.Name, store.KindPlan, true, r.end.Sub(r.start))
		}
		log.Warn("task held: its plan waits for approval", "run_id", r.id, "reason", reason,
			"add", counts.Add, "change", counts.Change, "destroy", counts.Destroy, "replace", counts.Replace)
		return Result{hold: &heldRun{plan: plan, drv: hp, run: r, digest: digest}}
	}
	if req.Mode == ModePlan {
		discardPlan(ctx, log, e, hp)
		r.end = time.Now()
		if rc.opts.Metrics != nil {
			rc.opts.Metrics.RunFinished(s.Name, r.kind, true, r.end.Sub(r.start))
		}
		return Result{plan: hp.Text}
	}
	return rc.applyHeld(ctx, log, e, s, r, hp, false)
}

// gatedDestroy is a deletion with destroy (ModeDestroy) of a task with
// safety gates: the destroy is planned (`plan -destroy`) and goes through
// the policy and the approval rules like any other plan. A plan the rules
// hold is returned in the outcome (hold, marked DeletesTask) and nothing
// is destroyed; a plan they let through is applied at once, exactly it,
// and the task's state is removed (Forget). A policy that denies the
// destroy, or cannot be evaluated, fails it: the task is kept.
func (rc *reconciler) gatedDestroy(ctx context.Context, j job) Result {
	s := j.spec
	log := rc.log.With("task_name", s.Name)
	id := j.ID
	if id == "" {
		id = uuid.NewString()
	}
	sp := rc.supersede(ctx, log, j, id, "") // the destroy replaces a plan the task held
	out := rc.gatedDestroyOf(ctx, log, j, id)
	if !out.matched {
		out.supersede = sp
	}
	return out
}

// gatedDestroyOf is gatedDestroy but for the plan it supersedes.
func (rc *reconciler) gatedDestroyOf(ctx context.Context, log *slog.Logger, j job, id string) Result {
	e, s := j.drv, j.spec
	trigger := Due(TriggerAPI).String()
	start := time.Now()
	log.Info("planning the destroy of the task's infrastructure (deletion with destroy)", "run_id", id, "gates", true)
	hp, err := rc.planHeld(ctx, e, s, false, driver.Run{ID: id, Destroy: true}, nil)
	if err == nil && s.Policy != nil && hp.Changes {
		msgs, perr := checkPolicy(ctx, s, hp, trigger)
		switch {
		case perr != nil:
			log.Error("policy could not be evaluated: nothing destroyed", "run_id", id, "error", perr)
			err = &driver.Error{Op: "policy", Summary: "the policy could not be evaluated; nothing destroyed: " + perr.Error(), Err: perr}
		case len(msgs) > 0:
			denied := &policy.DeniedError{Messages: msgs}
			log.Warn("policy denied the destroy: nothing destroyed, the task is kept", "run_id", id, "messages", strings.Join(msgs, "; "))
			emitGate(rc.opts, gate.Event{Kind: gate.EventPolicy, Action: gate.ActionDenied, Task: s.Name, Messages: msgs, Trigger: trigger,
				Plan: gate.Plan{ID: id, Task: s.Name, Created: start.UTC(), Destroy: hp.Counts.Destroy, InState: hp.Counts.InState, DeletesTask: true}})
			err = &driver.Error{Op: "policy", Summary: denied.Error(), Err: denied, Terminal: true}
		}
		if err != nil {
			discardPlan(ctx, log, e, hp)
		}
	}
	if err != nil {
		rc.recordDestroy(ctx, s, id, start, hp.Result, err)
		return Result{failed: true, err: err}
	}
	counts := hp.Counts
	digest := planDigest(rc.opts, s.Name, hp)
	if a := j.match; a != nil && digest != "" && digest == a.digest {
		log.Info("the approved destroy plan was made again after a restart with the same changes: applying it", "plan", a.id, "run_id", id)
		out := rc.applyDestroy(ctx, e, s, id, hp, start)
		out.matched = true
		return out
	}
	reason := gate.Hold(s.Approval, counts)
	if reason == "" && s.Approval != nil && s.Approval.Required {
		reason = "approval required" // even a destroy without changes: it deletes the task
	}
	if reason != "" {
		plan := gate.Plan{ID: id, Task: s.Name, Created: start.UTC(), State: gate.Pending, Reason: "task deletion with destroy: " + reason,
			Add: counts.Add, Change: counts.Change, Destroy: counts.Destroy, InState: counts.InState, Text: rc.opts.redact(s.Name, hp.Text), DeletesTask: true}
		if d := s.Approval.Expire.D(); d > 0 {
			plan.Expires = plan.Created.Add(d)
		}
		log.Warn("task deletion held: its destroy plan waits for approval; nothing destroyed", "run_id", id, "reason", reason,
			"destroy", counts.Destroy)
		r := &runRecord{id: id, trigger: trigger, kind: store.KindDestroy, actor: actorFrom(ctx), start: start}
		return Result{hold: &heldRun{plan: plan, drv: hp, run: r, destroy: true, digest: digest}}
	}
	return rc.applyDestroy(ctx, e, s, id, hp, start)
}

// applyDestroy applies exactly the destroy plan hp as the run id, records
// it (a destroy event) and removes the task's state.
func (rc *reconciler) applyDestroy(ctx context.Context, e *driverSlot, s *task.Spec, id string, hp driver.HeldPlan, start time.Time) Result {
	res, err := e.drv.(driver.PlanHolder).ApplyPlan(ctx, driver.Run{ID: id}, hp)
	if err == nil {
		res.Destroy = hp.Counts.Destroy // exactly the plan was applied
	}
	rc.recordDestroy(ctx, s, id, start, res, err)
	if err == nil {
		err = e.drv.Forget(ctx)
	}
	if err != nil {
		return Result{failed: true, err: err}
	}
	return Result{}
}

// planDigest is the digest of the changes of the plan hp of the task name
// as its operator sees them (gate.ChangesDigest, the task's redactor on
// every value); "" when the driver gave no JSON plan.
func planDigest(opts *Options, name string, hp driver.HeldPlan) string {
	if len(hp.JSON) == 0 {
		return ""
	}
	d, err := gate.ChangesDigest(hp.JSON, func(v string) string { return opts.redact(name, v) })
	if err != nil {
		return ""
	}
	return d
}

// planHeld makes the task's driver (when needed) and a held plan.
func (rc *reconciler) planHeld(ctx context.Context, e *driverSlot, s *task.Spec, exports bool, run driver.Run, in *task.Inputs) (driver.HeldPlan, error) {
	if err := rc.ensureDriver(ctx, e, s, exports); err != nil {
		return driver.HeldPlan{}, err
	}
	ph, ok := e.drv.(driver.PlanHolder)
	if !ok {
		err := fmt.Errorf("the task's driver cannot hold a plan: its approval and policy blocks cannot be enforced")
		return driver.HeldPlan{}, &driver.Error{Op: "plan", Summary: err.Error(), Err: err, Terminal: true}
	}
	return ph.PlanHeld(ctx, run, in)
}

// checkPolicy evaluates the task's policy files, as they are now, on the
// plan's JSON.
func checkPolicy(ctx context.Context, s *task.Spec, hp driver.HeldPlan, trigger string) ([]string, error) {
	if len(hp.JSON) == 0 {
		return nil, errors.New("the driver gave no JSON form of the plan")
	}
	return policy.Evaluate(ctx, s.Policy.Files, s.Policy.EvalTimeout(), hp.JSON, policy.Input{Task: policy.TaskInput(*s), Trigger: trigger})
}

// policyRetried reports whether a policy evaluation that gave no verdict
// fails its run without making it terminal, so that the run is retried
// per the task's retry settings: the evaluation was stopped from outside,
// the helper failed (missing, crashed, an answer that is not one), or no
// answer came within the time limit (a hung helper, a loaded machine).
// Nothing is applied either way.
func policyRetried(err error) bool {
	var he *policy.HelperError
	var te *policy.TimeoutError
	return errors.Is(err, policy.ErrCancelled) || errors.As(err, &he) || errors.As(err, &te)
}

// applyHeld applies exactly the plan hp as the run r and records it, and
// the apply in the task's destroy window (approved: the plan an operator
// approved, where the window starts again).
func (rc *reconciler) applyHeld(ctx context.Context, log *slog.Logger, e *driverSlot, s *task.Spec, r *runRecord, hp driver.HeldPlan, approved bool) Result {
	if err := rc.opts.Store.StartRun(ctx, s.Name, r.id); err != nil {
		discardPlan(ctx, log, e, hp)
		log.Error("not applying the plan: the in-flight marker could not be stored", "error", err)
		return Result{failed: true, err: fmt.Errorf("storing the in-flight marker: %w", err)}
	}
	res, err := e.drv.(driver.PlanHolder).ApplyPlan(ctx, driver.Run{ID: r.id}, hp)
	if err == nil {
		// Exactly the plan was applied: its counts are the run's.
		res.Add, res.Change, res.Destroy = hp.Counts.Add, hp.Counts.Change, hp.Counts.Destroy
	}
	r.res, r.err, r.end = res, err, time.Now()
	r.planText = rc.opts.redact(s.Name, hp.Text)
	if err == nil {
		if werr := gate.RecordApply(ctx, rc.opts.Store, s, hp.Counts, r.end, approved); werr != nil {
			log.Error("the apply could not be recorded in the task's destroy window", "run_id", r.id, "error", werr)
		}
	}
	r.phases = eventPhases(e.initStart, e.initEnd, r.res.Phases, r.kind, r.start, r.end)
	e.initStart, e.initEnd = time.Time{}, time.Time{}
	return rc.recordRun(ctx, log, e, s, r)
}

// expireLocked drops the task's held plan when approval.expire has passed
// (the task's timer: evExpire): the task waits for its next change. The
// plan's files are discarded by a worker (intentDiscard), or by the
// task's next job when it is busy. It returns the gate event. c.mu is
// held.
func (c *gateKeeper) expireLocked(e *entry) []gate.Event {
	h, g := e.lc.held, c.stateLocked(e)
	id := h.plan.ID
	g.settled = h.plan.Fingerprint
	p := c.endHeldLocked(e, gate.Expired, "", evExpire)
	if h.destroy {
		e.lc.wait(fmt.Sprintf("the destroy plan %s of the task's deletion expired without approval: the task is kept", id))
	} else {
		e.lc.wait(fmt.Sprintf("held plan %s expired without approval; the task runs again when its desired state changes", id))
	}
	c.giveBackLocked(e, h)
	g.orphans = append(g.orphans, h.drv)
	c.requestLocked(e, intent{kind: intentDiscard, noReply: true})
	c.log.Warn("held plan expired without approval: nothing applied", "task_name", e.spec.Name, "plan", id)
	return []gate.Event{{Kind: gate.EventApproval, Action: gate.ActionExpired, Task: p.Task, Plan: p}}
}

// forgetHeldLocked forgets the task's held plan when this instance stops
// leading or owning the task: its record stays in the store, and the new
// leader or owner holds it again (restoreHeldLocked). The plan's files
// are discarded by the task's next job here (a driver's plan that outlives
// the process is not: the record keeps it). c.mu is held.
func (c *gateKeeper) forgetHeldLocked(e *entry) {
	h, g := e.lc.held, c.stateLocked(e)
	if h == nil {
		return
	}
	if !h.drv.Durable { // a plan that outlives the process is the new leader's or owner's to apply
		g.orphans = append(g.orphans, h.drv)
	}
	c.endHeldLocked(e, gate.Superseded, "", evDrop)
	c.hs.keepLocked(e.spec.Name) // its record stays, for the new leader or owner
	g.plan, g.settled = gate.Plan{}, ""
	c.log.Info("held plan dropped here: this instance no longer runs the task; its new leader or owner holds it from the store",
		"task_name", e.spec.Name)
}

// heldPlan returns the task's newest held plan, whatever its state
// (api.Approvals).
func (c *gateKeeper) heldPlan(name string) (gate.Plan, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.tasks[name]
	if e == nil {
		return gate.Plan{}, fmt.Errorf("task %q: %w", name, ErrNotFound)
	}
	if c.stateLocked(e).plan.ID == "" {
		return gate.Plan{}, fmt.Errorf("task %q: %w", name, gate.ErrNoPlan)
	}
	return clonePlan(c.stateLocked(e).plan), nil
}

// approve approves the task's pending plan id, exactly that plan, and
// records who approved it (api.Approvals). It returns once the approval
// is recorded: the apply is a request of the task (intentApprove), done in
// the background by a worker, and the task's next event tells how it
// went. When the task's desired state moved on since the plan was made,
// the plan is superseded: a new plan is made (and held, or applied, per
// the rules) before Approve returns, and the error is a
// *gate.SupersededError naming it. A plan Terraform finds stale when it
// applies it is superseded in the same way, after the answer.
func (c *gateKeeper) approve(ctx context.Context, name, id, who string) error {
	e, h, err := c.takeHeld(ctx, name, id)
	if err != nil {
		return err
	}
	// The apply goes on when the caller goes away, as a run the API
	// started does.
	rctx, done, err := c.apiRun(ctx)
	if err != nil {
		c.mu.Lock()
		c.releaseLocked(e)
		c.mu.Unlock()
		return err
	}
	if !h.destroy {
		s := e.spec
		// Right after a start (a plan restored from the store) the task's
		// data may not have come from Consul yet: wait for it a while.
		_ = c.obs.waitReady(rctx, e.changed, &s, e.qs, syncWait)
		want, ready, derr := c.obs.desired(rctx, &s)
		if derr != nil || !ready {
			done()
			c.mu.Lock()
			c.releaseLocked(e)
			c.mu.Unlock()
			if derr == nil {
				derr = errors.New("its data from Consul is not complete")
			}
			return fmt.Errorf("task %q: the desired state cannot be read to check plan %s: %w", name, id, derr)
		}
		if want.Fingerprint != h.plan.Fingerprint {
			defer done()
			return c.replan(rctx, e, id)
		}
		if h.restored { // its run's record is the store's: what it applies is this desired state
			r := *h.run
			r.want = want
			h.run = &r
		}
	}
	// A plan restored from the store whose driver's plan did not outlive
	// the process is made again, and applied only when its changes are
	// the ones approved (reconciler.approve).
	replan := h.restored && h.drv.Ref == ""
	c.mu.Lock()
	p := c.endHeldLocked(e, gate.Approved, who, evDrop)
	gen, err := c.submitLocked(e, intent{kind: intentApprove, actor: who,
		approved: &approval{id: id, who: who, token: actorFrom(ctx), plan: p, drv: h.drv, run: h.run, destroy: h.destroy, enabled: h.enabled,
			replan: replan, digest: h.digest}})
	if err != nil {
		c.stateLocked(e).orphans = append(c.stateLocked(e).orphans, h.drv) // discarded by the task's next job
	}
	c.mu.Unlock()
	if err != nil {
		done()
		// Nothing was applied: the task's desired state is not recorded
		// as applied, and its next run plans it again.
		c.log.Warn("the approved plan was not applied", "task_name", name, "plan", id, "error", err)
		return nil
	}
	if replan {
		defer done()
		return c.awaitReplanned(rctx, e, gen, p, h.run.trigger)
	}
	c.log.Info("held plan approved: applying it", "task_name", name, "plan", id, "approved_by", who)
	c.gateEvent(gate.Event{Kind: gate.EventApproval, Action: gate.ActionApproved, Task: name, Plan: p, Trigger: h.run.trigger})
	go func() {
		defer done()
		c.mu.Lock()
		_, err := c.awaitIntentLocked(rctx, e, gen)
		if err != nil && rctx.Err() != nil { // withdrawn: no worker took it before shutdown
			c.stateLocked(e).orphans = append(c.stateLocked(e).orphans, h.drv)
		}
		c.mu.Unlock()
		if err != nil {
			c.log.Warn("the approved plan was not applied: ctsync is stopping", "task_name", name, "plan", id, "error", err)
		}
	}()
	return nil
}

// awaitReplanned waits for the approval of the restored plan p (request
// gen), which the worker makes again: applied when its changes are the
// ones approved (the approval's event is sent then), superseded otherwise
// (a *gate.SupersededError naming the new plan).
func (c *gateKeeper) awaitReplanned(ctx context.Context, e *entry, gen uint64, p gate.Plan, trigger string) error {
	name := e.spec.Name
	c.mu.Lock()
	out, err := c.awaitIntentLocked(ctx, e, gen)
	newer, superseded := c.stateLocked(e).newer[p.ID]
	c.mu.Unlock()
	switch {
	case err != nil:
		return err
	case out.matched:
		c.log.Info("held plan approved: made again after a restart with the same changes, and applied", "task_name", name, "plan", p.ID,
			"approved_by", p.DecidedBy, "error", out.err)
		c.gateEvent(gate.Event{Kind: gate.EventApproval, Action: gate.ActionApproved, Task: name, Plan: p, Trigger: trigger})
		return nil
	case superseded && newer != "":
		return &gate.SupersededError{ID: p.ID, Newer: newer}
	case out.failed && out.err != nil:
		return fmt.Errorf("plan %s was made again to be applied after a restart, and that failed: nothing applied: %w", p.ID, out.err)
	}
	return fmt.Errorf("%w: plan %s is superseded: made again after a restart, the task had nothing to apply", gate.ErrStalePlan, p.ID)
}

// replan supersedes the pending plan id, whose desired state moved on,
// with a new run of the task (held or applied per the gates; a request
// that replaces id), and returns the *gate.SupersededError naming the new
// plan. The task is reserved by the caller.
func (c *gateKeeper) replan(ctx context.Context, e *entry, id string) error {
	name := e.spec.Name
	c.mu.Lock()
	defer c.mu.Unlock()
	gen, err := c.submitLocked(e, intent{kind: intentRun, req: Request{Name: name, Trigger: Due(TriggerChange)}, actor: actorFrom(ctx), replaces: id})
	if err != nil {
		return err
	}
	out, err := c.awaitIntentLocked(ctx, e, gen)
	if err != nil {
		return err
	}
	if out.failed && out.err != nil {
		c.log.Warn("the plan that supersedes an approved plan failed", "task_name", name, "plan", id, "error", out.err)
	}
	newer, ok := c.stateLocked(e).newer[id]
	if !ok || newer == "" {
		return fmt.Errorf("%w: plan %s is superseded: the task's desired state changed since it was made", gate.ErrStalePlan, id)
	}
	return &gate.SupersededError{ID: id, Newer: newer}
}

// approve applies the approved plan of j (intentApprove). A plan Terraform
// finds stale (the state moved under it: nothing was applied) is
// superseded by a new run of the task, held or applied per the rules.
func (rc *reconciler) approve(ctx context.Context, j job) Result {
	a, s := j.approved, j.spec
	log := rc.log.With("task_name", s.Name)
	if j.drv.drv == nil { // a plan restored from the store: no run made the task's driver yet
		if err := rc.ensureDriver(ctx, j.drv, s, j.exports); err != nil {
			log.Error("the approved plan was not applied: the task's driver could not be prepared", "plan", a.id, "error", err)
			return Result{failed: true, err: err}
		}
	}
	if a.replan && !a.destroy { // restored without the driver's plan: made again (heldstore.go)
		log.Info("the approved plan was held before a restart and its plan file is gone: planning it again", "plan", a.id)
		return rc.again(ctx, j, Request{Name: s.Name, Trigger: Due(TriggerChange), Force: true}, a)
	}
	if a.destroy {
		return rc.approveDestroy(ctx, log, j)
	}
	r := *a.run
	r.id, r.actor = uuid.NewString(), a.token // "" when no token was used: who is then "cli", "dashboard" (the gate's By)
	r.gate = approvedDecision(a.plan)
	r.before = rc.opts.Store.Run(s.Name)
	r.start = time.Now()
	if rc.opts.Metrics != nil {
		rc.opts.Metrics.RunStarted(s.Name)
	}
	out := rc.applyHeld(ctx, log, j.drv, s, &r, a.drv, true)
	if !out.failed || !errors.Is(out.err, driver.ErrPlanStale) {
		return out
	}
	re := rc.again(ctx, j, Request{Name: s.Name, Trigger: Due(TriggerChange), Force: true}, nil)
	if re.supersede == nil || re.supersede.id != a.id {
		log.Warn("the approved plan was stale when applied: superseded", "plan", a.id, "error", re.err)
	}
	if !re.recorded {
		re.recorded, re.inputs = out.recorded, out.inputs
	}
	return re
}

// again runs the task of j once more with req, in place of its approved
// plan, which is superseded: by the new plan, or by none when the run
// does not plan. With match (the approval of a plan restored without the
// driver's plan), a new plan whose changes are match's is applied as the
// approved one instead (outcome.matched).
func (rc *reconciler) again(ctx context.Context, j job, req Request, match *approval) Result {
	a := j.approved
	j.kind, j.approved, j.Request, j.match = intentRun, nil, req, match
	j.held = heldView{plan: gate.Plan{ID: a.id, State: gate.Pending}} // what the new run supersedes (already discarded)
	out := rc.Decide(ctx, j)
	if p := out.next; p != nil { // decided and run in one go: the job commits once
		late := rc.Execute(ctx, j, p)
		late.readData = late.readData || out.readData
		if !late.setWait {
			late.setWait, late.waitReason = out.setWait, out.waitReason
		}
		out = late
	}
	if out.supersede == nil && !out.matched {
		out.supersede = &supersession{id: a.id}
	}
	return out
}

// approveDestroy applies the approved destroy plan of a deletion with
// destroy, after which the task is deleted (removeTask). A plan Terraform
// finds stale is planned again, and held again or applied per the rules;
// a destroy that fails keeps the task, disabled, as a failed deletion
// does.
func (rc *reconciler) approveDestroy(ctx context.Context, log *slog.Logger, j job) Result {
	a, s := j.approved, j.spec
	var out Result
	if a.replan { // restored without the driver's plan: made again, applied when the same (heldstore.go)
		log.Info("the approved destroy plan was held before a restart and its plan file is gone: planning it again", "plan", a.id)
		out = rc.again(ctx, j, Request{Name: s.Name, Trigger: Due(TriggerAPI), Mode: ModeDestroy}, a)
		if out.hold != nil {
			return out
		}
	} else {
		out = rc.applyDestroy(ctx, j.drv, s, uuid.NewString(), a.drv, time.Now())
	}
	if out.failed && errors.Is(out.err, driver.ErrPlanStale) {
		log.Warn("the approved destroy plan is stale: the destroy is planned again", "plan", a.id)
		out = rc.again(ctx, j, Request{Name: s.Name, Trigger: Due(TriggerAPI), Mode: ModeDestroy}, nil)
		if out.hold != nil {
			return out // held again: it waits for its own approval
		}
	}
	if out.failed {
		log.Error("the approved destroy failed: the task is kept, disabled", "plan", a.id, "error", out.err)
		return out
	}
	log.Info("task deleted: its approved destroy plan was applied", "plan", a.id, "approved_by", a.who)
	out.removeTask = true
	return out
}

// giveBackLocked keeps a task whose held destroy plan (h) was rejected or
// expired: its enabled flag is the one it had before the deletion, and a
// change that came meanwhile runs. c.mu is held.
func (c *gateKeeper) giveBackLocked(e *entry, h *heldRun) {
	if !h.destroy {
		return
	}
	e.spec.Enabled = h.enabled
	signal(c.driftKick)
	signal(c.cronKick)
	c.markDirtyLocked(e, Due(TriggerEnable))
}

// reject drops the task's pending plan id and records who rejected it
// (api.Approvals): nothing is applied, and the same desired state is not
// planned again; the task waits for its next change. The plan's files are
// discarded by a worker (intentDiscard, which takes no run slot) before
// Reject returns.
func (c *gateKeeper) reject(ctx context.Context, name, id, who string) error {
	e, h, err := c.takeHeld(ctx, name, id)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.stateLocked(e).settled = h.plan.Fingerprint
	p := c.endHeldLocked(e, gate.Rejected, who, evDrop)
	c.giveBackLocked(e, &h) // a rejected destroy keeps the task
	c.stateLocked(e).orphans = append(c.stateLocked(e).orphans, h.drv)
	gen, err := c.submitLocked(e, intent{kind: intentDiscard})
	if err == nil {
		_, err = c.awaitIntentLocked(context.WithoutCancel(ctx), e, gen)
	}
	c.mu.Unlock()
	if err != nil { // the task's next job here discards them
		c.log.Warn("the rejected plan's files are not discarded yet", "task_name", name, "plan", id, "error", err)
	}
	c.log.Info("held plan rejected: nothing applied; the task runs again when its desired state changes",
		"task_name", name, "plan", id, "rejected_by", who)
	c.gateEvent(gate.Event{Kind: gate.EventApproval, Action: gate.ActionRejected, Task: name, Plan: p})
	return nil
}

// takeHeld waits until the task is not running (a new plan may be under
// way) and takes it for a decision on its pending plan id, which it
// returns; the caller submits a request or releases the task.
func (c *gateKeeper) takeHeld(ctx context.Context, name, id string) (*entry, heldRun, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		e := c.tasks[name]
		if e == nil {
			return nil, heldRun{}, fmt.Errorf("task %q: %w", name, ErrNotFound)
		}
		if err := c.stateLocked(e).decidable(name, id); err != nil {
			return nil, heldRun{}, err
		}
		if e.lc.held != nil && c.stepLocked(e, evReserve, wake{}) {
			return e, *e.lc.held, nil
		}
		if err := c.awaitLocked(ctx, func() bool {
			ph := e.lc.phase
			return c.tasks[name] != e || (ph != phaseRunning && ph != phaseQueued)
		}); err != nil {
			return nil, heldRun{}, err
		}
		if ph := e.lc.phase; ph == phaseDeleting {
			return nil, heldRun{}, fmt.Errorf("task %q is being deleted: %w", name, gate.ErrStalePlan)
		}
	}
}

// decidable says why plan id of the task cannot be decided, nil when it
// can (it is the pending plan).
func (g *gateState) decidable(name, id string) error {
	if newer, ok := g.newer[id]; ok {
		if newer != "" {
			return &gate.SupersededError{ID: id, Newer: newer}
		}
		return fmt.Errorf("%w: plan %s is superseded: the task's desired state is the one last applied again", gate.ErrStalePlan, id)
	}
	switch {
	case g.plan.ID == "":
		return fmt.Errorf("task %q: %w", name, gate.ErrNoPlan)
	case g.plan.ID != id:
		return fmt.Errorf("%w: the held plan of task %q is %s", gate.ErrStalePlan, name, g.plan.ID)
	case g.plan.State != gate.Pending:
		return fmt.Errorf("%w: plan %s is %s", gate.ErrStalePlan, id, g.plan.State)
	}
	return nil
}

// changeLines says what changed in Consul, one line each (a held plan's
// consul_changes).
func changeLines(ch *store.Changes) []string {
	if ch == nil {
		return nil
	}
	var out []string
	for _, k := range []struct {
		what string
		d    *store.SetDiff
	}{{"service instance", ch.Services}, {"Consul KV key", ch.ConsulKV}, {"catalog service", ch.CatalogServices}, {"node", ch.Nodes}} {
		if k.d == nil {
			continue
		}
		for verb, names := range map[string][]string{"added": k.d.Added, "removed": k.d.Removed, "changed": k.d.Changed} {
			for _, n := range names {
				out = append(out, fmt.Sprintf("%s %s: %s", k.what, verb, n))
			}
		}
	}
	slices.Sort(out)
	return out
}

// HeldPlan returns the task's newest held plan, whatever its state
// (api.Approvals).
func (c *Controller) HeldPlan(name string) (gate.Plan, error) { return c.gk.heldPlan(name) }

// Approve approves the task's pending plan id, exactly that plan, and
// records who approved it (api.Approvals): see gateKeeper.approve.
func (c *Controller) Approve(ctx context.Context, name, id, who string) error {
	return c.gk.approve(ctx, name, id, who)
}

// Reject drops the task's pending plan id and records who rejected it
// (api.Approvals): see gateKeeper.reject.
func (c *Controller) Reject(ctx context.Context, name, id, who string) error {
	return c.gk.reject(ctx, name, id, who)
}
