package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

// StatusEvents is how many of a task's newest events the status endpoints
// return with include=events, as CTS (which keeps no more). The status is
// derived from the newest StatusEvents runs (store.Status): the safety
// gates' audit events (kind "gate") and drift checks are shown but are not
// runs and do not count. GET /v1/tasks/{name}/events returns the whole
// history.
const StatusEvents = 5

var (
	errNotFound = reconcile.ErrNotFound
	errActive   = reconcile.ErrActive
	errExists   = reconcile.ErrExists
	errRefused  = reconcile.ErrRefused
	errDeleting = reconcile.ErrDeleting
)

// notFound is the CTS error for an unknown task.
func notFound(name string) error {
	return fmt.Errorf("%w: a task with name '%s' does not exist or has not been initialized yet", errNotFound, name)
}

// message is the text shown to the client: the controller's sentinel
// prefix ("task not found: ") is dropped so the CTS wording remains.
func message(err error) string {
	msg := err.Error()
	for _, s := range []error{errNotFound, errActive, errExists, errDeleting} {
		if errors.Is(err, s) {
			msg = strings.TrimPrefix(msg, s.Error()+": ")
		}
	}
	return msg
}

// visibleTasks are the tasks the API shows: a task marked for deletion is
// gone as far as clients are concerned.
func (s *Server) visibleTasks() []reconcile.TaskState {
	all := s.opts.Controller.Tasks()
	out := all[:0:0]
	for _, t := range all {
		if !t.Deleting {
			out = append(out, t)
		}
	}
	return out
}

// lookup returns a task that can be changed, or the CTS 404 error: a task
// marked for deletion cannot.
func (s *Server) lookup(name string) (reconcile.TaskState, error) {
	st, err := s.opts.Controller.Task(name)
	if err != nil || st.Deleting {
		return reconcile.TaskState{}, notFound(name)
	}
	return st, nil
}

// lookupAny returns a task for reading: as in CTS, a task marked for
// deletion stays visible (status "deleting", with its events) until its run
// in progress has finished and it is gone.
func (s *Server) lookupAny(name string) (reconcile.TaskState, error) {
	st, err := s.opts.Controller.Task(name)
	if err != nil {
		return reconcile.TaskState{}, notFound(name)
	}
	return st, nil
}

// StatusDeleting is the status of a task marked for deletion whose run in
// progress has not finished yet.
const StatusDeleting = "deleting"

