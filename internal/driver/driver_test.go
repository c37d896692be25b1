package driver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestErrorFormat(t *testing.T) {
	base := fmt.Errorf("exit status 1\n\nError: Unsupported argument\n...")
	e := &Error{Op: "apply", Summary: "Error: Unsupported argument", Err: base}
	if e.Error() != "apply: Error: Unsupported argument" {
		t.Fatal(e.Error())
	}
	if !errors.Is(e, base) {
		t.Fatal("Unwrap")
	}
	e = &Error{Op: "plan", Err: fmt.Errorf("wrapped: %w", context.Canceled)}
	if e.Error() != "plan: wrapped: context canceled" || !errors.Is(e, context.Canceled) {
		t.Fatal(e.Error())
	}
	e = &Error{Op: "init", Err: base}
	if e.Error() != "init: exit status 1" {
		t.Fatal(e.Error())
	}
}

func TestErrorSummaryCut(t *testing.T) {
	long := &Error{Op: "apply", Headline: "Error: " + strings.Repeat("é", 200)}
	if s := ErrorSummary(long); len(s) > maxHeadline+3 || !strings.HasSuffix(s, "...") || !utf8.ValidString(s) {
		t.Fatalf("long summary %q", s)
	}
}

// The one-line error keeps the first paragraph of each diagnostic's
// detail; a provisioner's loses its command line, not its output.
func TestHeadlineKeepsTheCause(t *testing.T) {
	ds := Diagnostics{
		{Severity: "error", Summary: "local-exec provisioner error",
			Detail: "Error running command 'curl -fsS -X POST https://lb.example/api/pools/web --data @/etc/lb/pool.json': exit status 22. Output: curl: (22) The requested URL returned error: 503 Service Unavailable\nretrying later\n"},
		{Severity: "warning", Summary: "Deprecated", Detail: "ignored"},
		{Severity: "error", Summary: "local-exec provisioner error"},
		{Severity: "error", Summary: "Unsupported argument", Detail: "An argument named \"x\" is not expected here.\n\nSecond paragraph."},
		{Severity: "error", Summary: "Error running command without the usual form", Detail: "Error running command 'no closing quote"},
		{Severity: "error", Summary: "Long", Detail: strings.Repeat("é", 200)},
	}
	got := strings.Split(ds.Headline(), "; ")
	want := []string{
		"Error: local-exec provisioner error: exit status 22. Output: curl: (22) The requested URL returned error: 503 Service Unavailable retrying later",
		"Error: Unsupported argument: An argument named \"x\" is not expected here.",
		"Error: Error running command without the usual form: Error running command 'no closing quote",
	}
	if len(got) != 4 || strings.Join(got[:3], "\n") != strings.Join(want, "\n") {
		t.Fatalf("headline parts:\n%s", strings.Join(got, "\n"))
	}
	if l := got[3]; !strings.HasSuffix(l, "...") || len(l) > len("Error: Long: ")+maxHeadlineDetail+3 || !utf8.ValidString(l) {
		t.Fatalf("long detail %q", l)
	}
	// What every one-line error shows.
	if s := ErrorSummary(fmt.Errorf("run: %w", &Error{Op: "apply", Headline: ds[:1].Headline()})); !strings.Contains(s, "503 Service Unavailable") || strings.Contains(s, "curl -fsS") {
		t.Fatalf("ErrorSummary %q", s)
	}
}
