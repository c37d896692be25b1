package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/reconcile"
)

// Approvals is what the API needs from the safety gates: the plans the
// approval rules hold and the operator's decision on them. The controller
// implements it; Options.Approvals nil means no run is ever held (the plan
// endpoints answer 404).
//
// Errors: an unknown task is reconcile.ErrNotFound (404); a task without
// a held plan gate.ErrNoPlan (404); an id that is not the task's pending
// plan gate.ErrStalePlan (409); an approval of a plan whose desired state
// moved on a *gate.SupersededError (409, naming the newer plan, which the
// controller has made and holds). Each may be wrapped.
type Approvals interface {
	// HeldPlan returns the task's newest held plan, whatever its state:
	// pending until approved, rejected, expired or superseded (the task
	// shows as waiting only while it is pending).
	HeldPlan(name string) (gate.Plan, error)
	// Approve applies the task's pending plan id, exactly that plan, and
	// records who approved it. It returns once the approval is recorded
	// (the apply may still run); the task's events tell how it went.
	Approve(ctx context.Context, name, id, who string) error
	// Reject drops the task's pending plan id and records who rejected
	// it; the task waits for its desired state to change.
	Reject(ctx context.Context, name, id, who string) error
}

// ClientHeader names the client ("cli", "dashboard") of an approval made
// while api_auth is off; with tokens, the approver is the token's name.
const ClientHeader = "X-Ctsync-Client"

// StatusWaiting is the status of a task whose run a safety gate holds for
// approval (ctsync).
const StatusWaiting = "waiting"

// PlanResponse is the body of GET /v1/tasks/{name}/plan and of the
// approve and reject calls (ctsync): the held plan, secrets redacted.
type PlanResponse struct {
	Plan      gate.Plan `json:"plan"`
	RequestID string    `json:"request_id"`
}

// HeldStatus is a task's pending held plan at a glance, in its status.
type HeldStatus struct {
	ID      string     `json:"id"`
	Reason  string     `json:"reason"`
	Created time.Time  `json:"created"`
	Expires *time.Time `json:"expires,omitempty"`
	Add     int        `json:"add"`
	Change  int        `json:"change"`
	Destroy int        `json:"destroy"`
}

// heldPlan returns the task's pending held plan, nil when there is none
// (or no gates).
func (s *Server) heldPlan(name string) *gate.Plan {
	if s.opts.Approvals == nil {
		return nil
	}
	p, err := s.opts.Approvals.HeldPlan(name)
	if err != nil || p.State != gate.Pending {
		return nil
	}
	return &p
}

// heldStatus fills the held-plan fields of a task's status.
func (s *Server) heldStatus(ts *TaskStatus) {
	p := s.heldPlan(ts.TaskName)
	if p == nil {
		return
	}
	h := &HeldStatus{ID: p.ID, Reason: s.redact(ts.TaskName, p.Reason), Created: p.Created.UTC(), Add: p.Add, Change: p.Change, Destroy: p.Destroy}
	if !p.Expires.IsZero() {
		e := p.Expires.UTC()
		h.Expires = &e
	}
	ts.Held = h
	ts.Waiting = h.Reason
	if ts.Status != StatusDeleting {
		ts.Status = StatusWaiting
	}
}

// redactPlan hides the configuration's secrets in what a plan shows.
func (s *Server) redactPlan(p gate.Plan) gate.Plan {
	p.Reason = s.redact(p.Task, p.Reason)
	p.Text = s.redact(p.Task, p.Text)
	if len(p.Changes) > 0 {
		ch := make([]string, len(p.Changes))
		for i, c := range p.Changes {
			ch[i] = s.redact(p.Task, c)
		}
		p.Changes = ch
	}
	return p
}

