package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

func TestHealthAndRequestID(t *testing.T) {
	h := newHarness(t, nil)
	r := h.do("GET", "/v1/health", "").expect(t, 200)
	if strings.TrimSpace(string(r.body)) != "{}" {
		t.Errorf("body %s", r.body)
	}
	id := r.header.Get("X-Request-Id")
	if len(id) != 36 {
		t.Errorf("X-Request-Id %q", id)
	}
	if id2 := h.do("GET", "/v1/health", "").header.Get("X-Request-Id"); id2 == id {
		t.Error("request ids repeat")
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content type %q", ct)
	}
}

func TestMethodNotAllowedAndUnknownPath(t *testing.T) {
	h := newHarness(t, []task.Spec{servicesTask("a", "nodata")})
	for _, c := range []struct{ method, path, allow string }{
		{"PUT", "/v1/tasks", "GET, POST, HEAD"},
		{"DELETE", "/v1/status", "GET, HEAD"},
		{"POST", "/v1/health", "GET, HEAD"},
		{"PUT", "/v1/tasks/a", "GET, PATCH, DELETE, HEAD"},
		{"GET", "/v1/tasks/a/run", "POST"},
		{"DELETE", "/v1/status/cluster", "GET, HEAD"},
	} {
		r := h.do(c.method, c.path, "").expect(t, 405)
		if msg := r.errMsg(t); !strings.Contains(msg, "not allowed") {
			t.Errorf("%s %s: %q", c.method, c.path, msg)
		}
		if got := r.header.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
	}
	r := h.do("GET", "/v1/status/cluster", "").expect(t, 405)
	if msg := r.errMsg(t); msg != "this endpoint is only available with high availability configured" {
		t.Errorf("cluster: %q", msg)
	}
	for _, p := range []string{"/v1/nope", "/v1/tasks/a/b/c", "/v1/tasks/"} {
		h.do("GET", p, "").expect(t, 404).errMsg(t)
	}
}

