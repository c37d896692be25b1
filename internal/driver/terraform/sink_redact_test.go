package terraform

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/redact"
)

// TestSinkForwardsRedacted: Terraform output forwarded to the daemon's log
// (driver "terraform" { log = true }) goes through the daemon's logger,
// which redacts the configuration's secrets.
func TestSinkForwardsRedacted(t *testing.T) {
	const secret = "provider-secret-0123456789"
	var buf bytes.Buffer
	h := redact.NewRedactingHandler(slog.NewJSONHandler(&buf, nil))
	h.SetRedactor(redact.NewRedactor([]string{secret}))
	s := &sink{task: "web", logger: slog.New(h)}
	s.begin("plan", false)
	w := s.writer("stdout")
	_, _ = io.WriteString(w, "  + token = \""+secret+"\"\n  + partial ")
	_, _ = io.WriteString(w, secret[:5])
	_, _ = io.WriteString(w, secret[5:]+" end\n")
	_, _ = io.WriteString(s.writer("stderr"), "Error: bad token "+secret)
	if err := s.detach(); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Contains(out, secret) {
		t.Errorf("secret forwarded to the log: %s", out)
	}
	if strings.Count(out, redact.Redacted) != 3 {
		t.Errorf("want 3 redactions: %s", out)
	}
}
