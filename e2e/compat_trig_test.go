package e2e

// CTS scenarios about when tasks run: several tasks at start-up naming a
// provider that has no terraform_provider block, and a schedule task
// created while the daemon runs.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/testutil"
)

// tfvarsIDs returns the sorted service IDs in a task's terraform.tfvars,
// read the way CTS's scenario reads them.
func tfvarsIDs(work, taskName string) string {
	b, err := os.ReadFile(filepath.Join(work, taskName, "terraform.tfvars"))
	if err != nil {
		return ""
	}
	var ids []string
	for _, m := range regexp.MustCompile(`\s+id\s+= "([^"]+)`).FindAllSubmatch(b, -1) {
		ids = append(ids, string(m[1]))
	}
	slices.Sort(ids)
	return strings.Join(ids, ",")
}

// taskStatuses returns each task's status from /v1/status/tasks.
func taskStatuses(port int) map[string]string {
	_, _, b := haGet(port, "/v1/status/tasks")
	var body map[string]struct {
		Status string `json:"status"`
	}
	if json.Unmarshal(b, &body) != nil {
		return nil
	}
	out := map[string]string{}
	for name, st := range body {
		out[name] = st.Status
	}
	return out
}

// CTS's multi-task scenario (TestTasksUpdate): three tasks on api,
// api+db and api+web, each with providers = ["local"] and no
// terraform_provider block, the default buffer period. Every task shows as
// run in /v1/status/tasks, the rendered inputs follow registrations and
// deregistrations, and SIGINT ends the daemon with exit code 0.
func TestCompatTasksUpdate(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	reg := func(id, name, addr string, port int) {
		c.RegisterService(t, &api.AgentServiceRegistration{ID: id, Name: name, Address: addr, Port: port}, api.HealthPassing)
	}
	reg("api", "api", "1.2.3.4", 8080)
	reg("web", "web", "5.6.7.8", 8000)
	reg("db", "db", "10.10.10.10", 8000)

	dir := t.TempDir()
	work := filepath.Join(dir, "sync-tasks")
	port := testutil.FreePort(t)
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "log_level = \"DEBUG\"\nworking_dir = %q\nport = %d\nconsul {\n  address = %q\n}\ndriver \"terraform\" {\n  log = true\n}\n",
		work, port, c.Addr)
	tasks := map[string]string{"e2e_task_api": `"api"`, "e2e_task_api_db": `"api", "db"`, "e2e_task_api_web": `"api", "web"`}
	for _, name := range []string{"e2e_task_api_db", "e2e_task_api_web", "e2e_task_api"} {
		fmt.Fprintf(&cfg, "\ntask {\n  name = %q\n  description = \"multi-task scenario\"\n  providers = [\"local\"]\n  module = %q\n  condition \"services\" {\n    names = [%s]\n  }\n}\n",
			name, module("instances_file"), tasks[name])
	}
	p := startCtsync(t, dir, "start", "-config-file", writeFile(t, dir, "config.hcl", cfg.String()))

	start := time.Now()
	testutil.Eventually(t, 90*time.Second, "every task to show as run in /v1/status/tasks", func() bool {
		st := taskStatuses(port)
		if len(st) != len(tasks) {
			return false
		}
		for _, s := range st {
			if s == "unknown" || s == "" {
				return false
			}
		}
		return true
	})
	t.Logf("every task run %s after start", time.Since(start).Round(time.Millisecond))
	want := map[string]string{"e2e_task_api": "api", "e2e_task_api_db": "api,db", "e2e_task_api_web": "api,web"}
	waitIDs := func(what string) {
		t.Helper()
		testutil.Eventually(t, 60*time.Second, what, func() bool {
			for name, ids := range want {
				if tfvarsIDs(work, name) != ids {
					return false
				}
			}
			return true
		})
	}
	waitIDs("terraform.tfvars of every task to list its services")
	if _, err := os.Stat(filepath.Join(work, "resources", "db.txt")); err != nil {
		t.Fatalf("the module did not write its files: %v", err)
	}

	reg("api_new", "api", "5.6.7.8", 8080)
	reg("web_new", "web", "5.6.7.8", 8080)
	want = map[string]string{"e2e_task_api": "api,api_new", "e2e_task_api_db": "api,api_new,db", "e2e_task_api_web": "api,api_new,web,web_new"}
	waitIDs("the new instances in every task's terraform.tfvars")

	if err := c.Client.Agent().ServiceDeregister("api_new"); err != nil {
		t.Fatal(err)
	}
	want = map[string]string{"e2e_task_api": "api", "e2e_task_api_db": "api,db", "e2e_task_api_web": "api,web,web_new"}
	waitIDs("the deregistered instance gone from every task's terraform.tfvars")

	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit code %d on SIGINT, want 0", code)
	}
	// CTS's lines, which operators' log alerts look for.
	for _, want := range []string{"[INFO]  cli: running controller in daemon mode\n",
		"[INFO]  cli: signal received to initiate graceful shutdown: signal=interrupt ", "[INFO]  cli: graceful shutdown\n"} {
		if !strings.Contains(p.out.String(), want) {
			t.Errorf("the log lacks %q", want)
		}
	}
}

