package e2e

// Faults of Terraform: the binary is missing, crashes during an apply, or
// disappears while the daemon runs.

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/testutil"
)

// No Terraform: a clear error naming the problem and exit code 16, before
// anything else happens (no Consul is needed to find that out).
func TestFaultTerraformMissing(t *testing.T) {
	skipShort(t)
	for _, tc := range []struct {
		name, driver string
		env          []string
		want         string
	}{
		{"configured_path", "driver \"terraform\" {\n  path = \"/nonexistent/bin/terraform\"\n}\n", nil,
			`terraform path "/nonexistent/bin/terraform"`},
		{"not_executable", "driver \"terraform\" {\n  path = \"" + writeFile(t, t.TempDir(), "terraform", "#!/bin/sh\n") + "\"\n}\n", nil,
			"is not an executable file"},
		{"not_on_path", "", []string{"PATH=/nonexistent"}, "neither terraform nor tofu was found on PATH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			cfg := writeFile(t, work, "config.hcl", faultConfig(t, "127.0.0.1:1", filepath.Join(work, "sync-tasks"), testutil.FreePort(t), tc.driver,
				servicesTask(t, "web_task", "services_file", t.TempDir(), `"web"`)))
			p := startCompat(t, work, tc.env, "start", "-config-file", cfg)
			if code := p.wait(t, 30*time.Second); code != 16 {
				t.Fatalf("exit code %d, want 16:\n%s", code, p.out.String())
			}
			if ls := p.lines("terraform driver", tc.want); len(ls) == 0 {
				t.Fatalf("no clear error (%q):\n%s", tc.want, p.out.String())
			}
		})
	}
}

