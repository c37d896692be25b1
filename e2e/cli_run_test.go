package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/testutil"
)

// task run shows the plan of the task, asks for approval and applies the
// task now, although nothing it watches changed, then reports the run:
// "no" runs nothing; "yes" re-creates the module's file that was removed
// behind Terraform's back, and the run it reports is the one whose log
// task logs prints.
func TestCLITaskRun(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	out, varFile := newTaskDir(t)
	work := t.TempDir()
	cfg := config(t, c.Addr, filepath.Join(work, "sync-tasks"),
		taskSpec{name: "web-task", module: module("services_file"), services: `"web"`,
			extra: fmt.Sprintf("variable_files = [%q]", varFile)})
	port := regexp.MustCompile(`port = (\d+)`).FindStringSubmatch(cfg)[1]
	p := startCtsync(t, work, "start", "-config-file", writeFile(t, work, "config.hcl", cfg))
	waitServices(t, out, "web-1")
	env := []string{"CTS_ADDRESS=http://127.0.0.1:" + port}
	cli := func(stdin string, args ...string) (string, int) {
		t.Helper()
		return runCLI(ctsyncBin, env, stdin, args...)
	}
	var o string
	testutil.Eventually(t, 30*time.Second, "the first run recorded", func() bool {
		o, _ = cli("", "status", "web-task")
		return strings.Contains(o, "successful")
	})

	// The module's file goes outside Terraform: the plan re-creates it.
	if err := os.Remove(filepath.Join(out, "services.json")); err != nil {
		t.Fatal(err)
	}
	o, code := cli("no\n", "task", "run", "web-task")
	if code != 0 || !strings.Contains(o, "local_file.services will be created") ||
		!strings.Contains(o, "Only 'yes' will be accepted") || !strings.Contains(o, "Cancelled running task 'web-task'") {
		t.Fatalf("task run answered no (exit %d):\n%s", code, o)
	}
	if fileExistsAt(out, "services.json") {
		t.Fatal("task run answered no applied the task")
	}

	o, code = cli("yes\n", "task", "run", "web-task")
	m := regexp.MustCompile(`Run (\S+): apply succeeded in \S+\n {4}Plan: 1 to add, 0 to change, 0 to destroy\.`).FindStringSubmatch(o)
	if code != 0 || !strings.Contains(o, "==> 'web-task' run complete!") || m == nil {
		t.Fatalf("task run answered yes (exit %d):\n%s", code, o)
	}
	if !fileExistsAt(out, "services.json") {
		t.Fatal("task run did not apply the task: services.json is missing")
	}
	if !strings.Contains(o, "ctsync task logs -run="+m[1]+" web-task") {
		t.Fatalf("task run does not say how to read the run's log:\n%s", o)
	}
	if lg, code := cli("", "task", "logs", "-run="+m[1], "web-task"); code != 0 || !strings.Contains(lg, "terraform apply") {
		t.Fatalf("task logs of the run task run reported (exit %d):\n%s", code, lg)
	}

	// -auto-approve asks nothing; an unchanged plan still runs.
	o, code = cli("", "task", "run", "-auto-approve", "web-task")
	if code != 0 || strings.Contains(o, "Enter a value") || !strings.Contains(o, "No changes.") ||
		!strings.Contains(o, "==> 'web-task' run complete!") {
		t.Fatalf("task run -auto-approve (exit %d):\n%s", code, o)
	}
	if o, code := cli("", "task", "run", "-auto-approve", "nope"); code != 11 || !strings.Contains(o, "404") {
		t.Fatalf("task run of an unknown task (exit %d):\n%s", code, o)
	}
	if p.count("panic") > 0 {
		t.Fatalf("the daemon panicked:\n%s", p.out.String())
	}
}

