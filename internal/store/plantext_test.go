package store

import (
	"strings"
	"testing"
)

func TestClipPlanText(t *testing.T) {
	short := "Plan: 1 to add\n"
	if got := ClipPlanText(short); got != short {
		t.Fatalf("short text changed: %q", got)
	}
	long := strings.Repeat("  # a.b will be destroyed\n", MaxPlanText/10)
	got := ClipPlanText(long)
	if len(got) > MaxPlanText+64 || !strings.HasSuffix(got, "(cut: the plan is longer than 32 KiB)\n") || !strings.HasPrefix(long, strings.TrimSuffix(got, "... (cut: the plan is longer than 32 KiB)\n")) {
		t.Fatalf("clipped to %d bytes, ending %q", len(got), got[len(got)-80:])
	}
}
