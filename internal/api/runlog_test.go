package api

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/redact"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

// writeLog writes a run log file and returns its path.
func writeLog(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "run.log")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func withRedact(secrets ...string) harnessOpt {
	return func(o *Options) {
		o.Redactor = redact.NewRedactor(secrets)
	}
}

func TestEventLog(t *testing.T) {
	h := newHarness(t, []task.Spec{servicesTask("web-task", "web")}, withRedact("hunter22", "consul-tok"))
	log := "==> terraform apply\nprovider token hunter22\nConsul token consul-tok used\nApply complete!\n"
	ev := store.Event{ID: "run-1", TaskName: "web-task", Success: false, Kind: store.KindApply,
		StartTime: time.Now(), EndTime: time.Now(), LogPath: writeLog(t, log),
		LogTail: "token hunter22 failed", Error: &store.EventError{Message: "Error: bad hunter22"}}
	_ = h.st.AddEvent(context.Background(), ev)
	_ = h.st.AddEvent(context.Background(), store.Event{ID: "no-log", TaskName: "web-task", Success: true, Kind: store.KindNoop})
	_ = h.st.AddEvent(context.Background(), store.Event{ID: "rotated", TaskName: "web-task", Success: true, Kind: store.KindApply,
		LogPath: filepath.Join(t.TempDir(), "gone.log")})

	r := h.do("GET", "/v1/tasks/web-task/events/run-1/log", "").expect(t, 200)
	body := string(r.body)
	want := "==> terraform apply\nprovider token [redacted]\nConsul token [redacted] used\nApply complete!\n"
	if body != want {
		t.Errorf("log:\n%s\nwant:\n%s", body, want)
	}
	if ct := r.header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}

	for path, msg := range map[string]string{
		"/v1/tasks/nope/events/run-1/log":       "does not exist",
		"/v1/tasks/web-task/events/other/log":   "has no event with id 'other'",
		"/v1/tasks/web-task/events/no-log/log":  "no log was kept",
		"/v1/tasks/web-task/events/rotated/log": "rotated away",
	} {
		if got := h.do("GET", path, "").expect(t, 404).errMsg(t); !strings.Contains(got, msg) {
			t.Errorf("%s: %q lacks %q", path, got, msg)
		}
	}
	h.do("POST", "/v1/tasks/web-task/events/run-1/log", "").expect(t, 405)

	// Log tails and error messages are redacted wherever events are served.
	for _, path := range []string{"/v1/tasks/web-task/events", "/v1/status/tasks?include=events", "/v1/status/tasks/web-task?include=events"} {
		b := string(h.do("GET", path, "").expect(t, 200).body)
		if strings.Contains(b, "hunter22") || !strings.Contains(b, "token [redacted] failed") || !strings.Contains(b, "Error: bad [redacted]") {
			t.Errorf("%s: not redacted: %s", path, b)
		}
	}
	// The store keeps the original.
	if evs := h.st.Events("web-task"); evs[2].LogTail != "token hunter22 failed" || evs[2].Error.Message != "Error: bad hunter22" {
		t.Errorf("redaction changed the stored event: %+v", evs[2])
	}
}

// A task's own run log and events show the values protected for it (its
// variables', redact.Redactor.Protect) as written; another task's, served
// by the same endpoints, still show them redacted.
func TestEventLogProtectedForItsTaskOnly(t *testing.T) {
	const secret = "consul-acl-token-0123456789"
	red := redact.NewRedactor([]string{secret})
	red.Protect("mine", secret)
	h := newHarness(t, []task.Spec{servicesTask("mine", "web"), servicesTask("other", "web")},
		func(o *Options) { o.Redactor = red })
	for _, name := range []string{"mine", "other"} {
		_ = h.st.AddEvent(context.Background(), store.Event{ID: "run-" + name, TaskName: name, Kind: store.KindApply,
			StartTime: time.Now(), EndTime: time.Now(), LogPath: writeLog(t, "said: "+secret+"\n"),
			LogTail: "said: " + secret, Error: &store.EventError{Message: "Error: " + secret}})
	}
	for name, want := range map[string]string{"mine": secret, "other": redact.Redacted} {
		if got := string(h.do("GET", "/v1/tasks/"+name+"/events/run-"+name+"/log", "").expect(t, 200).body); got != "said: "+want+"\n" {
			t.Errorf("%s's run log: %q", name, got)
		}
		for _, path := range []string{"/v1/tasks/" + name + "/events", "/v1/status/tasks/" + name + "?include=events"} {
			b := string(h.do("GET", path, "").expect(t, 200).body)
			if !strings.Contains(b, `"said: `+want+`"`) || !strings.Contains(b, `"Error: `+want+`"`) {
				t.Errorf("%s: want %q: %s", path, want, b)
			}
		}
	}
	b := string(h.do("GET", "/v1/status/tasks?include=events", "").expect(t, 200).body)
	if strings.Count(b, secret) != 2 || strings.Count(b, "said: "+redact.Redacted) != 1 {
		t.Errorf("every task's events: each through its own view: %s", b)
	}
}

