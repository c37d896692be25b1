// Package gatetest is an in-memory stand-in for the controller's side of
// held plans (the api.Approvals interface), for the tests of the API, the
// CLI and the dashboard. It keeps the rules the controller keeps: only the
// pending plan can be decided, a decision is recorded with who made it,
// and approving a plan whose desired state moved on supersedes it with a
// newer plan, held with the same reason.
package gatetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ctsync/ctsync/internal/gate"
)

// Decision is one approve or reject call that succeeded.
type Decision struct {
	Task, ID, Who string
	Approve       bool
}

// Approvals holds plans per task. Its zero value is not usable: use New.
type Approvals struct {
	mu    sync.Mutex
	plans map[string]gate.Plan
	moved map[string]bool
	seq   int
	calls []string
	// Decisions receives every decision that succeeded (buffered; once
	// full, further ones are dropped).
	Decisions chan Decision
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// OnGate, when set, gets what the gates did, as the controller's gate
	// hook does: held, approved, rejected, expired, superseded.
	OnGate func(gate.Event)
}

// New returns an empty Approvals.
func New() *Approvals {
	return &Approvals{plans: map[string]gate.Plan{}, moved: map[string]bool{}, Decisions: make(chan Decision, 100)}
}

func (a *Approvals) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now().UTC()
}

// Hold makes p the task's pending plan (p.Task names it). An empty ID or
// Created is filled in.
func (a *Approvals) Hold(p gate.Plan) gate.Plan {
	a.mu.Lock()
	p = a.hold(p)
	a.mu.Unlock()
	a.emit(gate.ActionHeld, p, "")
	return p
}

// emit hands an approval event to OnGate.
func (a *Approvals) emit(action string, p gate.Plan, newer string) {
	if a.OnGate != nil {
		a.OnGate(gate.Event{Kind: gate.EventApproval, Action: action, Task: p.Task, Plan: p, Newer: newer, Time: a.now()})
	}
}

func (a *Approvals) hold(p gate.Plan) gate.Plan {
	a.seq++
	if p.ID == "" {
		p.ID = fmt.Sprintf("plan-%d", a.seq)
	}
	if p.Created.IsZero() {
		p.Created = a.now()
	}
	p.State = gate.Pending
	p.DecidedBy, p.DecidedAt = "", time.Time{}
	a.plans[p.Task] = p
	a.moved[p.Task] = false
	return p
}

// Move marks the task's desired state as changed since its plan was made:
// the next approval supersedes it.
func (a *Approvals) Move(name string) {
	a.mu.Lock()
	a.moved[name] = true
	a.mu.Unlock()
}

// Expire ends the task's pending plan as approval.expire does.
func (a *Approvals) Expire(name string) {
	a.mu.Lock()
	p, ok := a.plans[name]
	ok = ok && p.State == gate.Pending
	if ok {
		p.State = gate.Expired
		a.plans[name] = p
	}
	a.mu.Unlock()
	if ok {
		a.emit(gate.ActionExpired, p, "")
	}
}

// Calls lists the decisions asked for, e.g. "approve web plan-1 by ops".
func (a *Approvals) Calls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.calls)
}

// HeldPlan implements api.Approvals.
func (a *Approvals) HeldPlan(name string) (gate.Plan, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.plans[name]
	if !ok {
		return gate.Plan{}, fmt.Errorf("task %q: %w", name, gate.ErrNoPlan)
	}
	p.Changes = slices.Clone(p.Changes)
	return p, nil
}

// Approve implements api.Approvals.
func (a *Approvals) Approve(ctx context.Context, name, id, who string) error {
	return a.decide(ctx, name, id, who, true)
}

// Reject implements api.Approvals.
func (a *Approvals) Reject(ctx context.Context, name, id, who string) error {
	return a.decide(ctx, name, id, who, false)
}

func (a *Approvals) decide(ctx context.Context, name, id, who string, approve bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	verb := "reject"
	if approve {
		verb = "approve"
	}
	a.mu.Lock()
	a.calls = append(a.calls, fmt.Sprintf("%s %s %s by %s", verb, name, id, who))
	p, ok := a.plans[name]
	switch {
	case !ok:
		a.mu.Unlock()
		return fmt.Errorf("task %q: %w", name, gate.ErrNoPlan)
	case p.ID != id:
		a.mu.Unlock()
		return fmt.Errorf("%w: the task's held plan is %s", gate.ErrStalePlan, p.ID)
	case p.State != gate.Pending:
		a.mu.Unlock()
		return fmt.Errorf("%w: plan %s is %s", gate.ErrStalePlan, id, p.State)
	case approve && a.moved[name]:
		p.State = gate.Superseded
		a.plans[name] = p
		next := p
		next.ID, next.Created = "", time.Time{}
		next = a.hold(next)
		a.mu.Unlock()
		a.emit(gate.ActionSuperseded, p, next.ID)
		a.emit(gate.ActionHeld, next, "")
		return &gate.SupersededError{ID: id, Newer: next.ID}
	}
	p.State = gate.Rejected
	if approve {
		p.State = gate.Approved
	}
	p.DecidedBy, p.DecidedAt = who, a.now()
	a.plans[name] = p
	a.mu.Unlock()
	action := gate.ActionRejected
	if approve {
		action = gate.ActionApproved
	}
	a.emit(action, p, "")
	select {
	case a.Decisions <- Decision{Task: name, ID: id, Who: who, Approve: approve}:
	default:
	}
	return nil
}
