package api

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/ctsync/ctsync/internal/store"
)

// MaxEventsLimit bounds ?limit= of GET /v1/tasks/{name}/events.
const MaxEventsLimit = 1000

// getEvents serves GET /v1/tasks/{name}/events[?result=&kind=&limit=&offset=]
// (ctsync): the run history kept, newest first, optionally only successes
// or failures, or one kind, and one page of it. Total counts the events
// that match, before paging.
func (s *Server) getEvents(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	q, err := queryParams(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if _, err := s.lookupAny(name); err != nil {
		s.fail(w, r, err)
		return
	}
	var keep func(store.Event) bool
	switch v := q.Get("result"); v {
	case "":
	case "success":
		keep = func(ev store.Event) bool { return ev.Success }
	case "failure":
		keep = func(ev store.Event) bool { return !ev.Success }
	default:
		s.fail(w, r, badRequest("unsupported value %q for query parameter result: must be success or failure", v))
		return
	}
	kind := q.Get("kind")
	limit, err := intParam(q.Get("limit"), "limit", 1, MaxEventsLimit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	offset, err := intParam(q.Get("offset"), "offset", 0, -1)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	evs := []store.Event{}
	for _, ev := range s.opts.Controller.Events(name) {
		if (keep == nil || keep(ev)) && (kind == "" || ev.Kind == kind) {
			evs = append(evs, ev)
		}
	}
	total := len(evs)
	evs = evs[min(offset, total):]
	if limit > 0 && len(evs) > limit {
		evs = evs[:limit]
	}
	writeJSON(w, http.StatusOK, EventsResponse{Events: s.redactEvents(evs), Total: total, RequestID: requestID(r)})
}

// intParam reads an optional whole-number query parameter within [lo, hi]
// (hi < 0: no upper bound); 0 when absent.
func intParam(v, name string, lo, hi int) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || (hi >= 0 && n > hi) {
		bound := fmt.Sprintf("at least %d", lo)
		if hi >= 0 {
			bound = fmt.Sprintf("between %d and %d", lo, hi)
		}
		return 0, badRequest("invalid value %q for query parameter %s: must be a whole number %s", v, name, bound)
	}
	return n, nil
}

// getEvent serves GET /v1/tasks/{name}/events/{id} (ctsync): one run, and
// the id of the task's run before it (the link to its page).
func (s *Server) getEvent(w http.ResponseWriter, r *http.Request) {
	name, id := r.PathValue("name"), r.PathValue("id")
	if _, err := queryParams(r); err != nil {
		s.fail(w, r, err)
		return
	}
	if _, err := s.lookupAny(name); err != nil {
		s.fail(w, r, err)
		return
	}
	evs := s.opts.Controller.Events(name)
	for i, ev := range evs {
		if ev.ID != id {
			continue
		}
		resp := EventResponse{Event: ev.Redacted(s.opts.Redactor.ForTask(name).Redact), RequestID: requestID(r)}
		if i > 0 {
			resp.NewerID = evs[i-1].ID
		}
		if i+1 < len(evs) {
			resp.OlderID = evs[i+1].ID
		}
		writeJSON(w, http.StatusOK, resp)
		return
	}
	s.fail(w, r, &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("task '%s' has no event with id '%s' (the history keeps the newest runs only)", name, id)})
}

// RunBrief is one run in GET /v1/status/runs: what a chart needs, without
// the run's log tail or error text.
type RunBrief struct {
	TaskName   string     `json:"task_name"`
	ID         string     `json:"id"`
	Kind       string     `json:"kind,omitempty"`
	Success    bool       `json:"success"`
	Trigger    string     `json:"trigger,omitempty"`
	StartTime  time.Time  `json:"start_time"`
	EndTime    time.Time  `json:"end_time"`
	DetectedAt *time.Time `json:"detected_at,omitempty"`
}

// RunsResponse is the body of GET /v1/status/runs (ctsync).
type RunsResponse struct {
	Runs      []RunBrief `json:"runs"`
	RequestID string     `json:"request_id"`
}

// getRuns serves GET /v1/status/runs[?task=&since=] (ctsync): the kept
// runs of every task (or of one), compact, newest first per task; with
// since (RFC 3339), only those that ended after it. The dashboard draws
// its charts from it.
func (s *Server) getRuns(w http.ResponseWriter, r *http.Request) {
	q, err := queryParams(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var since time.Time
	if v := q.Get("since"); v != "" {
		if since, err = time.Parse(time.RFC3339, v); err != nil {
			s.fail(w, r, badRequest("invalid value %q for query parameter since: must be an RFC 3339 time, e.g. 2026-01-02T15:04:05Z", v))
			return
		}
	}
	var names []string
	if name := q.Get("task"); name != "" {
		if _, err := s.lookupAny(name); err != nil {
			s.fail(w, r, err)
			return
		}
		names = []string{name}
	} else {
		for _, t := range s.visibleTasks() {
			names = append(names, t.Spec.Name)
		}
	}
	out := RunsResponse{Runs: []RunBrief{}, RequestID: requestID(r)}
	for _, name := range names {
		for _, ev := range s.opts.Controller.Events(name) {
			if !since.IsZero() && !ev.EndTime.After(since) {
				continue
			}
			out.Runs = append(out.Runs, RunBrief{TaskName: name, ID: ev.ID, Kind: ev.Kind, Success: ev.Success, Trigger: ev.Trigger,
				StartTime: ev.StartTime, EndTime: ev.EndTime, DetectedAt: ev.DetectedAt})
		}
	}
	writeJSON(w, http.StatusOK, out)
}
