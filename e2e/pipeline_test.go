package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/testutil"
)

// newTaskDir makes the folder a fixture module writes into and a tfvars
// file pointing the module at it.
func newTaskDir(t *testing.T) (dir, varFile string) {
	t.Helper()
	dir = t.TempDir()
	varFile = writeFile(t, dir, "task.tfvars", fmt.Sprintf("dir = %q\n", dir))
	return dir, varFile
}

func reg(id, name string, port int) *api.AgentServiceRegistration {
	return &api.AgentServiceRegistration{ID: id, Name: name, Address: "127.0.0.1", Port: port}
}

// The core loop: register, deregister and health flips reach the module;
// state is at the CTS key; a check-output-only change runs nothing.
func TestServicesLifecycle(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	out, varFile := newTaskDir(t)
	work := t.TempDir()
	cfg := writeFile(t, work, "config.hcl", config(t, c.Addr, filepath.Join(work, "sync-tasks"),
		taskSpec{name: "web-task", module: module("services_file"), services: `"web"`,
			extra: fmt.Sprintf("variable_files = [%q]", varFile)}))

	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	c.RegisterService(t, reg("web-2", "web", 8002), "passing")
	c.RegisterService(t, reg("db-1", "db", 5432), "passing")
	p := startCtsync(t, work, "start", "-config-file", cfg)

	got := waitServices(t, out, "web-1,web-2")
	s := got["web-1.node-1.dc1"]
	if s.Name != "web" || s.Address != "127.0.0.1" || s.Port != 8001 || s.Status != "passing" ||
		s.Node != "node-1" || s.NodeDatacenter != "dc1" || s.Meta == nil || s.Tags == nil || s.CTSUserDefinedMeta == nil {
		t.Fatalf("service entry not as CTS renders it: %+v", s)
	}

	// State lives where CTS keeps it, so operators can switch back and forth.
	kv, _, err := c.Client.KV().Get("consul-terraform-sync/terraform-env:web-task", nil)
	if err != nil || kv == nil || len(kv.Value) == 0 {
		t.Fatalf("no Terraform state at consul-terraform-sync/terraform-env:web-task (err=%v)", err)
	}

	c.RegisterService(t, reg("web-3", "web", 8003), "passing")
	waitServices(t, out, "web-1,web-2,web-3")

	c.SetCheck(t, "web-2", api.HealthCritical, "down")
	waitServices(t, out, "web-1,web-3")

	c.SetCheck(t, "web-2", api.HealthPassing, "up again")
	waitServices(t, out, "web-1,web-2,web-3")

	if err := c.Client.Agent().ServiceDeregister("web-1"); err != nil {
		t.Fatal(err)
	}
	waitServices(t, out, "web-2,web-3")

	// Only a check's output text changes: the inputs are the same, so no
	// run. The agent would sync an output-only change lazily, so write it
	// to the catalog directly (an external node) to be sure Consul's index
	// moves.
	extNode := func(output string) {
		t.Helper()
		_, err := c.Client.Catalog().Register(&api.CatalogRegistration{Node: "ext", Address: "10.9.9.9",
			Service: &api.AgentService{ID: "web-ext", Service: "web", Port: 9000},
			Check: &api.AgentCheck{CheckID: "ext-http", Name: "http", Status: api.HealthPassing,
				ServiceID: "web-ext", Output: output}}, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	extNode("HTTP 200 at 10:00:00")
	waitServices(t, out, "web-2,web-3,web-ext")
	runs := p.count("executing task")
	_, meta, err := c.Client.Health().Service("web", "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	extNode("HTTP 200 at 10:00:10")
	_, meta2, err := c.Client.Health().Service("web", "", true, nil)
	if err != nil || meta2.LastIndex <= meta.LastIndex {
		t.Fatalf("the output-only change did not move Consul's index (%d -> %d, %v)", meta.LastIndex, meta2.LastIndex, err)
	}
	// A change that does trigger a run proves the watch saw both.
	c.RegisterService(t, reg("web-4", "web", 8004), "passing")
	waitServices(t, out, "web-2,web-3,web-4,web-ext")
	if n := p.count("executing task") - runs; n != 1 {
		t.Fatalf("%d runs after an output-only change and one registration, want 1", n)
	}
}

// SIGTERM during an apply: ctsync stops watching, lets the apply finish and
// exits 0.
func TestGracefulShutdownDuringApply(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	out, varFile := newTaskDir(t)
	work := t.TempDir()
	cfg := writeFile(t, work, "config.hcl", config(t, c.Addr, filepath.Join(work, "sync-tasks"),
		taskSpec{name: "gated", module: module("gated"), services: `"web"`,
			extra: fmt.Sprintf("variable_files = [%q]", varFile)}))
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	p := startCtsync(t, work, "start", "-config-file", cfg)
	testutil.Eventually(t, 60*time.Second, "the apply to start", func() bool {
		_, err := os.Stat(filepath.Join(out, "started"))
		return err == nil
	})
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the shutdown to begin", func() bool {
		return p.count("signal received to initiate graceful shutdown") > 0
	})
	writeFile(t, out, "gate", "")
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	if got := ids(readServices(t, out)); got != "web-1" {
		t.Fatalf("the apply in progress did not finish: services.json has %q", got)
	}
	// CTS's lines, which operators' log alerts look for.
	for _, want := range []string{"[INFO]  ctrl: task completed: task_name=gated ",
		"[INFO]  cli: signal received to initiate graceful shutdown: signal=terminated ", "[INFO]  cli: graceful shutdown\n"} {
		if !strings.Contains(p.out.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, p.out.String())
		}
	}
}

