package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// Every check of configuration loading answers before the 201, with a 400
// that names the field; sizes have documented limits.
func TestSubmissionChecks(t *testing.T) {
	h := newHarness(t, nil, func(o *Options) {
		o.Validate = func(s task.Spec) error { // what the daemon adds (cli): the local module folder
			if s.Module == "./missing" {
				return &task.FieldError{Field: "module", Msg: `local module "./missing" does not exist`}
			}
			return nil
		}
	})
	body := func(name, rest string) string {
		return `{"task":{"name":"` + name + `","module":"./m","condition":{"services":{"names":["web"]}}` + rest + `}}`
	}
	long := strings.Repeat("a", 300)
	for _, c := range []struct {
		what, body string
		status     int
		want       string
	}{
		{"300-character name", body(long, ""), 400, "invalid task: name: is 300 characters long: a task name has at most 128"},
		{"129-character name", body(strings.Repeat("b", 129), ""), 400, "name: is 129 characters long"},
		{"function call", body("f", `,"variables":{"x":"upper(\"a\")"}`), 400, "variables.x: must be a literal value"},
		{"variable reference", body("r", `,"variables":{"x":"var.y"}`), 400, "variables.x: must be a literal value"},
		{"bad variable name", body("n", `,"variables":{"a b":"1"}`), 400, `variables.a b: "a b" is not a valid name`},
		{"reserved variable name", body("n", `,"variables":{"count":"1"}`), 400, `"count" is reserved`},
		{"bad provider name", body("p", `,"providers":["a b"]`), 400, `providers[0]: provider "a b" is not a valid name`},
		{"bad provider alias", body("p", `,"providers":["aws.x y"]`), 400, `providers[0]: provider alias "x y"`},
		{"missing module", `{"task":{"name":"m","module":"./missing","condition":{"services":{"names":["web"]}}}}`, 400, `module: local module "./missing" does not exist`},
		{"long description", body("d", `,"description":"`+strings.Repeat("d", MaxDescriptionBytes+1)+`"`), 400, "task.description is 4097 bytes long: at most 4096"},
		{"long variable", body("v", `,"variables":{"x":"\"`+strings.Repeat("v", MaxVariableBytes)+`\""}`), 400, "task.variables.x is 65538 bytes long: at most 65536"},
		{"long filter", body("f", `,"module_input":{"consul_kv":{"path":"`+strings.Repeat("k", MaxStringBytes+1)+`"}}`), 400, "task.module_input.consul_kv.path is 4097 bytes long"},
		{"long key", body("k", `,"variables":{"`+strings.Repeat("k", MaxKeyBytes+1)+`":"1"}`), 400, "task.variables has a key of 1025 bytes"},
		{"body over 1 MiB", body("b", `,"description":"`+strings.Repeat("d", MaxBodyBytes)+`"`), 413, "request body is larger than 1048576 bytes"},
	} {
		for _, run := range []string{"", "?run=now", "?run=inspect"} {
			r := h.do("POST", "/v1/tasks"+run, c.body).expect(t, c.status)
			if msg := r.errMsg(t); !strings.Contains(msg, c.want) {
				t.Errorf("%s%s: message %q, want %q", c.what, run, msg, c.want)
			}
		}
	}
	if n := len(h.ctrl.Tasks()); n != 0 {
		t.Fatalf("%d tasks created", n)
	}
	// Within the limits: created.
	h.do("POST", "/v1/tasks", body(strings.Repeat("c", task.MaxNameLength),
		`,"description":"`+strings.Repeat("d", MaxDescriptionBytes)+`","variables":{"x":"[1, \"a\", {b = true}]"}`)).expect(t, 201)
}

// While a deleted task's last run ends, its name answers 409 "being
// deleted" to a create; once it is gone the same request creates it.
func TestCreateWhileDeleting(t *testing.T) {
	h := newHarness(t, []task.Spec{servicesTask("a", "web")})
	release := h.gate("a")
	h.w.Set(healthKey("web"), instances("web-1"))
	h.waitChan(h.started, "a")
	h.do("DELETE", "/v1/tasks/a", "").expect(t, 202)
	h.do("GET", "/v1/tasks/a", "").expect(t, 404)
	for _, run := range []string{"", "?run=now"} {
		msg := h.do("POST", "/v1/tasks"+run, taskBody("a", "./m")).expect(t, 409).errMsg(t)
		if msg != "task 'a' is being deleted: create it again once it is gone" {
			t.Errorf("409 %q", msg)
		}
	}
	// The controller says the same when the name is taken between the
	// API's look-up and the create.
	if err := h.ctrl.Create(t.Context(), servicesTask("a", "web"), false); !errors.Is(err, errDeleting) {
		t.Errorf("controller create: %v", err)
	}
	release()
	h.waitChan(h.applied, "a")
	testutil.WaitFor(t, "a gone", func() bool { _, err := h.ctrl.Task("a"); return err != nil })
	h.do("POST", "/v1/tasks", taskBody("a", "./m")).expect(t, 201)
	h.do("POST", "/v1/tasks", taskBody("a", "./m")).expect(t, 400)
}

// recordTooLarge is a controller whose creates fail as a cluster's do when
// the task's record is larger than Consul takes.
type recordTooLarge struct{ *reconcile.Controller }

func (recordTooLarge) Create(context.Context, task.Spec, bool) error {
	return fmt.Errorf("saving task in consul: %w", store.ErrRecordTooLarge)
}

func TestRecordTooLargeIs413(t *testing.T) {
	h := newHarness(t, nil, func(o *Options) { o.Controller = recordTooLarge{o.Controller.(*reconcile.Controller)} })
	for _, run := range []string{"", "?run=now"} {
		msg := h.do("POST", "/v1/tasks"+run, taskBody("a", "./m")).expect(t, 413).errMsg(t)
		if !strings.Contains(msg, "too large to be saved in consul") {
			t.Errorf("413%s: %q", run, msg)
		}
	}
}
