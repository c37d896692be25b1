package api

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

// The status of a task tells its last run (with the one-line error) and
// its pending retry; the shapes match the OpenAPI document.
func TestStatusShowsLastRunAndRetry(t *testing.T) {
	h := newHarness(t, []task.Spec{servicesTask("web-task", "web")})
	start := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	_ = h.st.AddEvent(context.Background(), store.Event{ID: "r1", TaskName: "web-task", Kind: store.KindApply, StartTime: start, EndTime: start.Add(time.Second),
		Error: &store.EventError{Message: "apply: Error: boom: detail"}, ErrorSummary: "Error: boom", Terminal: true,
		Plan: &store.PlanSummary{Add: 1, Destroy: 1}})
	_ = h.st.AddEvent(context.Background(), store.Event{ID: "d1", TaskName: "web-task", Kind: store.KindDrift, Success: true})
	spec := servicesTask("web-task", "web")
	next := start.Add(time.Minute)
	ts := h.srv.taskStatus(reconcile.TaskState{Spec: spec, Retry: &reconcile.Retry{Attempt: 4, NextAt: next, LastError: "Error: boom"}}, false)
	if ts.LastRun == nil || ts.LastRun.ID != "r1" || ts.LastRun.ErrorSummary != "Error: boom" || !ts.LastRun.Terminal || ts.LastRun.Plan.Add != 1 {
		t.Fatalf("last run %+v", ts.LastRun)
	}
	if ts.Retry == nil || ts.Retry.Attempt != 4 || !ts.Retry.NextAt.Equal(next) || ts.Retry.LastError != "Error: boom" {
		t.Fatalf("retry %+v", ts.Retry)
	}
	b, _ := json.Marshal(ts)
	var v any
	_ = json.Unmarshal(b, &v)
	if err := loadSpec(t).Components.Schemas["TaskStatus"].Value.VisitJSON(v); err != nil {
		t.Fatalf("status with last_run and retry does not match the spec: %v\n%s", err, b)
	}
}

// GET /v1/tasks/{name}/events filters by result and pages; GET
// .../events/{id} serves one run with its neighbours.
func TestEventsFilterPageAndOne(t *testing.T) {
	h := newHarness(t, []task.Spec{servicesTask("web-task", "web")})
	detected := time.Date(2026, 3, 4, 5, 6, 0, 0, time.UTC)
	for i := range 7 {
		ev := store.Event{ID: fmt.Sprint("e", i), TaskName: "web-task", Kind: store.KindApply, Success: i%3 != 0,
			StartTime: detected.Add(time.Duration(i) * time.Minute), DetectedAt: &detected, Actor: "ops",
			Phases:  []store.Phase{{Name: "apply", StartTime: detected, EndTime: detected.Add(time.Second)}},
			Changes: &store.Changes{Services: &store.SetDiff{Added: []string{"web-3"}, AddedCount: 1}}}
		_ = h.st.AddEvent(context.Background(), ev)
	}
	var page EventsResponse
	h.do("GET", "/v1/tasks/web-task/events?result=failure&limit=2&offset=1", "").expect(t, 200).json(t, &page)
	if page.Total != 3 || len(page.Events) != 2 || page.Events[0].ID != "e3" || page.Events[1].ID != "e0" {
		t.Fatalf("failures page: total %d, %+v", page.Total, page.Events)
	}
	h.do("GET", "/v1/tasks/web-task/events?result=success&offset=100", "").expect(t, 200).json(t, &page)
	if page.Total != 4 || len(page.Events) != 0 {
		t.Fatalf("past the end: total %d, %d events", page.Total, len(page.Events))
	}
	var one EventResponse
	h.do("GET", "/v1/tasks/web-task/events/e3", "").expect(t, 200).json(t, &one)
	if one.Event.ID != "e3" || one.NewerID != "e4" || one.OlderID != "e2" || one.Event.Actor != "ops" ||
		one.Event.Changes.Services.Added[0] != "web-3" {
		t.Fatalf("one event: %+v", one)
	}
}