func TestEventLogTooLong(t *testing.T) {
	h := newHarness(t, []task.Spec{servicesTask("web-task", "web")})
	line := strings.Repeat("x", 99) + "\n"
	big := "FIRST LINE\n" + strings.Repeat(line, MaxLogBytes/100+10) + "LAST LINE\n"
	_ = h.st.AddEvent(context.Background(), store.Event{ID: "big", TaskName: "web-task", Success: true, Kind: store.KindApply, LogPath: writeLog(t, big)})
	body := string(h.do("GET", "/v1/tasks/web-task/events/big/log", "").expect(t, 200).body)
	if len(body) > MaxLogBytes+100 || !strings.HasPrefix(body, "[the first ") || !strings.HasSuffix(body, "LAST LINE\n") ||
		strings.Contains(body, "FIRST LINE") {
		t.Errorf("long log served as %d bytes starting %q", len(body), body[:min(len(body), 60)])
	}
	if first := strings.SplitN(body, "\n", 3)[1]; first != strings.TrimSuffix(line, "\n") {
		t.Errorf("the served part does not start at a line: %q", first)
	}
}

// The status endpoints carry the drift state (ctsync).
func TestTaskStatusDrift(t *testing.T) {
	h := newHarness(t, []task.Spec{servicesTask("web-task", "web")})
	var st map[string]TaskStatus
	h.do("GET", "/v1/status/tasks", "").expect(t, 200).json(t, &st)
	if s := st["web-task"]; s.Drifted || s.LastDriftCheck != nil {
		t.Errorf("drift state of a task without drift detection: %+v", s)
	}
}

// drift_detection is accepted in a task created through the API and shown
// back.
func TestCreateTaskWithDriftDetection(t *testing.T) {
	h := newHarness(t, nil)
	body := `{"task":{"name":"d","module":"org/m/x","condition":{"services":{"names":["web"]}},
		"drift_detection":{"interval":"6h","remediate":true}}}`
	h.do("POST", "/v1/tasks", body).expect(t, 201)
	var got TaskResponse
	h.do("GET", "/v1/tasks/d", "").expect(t, 200).json(t, &got)
	if dd := got.Task.DriftDetection; dd == nil || dd.Interval.D() != 6*time.Hour || !dd.Remediate {
		t.Errorf("drift_detection = %+v", dd)
	}
	for _, bad := range []struct{ body, msg string }{
		{`{"task":{"name":"e","module":"m","condition":{"services":{"names":["web"]}},"drift_detection":{"interval":"10ms"}}}`, "drift_detection.interval: must be at least 1s"},
		{`{"task":{"name":"e","module":"m","condition":{"services":{"names":["web"]}},"drift_detection":{"remediate":true}}}`, "drift_detection.interval: must be at least 1s"},
		{`{"task":{"name":"e","module":"m","condition":{"services":{"names":["web"]}},"drift_detection":{"interval":"6h","every":1}}}`, `unknown field "every"`},
		{`{"task":{"name":"e","module":"m","condition":{"services":{"names":["web"]}},"drift_detection":{"interval":"soon"}}}`, `invalid duration "soon"`},
	} {
		if msg := h.do("POST", "/v1/tasks", bad.body).expect(t, 400).errMsg(t); !strings.Contains(msg, bad.msg) {
			t.Errorf("%s: %q lacks %q", bad.body, msg, bad.msg)
		}
	}
}

// refresh is accepted in a task created through the API and shown back; a
// value that is not a policy is refused, naming the field.
func TestCreateTaskWithRefresh(t *testing.T) {
	h := newHarness(t, nil)
	body := `{"task":{"name":"r","module":"org/m/x","condition":{"services":{"names":["web"]}},"refresh":"always"}}`
	h.do("POST", "/v1/tasks", body).expect(t, 201)
	var got TaskResponse
	h.do("GET", "/v1/tasks/r", "").expect(t, 200).json(t, &got)
	if got.Task.Refresh != task.RefreshAlways {
		t.Errorf("refresh = %q, want always", got.Task.Refresh)
	}
	bad := `{"task":{"name":"s","module":"m","condition":{"services":{"names":["web"]}},"refresh":"never"}}`
	if msg := h.do("POST", "/v1/tasks", bad).expect(t, 400).errMsg(t); !strings.Contains(msg, `refresh: "never" is not a refresh policy`) {
		t.Errorf("%q lacks the refresh error", msg)
	}
}
