package terraform

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/redact"
)

const (
	logsDir     = "logs"
	initLogName = "init.log"
)

// sink receives the output of the Terraform commands of one driver and
// routes it to the current run's log file, the per-command buffers (for
// parsing and error classification) and, optionally, the slog logger.
// tfexec writes stdout and stderr from two goroutines, hence the mutex.
// What reaches the log file goes through a redact.Writer first: the file
// never holds a secret in clear, even one a provisioner echoes.
type sink struct {
	mu      sync.Mutex
	red     *redact.Redactor
	file    *os.File
	out     *redact.Writer // file, redacted
	mute    bool           // the command's stdout is machine output: keep it out of the logs
	stdout  bytes.Buffer
	stderr  bytes.Buffer
	logger  *slog.Logger // nil: do not forward
	task    string
	partial map[string][]byte // per stream, a line not yet ended
	// planned is when the current command printed its plan's summary
	// ("Plan: ..." or "No changes."): where an apply's plan ends.
	planned time.Time
	// started, when set, is called at the first output of each command
	// (begin), while the command runs.
	started func()
	quiet   bool // the current command has written nothing yet
	// ui says the current command's stdout is Terraform's machine-readable
	// UI (-json): each line is decoded (uiLine), what it says is kept in
	// diags and changes, and its message goes on as text.
	ui      bool
	uiBuf   []byte // a line of the machine-readable UI not yet ended
	diags   driver.Diagnostics
	changes map[string]changeSummary // by operation: plan, apply, destroy
}

var (
	planLine     = []byte("Plan: ")
	noChangeLine = []byte("No changes.")
)

func (s *sink) writer(stream string) io.Writer { return streamWriter{s: s, stream: stream} }

type streamWriter struct {
	s      *sink
	stream string
}

func (w streamWriter) Write(p []byte) (int, error) {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.quiet {
		s.quiet = false
		if s.started != nil {
			s.started()
		}
	}
	if w.stream == "stdout" && s.ui {
		s.uiBuf = append(s.uiBuf, p...)
		for {
			i := bytes.IndexByte(s.uiBuf, '\n')
			if i < 0 {
				break
			}
			s.text(w.stream, s.uiLine(s.uiBuf[:i]))
			s.uiBuf = s.uiBuf[i+1:]
		}
		if len(s.uiBuf) == 0 {
			s.uiBuf = nil
		}
		return len(p), nil
	}
	s.text(w.stream, p)
	return len(p), nil
}

// text takes a command's output as text: into the command's buffers, the
// run log and the logger.
func (s *sink) text(stream string, p []byte) {
	if stream == "stderr" {
		s.stderr.Write(p)
	} else {
		s.stdout.Write(p)
		if s.planned.IsZero() && (bytes.Contains(p, planLine) || bytes.Contains(p, noChangeLine)) {
			s.planned = time.Now()
		}
		if s.mute {
			return // machine-readable output: neither logged nor forwarded
		}
	}
	if s.out != nil {
		// A failing log write must not fail the Terraform command.
		_, _ = s.out.Write(p)
	}
	if s.logger != nil {
		s.forward(stream, p)
	}
}

// forward logs complete lines; a partial line waits for its end.
func (s *sink) forward(stream string, p []byte) {
	buf := append(s.partial[stream], p...)
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		s.logLine(stream, buf[:i])
		buf = buf[i+1:]
	}
	if s.partial == nil {
		s.partial = map[string][]byte{}
	}
	s.partial[stream] = append([]byte(nil), buf...)
}

func (s *sink) logLine(stream string, line []byte) {
	l := strings.TrimRight(string(line), "\r")
	if strings.TrimSpace(l) == "" {
		return
	}
	s.logger.LogAttrs(context.Background(), slog.LevelInfo, l,
		slog.String("task_name", s.task), slog.String("stream", stream))
}

// begin starts a command: clears the per-command buffers and writes a marker
// line into the log file.
func (s *sink) begin(cmd string, mute bool) { s.start(cmd, mute, false) }

// beginUI starts a command whose stdout is Terraform's machine-readable UI
// (-json).
func (s *sink) beginUI(cmd string) { s.start(cmd, false, true) }

