package api

import (
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/task"
)

// A task created through the API takes removal_delay (or inherits the
// global default when its condition has removals) and approval { window,
// max_replace }, with the configuration files' rules; a mistake answers
// 400 naming the field.
func TestCreateTaskRemovalDelayAndWindow(t *testing.T) {
	h := newHarness(t, nil, func(o *Options) { o.RemovalDelay = 45 * time.Second })
	valid := `"module":"m","condition":{"services":{"names":["web"]}}`
	for _, c := range []struct {
		name, body string
		want       string
	}{
		{"delay a number", `{"task":{"name":"x",` + valid + `,"removal_delay":30}}`, "invalid value for task.removal_delay: must be a string holding a duration"},
		{"delay negative", `{"task":{"name":"x",` + valid + `,"removal_delay":"-1s"}}`, "invalid value for task.removal_delay: (-1s) cannot be negative"},
		{"delay too long", `{"task":{"name":"x",` + valid + `,"removal_delay":"25h"}}`, "task.removal_delay: (25h0m0s) must be at most 24h0m0s"},
		{"delay on kv", `{"task":{"name":"x","module":"m","removal_delay":"5s","condition":{"consul_kv":{"path":"k"}}}}`,
			"invalid task: removal_delay: applies only to tasks with a services, catalog-services or nodes condition"},
		{"window a number", `{"task":{"name":"x",` + valid + `,"approval":{"window":3600}}}`, "invalid value for task.approval.window: must be a string holding a duration"},
		{"window 5ms", `{"task":{"name":"x",` + valid + `,"approval":{"window":"5ms"}}}`, "task.approval.window: (5ms) must be at least 1s"},
		{"window too long", `{"task":{"name":"x",` + valid + `,"approval":{"window":"169h"}}}`, "task.approval.window: (169h0m0s) must be at most 168h0m0s"},
		{"max_replace", `{"task":{"name":"x",` + valid + `,"approval":{"max_replace":-1}}}`, "invalid task: approval.max_replace: (-1) cannot be negative"},
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

	get := func(name string) task.Spec {
		var got TaskResponse
		h.do("GET", "/v1/tasks/"+name, "").expect(t, 200).json(t, &got)
		return got.Task
	}
	h.do("POST", "/v1/tasks", `{"task":{"name":"own",`+valid+`,"removal_delay":"30s","approval":{"window":"2h","max_replace":3}}}`).expect(t, 201)
	s := get("own")
	if s.Removal() != 30*time.Second {
		t.Errorf("own removal_delay %s", s.RemovalDelay)
	}
	if a := s.Approval; a == nil || a.Window == nil || a.Window.D() != 2*time.Hour || a.MaxReplace == nil || *a.MaxReplace != 3 {
		t.Errorf("approval %+v", a)
	}
	h.do("POST", "/v1/tasks", `{"task":{"name":"inherits",`+valid+`,"approval":{"window":"0s"}}}`).expect(t, 201)
	s = get("inherits")
	if s.Removal() != 45*time.Second {
		t.Errorf("inherited removal_delay %s, want the global 45s", s.RemovalDelay)
	}
	if a := s.Approval; a == nil || a.Window == nil || a.EffectiveWindow() != 0 {
		t.Errorf("window 0s: %+v", a)
	}
	h.do("POST", "/v1/tasks", `{"task":{"name":"off",`+valid+`,"removal_delay":"0s"}}`).expect(t, 201)
	if d := get("off").RemovalDelay; d == nil || *d != 0 {
		t.Errorf("removal_delay 0s over the global default: %v", d)
	}
	h.do("POST", "/v1/tasks", `{"task":{"name":"kv","module":"m","condition":{"consul_kv":{"path":"k"}}}}`).expect(t, 201)
	if d := get("kv").RemovalDelay; d != nil {
		t.Errorf("a consul-kv task inherits removal_delay %s", d)
	}
	// Without a global default, a task without removal_delay has none in
	// its JSON (a CTS client sees the task it sent).
	h2 := newHarness(t, nil)
	h2.do("POST", "/v1/tasks", `{"task":{"name":"plain",`+valid+`}}`).expect(t, 201)
	if body := string(h2.do("GET", "/v1/tasks/plain", "").expect(t, 200).body); strings.Contains(body, "removal_delay") {
		t.Errorf("a task without removal_delay shows one: %s", body)
	}
}
