package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/task"
)

// Updater replaces a task's settings, keeping its run state, history and
// held plans (reconcile.Controller.Update): a changed desired state then
// runs as any change does. A Controller that implements it takes PATCH
// /v1/tasks/{name} with any field of the task; without it only enabled.
type Updater interface {
	Update(ctx context.Context, spec task.Spec) error
}

// ErrFileTask is the error of a change through the API to a task of the
// configuration files other than its enabled flag (409).
var ErrFileTask = errors.New("the task comes from the configuration files")

// patchFields reads the body of PATCH /v1/tasks/{name}: a JSON object
// whose fields are fields of the task (the create schema).
func patchFields(body []byte) (map[string]json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if !json.Valid(body) {
		return nil, jsonError(json.Unmarshal(body, new(any)), "")
	}
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return nil, schemaError("invalid request body: must be a JSON object holding fields of the task (value must be an object)")
	}
	if len(fields) == 0 {
		return nil, badRequest("the request body sets no field of the task")
	}
	return fields, nil
}

// patchedSpec is the task spec with the fields of a PATCH body: each field
// sent replaces the task's value of that field (null: its default), the
// others keep theirs. The result is decoded and checked exactly as the
// body of a create (decodeTask, the api_tasks allowlist, Validate).
func (s *Server) patchedSpec(cur task.Spec, fields map[string]json.RawMessage) (task.Spec, error) {
	if v, ok := fields["name"]; ok {
		var name string
		if err := json.Unmarshal(v, &name); err != nil || name != cur.Name {
			return task.Spec{}, badRequest("task.name cannot be changed: create a task with the new name and delete this one")
		}
	}
	b, err := json.Marshal(cur)
	if err != nil {
		return task.Spec{}, err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return task.Spec{}, err
	}
	for k, v := range fields {
		if string(v) == "null" {
			delete(obj, k)
			continue
		}
		obj[k] = v
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return task.Spec{}, err
	}
	spec, err := s.decodeTask(raw)
	if err != nil {
		return task.Spec{}, err
	}
	if err := checkAllowed(s.apiTasks(), spec); err != nil {
		return task.Spec{}, err
	}
	if s.opts.Validate != nil {
		if err := s.opts.Validate(spec); err != nil {
			return task.Spec{}, invalidTask(err)
		}
	}
	return spec, nil
}

// updateTask serves PATCH /v1/tasks/{name}[?run=now|inspect]. A body with
// enabled alone enables or disables the task (CTS's PATCH, for every
// task); any other field of the task's JSON changes a task created
// through the API, with the checks of a create. A task of the
// configuration files changes only in enabled: 409 naming the fields.
func (s *Server) updateTask(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	q, err := queryParams(r)
	var run string
	if err == nil {
		run, err = runParam(q)
	}
	var body []byte
	if err == nil {
		body, err = readBody(w, r)
	}
	var fields map[string]json.RawMessage
	if err == nil {
		fields, err = patchFields(body)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if _, ok := fields["enabled"]; ok && len(fields) == 1 {
		var req UpdateTaskRequest
		if err := decodeStrict(body, &req, ""); err != nil {
			s.fail(w, r, err)
			return
		}
		if req.Enabled == nil {
			s.fail(w, r, badRequest("enabled must be true or false"))
			return
		}
		s.setEnabled(w, r, name, *req.Enabled, run)
		return
	}
	s.patchTask(w, r, name, fields, run)
}

// setEnabled is a PATCH of enabled alone.
func (s *Server) setEnabled(w http.ResponseWriter, r *http.Request, name string, enabled bool, run string) {
	if _, err := s.lookup(name); err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := s.opts.Controller.SetEnabled(reconcile.WithActor(r.Context(), tokenName(r)), name, enabled, reconcile.EnableMode(run))
	if err != nil {
		if !errors.Is(err, errNotFound) && !errors.Is(err, errActive) {
			err = fmt.Errorf("updating task '%s': %w", name, err)
		}
		s.fail(w, r, err)
		return
	}
	if run == "inspect" {
		writeJSON(w, http.StatusOK, UpdateTaskResponse{Inspect: &RunResult{Plan: s.redact(name, res.Plan), ChangesPresent: res.ChangesPresent, TFCRunURL: res.TFCRunURL}})
		return
	}
	s.log.Info("task updated through the api", "task_name", name, "enabled", enabled, "run", run, "token", tokenName(r), "request_id", requestID(r))
	writeJSON(w, http.StatusOK, UpdateTaskResponse{})
}

// patchTask is a PATCH of fields other than enabled alone.
func (s *Server) patchTask(w http.ResponseWriter, r *http.Request, name string, fields map[string]json.RawMessage, run string) {
	st, err := s.lookup(name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	others := slices.Sorted(maps.Keys(fields))
	others = slices.DeleteFunc(others, func(f string) bool { return f == "enabled" })
	if s.opts.FileTask != nil && s.opts.FileTask(name) {
		s.fail(w, r, &httpError{status: http.StatusConflict, msg: fmt.Sprintf(
			"%v: task '%s' is defined in ctsync's configuration files, which are its source of truth: only enabled can be changed through the API, not %s; change the file and reload ctsync (SIGHUP)",
			ErrFileTask, name, strings.Join(others, ", "))})
		return
	}
	if s.apiTasks().CreateDisabled {
		s.fail(w, r, &httpError{status: http.StatusForbidden,
			msg: "changing tasks through the API is disabled on this server (api_tasks { create = false }): only enabled can be changed"})
		return
	}
	switch run {
	case "inspect":
		s.fail(w, r, badRequest("run=inspect plans a change of enabled alone; to plan new settings, create a task with them with run=inspect"))
		return
	case "now":
		s.fail(w, r, badRequest("run=now applies a change of enabled alone; new settings run as any change does (when the task's desired state changed): to apply the task now whatever it is, use POST /v1/tasks/%s/run after the change", name))
		return
	}
	spec, err := s.patchedSpec(st.Spec, fields)
	if err != nil {
		if he := (*httpError)(nil); errors.As(err, &he) && he.status == http.StatusForbidden {
			s.log.Warn("api: task change outside the allowlist refused", "task_name", name, "reason", err.Error(), "token", tokenName(r), "request_id", requestID(r))
		}
		s.fail(w, r, err)
		return
	}
	up, ok := s.opts.Controller.(Updater)
	if !ok {
		s.fail(w, r, &httpError{status: http.StatusNotImplemented, msg: "this server changes only enabled through the API"})
		return
	}
	ctx := reconcile.WithActor(r.Context(), tokenName(r))
	if err := up.Update(ctx, spec); err != nil {
		if !errors.Is(err, errNotFound) && !errors.Is(err, errActive) {
			err = fmt.Errorf("updating task '%s': %w", name, err)
		}
		s.fail(w, r, err)
		return
	}
	s.log.Info("task updated through the api", "task_name", name, "fields", strings.Join(slices.Sorted(maps.Keys(fields)), ","), "token", tokenName(r), "request_id", requestID(r))
	view := TaskView(spec)
	writeJSON(w, http.StatusOK, UpdateTaskResponse{Task: &view})
}
