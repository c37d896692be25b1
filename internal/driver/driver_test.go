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
