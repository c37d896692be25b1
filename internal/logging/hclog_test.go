package logging

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

var at = time.Date(2026, 11, 25, 21, 34, 47, 248_000_000, time.UTC)

func newTest(level slog.Level) (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	h := NewHCLogHandler(&buf, Options{Level: level, Name: "cli", TimeFn: func() time.Time { return at }})
	return slog.New(h), &buf
}

// TestHCLogFormat: the lines are hclog's, byte for byte, as Consul, Vault,
// Nomad and CTS write them (a multi-line value included: hclog writes it
// after the single-line ones, each line behind "  | ").
func TestHCLogFormat(t *testing.T) {
	log, buf := newTest(LevelTrace)
	ctrl := log.With(NameKey, "ctrl")
	ctrl.With("task_name", "lb").Info("task completed", "run_id", "r1", "added", 2)
	log.Info("graceful shutdown")
	ctrl.Warn("task waits before it can run", "task_name", "web", "reason", "vault is not reachable")
	log.With(NameKey, "ha").Error("ha: lost the lock", "error", errors.New("session invalidated"))
	log.Debug("configuration", "d", 1500*time.Millisecond)
	log.Log(t.Context(), LevelTrace, "trace line")
	log.With(NameKey, "terraform").WithGroup("tf").Info("output", "line", "a\nb", slog.Group("g", "k", "v"))
	log.Info("per record", NameKey, "api", "request_id", "x")

	want := `2026-11-25T21:34:47.248Z [INFO]  ctrl: task completed: task_name=lb run_id=r1 added=2
2026-11-25T21:34:47.248Z [INFO]  cli: graceful shutdown
2026-11-25T21:34:47.248Z [WARN]  ctrl: task waits before it can run: task_name=web reason="vault is not reachable"
2026-11-25T21:34:47.248Z [ERROR] ha: lost the lock: error="session invalidated"
2026-11-25T21:34:47.248Z [DEBUG] cli: configuration: d=1.5s
2026-11-25T21:34:47.248Z [TRACE] cli: trace line
2026-11-25T21:34:47.248Z [INFO]  terraform: output:
  tf.line=
  | a
  | b
   tf.g.k=v
2026-11-25T21:34:47.248Z [INFO]  api: per record: request_id=x
`
	if got := buf.String(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestHCLogLevel(t *testing.T) {
	log, buf := newTest(slog.LevelWarn)
	log.Info("not written")
	log.Debug("not written")
	log.Warn("written")
	if got := buf.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, "[WARN]  cli: written") {
		t.Errorf("got %q", got)
	}
	var def bytes.Buffer
	h := NewHCLogHandler(&def, Options{DisableTime: true})
	slog.New(h).Debug("not written")
	slog.New(h).Info("no name, no time")
	if got := def.String(); got != "[INFO]  no name, no time\n" {
		t.Errorf("default options: %q", got)
	}
}