func (s *sink) start(cmd string, mute, ui bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushPartial()
	s.flushUI()
	s.stdout.Reset()
	s.stderr.Reset()
	s.planned = time.Time{}
	s.mute = mute
	s.quiet = true
	s.ui = ui
	s.diags = nil
	s.changes = nil
	if s.out != nil {
		fmt.Fprintf(s.out, "==> %s terraform %s\n", time.Now().UTC().Format(time.RFC3339), cmd)
	}
}

func (s *sink) flushPartial() {
	if s.logger == nil {
		return
	}
	for stream, p := range s.partial {
		if len(p) > 0 {
			s.logLine(stream, p)
		}
		delete(s.partial, stream)
	}
}

// output returns the current command's stdout (as text, the machine-readable
// UI's messages) and stderr.
func (s *sink) output() (stdout, stderr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushUI()
	return s.stdout.String(), s.stderr.String()
}

// report returns what the current command's machine-readable UI said: its
// diagnostics and its change summaries (ok is false for a command without
// that UI).
func (s *sink) report() (diags driver.Diagnostics, changes map[string]changeSummary, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushUI()
	return s.diags, s.changes, s.ui
}

// flushUI takes a last UI line that did not end with a newline.
func (s *sink) flushUI() {
	if len(s.uiBuf) > 0 {
		line := s.uiBuf
		s.uiBuf = nil
		s.text("stdout", s.uiLine(line))
	}
}

// plannedAt returns when the current command printed its plan's summary
// (zero: not seen).
func (s *sink) plannedAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.planned
}

// note writes a line of our own into the log file.
func (s *sink) note(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out != nil {
		fmt.Fprintf(s.out, "==> %s "+format+"\n", append([]any{time.Now().UTC().Format(time.RFC3339)}, args...)...)
	}
}

// attach points the sink at a new log file (nil: no file).
func (s *sink) attach(f *os.File) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.file = f
	s.out = nil
	if f != nil {
		s.out = redact.NewWriter(f, s.red)
	}
	s.mute = true
	s.stdout.Reset()
	s.stderr.Reset()
}

// detach flushes and closes the current log file.
func (s *sink) detach() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushUI()
	s.flushPartial()
	f, out := s.file, s.out
	s.file, s.out = nil, nil
	s.mute = true // output outside a command (version probes) is not logged
	if f == nil {
		return nil
	}
	return errors.Join(out.Flush(), f.Close())
}

// validRunID reports whether id can name a log file.
func validRunID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("run id is empty")
	case id == "." || id == "..":
		return fmt.Errorf("run id %q is not a valid file name", id)
	case strings.ContainsAny(id, `/\`+"\x00"):
		return fmt.Errorf("run id %q must not contain path separators", id)
	case strings.TrimSuffix(id, ".log") == strings.TrimSuffix(initLogName, ".log"):
		return fmt.Errorf("run id %q is reserved", id)
	}
	return nil
}

// openLog opens (appending) a log file in the task's logs folder, mode 0600.
func openLog(workDir, name string) (*os.File, string, error) {
	dir := filepath.Join(workDir, logsDir)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, "", err
	}
	p := filepath.Join(dir, name)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, "", err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, "", err
	}
	return f, p, nil
}

// rotateLogs keeps the newest keep run logs, always including current (the
// log of the run in progress). init.log is not a run log.
func rotateLogs(workDir, current string, keep int) error {
	dir := filepath.Join(workDir, logsDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	type logFile struct {
		name string
		mod  time.Time
	}
	var logs []logFile
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".log") || e.Name() == initLogName || e.Name() == current {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		logs = append(logs, logFile{e.Name(), info.ModTime()})
	}
	keep-- // the current run's log
	if keep < 0 {
		keep = 0
	}
	if len(logs) <= keep {
		return nil
	}
	sort.Slice(logs, func(i, j int) bool {
		if !logs[i].mod.Equal(logs[j].mod) {
			return logs[i].mod.After(logs[j].mod)
		}
		return logs[i].name > logs[j].name
	})
	var firstErr error
	for _, l := range logs[keep:] {
		if err := os.Remove(filepath.Join(dir, l.name)); err != nil && !os.IsNotExist(err) && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}