// A change that arrives while the task's apply is running is applied
// right after it; it is never lost and the task never runs twice at once.
func TestChangeDuringSlowApply(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	out, varFile := newTaskDir(t)
	work := t.TempDir()
	cfg := writeFile(t, work, "config.hcl", config(t, c.Addr, filepath.Join(work, "sync-tasks"),
		taskSpec{name: "gated", module: module("gated"), services: `"web"`,
			extra: fmt.Sprintf("variable_files = [%q]", varFile)}))
	gate := filepath.Join(out, "gate")
	writeFile(t, out, "gate", "")

	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	startCtsync(t, work, "start", "-config-file", cfg)
	waitServices(t, out, "web-1")

	// Close the gate, trigger run 2 and wait until it is inside its apply.
	if err := os.Remove(gate); err != nil {
		t.Fatal(err)
	}
	c.RegisterService(t, reg("web-2", "web", 8002), "passing")
	testutil.Eventually(t, 60*time.Second, "second apply to start", func() bool {
		b, _ := os.ReadFile(filepath.Join(out, "started"))
		return strings.Count(string(b), "started") == 2
	})
	// Change the catalog during the apply, then let it finish.
	c.RegisterService(t, reg("web-3", "web", 8003), "passing")
	writeFile(t, out, "gate", "")
	waitServices(t, out, "web-1,web-2,web-3")
}

// Consul restarts (a dev agent comes back empty); ctsync reconnects and
// follows the new catalog.
func TestConsulRestart(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	out, varFile := newTaskDir(t)
	work := t.TempDir()
	// The state must survive the restart of a dev agent, so keep it local.
	cfg := writeFile(t, work, "config.hcl", config(t, c.Addr, filepath.Join(work, "sync-tasks"),
		taskSpec{name: "web-task", module: module("services_file"), services: `"web"`,
			extra: fmt.Sprintf("variable_files = [%q]", varFile)})+
		fmt.Sprintf("\ndriver \"terraform\" {\n  backend \"local\" {\n    path = %q\n  }\n}\n", filepath.Join(work, "state.tfstate")))

	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	c.RegisterService(t, reg("web-2", "web", 8002), "passing")
	startCtsync(t, work, "start", "-config-file", cfg)
	waitServices(t, out, "web-1,web-2")

	c.Restart()
	c.RegisterService(t, reg("web-2", "web", 8002), "passing")
	c.RegisterService(t, reg("web-9", "web", 8009), "passing")
	waitServices(t, out, "web-2,web-9")
}

