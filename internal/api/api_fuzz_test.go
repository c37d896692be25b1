package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

// fuzzController accepts every call. It knows one task, "web". A spec the
// API hands to Create or Inspect must be valid: the API is the gate.
// (Embedding the interface keeps it compiling when methods are added; an
// unexpected call panics, which the fuzz target reports as a 500.)
type fuzzController struct {
	Controller
	mu      sync.Mutex
	invalid []string
}

func (c *fuzzController) Tasks() []reconcile.TaskState { return []reconcile.TaskState{c.web()} }

func (c *fuzzController) web() reconcile.TaskState {
	return reconcile.TaskState{Spec: task.Spec{Name: "web", Module: "./m", Enabled: true,
		Condition: task.Condition{Services: &task.ServicesCondition{ServicesSelector: task.ServicesSelector{Names: []string{"web"}}}}}}
}

func (c *fuzzController) Task(name string) (reconcile.TaskState, error) {
	if name == "web" {
		return c.web(), nil
	}
	return reconcile.TaskState{}, reconcile.ErrNotFound
}

func (c *fuzzController) check(spec task.Spec) {
	if err := spec.Validate(); err != nil {
		c.mu.Lock()
		c.invalid = append(c.invalid, fmt.Sprintf("%+v: %v", spec, err))
		c.mu.Unlock()
	}
}

func (c *fuzzController) Create(_ context.Context, spec task.Spec, _ bool) error {
	c.check(spec)
	return nil
}

func (c *fuzzController) Inspect(_ context.Context, spec task.Spec) (reconcile.PlanResult, error) {
	c.check(spec)
	return reconcile.PlanResult{Plan: "No changes."}, nil
}

func (c *fuzzController) SetEnabled(context.Context, string, bool, reconcile.EnableMode) (reconcile.PlanResult, error) {
	return reconcile.PlanResult{}, nil
}
func (c *fuzzController) RunNow(context.Context, string) error       { return nil }
func (c *fuzzController) Delete(context.Context, string, bool) error { return nil }
func (c *fuzzController) Events(string) []store.Event                { return nil }
func (c *fuzzController) takeInvalid() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.invalid
	c.invalid = nil
	return v
}

// panicLog records "api handler panicked" lines so a recovered panic is
// reported with its value.
type panicLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *panicLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *panicLog) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.buf.String()
	l.buf.Reset()
	return s
}

func newFuzzServer(f *testing.F) (*Server, *fuzzController, *panicLog) {
	ctl := &fuzzController{}
	logs := &panicLog{}
	s, err := New(Options{Addr: "127.0.0.1:0", Controller: ctl,
		Logger:       slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelError})),
		BufferPeriod: task.DefaultBufferPeriod})
	if err != nil {
		f.Fatal(err)
	}
	return s, ctl, logs
}

// checkResponse asserts the API's contract for any request: no 500, a JSON
// body, and a non-empty error message on every error status.
func checkResponse(t *testing.T, rec *httptest.ResponseRecorder, logs *panicLog, ctl *fuzzController, req string) {
	t.Helper()
	if p := logs.take(); p != "" {
		t.Fatalf("%s: the handler logged an error (panic?):\n%s", req, p)
	}
	if bad := ctl.takeInvalid(); len(bad) > 0 {
		t.Fatalf("%s: the API handed an invalid task to the controller: %s", req, bad)
	}
	if rec.Code >= 500 {
		t.Fatalf("%s: status %d: %s", req, rec.Code, rec.Body)
	}
	if (rec.Code == http.StatusMovedPermanently || rec.Code == http.StatusTemporaryRedirect) && rec.Header().Get("Location") != "" {
		// net/http's mux redirects a path with "." or ".." segments, or
		// "//", to its clean form (307 keeps the method): not an API
		// answer, and fine.
		return
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: Content-Type %q", req, ct)
	}
	var body struct {
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("%s: status %d, body is not JSON (%v): %q", req, rec.Code, err, rec.Body)
	}
	if rec.Code >= 400 && (body.Error == nil || strings.TrimSpace(body.Error.Message) == "") {
		t.Fatalf("%s: status %d without an error message: %s", req, rec.Code, rec.Body)
	}
}

var fuzzRunModes = []string{"", "now", "inspect", "bogus"}

