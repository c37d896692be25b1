package redact

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
)

// RedactingHandler is a slog.Handler that replaces the configuration's
// secrets in every record (message, attribute values, groups, errors)
// before passing it on. The redactor can be set after the logger is built
// (SetRedactor), since the secrets are known only once the configuration,
// and the provider values read from Consul, are resolved; loggers derived
// with With or WithGroup share it.
type RedactingHandler struct {
	inner slog.Handler
	r     *atomic.Pointer[Redactor]
}

// NewRedactingHandler wraps h; it redacts nothing until SetRedactor.
func NewRedactingHandler(h slog.Handler) *RedactingHandler {
	return &RedactingHandler{inner: h, r: &atomic.Pointer[Redactor]{}}
}

// SetRedactor sets (or replaces) the redactor of h and of every handler
// derived from it.
func (h *RedactingHandler) SetRedactor(r *Redactor) { h.r.Store(r) }

// SetLoggerRedactor sets the redactor of the logger's handler when it is a
// RedactingHandler (or derived from one) and reports whether it was.
func SetLoggerRedactor(l *slog.Logger, r *Redactor) bool {
	if h, ok := l.Handler().(*RedactingHandler); ok {
		h.SetRedactor(r)
		return true
	}
	return false
}

// Enabled implements slog.Handler.
func (h *RedactingHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

// Handle implements slog.Handler.
func (h *RedactingHandler) Handle(ctx context.Context, rec slog.Record) error {
	red := h.r.Load()
	if red.replacer() == nil {
		return h.inner.Handle(ctx, rec)
	}
	out := slog.NewRecord(rec.Time, rec.Level, red.Redact(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(redactAttr(red, a))
		return true
	})
	return h.inner.Handle(ctx, out)
}

// WithAttrs implements slog.Handler. The attributes are redacted with the
// redactor set at this time (they are usually static labels).
func (h *RedactingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if red := h.r.Load(); red.replacer() != nil {
		as := make([]slog.Attr, len(attrs))
		for i, a := range attrs {
			as[i] = redactAttr(red, a)
		}
		attrs = as
	}
	return &RedactingHandler{inner: h.inner.WithAttrs(attrs), r: h.r}
}

// WithGroup implements slog.Handler.
func (h *RedactingHandler) WithGroup(name string) slog.Handler {
	return &RedactingHandler{inner: h.inner.WithGroup(name), r: h.r}
}

func redactAttr(red *Redactor, a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, red.Redact(v.String()))
	case slog.KindGroup:
		g := v.Group()
		as := make([]any, len(g))
		for i, ga := range g {
			as[i] = redactAttr(red, ga)
		}
		return slog.Group(a.Key, as...)
	case slog.KindAny:
		var s string
		if err, ok := v.Any().(error); ok {
			s = err.Error()
		} else {
			s = fmt.Sprint(v.Any())
		}
		if r := red.Redact(s); r != s {
			return slog.String(a.Key, r)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
