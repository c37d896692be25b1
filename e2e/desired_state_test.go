package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/testutil"
)

// copyDir copies the regular files of a module directory (no subfolders).
func copyDir(t *testing.T, from, to string) string {
	t.Helper()
	must(t, os.MkdirAll(to, 0o755))
	ents, err := os.ReadDir(from)
	must(t, err)
	for _, e := range ents {
		if e.Type().IsRegular() {
			b, err := os.ReadFile(filepath.Join(from, e.Name()))
			must(t, err)
			must(t, os.WriteFile(filepath.Join(to, e.Name()), b, 0o644))
		}
	}
	return to
}

// desiredSetup is what TestDesiredStateAcrossHARestarts changes, one thing
// at a time, between restarts.
type desiredSetup struct {
	binary, echoVersion, gzip, region, moduleDir, varFile string
}

func desiredConfig(id string, port int, work, consulAddr string, s desiredSetup) string {
	return fmt.Sprintf(`log_level = "DEBUG"
id = %q
port = %d
working_dir = %q

consul {
  address = %q
}

buffer_period {
  enabled = false
}

high_availability {
  cluster {
    name = "desired"
    storage "consul" {
      session_ttl = "15s"
    }
  }
  instance {
    address = "127.0.0.1"
  }
}

driver "terraform" {
  path = %q
  required_providers {
    echo = {
      source  = "ctsync/echo"
      version = %q
    }
  }
  backend "consul" {
    path = "ctsync-e2e/desired-state"
    gzip = %s
  }
}

terraform_provider "echo" {
  region = %q
}

task {
  name           = "edge"
  module         = %q
  providers      = ["echo"]
  variable_files = [%q]
  condition "services" {
    names = ["web"]
  }
}
`, id, port, filepath.Join(work, "sync-tasks"), consulAddr, s.binary, s.echoVersion, s.gzip, s.region, s.moduleDir, s.varFile)
}

// Each element of a task's desired state, changed alone while the cluster
// is down, makes the task run exactly once when it comes back, and the
// run's trigger says what changed; a restart with nothing changed runs
// nothing (the controller logs that it considered and skipped the task).
func TestDesiredStateAcrossHARestarts(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	work := t.TempDir()
	out := t.TempDir()
	port := testutil.FreePort(t)
	tf, err := filepath.EvalSymlinks(testutil.Binary(t, "terraform"))
	must(t, err)
	s := desiredSetup{
		binary:      tf,
		echoVersion: ">= 0.1.0",
		gzip:        "false",
		region:      "eu-west-1",
		moduleDir:   copyDir(t, module("compat_provider"), filepath.Join(work, "module")),
		varFile:     writeFile(t, work, "task.tfvars", fmt.Sprintf("dir = %q\n", out)),
	}
	cfg := filepath.Join(work, "config.hcl")
	cliCfg := compatCLIConfig(t)
	var p *proc
	start := func() {
		t.Helper()
		writeFile(t, work, "config.hcl", desiredConfig("cts-desired", port, work, c.Addr, s))
		p = startCompat(t, work, []string{"TF_CLI_CONFIG_FILE=" + cliCfg}, "start", "-config-file", cfg)
	}
	stop := func() {
		t.Helper()
		must(t, p.cmd.Process.Signal(syscall.SIGTERM))
		if code := p.wait(t, 60*time.Second); code != 0 {
			t.Fatalf("exit code %d; output:\n%s", code, p.out.String())
		}
	}
	// settled waits until the task's start-up decision is made: a run that
	// ended, or a skip.
	settled := func() {
		t.Helper()
		testutil.Eventually(t, 120*time.Second, "the task run or skipped", func() bool {
			return p.countLog("desired state unchanged since last apply, skipping run", "edge") > 0 ||
				p.countLog("task completed", "edge") > 0 || p.countLog("error applying task", "edge") > 0
		})
	}
	must(t, c.Client.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "web-1", Name: "web", Port: 80, Address: "10.0.0.1"}))

	start()
	settled()
	if p.successes("edge") != 1 {
		t.Fatalf("first start: %d successful runs, want 1", p.successes("edge"))
	}
	stop()
	start()
	settled()
	if n := p.runs("edge"); n != 0 {
		t.Fatalf("restart with nothing changed: %d runs", n)
	}

	steps := []struct {
		what, trigger string
		change        func()
	}{
		{"module code", "module changed", func() {
			f := filepath.Join(s.moduleDir, "main.tf")
			b, err := os.ReadFile(f)
			must(t, err)
			must(t, os.WriteFile(f, append(b, "\n# edited by the operator\n"...), 0o644))
		}},
		{"variable file", "task changed", func() {
			writeFile(t, work, "task.tfvars", fmt.Sprintf("dir = %q\n", filepath.Join(out, "moved")))
			must(t, os.MkdirAll(filepath.Join(out, "moved"), 0o755))
		}},
		{"provider config", "provider config changed", func() { s.region = "eu-central-1" }},
		{"backend", "backend changed", func() { s.gzip = "true" }},
		{"required_providers", "required_providers changed", func() { s.echoVersion = ">= 0.0.1" }},
		{"binary", "binary changed", func() {
			cp := filepath.Join(work, "terraform-copy")
			b, err := os.ReadFile(tf)
			must(t, err)
			must(t, os.WriteFile(cp, b, 0o755))
			s.binary = cp
		}},
		{"consul data", "", func() {
			must(t, c.Client.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "web-2", Name: "web", Port: 80, Address: "10.0.0.2"}))
		}},
	}
	for _, st := range steps {
		stop()
		st.change()
		start()
		settled()
		if n, ok := p.runs("edge"), p.successes("edge"); n != 1 || ok != 1 {
			t.Fatalf("%s changed: %d runs, %d successful; want exactly one successful run", st.what, n, ok)
		}
		if st.trigger != "" && !strings.Contains(p.out.String(), `trigger="`+st.trigger) {
			t.Fatalf("%s changed: the run's trigger does not say %q", st.what, st.trigger)
		}
		// And nothing more once it is applied.
		stop()
		start()
		settled()
		if n := p.runs("edge"); n != 0 {
			t.Fatalf("after the %s change was applied, a restart ran the task %d times", st.what, n)
		}
	}
	if b, err := os.ReadFile(filepath.Join(out, "moved", "provider.json")); err != nil || !strings.Contains(string(b), "eu-central-1") {
		t.Fatalf("provider.json after the changes: %s %v", b, err)
	}
}

