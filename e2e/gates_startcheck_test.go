package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// The gates' configuration is checked at start: a policy file that is
// missing and approval rules out of range each make ctsync start exit 15
// (configuration error) naming the configuration file's line and the
// field. (Rego errors: TestPolicyBadRegoAtStart.)
func TestGateConfigErrors(t *testing.T) {
	skipShort(t)
	// The configuration is refused before ctsync talks to Consul: nothing
	// listens at this address.
	consulAddr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	_, varFile := newTaskDir(t)
	for _, tc := range []struct {
		what, blocks string
		want         []string
	}{
		{"a missing policy file", `
  policy {
    files = ["policies/missing.rego"]
  }`, []string{"config.hcl:", `task "fw".policy.files[0]`, "missing.rego"}},
		{"max_destroy_percent out of range", `
  approval {
    max_destroy_percent = 150
  }`, []string{"config.hcl:", "approval.max_destroy_percent", "between 0 and 100"}},
		{"expire 0", `
  approval {
    expire = "0s"
  }`, []string{"config.hcl:", "approval.expire", "longer than 0"}},
		{"window too long", `
  approval {
    window = "200h"
  }`, []string{"config.hcl:", `task "fw".approval.window`, "at most 168h0m0s"}},
		{"max_replace negative", `
  approval {
    max_replace = -1
  }`, []string{"config.hcl:", `task "fw".approval.max_replace`, "cannot be negative"}},
		{"removal_delay too long", `
  removal_delay = "25h"`, []string{"config.hcl:", `task "fw".removal_delay`, "at most 24h0m0s"}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			work := t.TempDir()
			cfg := daemonConfig(t, work, testutil.FreePort(t), consulAddr, gateTask("fw", varFile, tc.blocks))
			p := startCtsync(t, work, "start", "-config-file", cfg)
			if code := p.wait(t, 60*time.Second); code != 15 {
				t.Fatalf("exit %d, want 15 (configuration error):\n%s", code, p.out.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(p.out.String(), w) {
					t.Errorf("the error does not name %q:\n%s", w, p.out.String())
				}
			}
		})
	}
}