// A schedule task created through the CLI while the daemon runs
// (`task create -task-file`, cron every 10 seconds) runs on its schedule
// from its creation: a schedule event within 17 s, as CTS's scenario
// (TestCondition_Schedule_CreateAndDeleteCLI) expects, and one more ~10 s
// later.
func TestCompatScheduleCreatedAtRunTime(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	c.RegisterService(t, &api.AgentServiceRegistration{ID: "web-1", Name: "web", Port: 1}, api.HealthPassing)
	dir, out := t.TempDir(), t.TempDir()
	port := testutil.FreePort(t)
	cfg := fmt.Sprintf("log_level = \"DEBUG\"\nworking_dir = %q\nport = %d\nconsul {\n  address = %q\n}\nbuffer_period {\n  enabled = false\n}\n",
		filepath.Join(dir, "sync-tasks"), port, c.Addr)
	cfg += fmt.Sprintf("\ntask {\n  name = \"web\"\n  module = %q\n  variables = { dir = %q }\n  condition \"services\" {\n    names = [\"web\"]\n  }\n}\n",
		module("services_file"), out)
	startCtsync(t, dir, "start", "-config-file", writeFile(t, dir, "config.hcl", cfg))
	testutil.Eventually(t, 90*time.Second, "the configured task to run", func() bool { return taskStatuses(port)["web"] == "successful" })

	taskFile := writeFile(t, dir, "task.hcl", fmt.Sprintf(`
task {
  name      = "created_scheduled_task"
  module    = %q
  variables = { dir = %q }
  condition "schedule" {
    cron = "*/10 * * * * * *"
  }
  module_input "services" {
    names = ["web"]
  }
}
`, module("services_file"), t.TempDir()))
	o, code := runCLI(ctsyncBin, []string{fmt.Sprintf("CTS_ADDRESS=http://127.0.0.1:%d", port)}, "yes\n",
		"task", "create", "-auto-approve", "-task-file", taskFile)
	if code != 0 {
		t.Fatalf("task create: exit %d\n%s", code, o)
	}
	created := time.Now()
	schedule := func() []apiEvent {
		var out []apiEvent
		for _, ev := range apiEvents(t, port, "created_scheduled_task") {
			if ev.Trigger == "schedule" && ev.Success {
				out = append(out, ev)
			}
		}
		return out
	}
	testutil.Eventually(t, 17*time.Second, "a schedule event of the created task", func() bool { return len(schedule()) >= 1 })
	t.Logf("first schedule event %s after creation", time.Since(created).Round(time.Millisecond))
	testutil.Eventually(t, 15*time.Second, "a second schedule event", func() bool { return len(schedule()) >= 2 })

	// Deleted through the CLI, with CTS's prompt and result lines.
	o, code = runCLI(ctsyncBin, []string{fmt.Sprintf("CTS_ADDRESS=http://127.0.0.1:%d", port)}, "yes\n",
		"task", "delete", "created_scheduled_task")
	if code != 0 || !strings.Contains(o, "==> Do you want to delete 'created_scheduled_task'?\n") ||
		!strings.Contains(o, "==> Task 'created_scheduled_task' has been marked for deletion and will be deleted when not running.\n") {
		t.Fatalf("task delete: exit %d\n%s", code, o)
	}
	testutil.Eventually(t, 30*time.Second, "the deleted task to be gone", func() bool {
		st, _, _ := haGet(port, "/v1/status/tasks/created_scheduled_task")
		return st == http.StatusNotFound
	})
}

