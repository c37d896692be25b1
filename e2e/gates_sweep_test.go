package e2e

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// A daemon killed (SIGKILL) while it holds a plan leaves the saved plan and
// its inputs (every value of the run) in the task's working directory: the
// restarted daemon removes them at start, logs how many, and holds the
// same plan again from its record (without its file).
func TestGateKilledHeldPlanRemoved(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	g, dir, p := startEmptyCatalog(t, c, "", "")
	planDir := filepath.Join(g.work, "sync", "web", ".ctsync-plan")
	files := func(id string) []string {
		return []string{filepath.Join(planDir, "held-"+id+".tfplan"), filepath.Join(planDir, "held-"+id+".tfvars")}
	}
	for _, f := range files(p.ID) {
		if !fileExistsAt(f) {
			t.Fatalf("the held plan's file %s is missing", f)
		}
	}

	must(t, g.p.cmd.Process.Signal(syscall.SIGKILL))
	g.p.wait(t, 60*time.Second)
	for _, f := range files(p.ID) {
		if !fileExistsAt(f) {
			t.Fatalf("the killed daemon's held plan file %s is gone before the restart", f)
		}
	}

	// The restarted daemon holds the same plan again, from its record in
	// the history database, and removes its files at start: a held plan's
	// file (every value of its run, secrets included) never outlives the
	// process that made it, even while its plan is held again.
	g.p = startCtsync(t, g.work, "start", "-config-file", g.cfg)
	again := g.waitPendingUnless("web", emptyCatalogReason, rulesChanged(dir, "web-1,web-2,web-3,web-4"))
	if again.ID != p.ID {
		t.Errorf("the plan held after the restart is %s, want %s", again.ID, p.ID)
	}
	g.p.waitOutput(t, 10*time.Second, "removed the held plans a previous ctsync left", "plans=1")
	for _, f := range files(p.ID) {
		if fileExistsAt(f) {
			t.Errorf("the killed daemon's held plan file %s is still there after the restart", f)
		}
	}
}
