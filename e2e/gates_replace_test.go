package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// lbTask renders a task on the bundled load-balancer example
// (examples/load-balancer), which replaces its two resources (the
// upstream file and the reload) on every change of the instances, with
// an approval block.
func lbTask(name, upstream, approval string) string {
	return fmt.Sprintf(`
task {
  name   = %q
  module = %q
  variables = {
    service_name   = "web"
    upstream_file  = %q
    reload_command = "true"
  }
  condition "services" {
    names = ["web"]
  }
  approval {
%s
  }
}
`, name, filepath.Join(testutil.RepoRoot(), "examples", "load-balancer"), upstream, approval)
}

// Replacements apart (issue 37), with the real Terraform and the bundled
// load-balancer example: a catalog change replaces both of its resources
// (+2 -2). max_destroy = 1 no longer holds it (a replacement is not a
// destroy): the change is applied at once. max_replace = 1 holds it, with
// a reason that says it replaces.
func TestGateReplacementsApart(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	dir := t.TempDir()
	lb, strict := filepath.Join(dir, "lb.conf"), filepath.Join(dir, "strict.conf")
	registerWeb(t, c, 1, 2)
	g := startGated(t, c, lbTask("lb", lb, "    max_destroy = 1")+lbTask("strict", strict, "    max_replace = 1"))

	has := func(file string, want ...string) func() bool {
		return func() bool {
			b, err := os.ReadFile(file)
			if err != nil {
				return false
			}
			for _, w := range want {
				if !strings.Contains(string(b), w) {
					return false
				}
			}
			return true
		}
	}
	// The first runs create: nothing is replaced or destroyed.
	testutil.Eventually(t, 3*time.Minute, "both upstream files with web-1 and web-2", func() bool {
		return has(lb, "127.0.0.1:8001", "127.0.0.1:8002")() && has(strict, "127.0.0.1:8001", "127.0.0.1:8002")()
	})
	g.waitQuiet("lb")
	g.waitQuiet("strict")

	// web-2 leaves: each task's plan replaces its two resources.
	deregister(t, c, "web-2")
	held := g.waitPending("strict", "plan replaces 2 of 2 resources (max_replace 1)")
	if held.Add != 2 || held.Destroy != 2 || held.InState != 2 {
		t.Errorf("strict's held plan %+v: want +2 -2 of 2", held)
	}
	testutil.Eventually(t, 2*time.Minute, "lb applied without web-2", func() bool {
		b, err := os.ReadFile(lb)
		return err == nil && strings.Contains(string(b), "127.0.0.1:8001") && !strings.Contains(string(b), "127.0.0.1:8002")
	})
	g.waitQuiet("lb")
	if code, _, body := g.plan("lb"); code != http.StatusNotFound {
		t.Errorf("max_destroy = 1 held a plan of replacements: %d %s", code, body)
	}
	if ev := g.events("lb"); len(ev) == 0 || ev[0].Plan == nil || ev[0].Plan.Destroy != 2 || !ev[0].Success {
		t.Errorf("lb's last event: %+v", ev)
	}
	if !has(strict, "127.0.0.1:8002")() {
		t.Error("strict applied its held plan")
	}
	// The operator approves: exactly that plan is applied.
	if code, body := g.decide("strict", held.ID, "approve", gateWriteSecret); code != http.StatusOK {
		t.Fatalf("approve: %d %s", code, body)
	}
	testutil.Eventually(t, 2*time.Minute, "strict applied without web-2", func() bool {
		b, err := os.ReadFile(strict)
		return err == nil && !strings.Contains(string(b), "127.0.0.1:8002")
	})
}