// partialModule applies in two steps: the first resource records the
// value, then the second refuses any value containing "bad" -- a run that
// fails after it has changed part of the infrastructure.
const partialModule = `
variable "services" {
  type = map(object({ meta = map(string) }))
}
variable "dir" {
  type = string
}
locals {
  value = join(",", sort([for s in var.services : lookup(s.meta, "v", "")]))
}
resource "terraform_data" "first" {
  triggers_replace = local.value
  provisioner "local-exec" {
    command     = "printf %s \"$V\" > \"$F\""
    environment = { V = local.value, F = "${var.dir}/first.txt" }
  }
}
resource "terraform_data" "second" {
  depends_on       = [terraform_data.first]
  triggers_replace = local.value
  provisioner "local-exec" {
    command     = "case \"$V\" in *bad*) echo \"refusing $V\" >&2; exit 1;; esac"
    environment = { V = local.value }
  }
}
`

// A run that fails half-way leaves the first resource changed; when the
// catalog then goes back to the value of the last successful run, the task
// still runs (its last run failed), and the first resource is restored.
func TestPartialFailureThenRevertConverges(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	work := t.TempDir()
	out := t.TempDir()
	mod := filepath.Join(work, "partial")
	must(t, os.MkdirAll(mod, 0o755))
	writeFile(t, mod, "main.tf", partialModule)
	port := testutil.FreePort(t)
	task := fmt.Sprintf("task {\n  name = \"partial\"\n  module = %q\n  variables = { dir = %q }\n  condition \"services\" {\n    names = [\"web\"]\n  }\n}", mod, out)
	cfg := writeFile(t, work, "config.hcl", faultConfig(t, c.Addr, filepath.Join(work, "sync-tasks"), port, "", task))
	register := func(v string) {
		must(t, c.Client.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "web-1", Name: "web", Port: 80, Meta: map[string]string{"v": v}}))
	}
	first := func(want string) {
		t.Helper()
		testutil.Eventually(t, 90*time.Second, "first.txt = "+want, func() bool {
			b, err := os.ReadFile(filepath.Join(out, "first.txt"))
			return err == nil && string(b) == want
		})
	}
	register("good")
	p := startCtsync(t, work, "start", "-config-file", cfg)
	first("good")
	testutil.Eventually(t, 60*time.Second, "the first run recorded", func() bool { return p.successes("partial") == 1 })

	register("bad")
	first("bad") // the first resource changed...
	waitFailedEvent(t, port, "partial", 90*time.Second, "refusing bad")

	register("good") // ...and the catalog goes back to the applied value
	first("good")
	testutil.Eventually(t, 60*time.Second, "a successful run after the revert", func() bool { return p.successes("partial") == 2 })
}