// FuzzCreateTask posts arbitrary bodies to POST /v1/tasks (with each run
// mode): never a 500 or a panic, always a JSON answer, a clear error for
// what is refused, and only valid tasks reach the controller.
func FuzzCreateTask(f *testing.F) {
	for _, s := range []string{
		`{"task": {"name": "a", "module": "./m", "condition": {"services": {"names": ["web"]}}}}`,
		`{"task": {"name": "b", "module": "org/mod/aws", "version": "1.0.0", "providers": ["aws.east"], "variables": {"x": "\"y\"", "n": "5"},` +
			`"buffer_period": {"enabled": true, "min": "5s", "max": "20s"}, "condition": {"consul_kv": {"path": "k", "recurse": true, "use_as_module_input": false}},` +
			`"module_input": {"services": {"regexp": "^web", "cts_user_defined_meta": {"a": "b"}}}}}`,
		`{"task": {"name": "c", "module": "m", "condition": {"schedule": {"cron": "*/5 * * * * * *"}}}}`,
		`{"task": {"name": "d", "module": "m", "condition": {"catalog_services": {"regexp": "(", "node_meta": {"k": "v"}}}}}`,
		`{"task": {"name": "e", "module": "m", "condition": {"schedule": {"cron": "0 0 30 2 *"}}}}`,
		`{"task": {"name": "f", "module": "m", "buffer_period": {"min": "1e400s", "max": -1}, "condition": {"services": {"names": []}}}}`,
		`{"task": {"name": "web", "module": "m", "condition": {"services": {"names": ["web"]}}}}`,
		`{"task": {"name": "${x}", "module": "%{y}", "description": "\u0000\ud800", "condition": {}}}`,
		`{"task": null}`, `{"task": []}`, `{}`, `[]`, `null`, ``, `{"task": {}} trailing`, `{"task": {"working_dir": "/etc"}}`,
		`{"task": {"name": "g", "module": "m", "enabled": "yes", "condition": {"services": {"names": ["a"], "use_as_module_input": 1}}}}`,
		`{"task": {"name": "h", "module": "m", "parallelism": 99999999999999999999, "drift_detection": {"interval": "1ns"}, "condition": {"services": {"names": ["a"]}}}}`,
		`{"task": {"name": "i", "module": "m", "condition": {"services": {"names": ["a"]}, "consul_kv": {"path": "k"}}}}`,
		`{"task": {"name": "j", "module": "m", "condition": {"services": {"names": ["a"], "regexp": "a"}}}}`,
	} {
		for i := range fuzzRunModes {
			f.Add([]byte(s), uint8(i))
		}
	}
	s, ctl, logs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte, mode uint8) {
		run := fuzzRunModes[int(mode)%len(fuzzRunModes)]
		target := "/v1/tasks"
		if run != "" {
			target += "?run=" + run
		}
		req := httptest.NewRequest(http.MethodPost, target, bytes.NewReader(body))
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		checkResponse(t, rec, logs, ctl, fmt.Sprintf("POST %s %q", target, body))
	})
}

// FuzzUpdateTask sends arbitrary task names, bodies and query strings to
// PATCH /v1/tasks/{name}, with the same contract as FuzzCreateTask.
func FuzzUpdateTask(f *testing.F) {
	for _, s := range [][3]string{
		{"web", `{"enabled": false}`, ""},
		{"web", `{"enabled": true}`, "run=now"},
		{"web", `{"enabled": true}`, "run=inspect"},
		{"web", `{"enabled": true}`, "run=now&run=now"},
		{"web", `{"enabled": null}`, ""},
		{"web", `{"enabled": "true"}`, ""},
		{"web", `{"enabled": true, "name": "x"}`, ""},
		{"nope", `{"enabled": true}`, ""},
		{"web", `{"enabled": true}{}`, "%zz"},
		{"we/b", ``, "run="},
		{"${x}", "\x00", ";"},
	} {
		f.Add(s[0], []byte(s[1]), s[2])
	}
	s, ctl, logs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, name string, body []byte, query string) {
		target := "/v1/tasks/" + url.PathEscape(name)
		if query != "" {
			target += "?" + query
		}
		u, err := url.ParseRequestURI(target)
		if err != nil || strings.ContainsAny(target, " \t\r\n#") {
			return // not a request line a client can send
		}
		req := httptest.NewRequest(http.MethodPatch, u.String(), bytes.NewReader(body))
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		checkResponse(t, rec, logs, ctl, fmt.Sprintf("PATCH %s %q", target, body))
	})
}
