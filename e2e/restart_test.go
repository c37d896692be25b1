package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/testutil"
)

// runLogs counts the run logs in a task's working directory: one per
// Terraform run (apply or plan), init's own log left out.
func runLogs(t *testing.T, taskDir string) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(taskDir, "logs"))
	if err != nil {
		t.Fatalf("the run logs of %s: %v", taskDir, err)
	}
	n := 0
	for _, e := range ents {
		if e.Name() != "init.log" && strings.HasSuffix(e.Name(), ".log") {
			n++
		}
	}
	return n
}

// TestSingleDaemonRestartRunsNothingUnchanged: a daemon without high
// availability (real Consul, real Terraform) keeps what each task applied
// in its history database. Stopped with SIGTERM and started again with
// nothing changed, it runs nothing: no event, no Terraform run (the run
// logs), each task considered and skipped. A catalog change then runs only
// the task it concerns. A task whose working directory was removed while
// the daemon was stopped runs at the next start, and says why.
func TestSingleDaemonRestartRunsNothingUnchanged(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	webOut, webVars := newTaskDir(t)
	dbOut, dbVars := newTaskDir(t)
	work := t.TempDir()
	port := testutil.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := daemonConfig(t, work, port, c.Addr, fmt.Sprintf(`
log_level = "DEBUG"
task {
  name           = "web"
  module         = %[1]q
  variable_files = [%[2]q]
  condition "services" {
    names = ["web"]
  }
}
task {
  name           = "db"
  module         = %[1]q
  variable_files = [%[3]q]
  condition "services" {
    names = ["db"]
  }
}
`, module("services_file"), webVars, dbVars))
	webDir, dbDir := filepath.Join(work, "sync", "web"), filepath.Join(work, "sync", "db")
	one := func(evs []store.Event) bool { return len(evs) == 1 }
	stop := func(p *proc) {
		t.Helper()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 90*time.Second); code != 0 {
			t.Fatalf("ctsync exited with %d:\n%s", code, p.out.String())
		}
	}
	skipped := func(p *proc, task string) func() bool {
		return func() bool { return p.countLog("desired state unchanged since last apply, skipping run", task) > 0 }
	}

	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	c.RegisterService(t, reg("db-1", "db", 9001), "passing")
	p := startCtsync(t, work, "start", "-config-file", cfg)
	waitServices(t, webOut, "web-1")
	waitServices(t, dbOut, "db-1")
	webEvs := waitEvents(t, base, "web", 60*time.Second, one)
	dbEvs := waitEvents(t, base, "db", 60*time.Second, one)
	webLogs, dbLogs := runLogs(t, webDir), runLogs(t, dbDir)
	if webLogs != 1 || dbLogs != 1 {
		t.Fatalf("run logs after the first runs: web %d, db %d", webLogs, dbLogs)
	}
	stop(p)

	// Started again with nothing changed: both tasks are considered and
	// skipped; no event, no Terraform run.
	p = startCtsync(t, work, "start", "-config-file", cfg)
	testutil.Eventually(t, 90*time.Second, "web considered and skipped", skipped(p, "web"))
	testutil.Eventually(t, 90*time.Second, "db considered and skipped", skipped(p, "db"))
	for name, before := range map[string][]store.Event{"web": webEvs, "db": dbEvs} {
		if evs := taskEvents(t, base, name); len(evs) != 1 || evs[0].ID != before[0].ID {
			t.Errorf("events of %s after a restart with nothing changed: %+v", name, evs)
		}
		if n := p.countLog("executing task", name); n != 0 {
			t.Errorf("%s ran %d times after a restart with nothing changed", name, n)
		}
	}
	if w, d := runLogs(t, webDir), runLogs(t, dbDir); w != webLogs || d != dbLogs {
		t.Errorf("terraform ran after a restart with nothing changed: run logs web %d → %d, db %d → %d", webLogs, w, dbLogs, d)
	}

	// A catalog change runs the task it concerns, and only that one.
	c.RegisterService(t, reg("web-2", "web", 8002), "passing")
	waitServices(t, webOut, "web-1,web-2")
	webEvs = waitEvents(t, base, "web", 60*time.Second, func(evs []store.Event) bool { return len(evs) == 2 })
	if webEvs[0].Trigger != "health/service/web" || !webEvs[0].Success {
		t.Errorf("the run of web after the change: %+v", webEvs[0])
	}
	if evs := taskEvents(t, base, "db"); len(evs) != 1 {
		t.Errorf("db ran on a change of web: %+v", evs)
	}
	if d := runLogs(t, dbDir); d != dbLogs {
		t.Errorf("terraform ran for db on a change of web: %d run logs, was %d", d, dbLogs)
	}
	stop(p)

	// db's working directory is removed while the daemon is stopped (its
	// Terraform state is in Consul, the backend): db runs at start, web
	// does not.
	if err := os.RemoveAll(dbDir); err != nil {
		t.Fatal(err)
	}
	p = startCtsync(t, work, "start", "-config-file", cfg)
	dbEvs = waitEvents(t, base, "db", 90*time.Second, func(evs []store.Event) bool { return len(evs) == 2 })
	if dbEvs[0].Trigger != reconcile.StartNotPrepared || !dbEvs[0].Success {
		t.Errorf("the run of db whose working directory was removed: %+v", dbEvs[0])
	}
	testutil.Eventually(t, 90*time.Second, "web considered and skipped", skipped(p, "web"))
	if evs := taskEvents(t, base, "web"); len(evs) != 2 || evs[0].ID != webEvs[0].ID {
		t.Errorf("web ran after the restart: %+v", evs)
	}
	if runLogs(t, dbDir) != 1 {
		t.Errorf("db's new working directory has %d run logs, want 1", runLogs(t, dbDir))
	}
	stop(p)
}

