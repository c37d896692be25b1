package redact

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/logging"
)

func TestRedactingHandler(t *testing.T) {
	const secret = "tok-0123456789-secret"
	for _, format := range []string{"text", "json", "hclog"} {
		var buf bytes.Buffer
		var inner slog.Handler = slog.NewTextHandler(&buf, nil)
		switch format {
		case "json":
			inner = slog.NewJSONHandler(&buf, nil)
		case "hclog": // the daemon's text format
			inner = logging.NewHCLogHandler(&buf, logging.Options{})
		}
		h := NewRedactingHandler(inner)
		root := slog.New(h)
		log := root.With("component", "terraform").WithGroup("g")
		log.Info("before " + secret)
		if !strings.Contains(buf.String(), secret) {
			t.Fatalf("%s: redacted before SetRedactor: %s", format, buf.String())
		}
		buf.Reset()
		if !SetLoggerRedactor(root, NewRedactor([]string{secret})) {
			t.Fatal("SetLoggerRedactor did not find the handler")
		}
		log.Info("line with "+secret, "s", "x"+secret, "err", errors.New("failed: "+secret),
			"list", []string{secret}, slog.Group("nested", "k", secret), "n", 42)
		log.With("w", secret).Warn("with")
		out := buf.String()
		if strings.Contains(out, secret) {
			t.Errorf("%s: secret in output: %s", format, out)
		}
		if strings.Count(out, Redacted) < 6 || !strings.Contains(out, "42") || !strings.Contains(out, "terraform") {
			t.Errorf("%s: output %s", format, out)
		}
	}
	if SetLoggerRedactor(slog.New(slog.DiscardHandler), nil) {
		t.Error("found a redacting handler in a plain logger")
	}
}

func TestRedactorAdd(t *testing.T) {
	r := NewRedactor([]string{"first-secret"})
	redact := r.Redact // holders keep the method value
	r.Add("second-secret", "ab")
	if got := redact("first-secret second-secret ab"); got != "[redacted] [redacted] ab" {
		t.Errorf("got %q", got)
	}
	empty := NewRedactor(nil)
	if empty.Redact("x-secret") != "x-secret" {
		t.Error("an empty redactor changes nothing")
	}
	empty.Add("x-secret")
	if empty.Redact("x-secret") != Redacted {
		t.Error("Add to an empty redactor")
	}
}
