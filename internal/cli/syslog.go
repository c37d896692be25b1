package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"log/syslog"
	"os"
	"strings"
	"sync"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/logging"
)

// The syslog block: every log line also goes to the local syslog daemon,
// with the same attributes as the console line (text format), at the
// syslog severity of its level.

// syslogDial connects to syslog; tests point it at their own socket.
var syslogDial = func(p syslog.Priority, tag string) (*syslog.Writer, error) { return syslog.New(p, tag) }

// withSyslog returns h, plus syslog when the configuration enables it. An
// unreachable syslog is reported on stderr and the console log goes on.
func withSyslog(cfg *config.Config, h slog.Handler, opts *slog.HandlerOptions) slog.Handler {
	if !cfg.Syslog.Enabled {
		return h
	}
	fac, ok := config.SyslogFacilities[cfg.Syslog.Facility]
	if !ok {
		fac = config.SyslogFacilities[config.DefaultSyslogFacility]
	}
	w, err := syslogDial(syslog.Priority(fac<<3)|syslog.LOG_INFO, cfg.Syslog.Name)
	if err != nil {
		fmt.Fprintf(os.Stderr, "syslog: %v (logging to the console only)\n", err)
		return h
	}
	return teeHandler{h, newSyslogHandler(w, opts)}
}

// syslogHandler formats records in hclog's text format, as the console
// (without the time, which syslog adds), and writes each at its severity.
type syslogHandler struct {
	w    *syslog.Writer
	mu   *sync.Mutex
	buf  *strings.Builder
	text slog.Handler // formats into buf
}

func newSyslogHandler(w *syslog.Writer, opts *slog.HandlerOptions) *syslogHandler {
	b := &strings.Builder{}
	text := logging.NewHCLogHandler(b, logging.Options{Level: opts.Level, Name: logName, DisableTime: true})
	return &syslogHandler{w: w, mu: &sync.Mutex{}, buf: b, text: text}
}

func (s *syslogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return s.text.Enabled(ctx, l)
}

func (s *syslogHandler) Handle(ctx context.Context, r slog.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Reset()
	if err := s.text.Handle(ctx, r); err != nil {
		return err
	}
	line := strings.TrimSuffix(s.buf.String(), "\n")
	switch {
	case r.Level >= slog.LevelError:
		return s.w.Err(line)
	case r.Level >= slog.LevelWarn:
		return s.w.Warning(line)
	case r.Level >= slog.LevelInfo:
		return s.w.Info(line)
	default:
		return s.w.Debug(line)
	}
}

func (s *syslogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *s
	c.text = s.text.WithAttrs(as)
	return &c
}

func (s *syslogHandler) WithGroup(name string) slog.Handler {
	c := *s
	c.text = s.text.WithGroup(name)
	return &c
}

// teeHandler sends each record to both handlers.
type teeHandler [2]slog.Handler

func (t teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return t[0].Enabled(ctx, l) || t[1].Enabled(ctx, l)
}

func (t teeHandler) Handle(ctx context.Context, r slog.Record) error {
	var errs []error
	for _, h := range t {
		if h.Enabled(ctx, r.Level) {
			errs = append(errs, h.Handle(ctx, r.Clone()))
		}
	}
	return errors.Join(errs...)
}

func (t teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return teeHandler{t[0].WithAttrs(as), t[1].WithAttrs(as)}
}

func (t teeHandler) WithGroup(name string) slog.Handler {
	return teeHandler{t[0].WithGroup(name), t[1].WithGroup(name)}
}