// CTS's module input scenarios (e2e/module_input_test.go): a task runs when
// its condition changes, never because only its module input's data did;
// the condition's run then reads the module input as it is. Three tasks,
// one per condition type with a module input of another type; the
// catalog-services one writes its regexp as a one-element list (CTS's weak
// typing), and a fourth, the same as the first, is created at run time
// with `task create -task-file`.
func TestCompatModuleInputsDoNotTrigger(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	dir := t.TempDir()
	port := testutil.FreePort(t)
	out := map[string]string{}
	for _, n := range []string{"cat_mi", "svc_mi", "kv_mi", "created_mi"} {
		out[n] = t.TempDir()
	}
	catTask := func(name string) string {
		return fmt.Sprintf(`
task {
  name      = %q
  module    = %q
  variables = { dir = %q }
  condition "catalog-services" {
    regexp              = ["web"]
    use_as_module_input = false
  }
  module_input "services" {
    regexp = "api"
    filter = "Service.Tags not contains \"filtered\""
    cts_user_defined_meta {
      meta_key = "meta_value"
    }
  }
}
`, name, module("compat_services"), out[name])
	}
	cfg := fmt.Sprintf("log_level = \"DEBUG\"\nworking_dir = %q\nport = %d\nconsul {\n  address = %q\n}\nbuffer_period {\n  enabled = false\n}\n",
		filepath.Join(dir, "sync-tasks"), port, c.Addr) + catTask("cat_mi") + fmt.Sprintf(`
task {
  name      = "svc_mi"
  module    = %q
  variables = { dir = %q }
  condition "services" {
    names               = ["db"]
    use_as_module_input = true
  }
  module_input "consul-kv" {
    path    = "key"
    recurse = true
  }
}

task {
  name      = "kv_mi"
  module    = %q
  variables = { dir = %q }
  condition "consul-kv" {
    path                = "key"
    use_as_module_input = false
  }
  module_input "services" {
    names = ["api"]
  }
}
`, module("compat_kv"), out["svc_mi"], module("compat_services"), out["kv_mi"])
	p := startCtsync(t, dir, "start", "-config-file", writeFile(t, dir, "config.hcl", cfg))
	testutil.Eventually(t, 90*time.Second, "the start-up runs", func() bool {
		st := taskStatuses(port)
		return st["cat_mi"] == "successful" && st["svc_mi"] == "successful" && st["kv_mi"] == "successful"
	})
	o, code := runCLI(ctsyncBin, []string{fmt.Sprintf("CTS_ADDRESS=http://127.0.0.1:%d", port)}, "",
		"task", "create", "-auto-approve", "-task-file", writeFile(t, dir, "task.hcl", catTask("created_mi")))
	if code != 0 {
		t.Fatalf("task create: exit %d\n%s", code, o)
	}
	testutil.Eventually(t, 90*time.Second, "the created task's first run", func() bool {
		return taskStatuses(port)["created_mi"] == "successful"
	})
	events := map[string]int{}
	for n := range out {
		events[n] = len(apiEvents(t, port, n))
		waitJSON(t, out[n], "services.json", map[string]any{})
	}
	runs := func(name string) int { return len(apiEvents(t, port, name)) - events[name] }

	// 1. Only module input data changes: the api instances (one filtered
	// out), the KV keys under key/. Nothing runs; ctsync says it saw each
	// change.
	seen := map[string]int{}
	for n := range out {
		seen[n] = p.countLog(moduleInputUnchanged, n)
	}
	c.RegisterService(t, &api.AgentServiceRegistration{ID: "api", Name: "api", Port: 1}, api.HealthPassing)
	c.RegisterService(t, &api.AgentServiceRegistration{ID: "api-filtered", Name: "api", Port: 2, Tags: []string{"filtered"}}, api.HealthPassing)
	for _, kv := range [][2]string{{"key/recurse", "value-recurse"}} {
		if _, err := c.Client.KV().Put(&api.KVPair{Key: kv[0], Value: []byte(kv[1])}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"cat_mi", "created_mi", "kv_mi", "svc_mi"} {
		testutil.Eventually(t, 60*time.Second, "ctsync to see the module input change of "+n, func() bool {
			return p.countLog(moduleInputUnchanged, n) > seen[n]
		})
	}
	for n := range out {
		if r := runs(n); r != 0 {
			t.Fatalf("task %s ran %d times for a change of its module input only", n, r)
		}
	}

	// 2. The conditions change: each task runs once, with the module
	// input data of step 1. (The KV condition first: svc_mi reads that
	// key too, as a module input, and its change would not run it.)
	if _, err := c.Client.KV().Put(&api.KVPair{Key: "key", Value: []byte("value")}, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "kv_mi to run", func() bool { return runs("kv_mi") >= 1 })
	c.RegisterService(t, &api.AgentServiceRegistration{ID: "web", Name: "web", Port: 3}, api.HealthPassing)
	c.RegisterService(t, &api.AgentServiceRegistration{ID: "db", Name: "db", Port: 4}, api.HealthPassing)
	rendered := func(name, want, meta string) func() bool {
		return func() bool {
			s := readServices(t, out[name])
			if s == nil || ids(s) != want {
				return false
			}
			for _, svc := range s {
				if svc.CTSUserDefinedMeta["meta_key"] != meta {
					return false
				}
			}
			return true
		}
	}
	for _, n := range []string{"cat_mi", "created_mi"} {
		testutil.Eventually(t, 60*time.Second, n+" to run with the api instance not filtered out", rendered(n, "api", "meta_value"))
	}
	testutil.Eventually(t, 60*time.Second, "kv_mi to run with the api instances", rendered("kv_mi", "api,api-filtered", ""))
	waitJSON(t, out["svc_mi"], "consul_kv.json", map[string]string{"key": "value", "key/recurse": "value-recurse"})
	for n := range out {
		testutil.Eventually(t, 30*time.Second, "the run of "+n+" to be recorded", func() bool { return runs(n) >= 1 })
		if r := runs(n); r != 1 {
			t.Errorf("task %s ran %d times for one change of its condition, want 1", n, r)
		}
	}
}

// SIGINT during -once: CTS's line naming the signal, the run in progress
// interrupted, exit code 12.
func TestCompatOnceInterrupted(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	out, varFile := newTaskDir(t)
	work := t.TempDir()
	cfg := writeFile(t, work, "config.hcl", config(t, c.Addr, filepath.Join(work, "sync-tasks"),
		taskSpec{name: "gated", module: module("gated"), services: `"web"`, extra: fmt.Sprintf("variable_files = [%q]", varFile)}))
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	p := startCtsync(t, work, "start", "-once", "-config-file", cfg)
	testutil.Eventually(t, 60*time.Second, "the apply to start", func() bool {
		_, err := os.Stat(filepath.Join(out, "started"))
		return err == nil
	})
	must(t, p.cmd.Process.Signal(syscall.SIGINT))
	const line = "[INFO]  cli: signal received to initiate graceful shutdown: signal=interrupt\n"
	testutil.Eventually(t, 10*time.Second, "CTS's signal line", func() bool { return p.count(line) == 1 })
	writeFile(t, out, "gate", "")
	if code := p.wait(t, 90*time.Second); code != 12 {
		t.Fatalf("exit code %d after SIGINT during -once, want 12", code)
	}
}
