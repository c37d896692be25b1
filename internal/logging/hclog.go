// Package logging writes ctsync's log records in the HashiCorp text format
// (hclog's, the format of Consul, Vault, Nomad and Consul-Terraform-Sync):
//
//	2026-11-25T21:34:47.248Z [INFO]  ctrl: task completed: task_name=lb run_id=...
//
// The daemon logs through log/slog; NewHCLogHandler is the slog.Handler
// that hands each record to hclog itself, so the layout (level padding,
// "name: message: key=value", quoting of values with spaces, multi-line
// values) is hclog's own. A logger's "component" attribute is its hclog
// name.
package logging

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// LevelTrace is hclog's TRACE level, below slog's Debug.
const LevelTrace = slog.Level(-8)

// NameKey is the attribute that names a logger ("component": ctrl,
// watch, terraform, api, ...): with the text format it is the hclog name
// in front of the message instead of a key=value pair.
const NameKey = "component"

// Options configure NewHCLogHandler.
type Options struct {
	// Level is the lowest level written (default Info).
	Level slog.Leveler
	// Name is the name of records without a component (CTS: "cli").
	Name string
	// DisableTime leaves the time out (syslog adds its own).
	DisableTime bool
	// TimeFn returns the time of a line (default time.Now); tests fix it.
	TimeFn func() time.Time
}

// Handler is the hclog-format slog.Handler.
type Handler struct {
	root   hclog.Logger // unnamed, no implied arguments
	log    hclog.Logger // named and with the implied arguments
	name   string
	level  slog.Leveler
	prefix string // the open groups, "a.b."
}

// NewHCLogHandler returns a handler writing hclog's text format to w.
func NewHCLogHandler(w io.Writer, o Options) *Handler {
	level := o.Level
	if level == nil {
		level = slog.LevelInfo
	}
	root := hclog.New(&hclog.LoggerOptions{
		Output:      w,
		Level:       hclog.Trace, // Enabled filters
		DisableTime: o.DisableTime,
		TimeFn:      o.TimeFn,
		Color:       hclog.ColorOff,
	})
	h := &Handler{root: root, log: root, level: level}
	if o.Name != "" {
		h.name = o.Name
		h.log = root.Named(o.Name)
	}
	return h
}

// Enabled implements slog.Handler.
func (h *Handler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level()
}

// Handle implements slog.Handler.
func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	args := make([]any, 0, 2*r.NumAttrs())
	log := h.log
	r.Attrs(func(a slog.Attr) bool {
		if h.prefix == "" && a.Key == NameKey {
			log = log.ResetNamed(a.Value.String())
			return true
		}
		args = appendAttr(args, h.prefix, a)
		return true
	})
	msg := r.Message
	// A message that already starts with the logger's name ("ha: ...")
	// is not given it twice.
	if n := log.Name(); n != "" {
		msg = strings.TrimPrefix(msg, n+": ")
	}
	log.Log(hclogLevel(r.Level), msg, args...)
	return nil
}

// WithAttrs implements slog.Handler: the component names the logger, the
// other attributes are hclog's implied arguments.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	var args []any
	for _, a := range attrs {
		if h.prefix == "" && a.Key == NameKey {
			c.name = a.Value.String()
			c.log = c.log.ResetNamed(c.name)
			continue
		}
		args = appendAttr(args, h.prefix, a)
	}
	if len(args) > 0 {
		c.log = c.log.With(args...)
	}
	return &c
}

// WithGroup implements slog.Handler: the group prefixes the keys that
// follow ("group.key").
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.prefix = h.prefix + name + "."
	return &c
}

// appendAttr adds a (resolved; a group flattened to "group.key") to args.
func appendAttr(args []any, prefix string, a slog.Attr) []any {
	v := a.Value.Resolve()
	if a.Key == "" && v.Kind() != slog.KindGroup {
		return args
	}
	switch v.Kind() {
	case slog.KindGroup:
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range v.Group() {
			args = appendAttr(args, p, g)
		}
		return args
	case slog.KindTime:
		return append(args, prefix+a.Key, v.Time().Format(time.RFC3339Nano))
	case slog.KindDuration:
		return append(args, prefix+a.Key, v.Duration().String())
	}
	return append(args, prefix+a.Key, v.Any())
}

// hclogLevel maps a slog level to hclog's.
func hclogLevel(l slog.Level) hclog.Level {
	switch {
	case l < slog.LevelDebug:
		return hclog.Trace
	case l < slog.LevelInfo:
		return hclog.Debug
	case l < slog.LevelWarn:
		return hclog.Info
	case l < slog.LevelError:
		return hclog.Warn
	}
	return hclog.Error
}