// GET /v1/status/runs: every task's runs, compact, filtered by task and
// end time.
func TestRunsCompact(t *testing.T) {
	h := newHarness(t, []task.Spec{servicesTask("a", "web"), servicesTask("b", "web")})
	t0 := time.Date(2026, 3, 4, 5, 0, 0, 0, time.UTC)
	for i, name := range []string{"a", "a", "b"} {
		_ = h.st.AddEvent(context.Background(), store.Event{ID: fmt.Sprint(name, i), TaskName: name, Kind: store.KindApply, Success: i != 1,
			StartTime: t0.Add(time.Duration(i) * time.Hour), EndTime: t0.Add(time.Duration(i)*time.Hour + time.Second), LogTail: "long output"})
	}
	var all RunsResponse
	h.do("GET", "/v1/status/runs", "").expect(t, 200).json(t, &all)
	if len(all.Runs) != 3 {
		t.Fatalf("runs %+v", all.Runs)
	}
	var some RunsResponse
	h.do("GET", "/v1/status/runs?task=a&since="+t0.Add(30*time.Minute).Format(time.RFC3339), "").expect(t, 200).json(t, &some)
	if len(some.Runs) != 1 || some.Runs[0].ID != "a1" || some.Runs[0].Success {
		t.Fatalf("filtered runs %+v", some.Runs)
	}
}

// The safety gates' audit events (kind gate) are shown with include=events,
// in CTS's event shape plus their gate field (matching the OpenAPI
// document), but are not runs: the task's status, the status counts and
// its last run come from its runs only, however many audit events follow.
func TestGateAuditEventsAreNotRuns(t *testing.T) {
	h := newHarness(t, []task.Spec{servicesTask("web-task", "web")})
	ctx := context.Background()
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	_ = h.st.AddEvent(ctx, store.Event{ID: "bad1", TaskName: "web-task", Kind: store.KindApply, StartTime: at, EndTime: at})
	_ = h.st.AddEvent(ctx, store.Event{ID: "ok", TaskName: "web-task", Kind: store.KindApply, Success: true, StartTime: at, EndTime: at})
	for i := range 6 { // more than StatusEvents
		_ = h.st.AddEvent(ctx, store.Event{ID: fmt.Sprint("g", i), TaskName: "web-task", Kind: store.KindGate, Success: true,
			StartTime: at, EndTime: at, Actor: "ops", Plan: &store.PlanSummary{Destroy: 3},
			Gate: &store.GateDecision{Action: "rejected", PlanID: "p1", Reason: "plan destroys 3 of 4 resources (max_destroy 0)", Rule: "max_destroy", By: "ops", HeldSeconds: 12.5}})
	}
	var st map[string]TaskStatus
	h.do("GET", "/v1/status/tasks/web-task?include=events", "").expect(t, 200).json(t, &st)
	ts := st["web-task"]
	if ts.Status != "successful" || ts.LastRun == nil || ts.LastRun.ID != "ok" {
		t.Fatalf("status %q, last run %+v: want successful, run ok (audit events are not runs)", ts.Status, ts.LastRun)
	}
	if len(ts.Events) != StatusEvents || ts.Events[0].Gate == nil || ts.Events[0].Gate.PlanID != "p1" || ts.Events[0].Gate.By != "ops" {
		t.Fatalf("events %+v: want the newest %d, audit events with their gate", ts.Events, StatusEvents)
	}
	b, _ := json.Marshal(ts)
	var v any
	_ = json.Unmarshal(b, &v)
	if err := loadSpec(t).Components.Schemas["TaskStatus"].Value.VisitJSON(v); err != nil {
		t.Fatalf("status with audit events does not match the spec: %v\n%s", err, b)
	}
	var sum StatusResponse
	h.do("GET", "/v1/status", "").expect(t, 200).json(t, &sum)
	if sum.TaskSummary.Status.Successful != 1 {
		t.Fatalf("status counts %+v: want 1 successful", sum.TaskSummary.Status)
	}
}