// statusHarness has tasks whose events give each status; none of them can
// run (their data never arrives).
func statusHarness(t *testing.T) *harness {
	ok := func(n string) store.Event {
		return store.Event{ID: n + "-ok", TaskName: n, Success: true, StartTime: time.Now(), EndTime: time.Now()}
	}
	bad := func(n string) store.Event {
		return store.Event{ID: n + "-bad", TaskName: n, StartTime: time.Now(), EndTime: time.Now(),
			Error: &store.EventError{Message: "boom"}}
	}
	disabled := servicesTask("d_unknown", "nodata")
	disabled.Enabled = false
	h := newHarness(t, []task.Spec{
		servicesTask("a_ok", "nodata"), servicesTask("b_err", "nodata"), servicesTask("c_crit", "nodata"),
		disabled, servicesTask("e_window", "nodata"),
	})
	add := func(evs ...store.Event) { // oldest first
		for _, ev := range evs {
			if err := h.st.AddEvent(context.Background(), ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	add(bad("a_ok"), ok("a_ok"))
	add(ok("b_err"), ok("b_err"), bad("b_err"))
	add(bad("c_crit"), ok("c_crit"), bad("c_crit"))
	// A failure beyond the newest 5 events does not count (CTS keeps 5).
	add(bad("e_window"), ok("e_window"), ok("e_window"), ok("e_window"), ok("e_window"), bad("e_window"))
	return h
}

func TestStatus(t *testing.T) {
	h := statusHarness(t)
	var st StatusResponse
	h.do("GET", "/v1/status", "").expect(t, 200).json(t, &st)
	want := TaskSummary{Status: StatusCounts{Successful: 1, Errored: 2, Critical: 1, Unknown: 1},
		Enabled: EnabledCounts{True: 4, False: 1}}
	if st.TaskSummary != want {
		t.Errorf("summary %+v, want %+v", st.TaskSummary, want)
	}
}

func TestTaskStatuses(t *testing.T) {
	h := statusHarness(t)
	var all map[string]TaskStatus
	h.do("GET", "/v1/status/tasks", "").expect(t, 200).json(t, &all)
	wantStatus := map[string]string{"a_ok": "successful", "b_err": "errored", "c_crit": "critical",
		"d_unknown": "unknown", "e_window": "errored"}
	if len(all) != len(wantStatus) {
		t.Fatalf("got %d tasks: %v", len(all), all)
	}
	for n, s := range wantStatus {
		ts := all[n]
		if ts.Status != s || ts.TaskName != n {
			t.Errorf("%s: %+v, want status %s", n, ts, s)
		}
		if ts.Events != nil {
			t.Errorf("%s: events without include=events", n)
		}
		wantURL := "/v1/status/tasks/" + n + "?include=events"
		if n == "d_unknown" {
			wantURL = ""
		}
		if ts.EventsURL != wantURL {
			t.Errorf("%s: events_url %q, want %q", n, ts.EventsURL, wantURL)
		}
		if len(ts.Services) != 1 || ts.Services[0] != "nodata" {
			t.Errorf("%s: services %v", n, ts.Services)
		}
	}
	if all["d_unknown"].Enabled || !all["a_ok"].Enabled {
		t.Error("enabled flags wrong")
	}

	// Filter, case-insensitive.
	var errored map[string]TaskStatus
	h.do("GET", "/v1/status/tasks?status=ERRORED", "").expect(t, 200).json(t, &errored)
	if len(errored) != 2 || errored["b_err"].TaskName == "" || errored["e_window"].TaskName == "" {
		t.Errorf("status=ERRORED: %v", errored)
	}

	// include=events: newest first, at most 5.
	var one map[string]TaskStatus
	h.do("GET", "/v1/status/tasks/e_window?include=events", "").expect(t, 200).json(t, &one)
	evs := one["e_window"].Events
	if len(evs) != StatusEvents || evs[0].Success || !evs[1].Success {
		t.Errorf("events %+v", evs)
	}
	// Filter on a single task that does not match: empty map.
	var none map[string]TaskStatus
	h.do("GET", "/v1/status/tasks/a_ok?status=critical", "").expect(t, 200).json(t, &none)
	if len(none) != 0 {
		t.Errorf("filtered single task: %v", none)
	}

	for _, c := range []struct{ path, want string }{
		{"/v1/status/tasks?include=event", `"event" for query parameter include`},
		{"/v1/status/tasks?status=healthy", `"healthy" for query parameter status`},
		{"/v1/status/tasks?include=events&include=events", `query parameter "include" must not be repeated`},
		{"/v1/status/tasks/a_ok?status=errored&status=critical", `query parameter "status" must not be repeated`},
	} {
		if msg := h.do("GET", c.path, "").expect(t, 400).errMsg(t); !strings.Contains(msg, c.want) {
			t.Errorf("%s: %q, want %q", c.path, msg, c.want)
		}
	}
	msg := h.do("GET", "/v1/status/tasks/nope", "").expect(t, 404).errMsg(t)
	if msg != "a task with name 'nope' does not exist or has not been initialized yet" {
		t.Errorf("404 message %q", msg)
	}
}

func TestNextRunOfScheduleTask(t *testing.T) {
	sched := task.Spec{Name: "cron", Module: "m", Enabled: true, Providers: []string{}, BufferPeriod: &task.BufferPeriod{},
		Condition: task.Condition{Schedule: &task.ScheduleCondition{Cron: "0 0 1 1 *"}}}
	h := newHarness(t, []task.Spec{sched})
	var st map[string]TaskStatus
	testutil.WaitFor(t, "next_run", func() bool {
		h.do("GET", "/v1/status/tasks/cron", "").expect(t, 200).json(t, &st)
		return st["cron"].NextRun != nil
	})
	if next := *st["cron"].NextRun; next.Month() != time.January || next.Day() != 1 {
		t.Errorf("next_run %v", next)
	}
}

func TestGetTasks(t *testing.T) {
	b := servicesTask("b", "nodata")
	b.Variables = map[string]string{"x": `"y"`}
	h := newHarness(t, []task.Spec{b, servicesTask("a", "nodata")})
	var list TasksResponse
	r := h.do("GET", "/v1/tasks", "").expect(t, 200)
	r.json(t, &list)
	if len(list.Tasks) != 2 || list.Tasks[0].Name != "a" || list.Tasks[1].Name != "b" {
		t.Fatalf("tasks %+v", list.Tasks)
	}
	if list.RequestID != r.header.Get("X-Request-Id") {
		t.Errorf("request_id %q", list.RequestID)
	}
	var one TaskResponse
	h.do("GET", "/v1/tasks/b", "").expect(t, 200).json(t, &one)
	if one.Task.Name != "b" || one.Task.Variables["x"] != `"y"` || one.Task.Condition.Services.Names[0] != "nodata" {
		t.Errorf("task %+v", one.Task)
	}
	if one.Task.Condition.Services.CTSUserDefinedMeta == nil {
		t.Error("cts_user_defined_meta is null")
	}
	msg := h.do("GET", "/v1/tasks/zzz", "").expect(t, 404).errMsg(t)
	if msg != "a task with name 'zzz' does not exist or has not been initialized yet" {
		t.Errorf("404 message %q", msg)
	}
}

func TestCreateTaskDefaults(t *testing.T) {
	h := newHarness(t, nil)
	h.w.Set(healthKey("web"), instances("web-1"))

	var resp TaskResponse
	r := h.do("POST", "/v1/tasks", `{"task":{"name":"t1","module":"org/x/y","condition":{"services":{"names":["web"]}}}}`)
	r.expect(t, 201).json(t, &resp)
	got := resp.Task
	if !got.Enabled || !got.Condition.Services.UseAsModuleInput {
		t.Errorf("defaults not applied: %+v %+v", got, got.Condition.Services)
	}
	if got.BufferPeriod == nil || *got.BufferPeriod != globalBuffer {
		t.Errorf("buffer period %+v, want the global %+v", got.BufferPeriod, globalBuffer)
	}
	if resp.RequestID == "" || resp.Run != nil {
		t.Errorf("response %+v", resp)
	}
	// Created without run: it runs as soon as its data is there.
	h.waitChan(h.applied, "t1")
	st, err := h.ctrl.Task("t1")
	if err != nil || !st.Spec.Enabled {
		t.Fatalf("controller task %+v %v", st, err)
	}

	cases := []struct {
		body  string
		check func(task.Spec) string
	}{
		{`{"task":{"name":"t2","enabled":false,"module":"m","condition":{"services":{"names":["web"],"use_as_module_input":false}}}}`,
			func(s task.Spec) string {
				if s.Enabled || s.Condition.Services.UseAsModuleInput {
					return "explicit false values were overridden"
				}
				return ""
			}},
		{`{"task":{"name":"t3","enabled":false,"module":"m","buffer_period":{"min":"2s"},"condition":{"catalog_services":{"regexp":"^web"}}}}`,
			func(s task.Spec) string {
				want := task.BufferPeriod{Enabled: true, Min: task.Duration(2 * time.Second), Max: task.Duration(8 * time.Second)}
				if *s.BufferPeriod != want || !s.Condition.CatalogServices.UseAsModuleInput {
					return fmt.Sprintf("buffer %+v", *s.BufferPeriod)
				}
				return ""
			}},
		{`{"task":{"name":"t4","enabled":false,"module":"m","buffer_period":{"enabled":false,"min":"2s"},"condition":{"consul_kv":{"path":"k"}}}}`,
			func(s task.Spec) string {
				if *s.BufferPeriod != (task.BufferPeriod{}) || !s.Condition.ConsulKV.UseAsModuleInput {
					return fmt.Sprintf("buffer %+v", *s.BufferPeriod)
				}
				return ""
			}},
		{`{"task":{"name":"t5","enabled":false,"module":"m","buffer_period":{"min":"1s","max":"3s"},"condition":{"schedule":{"cron":"*/5 * * * *"}}}}`,
			func(s task.Spec) string {
				if *s.BufferPeriod != (task.BufferPeriod{}) {
					return fmt.Sprintf("schedule task buffer %+v", *s.BufferPeriod)
				}
				return ""
			}},
		{`{"task":{"name":"t6","enabled":false,"module":"m","buffer_period":{"max":"1m"},"condition":{"services":{"regexp":"^web$"}},"module_input":{"consul_kv":{"path":"p","recurse":true}}}}`,
			func(s task.Spec) string {
				want := task.BufferPeriod{Enabled: true, Min: globalBuffer.Min, Max: task.Duration(time.Minute)}
				if *s.BufferPeriod != want || s.ModuleInput.ConsulKV == nil || !s.ModuleInput.ConsulKV.Recurse {
					return fmt.Sprintf("task %+v", s)
				}
				return ""
			}},
		{`{"task":{"name":"t7","enabled":false,"module":"m","buffer_period":{},"condition":{"consul_kv":{"path":"k","use_as_module_input":false}}}}`,
			func(s task.Spec) string {
				if *s.BufferPeriod != globalBuffer || s.Condition.ConsulKV.UseAsModuleInput {
					return fmt.Sprintf("empty buffer_period block: %+v", *s.BufferPeriod)
				}
				return ""
			}},
		{`{"task":{"name":"t8","enabled":true,"module":"m","buffer_period":{"enabled":true},"condition":{"catalog_services":{"regexp":"x","use_as_module_input":false}}}}`,
			func(s task.Spec) string {
				want := task.BufferPeriod{Enabled: true, Min: globalBuffer.Min, Max: 4 * globalBuffer.Min}
				if *s.BufferPeriod != want || s.Condition.CatalogServices.UseAsModuleInput || !s.Enabled {
					return fmt.Sprintf("buffer %+v", *s.BufferPeriod)
				}
				return ""
			}},
	}
	for _, c := range cases {
		var resp TaskResponse
		h.do("POST", "/v1/tasks", c.body).expect(t, 201).json(t, &resp)
		if msg := c.check(resp.Task); msg != "" {
			t.Errorf("%s: %s", resp.Task.Name, msg)
		}
		st, err := h.ctrl.Task(resp.Task.Name)
		if err != nil {
			t.Fatal(err)
		}
		if msg := c.check(st.Spec); msg != "" {
			t.Errorf("%s in controller: %s", resp.Task.Name, msg)
		}
	}
}

func TestCreateRunNowAndInspect(t *testing.T) {
	h := newHarness(t, nil)
	h.w.Set(healthKey("web"), instances("web-1"))
	body := `{"task":{"name":"now","module":"m","condition":{"services":{"names":["web"]}}}}`

	var insp TaskResponse
	h.do("POST", "/v1/tasks?run=inspect", body).expect(t, 200).json(t, &insp)
	if insp.Run == nil || !insp.Run.ChangesPresent || !strings.Contains(insp.Run.Plan, "1 to add") {
		t.Errorf("inspect %+v", insp.Run)
	}
	h.do("GET", "/v1/tasks/now", "").expect(t, 404)

	h.do("POST", "/v1/tasks?run=now", body).expect(t, 201)
	h.waitChan(h.applied, "now")
	evs := h.ctrl.Events("now")
	if len(evs) != 1 || !evs[0].Success || evs[0].Trigger != "api" {
		t.Errorf("events after run=now: %+v", evs)
	}
	msg := h.do("POST", "/v1/tasks", body).expect(t, 400).errMsg(t)
	if !strings.Contains(msg, "already exists") || strings.HasPrefix(msg, "task already exists") {
		t.Errorf("duplicate: %q", msg)
	}
	h.do("POST", "/v1/tasks?run=inspect", body).expect(t, 400)

	// A failing run=now create keeps nothing.
	h.setFailing("bad", true)
	msg = h.do("POST", "/v1/tasks?run=now", strings.ReplaceAll(body, `"now"`, `"bad"`)).expect(t, 500).errMsg(t)
	if !strings.Contains(msg, "boom") {
		t.Errorf("failed run=now: %q", msg)
	}
	h.do("GET", "/v1/tasks/bad", "").expect(t, 404)
}

// rejectProvider is an Options.Validate that knows only provider "local".
func rejectProvider(s task.Spec) error {
	for i, p := range s.Providers {
		if p != "local" {
			return &task.FieldError{Field: fmt.Sprintf("providers[%d]", i), Msg: fmt.Sprintf("provider %q is not configured", p)}
		}
	}
	return nil
}

func TestCreateTaskBadInput(t *testing.T) {
	h := newHarness(t, []task.Spec{servicesTask("exists", "nodata")}, func(o *Options) { o.Validate = rejectProvider })
	valid := `"name":"x","module":"m","condition":{"services":{"names":["web"]}}`
	cases := []struct {
		name, query, body string
		status            int
		want              string
	}{
		{"too large", "", `{"task":{"name":"` + strings.Repeat("x", MaxBodyBytes) + `"}}`, 413, "larger than 1048576 bytes"},
		{"empty body", "", ``, 400, "request body is empty"},
		{"malformed", "", `{"task":{`, 400, "malformed JSON"},
		{"syntax", "", `{"task":{"name":}}`, 400, "malformed JSON at byte"},
		{"trailing", "", `{"task":{` + valid + `}} {}`, 400, "single JSON object"},
		{"not an object", "", `[]`, 400, "invalid request body"},
		{"no task", "", `{}`, 400, "task is required"},
		{"unknown top-level", "", `{"task":{` + valid + `},"extra":1}`, 400, `unknown field "extra"`},
		{"unknown task field", "", `{"task":{` + valid + `,"colour":"red"}}`, 400, `unknown field "colour" in task`},
		{"unknown nested field", "", `{"task":{"name":"x","module":"m","condition":{"services":{"names":["web"],"nmes":[]}}}}`, 400, `unknown field "nmes"`},
		{"working_dir", "", `{"task":{` + valid + `,"working_dir":"/tmp"}}`, 400, "task.working_dir cannot be set"},
		{"variable_files", "", `{"task":{` + valid + `,"variable_files":["a.tfvars"]}}`, 400, "task.variable_files cannot be set"},
		{"type enabled", "", `{"task":{` + valid + `,"enabled":"yes"}}`, 400, "task.enabled: expected a boolean"},
		{"type names", "", `{"task":{"name":"x","module":"m","condition":{"services":{"names":"web"}}}}`, 400, "task.condition.services.names: expected an array"},
		{"type use", "", `{"task":{"name":"x","module":"m","condition":{"services":{"names":["w"],"use_as_module_input":"no"}}}}`, 400, "task.condition.services.use_as_module_input"},
		{"bad duration", "", `{"task":{` + valid + `,"buffer_period":{"min":"soon"}}}`, 400, "task.buffer_period.min"},
		{"max below min", "", `{"task":{` + valid + `,"buffer_period":{"min":"10s","max":"1s"}}}`, 400, "buffer_period.max"},
		{"no name", "", `{"task":{"module":"m","condition":{"services":{"names":["web"]}}}}`, 400, "invalid task: name: is required"},
		{"bad name", "", `{"task":{"name":"1x","module":"m","condition":{"services":{"names":["web"]}}}}`, 400, "invalid task: name:"},
		{"no module", "", `{"task":{"name":"x","condition":{"services":{"names":["web"]}}}}`, 400, "invalid task: module: is required"},
		{"no condition", "", `{"task":{"name":"x","module":"m"}}`, 400, "invalid task: condition: task should be configured with a condition block"},
		{"two conditions", "", `{"task":{"name":"x","module":"m","condition":{"services":{"names":["w"]},"schedule":{"cron":"* * * * *"}}}}`, 400, "invalid task: condition:"},
		{"bad regexp", "", `{"task":{"name":"x","module":"m","condition":{"services":{"regexp":"(["}}}}`, 400, "condition.services.regexp"},
		{"bad catalog regexp", "", `{"task":{"name":"x","module":"m","condition":{"catalog_services":{"regexp":"a(("}}}}`, 400, "condition.catalog_services.regexp"},
		{"bad cron", "", `{"task":{"name":"x","module":"m","condition":{"schedule":{"cron":"every day"}}}}`, 400, "condition.schedule.cron"},
		{"never cron", "", `{"task":{"name":"x","module":"m","condition":{"schedule":{"cron":"0 0 30 2 *"}}}}`, 400, "never fires"},
		{"kv no path", "", `{"task":{"name":"x","module":"m","condition":{"consul_kv":{"recurse":true}}}}`, 400, "condition.consul_kv.path"},
		{"unknown provider", "", `{"task":{` + valid + `,"providers":["aws"]}}`, 400, `invalid task: providers[0]: provider "aws" is not configured`},
		{"exists", "", `{"task":{"name":"exists","module":"m","condition":{"services":{"names":["web"]}}}}`, 400, "task with name exists already exists"},
		{"bad run", "?run=later", `{"task":{` + valid + `}}`, 400, `invalid value "later" for query parameter run`},
		{"repeated run", "?run=now&run=now", `{"task":{` + valid + `}}`, 400, `query parameter "run" must not be repeated`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := h.do("POST", "/v1/tasks"+c.query, c.body).expect(t, c.status)
			if msg := r.errMsg(t); !strings.Contains(msg, c.want) {
				t.Errorf("message %q, want it to contain %q", msg, c.want)
			}
		})
	}
	if n := len(h.ctrl.Tasks()); n != 1 {
		t.Errorf("%d tasks after bad requests", n)
	}
}

func TestUpdateTask(t *testing.T) {
	h := newHarness(t, []task.Spec{servicesTask("a", "web")})
	h.w.Set(healthKey("web"), instances("web-1"))
	h.waitChan(h.applied, "a")
	h.waitIdle("a")

	r := h.do("PATCH", "/v1/tasks/a", `{"enabled":false}`).expect(t, 200)
	if strings.TrimSpace(string(r.body)) != "{}" {
		t.Errorf("body %s", r.body)
	}
	var got TaskResponse
	h.do("GET", "/v1/tasks/a", "").expect(t, 200).json(t, &got)
	if got.Task.Enabled {
		t.Fatal("still enabled")
	}

	// Inspect plans and changes nothing.
	var insp UpdateTaskResponse
	h.do("PATCH", "/v1/tasks/a?run=inspect", `{"enabled":true}`).expect(t, 200).json(t, &insp)
	if insp.Inspect == nil || !insp.Inspect.ChangesPresent || insp.Inspect.Plan == "" {
		t.Errorf("inspect %+v", insp)
	}
	h.do("GET", "/v1/tasks/a", "").expect(t, 200).json(t, &got)
	if got.Task.Enabled {
		t.Fatal("inspect enabled the task")
	}
	h.setNoChanges("a", true)
	h.do("PATCH", "/v1/tasks/a?run=inspect", `{"enabled":true}`).expect(t, 200).json(t, &insp)
	if insp.Inspect.ChangesPresent {
		t.Errorf("inspect %+v", insp)
	}

	// run=now enables and applies, recording an event.
	before := len(h.ctrl.Events("a"))
	h.do("PATCH", "/v1/tasks/a?run=now", `{"enabled":true}`).expect(t, 200)
	h.waitChan(h.applied, "a")
	if evs := h.ctrl.Events("a"); len(evs) != before+1 || evs[0].Trigger != "api" {
		t.Errorf("events %+v", evs)
	}
	h.do("GET", "/v1/tasks/a", "").expect(t, 200).json(t, &got)
	if !got.Task.Enabled {
		t.Fatal("not enabled")
	}

	for _, c := range []struct{ body, query, want string }{
		{`{"enabled":true,"name":"b"}`, "", "task.name cannot be changed"},
		{`{"enabled":true,"nonsense":1}`, "", `unknown field "nonsense"`},
		{`{}`, "", "sets no field"},
		{`[]`, "", "must be a JSON object"},
		{`{"enabled":"yes"}`, "", "enabled: expected a boolean"},
		{`not json`, "", "malformed JSON"},
		{``, "", "request body is empty"},
		{`{"enabled":true}`, "?run=soon", "query parameter run"},
	} {
		if msg := h.do("PATCH", "/v1/tasks/a"+c.query, c.body).expect(t, 400).errMsg(t); !strings.Contains(msg, c.want) {
			t.Errorf("%s: %q, want %q", c.body, msg, c.want)
		}
	}
	msg := h.do("PATCH", "/v1/tasks/nope", `{"enabled":true}`).expect(t, 404).errMsg(t)
	if msg != "a task with name 'nope' does not exist or has not been initialized yet" {
		t.Errorf("404 %q", msg)
	}
	h.do("PATCH", "/v1/tasks/a", strings.Repeat(" ", MaxBodyBytes+1)+`{"enabled":true}`).expect(t, 413)

	// A failing run=now is a 500 with the cause.
	h.do("PATCH", "/v1/tasks/a", `{"enabled":false}`).expect(t, 200)
	h.setFailing("a", true)
	msg = h.do("PATCH", "/v1/tasks/a?run=now", `{"enabled":true}`).expect(t, 500).errMsg(t)
	if !strings.Contains(msg, "boom") {
		t.Errorf("500 %q", msg)
	}
}

func TestActiveTaskConflicts(t *testing.T) {
	h := newHarness(t, []task.Spec{servicesTask("a", "web")})
	release := h.gate("a")
	h.w.Set(healthKey("web"), instances("web-1"))
	h.waitChan(h.started, "a")

	msg := h.do("PATCH", "/v1/tasks/a", `{"enabled":false}`).expect(t, 409).errMsg(t)
	if msg != "task 'a' is active and cannot be updated at this time" {
		t.Errorf("PATCH 409 %q", msg)
	}
	msg = h.do("POST", "/v1/tasks/a/run", "").expect(t, 409).errMsg(t)
	if !strings.Contains(msg, "task 'a' is active") {
		t.Errorf("run 409 %q", msg)
	}
	var st map[string]TaskStatus
	h.do("GET", "/v1/status/tasks/a", "").expect(t, 200).json(t, &st)
	if !st["a"].Active {
		t.Error("status does not show the task active")
	}
	release()
	h.waitChan(h.applied, "a")
	h.waitIdle("a")
	h.do("PATCH", "/v1/tasks/a", `{"enabled":false}`).expect(t, 200)
}

func TestRunTaskAndEvents(t *testing.T) {
	h := newHarness(t, []task.Spec{servicesTask("a", "web")})
	h.w.Set(healthKey("web"), instances("web-1"))
	h.waitChan(h.applied, "a")
	h.waitIdle("a")

	// Inputs unchanged: a normal trigger would skip; run applies anyway.
	seen := map[string]bool{}
	for i := 0; i < 6; i++ {
		var resp RunTaskResponse
		h.do("POST", "/v1/tasks/a/run", "").expect(t, 200).json(t, &resp)
		h.waitChan(h.applied, "a")
		if resp.Event == nil || !resp.Event.Success || resp.Event.Trigger != "api" || resp.Event.TaskName != "a" {
			t.Fatalf("event %+v", resp.Event)
		}
		// The answer is the run this call started, not an older one.
		if resp.RunID == "" || resp.Event.ID != resp.RunID || seen[resp.RunID] || resp.Status != RunSucceeded {
			t.Fatalf("run %d: answered run %q with event %q (status %q); earlier runs %v", i, resp.RunID, resp.Event.ID, resp.Status, seen)
		}
		seen[resp.RunID] = true
	}
	var evs EventsResponse
	h.do("GET", "/v1/tasks/a/events", "").expect(t, 200).json(t, &evs)
	if len(evs.Events) != 7 {
		t.Fatalf("%d events, want the whole history (7)", len(evs.Events))
	}
	for i := 1; i < len(evs.Events); i++ {
		if evs.Events[i].StartTime.After(evs.Events[i-1].StartTime) {
			t.Error("events not newest first")
		}
	}
	var st map[string]TaskStatus
	h.do("GET", "/v1/status/tasks/a?include=events", "").expect(t, 200).json(t, &st)
	if len(st["a"].Events) != StatusEvents {
		t.Errorf("status events %d", len(st["a"].Events))
	}
	h.do("POST", "/v1/tasks/zz/run", "").expect(t, 404)
	h.do("GET", "/v1/tasks/zz/events", "").expect(t, 404)

	// A task without events has an empty list, not null.
	h2 := newHarness(t, []task.Spec{servicesTask("quiet", "nodata")})
	r := h2.do("GET", "/v1/tasks/quiet/events", "").expect(t, 200)
	if !strings.Contains(string(r.body), `"events":[]`) {
		t.Errorf("body %s", r.body)
	}
}

func TestDeleteTask(t *testing.T) {
	h := newHarness(t, []task.Spec{servicesTask("a", "web"), servicesTask("b", "web"), servicesTask("c", "web")})
	h.w.Set(healthKey("web"), instances("web-1"))
	for range 3 {
		<-h.applied
	}

	var resp RequestIDResponse
	r := h.do("DELETE", "/v1/tasks/a", "").expect(t, 202)
	r.json(t, &resp)
	if resp.RequestID == "" || resp.RequestID != r.header.Get("X-Request-Id") {
		t.Errorf("request id %+v", resp)
	}
	// Gone for clients at once.
	h.do("GET", "/v1/tasks/a", "").expect(t, 404)
	h.do("DELETE", "/v1/tasks/a", "").expect(t, 404)
	testutil.WaitFor(t, "a removed", func() bool { _, err := h.ctrl.Task("a"); return errors.Is(err, reconcile.ErrNotFound) })
	if len(h.st.Events("a")) != 0 {
		t.Error("events of a deleted task remain")
	}

	// A running task is marked at once and removed when its run ends.
	release := h.gate("b")
	h.w.Set(healthKey("web"), instances("web-1", "web-2"))
	h.waitChan(h.started, "b")
	h.do("DELETE", "/v1/tasks/b", "").expect(t, 202)
	var list TasksResponse
	h.do("GET", "/v1/tasks", "").expect(t, 200).json(t, &list)
	if len(list.Tasks) != 1 || list.Tasks[0].Name != "c" {
		t.Errorf("tasks %+v", list.Tasks)
	}
	var sum StatusResponse
	h.do("GET", "/v1/status", "").expect(t, 200).json(t, &sum)
	if sum.TaskSummary.Enabled.True != 1 {
		t.Errorf("summary %+v", sum)
	}
	if st, err := h.ctrl.Task("b"); err != nil || !st.Deleting {
		t.Fatalf("b: %+v %v", st, err)
	}
	release()
	testutil.WaitFor(t, "b removed", func() bool { _, err := h.ctrl.Task("b"); return err != nil })

	// destroy=true runs terraform destroy first.
	h.do("DELETE", "/v1/tasks/c?destroy=true", "").expect(t, 202)
	h.waitChan(h.destroyed, "c")
	testutil.WaitFor(t, "c removed", func() bool { _, err := h.ctrl.Task("c"); return err != nil })

	h.do("DELETE", "/v1/tasks/nope", "").expect(t, 404)
	msg := h.do("DELETE", "/v1/tasks/x?destroy=yes", "").expect(t, 400).errMsg(t)
	if !strings.Contains(msg, "destroy") {
		t.Errorf("%q", msg)
	}
}

// TestConcurrentRequests hammers the API while tasks run and their data
// changes; run with -race.
func TestConcurrentRequests(t *testing.T) {
	var specs []task.Spec
	for i := range 4 {
		specs = append(specs, servicesTask(fmt.Sprintf("t%d", i), "web"))
	}
	h := newHarness(t, specs)
	h.w.Set(healthKey("web"), instances("web-1"))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-h.applied:
			}
			if i%4 == 0 {
				h.w.Set(healthKey("web"), instances("web-1", fmt.Sprintf("web-%d", i)))
			}
		}
	})
	var reqs sync.WaitGroup
	for g := range 8 {
		reqs.Go(func() {
			for i := range 25 {
				name := fmt.Sprintf("t%d", (g+i)%4)
				var r response
				switch i % 7 {
				case 0:
					r = h.do("GET", "/v1/status", "")
				case 1:
					r = h.do("GET", "/v1/status/tasks?include=events", "")
				case 2:
					r = h.do("GET", "/v1/tasks", "")
				case 3:
					r = h.do("PATCH", "/v1/tasks/"+name, `{"enabled":true}`)
				case 4:
					r = h.do("POST", "/v1/tasks/"+name+"/run", "")
				case 5:
					r = h.do("GET", "/v1/tasks/"+name+"/events", "")
				case 6:
					extra := fmt.Sprintf("x%d_%d", g, i)
					r = h.do("POST", "/v1/tasks", `{"task":{"name":"`+extra+`","module":"m","condition":{"services":{"names":["web"]}}}}`)
					if r.status == 201 {
						r = h.do("DELETE", "/v1/tasks/"+extra, "")
					}
				}
				switch r.status {
				case 200, 201, 202, 409:
				default:
					t.Errorf("status %d: %s", r.status, r.body)
				}
			}
		})
	}
	reqs.Wait()
	close(stop)
	wg.Wait()
}

