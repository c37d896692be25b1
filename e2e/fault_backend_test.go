package e2e

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// gatedModule creates one resource per service instance; each creation
// waits until <dir>/go exists, after writing <dir>/started-<key>.
const gatedModule = `
variable "services" {
  type = any
}

variable "dir" {
  type = string
}

resource "terraform_data" "svc" {
  for_each = var.services
  input    = each.key

  provisioner "local-exec" {
    command = "touch ${var.dir}/started-${each.key}; while [ ! -f ${var.dir}/go ]; do sleep 0.05; done"
  }
}
`

// The state backend (Consul, reached through a fault proxy: the daemon's
// own Consul link stays up) refuses connections in the middle of an apply,
// after the new resource is created: Terraform cannot save the state
// (errored.tfstate). Once the backend answers again, the daemon's run
// pushes the state back and is reported applied, with no failed event, and
// the state in Consul has the new resource.
func TestFaultBackendDownMidApply(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	proxy := testutil.StartFaultProxy(t, c.Addr)
	p, work, out, port := startBackendTask(t, c, proxy.Addr)
	succeeded := func() int {
		n := 0
		for _, ev := range apiEvents(t, port, "gated") {
			if ev.Success {
				n++
			}
		}
		return n
	}
	testutil.Eventually(t, 60*time.Second, "the first apply", func() bool { return succeeded() == 1 })

	must(t, os.Remove(filepath.Join(out, "go")))
	started, _ := filepath.Glob(filepath.Join(out, "started-*"))
	for _, f := range started {
		must(t, os.Remove(f))
	}
	c.RegisterService(t, reg("web-2", "web", 8002), "passing")
	testutil.Eventually(t, 60*time.Second, "the apply creates web-2", func() bool {
		m, _ := filepath.Glob(filepath.Join(out, "started-web-2*"))
		return len(m) == 1
	})
	proxy.Refuse()
	writeFile(t, out, "go", "")
	errored := filepath.Join(work, "sync-tasks", "gated", "errored.tfstate")
	testutil.Eventually(t, 60*time.Second, "terraform cannot save the state", func() bool { return fileExistsAt(errored) })
	proxy.Restore()
	start := time.Now()
	testutil.Eventually(t, 150*time.Second, "the run is reported applied", func() bool { return succeeded() == 2 })
	t.Logf("MEASURED reported applied %v after the backend came back", time.Since(start).Round(time.Millisecond))
	for _, ev := range apiEvents(t, port, "gated") {
		if !ev.Success {
			t.Errorf("a failed event: %+v", ev.Error)
		}
	}
	if fileExistsAt(errored) {
		t.Error("errored.tfstate is still there")
	}
	pair, _, err := c.Client.KV().Get(stateKey("gated"), nil)
	must(t, err)
	if pair == nil {
		t.Fatal("no state in Consul")
	}
	zr, err := gzip.NewReader(bytes.NewReader(pair.Value)) // gzip = true
	must(t, err)
	b, err := io.ReadAll(zr)
	must(t, err)
	if state := string(b); !strings.Contains(state, `"index_key": "web-2.`) {
		t.Fatalf("the state in Consul lacks web-2:\n%s", state)
	}
	p.running(t)
}

// An empty errored.tfstate in a task's directory (state push: "no state";
// a soak under chaos met one after Consul restarted during an apply) does
// not stop the task: the next run removes it and applies the catalog
// change at once, with no failed event, instead of retrying the push for
// two minutes at every run; and the daemon stops at SIGTERM without
// interrupting a run (exit 0, not 12).
func TestFaultEmptyErroredState(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	p, work, out, port := startBackendTask(t, c, c.Addr)
	events := func() (ok, failed int) {
		for _, ev := range apiEvents(t, port, "gated") {
			if ev.Success {
				ok++
			} else {
				failed++
			}
		}
		return ok, failed
	}
	testutil.Eventually(t, 60*time.Second, "the first apply", func() bool { ok, _ := events(); return ok == 1 })

	errored := filepath.Join(work, "sync-tasks", "gated", "errored.tfstate")
	writeFile(t, filepath.Dir(errored), "errored.tfstate", "")
	start := time.Now()
	c.RegisterService(t, reg("web-2", "web", 8002), "passing")
	// A run takes seconds; the push of the empty file was retried for 2
	// minutes before the run failed.
	testutil.Eventually(t, 60*time.Second, "the change applied", func() bool { ok, _ := events(); return ok == 2 })
	t.Logf("MEASURED the change applied %v after it was registered", time.Since(start).Round(time.Millisecond))
	if _, failed := events(); failed != 0 {
		t.Errorf("%d failed events", failed)
	}
	if fileExistsAt(errored) {
		t.Error("the empty errored.tfstate is still there")
	}
	if m, _ := filepath.Glob(filepath.Join(out, "started-web-2*")); len(m) != 1 {
		t.Error("web-2 is not applied")
	}
	p.waitOutput(t, 10*time.Second, "removed an empty errored.tfstate")
	must(t, p.cmd.Process.Signal(syscall.SIGTERM))
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d at SIGTERM, want 0", code)
	}
}

// startBackendTask starts a daemon with one task, "gated" (gatedModule,
// writing into out, waiting while out/go is missing), whose Terraform state
// is in Consul at backendAddr, once web-1 is registered. It returns the
// daemon, its folder, the module's output folder and the API port.
func startBackendTask(t *testing.T, c *testutil.Consul, backendAddr string) (p *proc, work, out string, port int) {
	t.Helper()
	work, out = t.TempDir(), t.TempDir()
	mod := filepath.Join(work, "gated")
	must(t, os.MkdirAll(mod, 0o755))
	writeFile(t, mod, "main.tf", gatedModule)
	vf := writeFile(t, out, "task.tfvars", fmt.Sprintf("dir = %q\n", out))
	port = testutil.FreePort(t)
	driverBlock := fmt.Sprintf("driver \"terraform\" {\n  backend \"consul\" {\n    address = %q\n    path = \"consul-terraform-sync/terraform\"\n  }\n}\n", backendAddr)
	taskBlock := fmt.Sprintf("task {\n  name = \"gated\"\n  module = %q\n  variable_files = [%q]\n  condition \"services\" {\n    names = [\"web\"]\n  }\n}", mod, vf)
	cfg := writeFile(t, work, "config.hcl", faultConfig(t, c.Addr, filepath.Join(work, "sync-tasks"), port, driverBlock, taskBlock))
	writeFile(t, out, "go", "")
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	return startCtsync(t, work, "start", "-config-file", cfg), work, out, port
}