// A terminal error (the module refuses an argument) is recorded as such
// and not retried; a change to the task's data runs it again.
func TestTerminalErrorIsNotRetried(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	work := t.TempDir()
	out, sentinelOut := t.TempDir(), t.TempDir()
	port := testutil.FreePort(t)
	broken := servicesTask(t, "broken", "services_file", out, `"web"`, `variables = { not_in_module = "x" }`)
	sentinel := servicesTask(t, "sentinel", "services_file", sentinelOut, `"api"`)
	cfg := writeFile(t, work, "config.hcl", faultConfig(t, c.Addr, filepath.Join(work, "sync-tasks"), port, "", broken, sentinel))
	must(t, c.Client.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "web-1", Name: "web", Port: 80}))
	p := startCtsync(t, work, "start", "-config-file", cfg)
	waitFailedEvent(t, port, "broken", 90*time.Second, "Unsupported argument")
	testutil.Eventually(t, 30*time.Second, "the terminal failure logged", func() bool {
		return p.countLog("task failed with a terminal error: it runs again when its desired state changes", "broken") == 1
	})
	// Time passes with the controller busy elsewhere: two runs of the
	// sentinel, each longer than the first retry delay (2s) would be.
	for i, id := range []string{"api-1", "api-2"} {
		must(t, c.Client.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: id, Name: "api", Port: 80}))
		testutil.Eventually(t, 60*time.Second, "a sentinel run", func() bool { return p.successes("sentinel") == i+1 })
	}
	if n := p.runs("broken"); n != 1 {
		t.Fatalf("a terminal failure ran %d times, want 1", n)
	}
	evs := apiEvents(t, port, "broken")
	if len(evs) != 1 || !strings.Contains(apiBody(t, port, "/v1/tasks/broken/events"), `"terminal":true`) {
		t.Fatalf("events: %+v", evs)
	}
	// The desired state changes: it runs again (and fails again).
	must(t, c.Client.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "web-2", Name: "web", Port: 80}))
	testutil.Eventually(t, 60*time.Second, "a second run after the change", func() bool { return p.runs("broken") == 2 })
}

func apiBody(t *testing.T, port int, path string) string {
	t.Helper()
	_, _, b := haGet(port, path)
	return string(b)
}

// A local module directory that vanishes while the daemon runs: the next
// run of its task is an error event naming the directory, the task stays
// dirty, and the other tasks carry on; putting the module back converges.
func TestVanishedModuleDirectory(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	work, out, otherOut := t.TempDir(), t.TempDir(), t.TempDir()
	mod := copyDir(t, module("services_file"), filepath.Join(work, "modules", "lb"))
	port := testutil.FreePort(t)
	lb := fmt.Sprintf("task {\n  name = \"lb\"\n  module = %q\n  variables = { dir = %q }\n  condition \"services\" {\n    names = [\"web\"]\n  }\n}", mod, out)
	cfg := writeFile(t, work, "config.hcl", faultConfig(t, c.Addr, filepath.Join(work, "sync-tasks"), port, "", lb,
		servicesTask(t, "other", "services_file", otherOut, `"web"`)))
	must(t, c.Client.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "web-1", Name: "web", Port: 80}))
	startCtsync(t, work, "start", "-config-file", cfg)
	waitServices(t, out, "web-1")
	waitServices(t, otherOut, "web-1")

	hidden := filepath.Join(work, "modules", "lb-away")
	must(t, os.Rename(mod, hidden))
	must(t, c.Client.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "web-2", Name: "web", Port: 80}))
	msg := waitFailedEvent(t, port, "lb", 60*time.Second, "desired state")
	if !strings.Contains(msg, mod) {
		t.Fatalf("the error does not name the module directory %s: %s", mod, msg)
	}
	waitServices(t, otherOut, "web-1,web-2") // nothing else stops
	if body := apiBody(t, port, "/v1/status/tasks/lb"); !strings.Contains(body, `"dirty":true`) {
		t.Fatalf("status of lb: %s", body)
	}
	must(t, os.Rename(hidden, mod))
	waitServices(t, out, "web-1,web-2") // the retry converges
}