// Service data with characters that mean something in HCL, templates,
// shells or JSON reaches the module byte for byte.
func TestHostileServiceData(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	out, varFile := newTaskDir(t)
	work := t.TempDir()
	cfg := writeFile(t, work, "config.hcl", config(t, c.Addr, filepath.Join(work, "sync-tasks"),
		taskSpec{name: "hostile", module: module("services_file"), services: `"web"`,
			extra: fmt.Sprintf("variable_files = [%q]", varFile)}))
	hostile := []string{
		`quote " and 'single'`,
		"${file(\"/etc/passwd\")}",
		"%{ if true }x%{ endif }",
		`back\slash \n not a newline`,
		"real\nnewline\ttab",
		"unicode: žluťoučký kůň 🚀 日本語",
		"<script>&amp;</script>",
		"$(rm -rf /) `id`",
	}
	r := reg("web-1", "web", 8001)
	r.Tags = hostile
	r.Meta = map[string]string{}
	for i, h := range hostile {
		r.Meta[fmt.Sprintf("k%d", i)] = h
	}
	c.RegisterService(t, r, "passing")
	startCtsync(t, work, "start", "-config-file", cfg)

	got := waitServices(t, out, "web-1")["web-1.node-1.dc1"]
	wantTags := append([]string(nil), hostile...)
	sortStrings(wantTags)
	if fmt.Sprint(got.Tags) != fmt.Sprint(wantTags) {
		t.Errorf("tags changed on the way:\n got %q\nwant %q", got.Tags, wantTags)
	}
	for k, v := range r.Meta {
		if got.Meta[k] != v {
			t.Errorf("meta %s: got %q want %q", k, got.Meta[k], v)
		}
	}
}

// A broken configuration exits with code 15 and names the file and line.
func TestBadConfigExits15(t *testing.T) {
	skipShort(t)
	work := t.TempDir()
	cfg := writeFile(t, work, "bad.hcl", "log_level = \"INFO\"\n\ntask {\n  name = \"a\"\n  module = \"./m\"\n  condition \"services\" {\n    names = [\"web\"]\n    bogus_field = 1\n  }\n}\n")
	p := startCtsync(t, work, "start", "-config-file", cfg)
	if code := p.wait(t, 30*time.Second); code != 15 {
		t.Fatalf("exit code %d, want 15; output:\n%s", code, p.out.String())
	}
	if out := p.out.String(); !strings.Contains(out, "bad.hcl:8") || !strings.Contains(out, "bogus_field") {
		t.Fatalf("error does not name file:line and field:\n%s", out)
	}
}

