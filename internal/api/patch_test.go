package api

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/task"
)

// updatingCtrl is the harness's controller with an Update that records
// the spec it is given and replaces the task with it (enough for the
// API's test; the controller's own Update keeps its run state).
type updatingCtrl struct {
	Controller
	mu    sync.Mutex
	specs []task.Spec
}

func (u *updatingCtrl) Update(ctx context.Context, s task.Spec) error {
	u.mu.Lock()
	u.specs = append(u.specs, s)
	u.mu.Unlock()
	if err := u.Controller.Delete(ctx, s.Name, false); err != nil {
		return err
	}
	return u.Controller.Create(ctx, s, false)
}

func (u *updatingCtrl) last(t *testing.T) task.Spec {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.specs) == 0 {
		t.Fatal("no update")
	}
	return u.specs[len(u.specs)-1]
}

func (u *updatingCtrl) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.specs)
}

// PATCH /v1/tasks/{name} takes any field of the task's JSON: each field
// sent replaces the task's, the others keep theirs, and the result passes
// exactly the checks of a create (schema, api_tasks allowlist, safety
// gates). A task of the configuration files changes only in enabled: any
// other field is a 409 naming it and the files.
func TestPatchTaskFields(t *testing.T) {
	upd := &updatingCtrl{}
	file := task.Spec{Name: "file", Module: "./modules/web", Enabled: true,
		Condition: task.Condition{Services: &task.ServicesCondition{ServicesSelector: task.ServicesSelector{Names: []string{"web"}}}}}
	h := newHarness(t, []task.Spec{file}, func(o *Options) {
		upd.Controller = o.Controller
		o.Controller = upd
		o.Tasks = config.APITasks{AllowedModules: []string{"./modules/*"}, AllowedVariables: []string{"size", "zone"}}
		o.FileTask = func(name string) bool { return name == "file" }
	})
	h.do("POST", "/v1/tasks", `{"task":{"name":"api","module":"./modules/web","version":"1.0.0","variables":{"size":"1"},"condition":{"services":{"names":["web"]}}}}`).expect(t, 201)

	// Variables and version change; the condition and the rest stay.
	var got UpdateTaskResponse
	h.do("PATCH", "/v1/tasks/api", `{"variables":{"size":"2","zone":"\"b\""},"version":"1.1.0"}`).expect(t, 200).json(t, &got)
	s := upd.last(t)
	if s.Name != "api" || s.Version != "1.1.0" || s.Variables["size"] != "2" || s.Variables["zone"] != `"b"` ||
		s.Condition.Services == nil || s.Condition.Services.Names[0] != "web" || !s.Enabled {
		t.Errorf("updated spec %+v", s)
	}
	if got.Task == nil || got.Task.Version != "1.1.0" {
		t.Errorf("response %+v", got)
	}
	// null resets a field; buffer period and approval as in a create.
	h.do("PATCH", "/v1/tasks/api", `{"version":null,"buffer_period":{"enabled":true,"min":"1s","max":"4s"},"approval":{"required":true}}`).expect(t, 200)
	if s := upd.last(t); s.Version != "" || s.BufferPeriod == nil || s.BufferPeriod.Min.D().Seconds() != 1 || s.Approval == nil || !s.Approval.Required {
		t.Errorf("after null and buffer period: %+v", s)
	}

	// Settings that round-trip through the task's JSON (an approval
	// expiry, a buffer period) pass a later change of another field.
	h.do("PATCH", "/v1/tasks/api", `{"approval":{"required":true,"expire":"2h"}}`).expect(t, 200)
	h.do("PATCH", "/v1/tasks/api", `{"description":"later"}`).expect(t, 200)
	if s := upd.last(t); s.Description != "later" || s.Approval == nil || s.Approval.Expire.D() != 2*time.Hour {
		t.Errorf("after a change of another field: %+v", s)
	}

	n := upd.count()
	for _, c := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"allowlist module", `{"module":"registry.example.com/other/x"}`, 403, "api_tasks.allowed_modules"},
		{"allowlist variable", `{"variables":{"password":"1"}}`, 403, `variable "password"`},
		{"schema", `{"condition":{"services":{"names":["web"],"bogus":1}}}`, 400, "bogus"},
		{"type", `{"parallelism":"many"}`, 400, "parallelism"},
		{"policy gate", `{"policy":{"files":["/etc/x.rego"]}}`, 400, "task.policy cannot be set through the API"},
		{"approval gate", `{"approval":{"max_destroy":-1}}`, 400, "approval.max_destroy"},
		{"rename", `{"name":"other"}`, 400, "task.name cannot be changed"},
		{"working_dir", `{"working_dir":"/tmp"}`, 400, "working_dir cannot be set"},
		{"inspect", `{"version":"2"}`, 400, "run=inspect"},
		{"now", `{"version":"2"}`, 400, "run=now applies a change of enabled alone"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := "/v1/tasks/api"
			if c.name == "inspect" || c.name == "now" {
				path += "?run=" + c.name
			}
			if msg := h.do("PATCH", path, c.body).expect(t, c.status).errMsg(t); !strings.Contains(msg, c.want) {
				t.Errorf("%q, want %q", msg, c.want)
			}
		})
	}
	if upd.count() != n {
		t.Errorf("a refused change reached the controller")
	}
	if !strings.Contains(h.logs.String(), "task change outside the allowlist refused") {
		t.Errorf("an allowlist refusal is not logged")
	}

	// A task of the configuration files: enabled only.
	msg := h.do("PATCH", "/v1/tasks/file", `{"enabled":false,"variables":{"size":"3"}}`).expect(t, 409).errMsg(t)
	for _, want := range []string{"configuration files", "source of truth", "variables", "reload"} {
		if !strings.Contains(msg, want) {
			t.Errorf("409 %q does not say %q", msg, want)
		}
	}
	h.do("PATCH", "/v1/tasks/file", `{"enabled":false}`).expect(t, 200)
	if st, _ := h.ctrl.Task("file"); st.Spec.Enabled {
		t.Error("enabled alone did not change a task of the files")
	}
	h.do("PATCH", "/v1/tasks/nope", `{"version":"1"}`).expect(t, 404)

	// create = false: only enabled changes.
	h.srv.SetLive(Live{Tasks: config.APITasks{CreateDisabled: true}})
	h.do("PATCH", "/v1/tasks/api", `{"version":"3"}`).expect(t, 403)
	h.do("PATCH", "/v1/tasks/api", `{"enabled":false}`).expect(t, 200)
}