func TestRequestLogging(t *testing.T) {
	h := newHarness(t, nil)
	h.do("GET", "/v1/health", "").expect(t, 200)
	h.do("GET", "/v1/status", "").expect(t, 200)
	logs := h.logs.String()
	if strings.Contains(logs, "path=/v1/health") {
		t.Error("health checks are logged")
	}
	if !strings.Contains(logs, "level=DEBUG msg=\"api request\" method=GET path=/v1/status") {
		t.Errorf("no request log line:\n%s", logs)
	}
}

func TestNewNeedsController(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Fatal("no error")
	}
}

// TestHandleMountsExtraRoutes checks that other handlers (metrics, UI) can
// share the mux and get the middleware.
func TestHandleMountsExtraRoutes(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.Handle("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	resp, err := h.ts.Client().Get(h.ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Request-Id") == "" {
		t.Errorf("status %d headers %v", resp.StatusCode, resp.Header)
	}
}

// /v1/health tells the truth: 503 with the reason when the daemon does not
// work (a stuck controller, a dead watch), CTS's {} otherwise.
func TestHealthReportsLiveness(t *testing.T) {
	var mu sync.Mutex
	var verdict error
	h := newHarness(t, nil, func(o *Options) {
		o.Health = func() error { mu.Lock(); defer mu.Unlock(); return verdict }
	})
	h.do("GET", "/v1/health", "").expect(t, 200)
	mu.Lock()
	verdict = errors.New("watch health/service/web has failed for 2m0s: connection refused")
	mu.Unlock()
	r := h.do("GET", "/v1/health", "").expect(t, 503)
	if !strings.Contains(string(r.body), `"message":"unhealthy: watch health/service/web has failed`) {
		t.Fatalf("body %s", r.body)
	}
	// The real controller of the harness is live.
	if err := h.ctrl.Live(); err != nil {
		t.Fatalf("controller: %v", err)
	}
}