// planError maps the gates' errors to API errors naming the task.
func planError(name, id string, err error) error {
	var sup *gate.SupersededError
	switch {
	case errors.As(err, &sup):
		return &httpError{status: http.StatusConflict, msg: fmt.Sprintf("task '%s': %v; review the newer plan (GET /v1/tasks/%s/plan) and approve it", name, sup, name)}
	case errors.Is(err, gate.ErrStalePlan):
		return &httpError{status: http.StatusConflict, msg: fmt.Sprintf("task '%s': plan '%s' is not the task's pending plan: %v", name, id, err)}
	case errors.Is(err, gate.ErrNoPlan):
		return noPlan(name)
	case errors.Is(err, errNotFound):
		return notFound(name)
	}
	return err
}

func noPlan(name string) error {
	return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("task '%s' has no held plan: no run of it waits for approval", name)}
}

// getPlan serves GET /v1/tasks/{name}/plan (ctsync): the task's newest
// held plan, with its state.
func (s *Server) getPlan(w http.ResponseWriter, r *http.Request) {
	if p, ok := s.planOf(w, r, ""); ok {
		writeJSON(w, http.StatusOK, PlanResponse{Plan: s.redactPlan(p), RequestID: requestID(r)})
	}
}

// planOf checks the request's query and task and returns the task's held
// plan; on an error it answers and returns ok false. id is the plan the
// request names ("" none).
func (s *Server) planOf(w http.ResponseWriter, r *http.Request, id string) (gate.Plan, bool) {
	name := r.PathValue("name")
	if _, err := queryParams(r); err != nil {
		s.fail(w, r, err)
		return gate.Plan{}, false
	}
	if _, err := s.lookup(name); err != nil {
		s.fail(w, r, err)
		return gate.Plan{}, false
	}
	if s.opts.Approvals == nil {
		s.fail(w, r, noPlan(name))
		return gate.Plan{}, false
	}
	p, err := s.opts.Approvals.HeldPlan(name)
	if err != nil {
		s.fail(w, r, planError(name, id, err))
		return gate.Plan{}, false
	}
	return p, true
}

func (s *Server) approvePlan(w http.ResponseWriter, r *http.Request) { s.decidePlan(w, r, true) }
func (s *Server) rejectPlan(w http.ResponseWriter, r *http.Request)  { s.decidePlan(w, r, false) }

// decidePlan serves POST /v1/tasks/{name}/plan/{id}/approve and .../reject
// (ctsync): the decision on the pending plan id, recorded with the token's
// name; the answer is the plan as it stands after the decision.
func (s *Server) decidePlan(w http.ResponseWriter, r *http.Request, approve bool) {
	name, id := r.PathValue("name"), r.PathValue("id")
	before, ok := s.planOf(w, r, id)
	if !ok {
		return
	}
	who := approver(r)
	verb, state, decide := "rejected", gate.Rejected, s.opts.Approvals.Reject
	if approve {
		verb, state, decide = "approved", gate.Approved, s.opts.Approvals.Approve
	}
	// The run that applies an approved plan is triggered by the token
	// (its actor), when one was used; who names the client otherwise.
	if err := decide(reconcile.WithActor(r.Context(), tokenName(r)), name, id, who); err != nil {
		s.log.Info("api: plan decision refused", "task_name", name, "plan", id, "decision", verb, "token", who,
			"request_id", requestID(r), "error", err)
		s.fail(w, r, planError(name, id, err))
		return
	}
	s.log.Info("plan "+verb+" through the api", "task_name", name, "plan", id, "by", who, "request_id", requestID(r))
	after, err := s.opts.Approvals.HeldPlan(name)
	if err != nil || after.ID != id {
		// Applied and forgotten already: the plan as it was, decided.
		after = before
		if after.ID != id {
			after = gate.Plan{ID: id, Task: name}
		}
		after.State, after.DecidedBy, after.DecidedAt = state, who, time.Now().UTC()
	}
	writeJSON(w, http.StatusOK, PlanResponse{Plan: s.redactPlan(after), RequestID: requestID(r)})
}

// approver is who decides: the token's name, or without api_auth the
// client's own name (ClientHeader: "cli", "dashboard"), else "api".
func approver(r *http.Request) string {
	if n := tokenName(r); n != "" {
		return n
	}
	switch c := r.Header.Get(ClientHeader); c {
	case "cli", "dashboard":
		return c
	}
	return "api"
}