// getHealth serves GET /v1/health: 200 with CTS's empty object while the
// daemon works (a follower included), 503 with the reason otherwise (the
// controller is not running or stuck, a watch has failed for minutes).
func (s *Server) getHealth(w http.ResponseWriter, r *http.Request) {
	if s.opts.Health != nil {
		if err := s.opts.Health(); err != nil {
			writeError(w, r, http.StatusServiceUnavailable, "unhealthy: "+err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

// statusEvents returns a task's newest events as the status endpoints use them.
func (s *Server) statusEvents(name string) []store.Event {
	evs := s.opts.Controller.Events(name)
	if len(evs) > StatusEvents {
		evs = evs[:StatusEvents]
	}
	return evs
}

func (s *Server) getStatus(w http.ResponseWriter, r *http.Request) {
	var sum TaskSummary
	for _, t := range s.visibleTasks() {
		status := store.Status(s.opts.Controller.Events(t.Spec.Name))
		if !t.Deleting && s.heldPlan(t.Spec.Name) != nil {
			// Its plan waits for approval: the task's own status says
			// waiting, and so does the count (not successful: what
			// the task should apply is not applied).
			status = StatusWaiting
		}
		switch status {
		case StatusWaiting:
			sum.Status.Waiting++
		case "successful":
			sum.Status.Successful++
		case "errored":
			sum.Status.Errored++
		case "critical":
			sum.Status.Critical++
		default:
			sum.Status.Unknown++
		}
		if t.Spec.Enabled {
			sum.Enabled.True++
		} else {
			sum.Enabled.False++
		}
	}
	resp := StatusResponse{TaskSummary: sum}
	if w := s.listenWarning(); w != "" {
		resp.Warnings = []string{w}
	}
	writeJSON(w, http.StatusOK, resp)
}

var statuses = []string{"successful", "errored", "critical", "unknown", StatusWaiting}

// getTaskStatuses serves GET /v1/status/tasks and /v1/status/tasks/{name}.
func (s *Server) getTaskStatuses(w http.ResponseWriter, r *http.Request) {
	q, err := queryParams(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	include := false
	if v, ok := q["include"]; ok {
		if v[0] != "events" {
			s.fail(w, r, badRequest("unsupported value %q for query parameter include: only \"events\" is supported", v[0]))
			return
		}
		include = true
	}
	filter := ""
	if v, ok := q["status"]; ok {
		filter = strings.ToLower(v[0])
		if !slices.Contains(statuses, filter) {
			s.fail(w, r, badRequest("unsupported value %q for query parameter status: must be one of %s", v[0], strings.Join(statuses, ", ")))
			return
		}
	}
	var tasks []reconcile.TaskState
	if name := r.PathValue("name"); name != "" {
		st, err := s.lookupAny(name)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		tasks = []reconcile.TaskState{st}
	} else {
		tasks = s.visibleTasks()
	}
	out := make(map[string]TaskStatus, len(tasks))
	for _, t := range tasks {
		ts := s.taskStatus(t, include)
		if filter != "" && ts.Status != filter {
			continue
		}
		out[t.Spec.Name] = ts
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) taskStatus(t reconcile.TaskState, include bool) TaskStatus {
	name := t.Spec.Name
	all := s.opts.Controller.Events(name)
	evs := s.statusEvents(name)
	ts := TaskStatus{
		TaskName:        name,
		Status:          store.Status(all),
		Enabled:         t.Spec.Enabled,
		Dirty:           t.Dirty,
		Terminal:        t.Terminal,
		QueryError:      t.QueryError,
		Waiting:         t.Waiting,
		Providers:       append([]string{}, t.Spec.Providers...),
		Services:        []string{},
		Active:          t.Active,
		Drifted:         t.Drifted,
		PendingRemovals: t.Removals,
	}
	if !t.LastDriftCheck.IsZero() {
		last := t.LastDriftCheck.UTC().Truncate(time.Second)
		ts.LastDriftCheck = &last
	}
	if sc, ok := s.spreadCluster(); ok { // spread.go
		id := sc.Holder(name)
		ts.Owner = &id
	}
	if c := t.Spec.Condition.Services; c != nil {
		ts.Services = append(ts.Services, c.Names...)
	} else if m := t.Spec.ModuleInput.Services; m != nil {
		ts.Services = append(ts.Services, m.Names...)
	}
	if len(evs) > 0 {
		ts.EventsURL = "/v1/status/tasks/" + url.PathEscape(name) + "?include=events"
	}
	if include {
		ts.Events = s.redactEvents(evs)
	}
	if t.Deleting {
		ts.Status = StatusDeleting
	}
	s.heldStatus(&ts) // approvals.go
	if !t.NextRun.IsZero() && t.Spec.Enabled {
		next := t.NextRun.UTC().Truncate(time.Second)
		ts.NextRun = &next
	}
	ts.LastRun = s.lastRun(all)
	if r := t.Retry; r != nil {
		ts.Retry = &RetryStatus{Attempt: r.Attempt, NextAt: r.NextAt.UTC().Truncate(time.Millisecond), LastError: s.redact(name, r.LastError)}
	}
	return ts
}

// lastRun is the newest event that is a run of the task (not a drift
// check nor a gate's audit event: IsRun), redacted; nil when there is none.
func (s *Server) lastRun(evs []store.Event) *LastRun {
	for _, ev := range evs {
		if !ev.IsRun() {
			continue
		}
		ev = ev.Redacted(s.opts.Redactor.ForTask(ev.TaskName).Redact)
		return &LastRun{ID: ev.ID, Success: ev.Success, Trigger: ev.Trigger, StartTime: ev.StartTime, EndTime: ev.EndTime,
			ErrorSummary: ev.ErrorSummary, Terminal: ev.Terminal, Plan: ev.Plan}
	}
	return nil
}

func (s *Server) getTasks(w http.ResponseWriter, r *http.Request) {
	tasks := s.visibleTasks()
	out := TasksResponse{Tasks: make([]task.Spec, 0, len(tasks)), RequestID: requestID(r)}
	for _, t := range tasks {
		out.Tasks = append(out.Tasks, TaskView(t.Spec))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getTask(w http.ResponseWriter, r *http.Request) {
	st, err := s.lookup(r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, TaskResponse{Task: TaskView(st.Spec), RequestID: requestID(r)})
}

// runAndBody reads the ?run= parameter and decodes the JSON body strictly
// into req; on a bad request it answers and returns ok false.
func (s *Server) runAndBody(w http.ResponseWriter, r *http.Request, req any) (run string, ok bool) {
	q, err := queryParams(r)
	if err == nil {
		run, err = runParam(q)
	}
	var body []byte
	if err == nil {
		body, err = readBody(w, r)
	}
	if err == nil {
		err = decodeStrict(body, req, "")
	}
	if err != nil {
		s.fail(w, r, err)
		return "", false
	}
	return run, true
}

// createTask serves POST /v1/tasks[?run=now|inspect].
func (s *Server) createTask(w http.ResponseWriter, r *http.Request) {
	if s.apiTasks().CreateDisabled {
		s.fail(w, r, &httpError{status: http.StatusForbidden,
			msg: "creating tasks through the API is disabled on this server (api_tasks { create = false }); run=inspect included"})
		return
	}
	var req TaskRequest
	run, ok := s.runAndBody(w, r, &req)
	if !ok {
		return
	}
	spec, err := s.decodeTask(req.Task)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := checkAllowed(s.apiTasks(), spec); err != nil {
		s.log.Warn("api: task outside the allowlist refused", "task_name", spec.Name, "module", spec.Module,
			"reason", err.Error(), "run", run, "token", tokenName(r), "request_id", requestID(r))
		s.fail(w, r, err)
		return
	}
	// After the allowlist: the daemon's own checks look at its files (a
	// local module folder), which a refused task must not learn about.
	if s.opts.Validate != nil {
		if err := s.opts.Validate(spec); err != nil {
			s.fail(w, r, invalidTask(err))
			return
		}
	}
	if st, err := s.opts.Controller.Task(spec.Name); err == nil {
		if st.Deleting {
			s.fail(w, r, fmt.Errorf("%w: task '%s' is being deleted: create it again once it is gone", errDeleting, spec.Name))
			return
		}
		s.fail(w, r, fmt.Errorf("%w: task with name %s already exists", errExists, spec.Name))
		return
	}
	ctl := s.opts.Controller
	switch run {
	case "inspect":
		res, err := ctl.Inspect(r.Context(), spec)
		if err != nil {
			s.fail(w, r, fmt.Errorf("inspecting task '%s': %w", spec.Name, err))
			return
		}
		writeJSON(w, http.StatusOK, TaskResponse{Task: TaskView(spec),
			// The task is not kept: its plan is shown through a view of
			// its own that shows its variables' values as written.
			Run: &RunResult{Plan: s.opts.Redactor.Protecting(spec.VariableStrings()...).Redact(res.Plan), ChangesPresent: res.ChangesPresent, TFCRunURL: res.TFCRunURL}, RequestID: requestID(r)})
		return
	case "now":
		if err := ctl.Create(r.Context(), spec, true); err != nil {
			if !errors.Is(err, errExists) && !errors.Is(err, errDeleting) {
				err = fmt.Errorf("running task '%s': %w", spec.Name, err)
			}
			s.fail(w, r, err)
			return
		}
	default:
		if err := ctl.Create(r.Context(), spec, false); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	s.log.Info("task created through the api", "task_name", spec.Name, "module", spec.Module, "run", run, "token", tokenName(r), "request_id", requestID(r))
	writeJSON(w, http.StatusCreated, TaskResponse{Task: TaskView(spec), RequestID: requestID(r)})
}

// deleteTask serves DELETE /v1/tasks/{name}[?destroy=true]. As CTS, the
// task is marked for deletion and removed asynchronously once it is not
// running; with destroy (ctsync) its infrastructure is destroyed first.
func (s *Server) deleteTask(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	q, err := queryParams(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	destroy := false
	if v, ok := q["destroy"]; ok {
		if destroy, err = strconv.ParseBool(v[0]); err != nil {
			s.fail(w, r, badRequest("invalid value %q for query parameter destroy: must be true or false", v[0]))
			return
		}
	}
	st, err := s.lookup(name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	id, token := requestID(r), tokenName(r)
	ctx := reconcile.WithActor(s.bgCtx, token)
	done := make(chan error, 1)
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		err := s.opts.Controller.Delete(ctx, name, destroy)
		done <- err
		var held *reconcile.DestroyHeldError
		switch {
		case err == nil:
			s.log.Info("task deleted", "task_name", name, "destroyed", destroy, "token", token, "request_id", id)
		case errors.Is(err, errNotFound):
		case errors.As(err, &held):
			s.log.Warn("task deletion held: its destroy plan waits for approval", "task_name", name, "plan", held.Plan.ID,
				"reason", s.redact("", held.Plan.Reason), "token", token, "request_id", id)
		default:
			s.log.Error("deleting task failed", "task_name", name, "request_id", id, "error", err)
		}
	}()
	if destroy && (st.Spec.Approval != nil || st.Spec.Policy != nil) {
		// The destroy of a task with safety gates is a plan like any
		// other: the answer says whether the approval rules hold it.
		s.answerGatedDestroy(w, r, name, done)
		return
	}
	// Answer once the task is marked (the controller does that first), so
	// that the next request already sees it gone.
	if err := s.waitMarked(r, name, done); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, DeleteTaskResponse{RequestID: id})
}

// answerGatedDestroy answers a deletion with destroy of a task with safety
// gates once it is decided: 202 with the held destroy plan (status held;
// nothing destroyed, the task kept until the plan is approved), 202 with
// status deleted once the destroy the gates let through is done, or the
// error (a denied or failed destroy: the task is kept).
func (s *Server) answerGatedDestroy(w http.ResponseWriter, r *http.Request, name string, done <-chan error) {
	var err error
	select {
	case err = <-done:
	case <-r.Context().Done():
		s.fail(w, r, r.Context().Err())
		return
	}
	var held *reconcile.DestroyHeldError
	switch {
	case errors.As(err, &held):
		p := s.redactPlan(held.Plan)
		writeJSON(w, http.StatusAccepted, DeleteTaskResponse{RequestID: requestID(r), Status: DeleteHeld, Plan: &p,
			Message: fmt.Sprintf("the destroy of task '%s' is held for approval: %s; nothing was destroyed and the task is kept (disabled) until "+
				"the plan is approved (POST /v1/tasks/%s/plan/%s/approve: destroys and deletes the task) or rejected (the task stays)",
				name, p.Reason, name, p.ID)})
	case err != nil:
		if !errors.Is(err, errNotFound) && !errors.Is(err, errActive) {
			err = fmt.Errorf("deleting task '%s': %w", name, err)
		}
		s.fail(w, r, err)
	default:
		writeJSON(w, http.StatusAccepted, DeleteTaskResponse{RequestID: requestID(r), Status: DeleteDone})
	}
}

// waitMarked waits until the task is marked for deletion or gone, or the
// delete returned. Marking takes the controller's lock only, so this is
// a matter of microseconds.
func (s *Server) waitMarked(r *http.Request, name string, done <-chan error) error {
	for {
		changed := s.opts.Controller.StateChanged()
		select {
		case err := <-done:
			return err
		default:
		}
		if st, err := s.opts.Controller.Task(name); err != nil || st.Deleting {
			return nil
		}
		select {
		case err := <-done:
			return err
		case <-r.Context().Done():
			return r.Context().Err()
		case <-changed:
		}
	}
}

// runTask serves POST /v1/tasks/{name}/run (ctsync): apply now, even when
// the inputs did not change since the last apply. The run gets its id
// here, and the answer is that run: 200 with its event, or, when a safety
// gate holds its plan, 202 with the held plan (nothing applied).
func (s *Server) runTask(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if _, err := queryParams(r); err != nil {
		s.fail(w, r, err)
		return
	}
	if _, err := s.lookup(name); err != nil {
		s.fail(w, r, err)
		return
	}
	runID := uuid.NewString()
	ctx := reconcile.WithRunID(reconcile.WithActor(r.Context(), tokenName(r)), runID)
	err := s.opts.Controller.RunNow(ctx, name)
	resp := RunTaskResponse{RequestID: requestID(r), RunID: runID}
	var held *reconcile.HeldError
	if errors.As(err, &held) {
		resp.Status = RunHeld
		resp.Message = fmt.Sprintf("the run's plan is held for approval: %s; nothing was applied (approve it: POST /v1/tasks/%s/plan/%s/approve)",
			held.Reason, name, held.Plan)
		if p := s.heldPlan(name); p != nil && p.ID == held.Plan {
			hp := s.redactPlan(*p)
			resp.Plan = &hp
		} else {
			resp.Plan = &gate.Plan{ID: held.Plan, Task: name, Reason: s.redact(name, held.Reason), State: gate.Pending}
		}
		s.log.Info("task run through the api: its plan is held for approval", "task_name", name, "run_id", runID,
			"token", tokenName(r), "request_id", requestID(r))
		writeJSON(w, http.StatusAccepted, resp)
		return
	}
	if err != nil {
		if !errors.Is(err, errNotFound) && !errors.Is(err, errActive) {
			err = fmt.Errorf("running task '%s' (run %s): %w", name, runID, err)
		}
		s.fail(w, r, err)
		return
	}
	// The event of this run, never an older one: none when the run did
	// not start (its data was not complete).
	for _, ev := range s.redactEvents(s.opts.Controller.Events(name)) {
		if ev.ID == runID {
			resp.Event = &ev
			resp.Status = RunSucceeded
			break
		}
	}
	if resp.Event == nil {
		resp.Status = RunNotRun
		resp.Message = "no run was made: the task's data from Consul was not complete"
	}
	writeJSON(w, http.StatusOK, resp)
}

// TaskView returns a task as the API shows it: empty lists and maps instead
// of nulls. The condition and module input structs are copied, never
// changed in place (the controller shares them).
func TaskView(s task.Spec) task.Spec {
	if s.Providers == nil {
		s.Providers = []string{}
	}
	if c := s.Condition.Services; c != nil {
		cc := *c
		cc.ServicesSelector = displaySelector(cc.ServicesSelector)
		s.Condition.Services = &cc
	}
	if c := s.Condition.CatalogServices; c != nil {
		cc := *c
		if cc.NodeMeta == nil {
			cc.NodeMeta = map[string]string{}
		}
		s.Condition.CatalogServices = &cc
	}
	if m := s.ModuleInput.Services; m != nil {
		mm := displaySelector(*m)
		s.ModuleInput.Services = &mm
	}
	if c := s.Condition.Nodes; c != nil {
		cc := *c
		cc.NodesSelector = displayNodes(cc.NodesSelector)
		s.Condition.Nodes = &cc
	}
	if m := s.ModuleInput.Nodes; m != nil {
		mm := displayNodes(*m)
		s.ModuleInput.Nodes = &mm
	}
	return s
}

func displayNodes(sel task.NodesSelector) task.NodesSelector {
	if sel.NodeMeta == nil {
		sel.NodeMeta = map[string]string{}
	}
	return sel
}

func displaySelector(sel task.ServicesSelector) task.ServicesSelector {
	if sel.CTSUserDefinedMeta == nil {
		sel.CTSUserDefinedMeta = map[string]string{}
	}
	return sel
}