// TestSingleDaemonInterruptedRunRunsAgain: a daemon without high
// availability killed (SIGKILL) in the middle of a run whose desired state
// equals the one already applied (an API "run now") finds the run's
// in-flight marker in its history database at the next start and runs the
// task again, though nothing changed; started once more, it runs nothing.
// Real Consul, real Terraform (local backend: a killed Terraform leaves no
// lock that outlives it).
func TestSingleDaemonInterruptedRunRunsAgain(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	out := t.TempDir()
	mod := t.TempDir()
	// Every apply replaces the gate, whose provisioner waits for the file
	// out/gate: a run stays in flight for as long as the test wants.
	writeFile(t, mod, "main.tf", `variable "services" {
  type = any
}
variable "dir" {
  type = string
}
resource "terraform_data" "gate" {
  triggers_replace = [timestamp()]
  provisioner "local-exec" {
    command     = "echo started >> started; while [ ! -f gate ]; do sleep 0.05; done"
    working_dir = var.dir
  }
}
`)
	vars := writeFile(t, out, "task.tfvars", fmt.Sprintf("dir = %q\n", out))
	work := t.TempDir()
	port := testutil.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := daemonConfig(t, work, port, c.Addr, fmt.Sprintf(`
log_level = "DEBUG"
driver "terraform" {
  backend "local" {
    path = %q
  }
}
task {
  name           = "slow"
  module         = %q
  variable_files = [%q]
  condition "services" {
    names = ["web"]
  }
}
`, filepath.Join(work, "slow.tfstate"), mod, vars))
	started := func() int {
		b, _ := os.ReadFile(filepath.Join(out, "started"))
		return strings.Count(string(b), "started")
	}
	gate := filepath.Join(out, "gate")
	writeFile(t, out, "gate", "")

	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	p := startCtsync(t, work, "start", "-config-file", cfg)
	waitEvents(t, base, "slow", 90*time.Second, func(evs []store.Event) bool { return len(evs) == 1 && evs[0].Success })

	// A run now with nothing changed, held in Terraform by the gate, and
	// the daemon killed in the middle of it.
	must(t, os.Remove(gate))
	go func() {
		req, _ := http.NewRequest("PATCH", base+"/v1/tasks/slow?run=now", strings.NewReader(`{"enabled": true}`))
		if resp, err := http.DefaultClient.Do(req); err == nil { // the daemon dies before it answers
			resp.Body.Close()
		}
	}()
	testutil.Eventually(t, 90*time.Second, "the second apply in flight", func() bool { return started() == 2 })
	must(t, p.cmd.Process.Kill())
	p.wait(t, 30*time.Second)
	writeFile(t, out, "gate", "")

	p = startCtsync(t, work, "start", "-config-file", cfg)
	evs := waitEvents(t, base, "slow", 90*time.Second, func(evs []store.Event) bool { return len(evs) == 2 })
	if evs[0].Trigger != reconcile.StartInterrupted || !evs[0].Success {
		t.Errorf("the run after the restart: trigger %q, success %v; want %q, a success", evs[0].Trigger, evs[0].Success, reconcile.StartInterrupted)
	}
	if n := started(); n != 3 {
		t.Errorf("%d applies, want 3", n)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 90*time.Second); code != 0 {
		t.Fatalf("ctsync exited with %d", code)
	}

	// Nothing in flight any more, nothing changed: nothing runs.
	p = startCtsync(t, work, "start", "-config-file", cfg)
	testutil.Eventually(t, 90*time.Second, "slow considered and skipped", func() bool {
		return p.countLog("desired state unchanged since last apply, skipping run", "slow") > 0
	})
	if evs := taskEvents(t, base, "slow"); len(evs) != 2 {
		t.Errorf("events after a restart with nothing changed: %+v", evs)
	}
	if n := started(); n != 3 {
		t.Errorf("%d applies after a restart with nothing changed, want 3", n)
	}
}
