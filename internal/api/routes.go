package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

// route is one method + path of the /v1 API.
type route struct {
	method  string
	path    string
	handler http.HandlerFunc
}

// routeTable lists every /v1 route. docs/api/openapi.yaml describes exactly
// these (a test checks both directions).
func (s *Server) routeTable() []route {
	return []route{
		{"GET", "/v1/health", s.getHealth},
		{"GET", "/v1/status", s.getStatus},
		{"GET", "/v1/status/tasks", s.getTaskStatuses},
		{"GET", "/v1/status/tasks/{name}", s.getTaskStatuses},
		{"GET", "/v1/status/cluster", s.getClusterStatus},
		{"GET", "/v1/status/runs", s.getRuns},
		{"GET", "/v1/tasks", s.getTasks},
		{"POST", "/v1/tasks", s.createTask},
		{"GET", "/v1/tasks/{name}", s.getTask},
		{"PATCH", "/v1/tasks/{name}", s.updateTask},
		{"DELETE", "/v1/tasks/{name}", s.deleteTask},
		{"POST", "/v1/tasks/{name}/run", s.runTask},
		{"GET", "/v1/tasks/{name}/events", s.getEvents},
		{"GET", "/v1/tasks/{name}/events/{id}", s.getEvent},
		{"GET", "/v1/tasks/{name}/events/{id}/log", s.getEventLog},
		{"GET", "/v1/tasks/{name}/plan", s.getPlan},
		{"POST", "/v1/tasks/{name}/plan/{id}/approve", s.approvePlan},
		{"POST", "/v1/tasks/{name}/plan/{id}/reject", s.rejectPlan},
	}
}

// routes registers the route table, a JSON 405 for the other methods of
// each path and a JSON 404 for unknown /v1 paths.
func (s *Server) routes() {
	allowed := map[string][]string{}
	var paths []string
	for _, rt := range s.routeTable() {
		s.mux.HandleFunc(rt.method+" "+rt.path, rt.handler)
		if allowed[rt.path] == nil {
			paths = append(paths, rt.path)
		}
		allowed[rt.path] = append(allowed[rt.path], rt.method)
	}
	for _, p := range paths {
		methods := allowed[p]
		if slices.Contains(methods, "GET") {
			methods = append(methods, "HEAD")
		}
		allow := strings.Join(methods, ", ")
		// A pattern without a method is less specific than the ones with
		// one, so it only sees the methods not registered above.
		s.mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, r, http.StatusMethodNotAllowed, "method "+r.Method+" is not allowed on "+r.URL.Path)
		})
	}
	s.mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, http.StatusNotFound, "no such endpoint: "+r.URL.Path)
	})
}

// fail writes the error response for err: an *httpError with its status,
// controller errors mapped as CTS does (409 instead of CTS's 500 for an
// active task), anything else 500.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpError
	if errors.As(err, &he) {
		writeError(w, r, he.status, he.msg)
		return
	}
	if ce := (*task.ChainError)(nil); errors.As(err, &ce) {
		writeError(w, r, http.StatusBadRequest, fmt.Sprintf("invalid task: %s: %v", ce.Field, ce))
		return
	}
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, errNotFound):
		status = http.StatusNotFound
	case errors.Is(err, errActive), errors.Is(err, errDeleting):
		status = http.StatusConflict
	case errors.Is(err, store.ErrRecordTooLarge):
		status = http.StatusRequestEntityTooLarge
	case errors.Is(err, errExists), errors.Is(err, errRefused):
		status = http.StatusBadRequest
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; nobody reads this.
		status = http.StatusServiceUnavailable
	}
	if status == http.StatusInternalServerError {
		s.log.Warn("api request failed", "method", r.Method, "path", r.URL.Path, "request_id", requestID(r), "error", err)
	}
	writeError(w, r, status, message(err))
}