// -once runs every task in parallel and exits 0; a failing task makes it
// exit non-zero and the error names the task and Terraform's message.
func TestOnceMode(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	work := t.TempDir()
	var tasks []taskSpec
	var outs []string
	for i := 0; i < 3; i++ {
		out, varFile := newTaskDir(t)
		outs = append(outs, out)
		tasks = append(tasks, taskSpec{name: fmt.Sprintf("t%d", i), module: module("services_file"), services: `"web"`,
			extra: fmt.Sprintf("variable_files = [%q]", varFile)})
	}
	cfg := writeFile(t, work, "config.hcl", config(t, c.Addr, filepath.Join(work, "sync-tasks"), tasks...))
	p := startCtsync(t, work, "start", "-once", "-config-file", cfg)
	if code := p.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	for _, out := range outs {
		if ids(readServices(t, out)) != "web-1" {
			t.Fatalf("task output in %s missing", out)
		}
	}
	// CTS's lines: one "task completed" per task, in task order (the runs
	// are parallel), then "graceful shutdown".
	log := p.out.String()
	last := -1
	for _, ts := range tasks {
		line := "[INFO]  ctrl: task completed: task_name=" + ts.name + "\n"
		i := strings.Index(log, line)
		if i < 0 || strings.Count(log, line) != 1 || i < last {
			t.Fatalf("%q: not once, or not in task order:\n%s", line, log)
		}
		last = i
	}
	if i := strings.Index(log, "[INFO]  cli: graceful shutdown\n"); i < last {
		t.Fatalf("no graceful shutdown line after the tasks:\n%s", log)
	}
	// The summary table on standard output.
	if !strings.Contains(log, "==> Run summary: 3 tasks, 3 succeeded, 0 failed, in ") ||
		!regexp.MustCompile(`\n    t1 +succeeded +[0-9.]+m?s\n`).MatchString(log) {
		t.Fatalf("no run summary:\n%s", log)
	}

	cfg2 := writeFile(t, work, "fail.hcl", config(t, c.Addr, filepath.Join(work, "sync-tasks-2"),
		taskSpec{name: "broken", module: module("failing"), services: `"web"`},
		taskSpec{name: "firewall", module: module("failing_apply"), services: `"web"`}))
	p = startCtsync(t, work, "start", "-once", "-log-format=json", "-config-file", cfg2)
	if code := p.wait(t, 3*time.Minute); code == 0 {
		t.Fatal("-once with a failing task exited 0")
	}
	if out := p.out.String(); !strings.Contains(out, "broken") || !strings.Contains(out, "this module always fails") {
		t.Fatalf("failure not reported with task name and Terraform's error:\n%s", out)
	}
	// The summary says Terraform's diagnostic (with the author's message
	// of a failed condition, with what the provisioner printed), not the
	// provisioner's command line that Terraform's detail starts with.
	if out := p.out.String(); !strings.Contains(out, "==> Run summary: 2 tasks, 0 succeeded, 2 failed, in ") ||
		!regexp.MustCompile(`\n    broken +failed +[0-9.]+m?s +Error: Resource precondition failed: this module always fails\n`).MatchString(out) ||
		!regexp.MustCompile(`\n    firewall +failed +[0-9.]+m?s +Error: local-exec provisioner error: exit status 3\. Output: 503 Service Unavailable\n`).MatchString(out) {
		t.Fatalf("no run summary with the failures:\n%s", out)
	}
	// -log-format=json: CTS's message and key, in JSON.
	if out := p.out.String(); !strings.Contains(out, `"msg":"error applying task"`) || !strings.Contains(out, `"task_name":"broken"`) {
		t.Fatalf("-log-format=json: no JSON error line:\n%s", out)
	}
}

// -inspect prints the plan and applies nothing.
func TestInspectMode(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	out, varFile := newTaskDir(t)
	work := t.TempDir()
	otherOut, otherVars := newTaskDir(t)
	cfg := writeFile(t, work, "config.hcl", config(t, c.Addr, filepath.Join(work, "sync-tasks"),
		taskSpec{name: "plan-me", module: module("services_file"), services: `"web"`,
			extra: fmt.Sprintf("variable_files = [%q]", varFile)},
		taskSpec{name: "not-me", module: module("services_file"), services: `"web"`,
			extra: fmt.Sprintf("variable_files = [%q]", otherVars)}))
	p := startCtsync(t, work, "start", "-inspect-task", "plan-me", "-config-file", cfg)
	if code := p.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	// Terraform's plan, as CTS prints it, then CTS's last line.
	for _, want := range []string{"local_file.services", "Plan: 1 to add, 0 to change, 0 to destroy.", "[INFO]  cli: graceful shutdown\n",
		"==> Plan summary: 1 tasks, 1 planned, 0 failed, in "} {
		if !strings.Contains(p.out.String(), want) {
			t.Fatalf("%q not printed:\n%s", want, p.out.String())
		}
	}
	if readServices(t, out) != nil || readServices(t, otherOut) != nil {
		t.Fatal("inspect applied the plan")
	}
	// CTS's line counts the tasks -inspect-task names, not the configured ones.
	if got := p.out.String(); !strings.Contains(got, "running controller in inspect mode: tasks=1\n") || strings.Contains(got, "not-me") {
		t.Errorf("the inspect line does not count only plan-me, or not-me was planned:\n%s", got)
	}
}
