package api

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strconv"

	"github.com/ctsync/ctsync/internal/store"
)

// MaxLogBytes bounds how much of a run log GET .../log serves: the end of
// a longer log is served, after a line saying what was cut.
const MaxLogBytes = 8 << 20

// getEventLog serves GET /v1/tasks/{name}/events/{id}/log (ctsync): the
// whole Terraform output of one run, as text, with secrets redacted. The
// log lives on the instance that ran the task and the driver keeps a
// bounded number per task, so an old run's log may be gone (404).
func (s *Server) getEventLog(w http.ResponseWriter, r *http.Request) {
	name, id := r.PathValue("name"), r.PathValue("id")
	if _, err := s.lookup(name); err != nil {
		s.fail(w, r, err)
		return
	}
	var ev *store.Event
	for _, e := range s.opts.Controller.Events(name) {
		if e.ID == id {
			ev = &e
			break
		}
	}
	switch {
	case ev == nil:
		s.fail(w, r, &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("task '%s' has no event with id '%s'", name, id)})
		return
	case ev.LogPath == "":
		s.fail(w, r, &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("no log was kept for event '%s' of task '%s'", id, name)})
		return
	case !logAllowed(ev.LogPath, s.logDirs()):
		s.log.Warn("api: an event's log path is outside the working directories; not served (was the event record in consul changed?)",
			"task_name", name, "event", id, "request_id", requestID(r))
		s.fail(w, r, &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("no log was kept for event '%s' of task '%s'", id, name)})
		return
	}
	text, err := readLog(ev.LogPath, MaxLogBytes)
	if errors.Is(err, fs.ErrNotExist) {
		s.fail(w, r, &httpError{status: http.StatusNotFound, msg: fmt.Sprintf(
			"the log of event '%s' of task '%s' is gone: older run logs are rotated away, and a log is kept only on the instance that ran it", id, name)})
		return
	}
	if err != nil {
		s.fail(w, r, fmt.Errorf("reading the log of event '%s': %w", id, err))
		return
	}
	text = s.redact(name, text)
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(text)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = io.WriteString(w, text)
	}
}

// readLog returns the file's content, or its last limit bytes (from a line
// start) after a note when it is longer.
func readLog(path string, limit int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	off := max(st.Size()-limit, 0)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	if off == 0 {
		return string(b), nil
	}
	for i, c := range b {
		if c == '\n' {
			b = b[i+1:]
			break
		}
	}
	return fmt.Sprintf("[the first %d bytes of this log are not shown]\n", st.Size()-int64(len(b))) + string(b), nil
}

// redact hides the configuration's secrets (Options.Redactor) in text of
// the task named task, through the task's view: the values of its own
// variables are shown as written (redact.Redactor.ForTask). With task ""
// (text of no task) every secret is hidden.
func (s *Server) redact(task, text string) string {
	return s.opts.Redactor.ForTask(task).Redact(text)
}

// redactEvents returns the events with secrets hidden in their log tail
// and error message; the events given are not changed.
func (s *Server) redactEvents(evs []store.Event) []store.Event {
	if s.opts.Redactor == nil || len(evs) == 0 {
		return evs
	}
	out := make([]store.Event, len(evs))
	for i, ev := range evs {
		out[i] = ev.Redacted(s.opts.Redactor.ForTask(ev.TaskName).Redact)
	}
	return out
}
