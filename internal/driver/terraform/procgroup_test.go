package terraform

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// heartbeatModule's apply never ends by itself: a local-exec provisioner
// appends a line to hb.txt (in the task's directory) every 250 ms.
const heartbeatModule = `
variable "services" {
  type = any
}

resource "terraform_data" "beat" {
  provisioner "local-exec" {
    command = "while true; do date +%s%N >> hb.txt; sleep 0.25; done"
  }
}
`

// Cancelling a run stops Terraform and the provisioner shells it started
// within the stop timeout: nothing of the run is left running afterwards.
func TestCancelStopsTerraformAndItsChildren(t *testing.T) {
	bin := needTerraform(t)
	dir := t.TempDir()
	o := localTask(t, dir, "beat", bin)
	o.Spec.Module = writeModule(t, dir, "mod-beat", map[string]string{"main.tf": heartbeatModule})
	o.StopTimeout = 2 * time.Second
	d := mustNew(t, o)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := d.Apply(ctx, run("beat"), services("web-1")); done <- err }()

	hb := filepath.Join(d.WorkDir(), "hb.txt")
	testutil.Eventually(t, 60*time.Second, "two heartbeats", func() bool {
		b, _ := os.ReadFile(hb)
		return strings.Count(string(b), "\n") >= 2
	})
	if len(terraformGroups(d.realDir)) == 0 {
		t.Fatal("the running terraform is not found by its working directory")
	}
	cancelled := time.Now()
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a cancelled apply succeeded")
		}
	case <-time.After(o.StopTimeout + testutil.Scale(10*time.Second)):
		t.Fatal("the apply did not return after its context ended")
	}
	took := time.Since(cancelled)
	if took > o.StopTimeout+testutil.Scale(3*time.Second) { // the margin: a slow machine's process exits
		t.Fatalf("stopping took %s, bound %s", took, o.StopTimeout)
	}
	// Nothing runs in the task's directory any more: no terraform, no
	// provisioner shell (they all had it as their working directory). A
	// killed process can take a moment to leave the process table.
	testutil.Eventually(t, 5*time.Second, "no process left in the task directory", func() bool {
		return len(processesIn(d.realDir)) == 0
	})
	t.Logf("stopped %s after the cancel (bound %s)", took.Round(time.Millisecond), o.StopTimeout)
}

// processesIn lists the processes whose working directory is dir.
func processesIn(dir string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err == nil && cwd == dir {
			comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
			out = append(out, e.Name()+":"+strings.TrimSpace(string(comm)))
		}
	}
	return out
}

// The saved plan holds every value of a run, provider secrets included: it
// is written in a folder only the daemon's user can enter, and removed.
func TestPlanFileIsPrivate(t *testing.T) {
	bin := needTerraform(t)
	dir := t.TempDir()
	d := mustNew(t, localTask(t, dir, "private", bin))
	if _, err := d.Plan(testCtx(t), run("p"), services("web-1")); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(d.WorkDir(), planDirName))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("plan folder: %v %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(d.WorkDir(), planDirName, planFile)); !os.IsNotExist(err) {
		t.Fatalf("plan file left behind: %v", err)
	}
}