// No Terraform and no task (the packaged configuration): the daemon starts
// and serves its API; a task added later fails to run with an error that
// says what to install, and runs once Terraform is there.
func TestNoTerraformNoTask(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	work := t.TempDir()
	port := testutil.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := writeFile(t, work, "config.hcl", faultConfig(t, c.Addr, filepath.Join(work, "sync-tasks"), port, ""))
	p := startCtsyncEnv(t, work, []string{"PATH=/nonexistent"}, "start", "-config-file", cfg)
	testutil.Eventually(t, 60*time.Second, "GET /v1/status to answer", func() bool {
		resp, err := http.Get(base + "/v1/status")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if ls := p.lines("no Terraform binary", "neither terraform nor tofu was found on PATH"); len(ls) == 0 {
		t.Errorf("no warning that Terraform is missing:\n%s", p.out.String())
	}

	out := t.TempDir()
	body := fmt.Sprintf(`{"task":{"name":"web","module":%q,"variables":{"dir":%q},"condition":{"services":{"names":["web"]}}}}`,
		module("services_file"), fmt.Sprintf("%q", out))
	const want = `task \"web\" needs Terraform to run: neither terraform nor tofu was found on PATH; install Terraform or OpenTofu`
	code, resp := apiCall(t, "POST", base+"/v1/tasks?run=now", body, nil)
	if code < 400 || !strings.Contains(resp, want) {
		t.Fatalf("creating a task with run=now without Terraform: %d %s, want an error with %q", code, resp, want)
	}
	// Created without running: its run fails with the same words, shown
	// as its one-line error; the daemon goes on.
	code, resp = apiCall(t, "POST", base+"/v1/tasks", body, nil)
	expectStatus(t, "create", 201, code, resp)
	evs := waitEvents(t, base, "web", 60*time.Second, func(evs []store.Event) bool { return len(evs) > 0 })
	if evs[0].Success || !strings.Contains(evs[0].ErrorSummary, strings.ReplaceAll(want, `\"`, `"`)) {
		t.Fatalf("the run without Terraform: %+v", evs[0])
	}
	p.running(t)
	if code, _ := apiCall(t, "GET", base+"/v1/status", "", nil); code != 200 {
		t.Fatalf("GET /v1/status: %d after the failed run", code)
	}
}

// fakeTerraform writes a terraform that runs the real one, except that
// while dir/crash exists, `apply` in the working directory of task
// "crashy" (module gated, writing into out) starts the real apply, waits
// until it is inside the apply (the module's provisioner wrote
// out/started), then SIGKILLs it and itself: a crash in the middle of an
// apply. It returns the script's path.
func fakeTerraform(t *testing.T, dir, out string) string {
	t.Helper()
	real := testutil.Binary(t, "terraform")
	script := fmt.Sprintf(`#!/bin/sh
# Test double of terraform (see fakeTerraform in fault_terraform_test.go).
real=%q
flag=%q
started=%q
if [ "$1" = apply ] && [ -f "$flag" ] && [ "$(basename "$PWD")" = crashy ]; then
  rm -f "$started"
  "$real" "$@" &
  child=$!
  while [ ! -f "$started" ]; do sleep 0.05; done
  kill -9 "$child"
  kill -9 $$
fi
exec "$real" "$@"
`, real, filepath.Join(dir, "crash"), filepath.Join(out, "started"))
	p := filepath.Join(dir, "terraform")
	must(t, os.WriteFile(p, []byte(script), 0o755))
	return p
}

// Terraform crashes during one task's apply: that task's run fails with an
// event that says so, the other task is unaffected, and the crashing task
// recovers once Terraform works again. Then the binary disappears while
// the daemon runs: the next run fails with a clear error, and the task
// recovers when it is back.
func TestFaultTerraformCrashMidApply(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	work := t.TempDir()
	binDir := t.TempDir()
	crashOut, steadyOut := t.TempDir(), t.TempDir()
	tf := fakeTerraform(t, binDir, crashOut)
	writeFile(t, binDir, "crash", "")
	port := testutil.FreePort(t)
	// Local state: a SIGKILLed Terraform leaves no lock behind in a local
	// backend (the lock is the process's own fcntl lock); lock leftovers
	// in Consul are TestFaultStateLockHeld's and TestFaultKilledDuringApply's.
	drv := fmt.Sprintf("driver \"terraform\" {\n  path = %q\n  backend \"local\" {\n    path = %q\n  }\n}\n", tf, filepath.Join(work, "state.tfstate"))
	cfg := writeFile(t, work, "config.hcl", faultConfig(t, c.Addr, filepath.Join(work, "sync-tasks"), port, drv,
		servicesTask(t, "crashy", "gated", crashOut, `"web"`),
		servicesTask(t, "steady", "services_file", steadyOut, `"web"`)))
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	p := startCtsync(t, work, "start", "-config-file", cfg)

	waitConverged(t, c, steadyOut, "web")
	msg := waitFailedEvent(t, port, "crashy", 60*time.Second, "apply")
	t.Logf("crash: %s", msg)
	if !strings.Contains(msg, "terraform was terminated by signal") {
		t.Errorf("the event does not say Terraform was killed: %q", msg)
	}
	p.waitOutput(t, 10*time.Second, "error applying task", "task_name=crashy")

	// Terraform works again; a change brings the crashed task up to date.
	// The gate lets the crashed apply's orphaned provisioner shell end, and
	// the later applies through.
	must(t, os.Remove(filepath.Join(binDir, "crash")))
	writeFile(t, crashOut, "gate", "")
	c.RegisterService(t, reg("web-2", "web", 8002), "passing")
	waitConverged(t, c, crashOut, "web")
	waitConverged(t, c, steadyOut, "web")

	// The binary disappears.
	must(t, os.Rename(tf, tf+".away"))
	failedBefore := len(failedEvents(t, port, "steady"))
	c.RegisterService(t, reg("web-3", "web", 8003), "passing")
	testutil.Eventually(t, 60*time.Second, "a failed run of steady without its binary", func() bool {
		return len(failedEvents(t, port, "steady")) > failedBefore
	})
	msg = failedEvents(t, port, "steady")[0]
	t.Logf("binary gone: %s", msg)
	if !strings.Contains(msg, "no such file or directory") {
		t.Errorf("the event does not say the binary is missing: %q", msg)
	}
	must(t, os.Rename(tf+".away", tf))
	c.RegisterService(t, reg("web-4", "web", 8004), "passing")
	waitConverged(t, c, crashOut, "web")
	waitConverged(t, c, steadyOut, "web")
	p.running(t)
}

// failedEvents returns the error messages of a task's failed events,
// newest first.
func failedEvents(t *testing.T, port int, taskName string) []string {
	var out []string
	for _, ev := range apiEvents(t, port, taskName) {
		if !ev.Success && ev.Error != nil {
			out = append(out, ev.Error.Message)
		}
	}
	return out
}
