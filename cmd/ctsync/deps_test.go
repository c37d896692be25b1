package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoPolicyEngineLinked: the daemon does not link Open Policy Agent,
// whose code alone costs every daemon 6–9 MiB of RSS (issue 39); policies
// are evaluated by the ctsync-policy helper (internal/policy).
func TestNoPolicyEngineLinked(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	if !strings.Contains(string(out), "github.com/ctsync/ctsync/internal/policy\n") {
		t.Fatalf("go list -deps printed no internal/policy:\n%s", out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/open-policy-agent/") || p == "github.com/ctsync/ctsync/internal/policy/engine" {
			t.Errorf("ctsync links %s: the policy engine belongs in cmd/ctsync-policy only", p)
		}
	}
}
