package e2e

// More of the safety gates end to end (docs/safety.md): a held plan over a
// restart.

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// A held plan over a restart (no high availability): `ctsync status` lists
// it under "Waiting for approval"; after SIGTERM the restarted daemon
// plans the task again and holds the new plan with the same reason,
// applying nothing meanwhile; approving that plan applies it.
func TestGateRestartReholds(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	g, dir, p := startEmptyCatalog(t, c, "", "")

	o, code := runCLI(ctsyncBin, []string{"CTS_ADDRESS=" + g.base, "CTS_TOKEN=" + gateReadSecret}, "", "status")
	want := fmt.Sprintf("web: plan %s (+0 ~0 -3): %s", p.ID, emptyCatalogReason)
	if code != 0 || !strings.Contains(o, "Waiting for approval:") || !strings.Contains(o, want) {
		t.Errorf("ctsync status (exit %d) does not list the held plan (%q):\n%s", code, want, o)
	}

	must(t, g.p.cmd.Process.Signal(syscall.SIGTERM))
	if code := g.p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "after the held daemon stopped")
	g.p = startCtsync(t, g.work, "start", "-config-file", g.cfg)
	again := g.waitPendingUnless("web", emptyCatalogReason, rulesChanged(dir, "web-1,web-2,web-3,web-4"))
	if again.Destroy != 3 || again.InState != 4 {
		t.Errorf("the plan held after the restart %+v: want 3 destroy of 4", again)
	}
	if code, body := g.decide("web", again.ID, "approve", gateWriteSecret); code != http.StatusOK {
		t.Fatalf("approve after the restart: %d %s", code, body)
	}
	waitRules(t, dir, "web-1")
}