// A run that fails is reported with its id, its plan and Terraform's
// one-line error, and exit 11: a task whose provisioner fails, once its
// one retry is spent (its error summary is no command line).
func TestCLITaskRunReportsFailure(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	work := t.TempDir()
	port := testutil.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	startCtsync(t, work, "start", "-config-file", daemonConfig(t, work, port, c.Addr, fmt.Sprintf(`
retry {
  max_retries = 1
}
task {
  name   = "firewall"
  module = %q
  condition "services" {
    names = ["web"]
  }
}
`, module("failing_apply"))))
	waitEvents(t, base, "firewall", 90*time.Second, func(evs []store.Event) bool {
		return len(evs) >= 2 && !evs[0].Success && !evs[1].Success
	})
	// The retry's reservation may outlive its event by a moment: "active"
	// (409) until it is released.
	var o string
	var code int
	testutil.Eventually(t, 30*time.Second, "task run to find the task idle", func() bool {
		o, code = runCLI(ctsyncBin, []string{"CTS_ADDRESS=" + base}, "", "task", "run", "-auto-approve", "firewall")
		return !strings.Contains(o, "is active")
	})
	m := regexp.MustCompile(`Run (\S+): apply failed in \S+\n {4}Plan: 1 to add, 0 to change, 1 to destroy\.\n {4}Error: local-exec provisioner error: exit status 3\. Output: 503 Service Unavailable\n`).FindStringSubmatch(o)
	if code != 11 || !strings.Contains(o, "terraform_data.rules is tainted, so must be replaced") || strings.Contains(o, "exit 3") ||
		!strings.Contains(o, "==> Error: the run of 'firewall' failed\n") || m == nil ||
		!strings.Contains(o, "ctsync task logs -run="+m[1]+" firewall") {
		t.Fatalf("task run of a failing task (exit %d):\n%s", code, o)
	}
}

// Ctrl-C while task run waits stops the waiting, not the run: the command
// exits 12 and says so, and the run, held in its apply by the module's
// gate, still ends and is recorded once the gate opens. A disabled task
// runs too, and stays disabled.
func TestCLITaskRunInterrupted(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	out, varFile := newTaskDir(t)
	work := t.TempDir()
	port := testutil.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	startCtsync(t, work, "start", "-config-file", daemonConfig(t, work, port, c.Addr, fmt.Sprintf(`
task {
  name           = "gated"
  module         = %q
  variable_files = [%q]
  condition "services" {
    names = ["web"]
  }
}
`, module("gated"), varFile)))
	gate := filepath.Join(out, "gate")
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitServices(t, out, "web-1")
	env := []string{"CTS_ADDRESS=" + base}
	waitEvents(t, base, "gated", 30*time.Second, func(evs []store.Event) bool { return len(evs) == 1 && evs[0].Success })
	if o, code := runCLI(ctsyncBin, env, "", "task", "disable", "gated"); code != 0 {
		t.Fatalf("task disable (exit %d):\n%s", code, o)
	}
	if err := os.Remove(gate); err != nil {
		t.Fatal(err)
	}
	// A new instance: the gate's resource is replaced, so the apply waits.
	c.RegisterService(t, reg("web-2", "web", 8002), "passing")

	cmd := exec.Command(ctsyncBin, "task", "run", "-auto-approve", "gated")
	cmd.Env = append(os.Environ(), env...)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the apply to wait at the gate", func() bool {
		data, _ := os.ReadFile(filepath.Join(out, "started"))
		return strings.Count(string(data), "started") == 2
	})
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 12 || !strings.Contains(b.String(),
		"==> Stopped waiting: the run of 'gated' goes on in the daemon (see ctsync status gated).") {
		t.Fatalf("task run interrupted (%v, exit %d):\n%s", err, code, b.String())
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	evs := waitEvents(t, base, "gated", 60*time.Second, func(evs []store.Event) bool { return len(evs) == 2 })
	if !evs[0].Success || evs[0].Trigger != "api" {
		t.Fatalf("the run task run started: %+v", evs[0])
	}
	waitServices(t, out, "web-1,web-2")
	if st := taskStatus(t, base, "gated"); st.Enabled {
		t.Fatalf("task run enabled the disabled task: %+v", st)
	}
}
