package api

import (
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/redact"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// A task created through the API may have an approval block (checked by the
// task's own rules), never a policy block.
func TestCreateTaskGates(t *testing.T) {
	h := newHarness(t, nil)
	valid := `"name":"x","module":"m","condition":{"services":{"names":["web"]}}`
	for _, c := range []struct {
		name, body string
		want       string
	}{
		{"policy", `{"task":{` + valid + `,"policy":{"files":["/etc/ctsync/fw.rego"]}}}`, "task.policy cannot be set through the API"},
		{"max_destroy", `{"task":{` + valid + `,"approval":{"max_destroy":-1}}}`, "invalid task: approval.max_destroy: (-1) cannot be negative"},
		{"percent", `{"task":{` + valid + `,"approval":{"max_destroy_percent":101}}}`, "invalid task: approval.max_destroy_percent: (101) must be between 0 and 100"},
		{"expire", `{"task":{` + valid + `,"approval":{"expire":"soon"}}}`, "task.approval.expire"},
		{"expire negative", `{"task":{` + valid + `,"approval":{"expire":"-1h"}}}`, "approval.expire: (-1h0m0s) cannot be negative"},
		// Issue 35: the values a configuration file refuses (one rule,
		// task.ParseExpire).
		{"expire a number", `{"task":{` + valid + `,"approval":{"expire":5}}}`, "task.approval.expire: must be a string holding a duration"},
		{"expire zero", `{"task":{` + valid + `,"approval":{"expire":"0s"}}}`, "task.approval.expire: must be longer than 0"},
		{"expire 5ns", `{"task":{` + valid + `,"approval":{"expire":"5ns"}}}`, "task.approval.expire: (5ns) must be at least 1s"},
		// Issue 35: a variable nested past depth.Max is refused, naming
		// the field, before the HCL parser recurses on it.
		{"deep variable", `{"task":{` + valid + `,"variables":{"x":"` + strings.Repeat("[", 65000) + `"}}}`, "invalid task: variables.x: the value nests deeper than 64 levels"},
		{"deep body", `{"task":{` + valid + `,"variables":` + strings.Repeat("[", 65000) + `}}`, "request body nests deeper than 64 levels"},
		{"type", `{"task":{` + valid + `,"approval":{"required":"yes"}}}`, "task.approval.required: expected a boolean"},
		{"unknown", `{"task":{` + valid + `,"approval":{"max_create":1}}}`, `unknown field "max_create"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if msg := h.do("POST", "/v1/tasks", c.body).expect(t, 400).errMsg(t); !strings.Contains(msg, c.want) {
				t.Errorf("message %q, want it to contain %q", msg, c.want)
			}
		})
	}
	if n := len(h.ctrl.Tasks()); n != 0 {
		t.Fatalf("%d tasks after bad requests", n)
	}

	body := `{"task":{` + valid + `,"policy":null,"approval":{"required":true,"max_destroy":0,"max_destroy_percent":50,"expire":"24h"}}}`
	h.do("POST", "/v1/tasks", body).expect(t, 201)
	var got TaskResponse
	h.do("GET", "/v1/tasks/x", "").expect(t, 200).json(t, &got)
	a := got.Task.Approval
	if a == nil || !a.Required || a.MaxDestroy == nil || *a.MaxDestroy != 0 || a.MaxDestroyPercent == nil ||
		*a.MaxDestroyPercent != 50 || a.Expire.D() != 24*time.Hour {
		t.Errorf("approval = %+v", a)
	}
}

func TestCheckStoredTaskPolicy(t *testing.T) {
	s := servicesTask("web", "web")
	s.Policy = &task.Policy{Files: []string{"/etc/ctsync/fw.rego"}}
	if err := CheckStoredTask("web", s, config.APITasks{}, nil); err == nil || !strings.Contains(err.Error(), "cannot set policy") {
		t.Errorf("stored task with a policy: %v", err)
	}
}

// The plan of run=inspect (POST and PATCH) is served redacted, like run
// logs and held plans: a module's plan may print a secret.
func TestInspectPlanRedacted(t *testing.T) {
	h := newHarness(t, nil, func(o *Options) {
		o.Redactor = redact.NewRedactor([]string{"1 to add"})
	})
	h.w.Set(healthKey("web"), instances("web-1"))
	body := `{"task":{"name":"now","module":"m","condition":{"services":{"names":["web"]}}}}`
	var insp TaskResponse
	h.do("POST", "/v1/tasks?run=inspect", body).expect(t, 200).json(t, &insp)
	if insp.Run == nil || strings.Contains(insp.Run.Plan, "1 to add") || !strings.Contains(insp.Run.Plan, "[redacted]") {
		t.Errorf("POST inspect: %+v", insp.Run)
	}
	h.do("POST", "/v1/tasks", body).expect(t, 201)
	// A task that is queued or running cannot be updated (409, as CTS):
	// wait for the run its creation started to end.
	testutil.WaitFor(t, "the creation's run to end", func() bool { st, err := h.ctrl.Task("now"); return err == nil && !st.Active })
	h.do("PATCH", "/v1/tasks/now", `{"enabled":false}`).expect(t, 200)
	var up UpdateTaskResponse
	h.do("PATCH", "/v1/tasks/now?run=inspect", `{"enabled":true}`).expect(t, 200).json(t, &up)
	if up.Inspect == nil || strings.Contains(up.Inspect.Plan, "1 to add") {
		t.Errorf("PATCH inspect: %+v", up.Inspect)
	}
}
