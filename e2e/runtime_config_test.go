package e2e

// Configuration at run time (issue 38), against real Consul and real
// Terraform: SIGHUP reloads the configuration files (tasks added, changed,
// removed; a bad file changes nothing), tasks created through the API
// survive a restart of a daemon without high availability, and PATCH
// changes any field of a task created through the API with the checks of
// a create.

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/testutil"
)

// servicesTaskHCL is a task block of the services_file module writing to
// the directory of varFile.
func servicesTaskHCL(name, varFile, services string) string {
	return fmt.Sprintf(`
task {
  name           = %q
  module         = %q
  variable_files = [%q]
  condition "services" {
    names = [%s]
  }
}
`, name, module("services_file"), varFile, services)
}

// TestReloadTasksEndToEnd: SIGHUP puts the edited configuration file in
// force: a task added runs, a task changed (its condition) runs with its
// new settings and keeps its history, a task removed is deleted with its
// resources kept; systemd's status says reloaded. A file with an error
// changes nothing: the status says reload refused with the file and line,
// the daemon goes on, and the tasks are as they were.
func TestReloadTasksEndToEnd(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	c.RegisterService(t, reg("db-1", "db", 9001), "passing")
	work := t.TempDir()
	port := testutil.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	webOut, webVars := newTaskDir(t)
	goneOut, goneVars := newTaskDir(t)
	addedOut, addedVars := newTaskDir(t)
	cfg := daemonConfig(t, work, port, c.Addr, `log_level = "DEBUG"`+
		servicesTaskHCL("web", webVars, `"web"`)+servicesTaskHCL("gone", goneVars, `"db"`))
	sock, next := notifySocket(t)
	p := startCtsyncEnv(t, work, []string{"NOTIFY_SOCKET=" + sock}, "start", "-config-file", cfg)
	next("READY=1")
	waitServices(t, webOut, "web-1")
	waitServices(t, goneOut, "db-1")
	waitEvents(t, base, "web", 60*time.Second, func(evs []store.Event) bool { return len(evs) == 1 })

	// web changes, gone goes, added comes.
	daemonConfig(t, work, port, c.Addr, `log_level = "DEBUG"`+
		servicesTaskHCL("web", webVars, `"web", "db"`)+servicesTaskHCL("added", addedVars, `"db"`))
	must(t, p.cmd.Process.Signal(syscall.SIGHUP))
	next("RELOADING=1")
	if m := next("READY=1"); !strings.Contains(m, "STATUS=reloaded") {
		t.Fatalf("status after the reload: %q", m)
	}
	waitServices(t, webOut, "db-1,web-1")
	waitServices(t, addedOut, "db-1")
	evs := waitEvents(t, base, "web", 60*time.Second, func(evs []store.Event) bool { return len(evs) == 2 })
	if !evs[0].Success {
		t.Errorf("the run of the changed task: %+v", evs[0])
	}
	code, body := apiCall(t, "GET", base+"/v1/tasks/gone", "", nil)
	expectStatus(t, "the removed task", 404, code, body)
	if got := readServices(t, goneOut); ids(got) != "db-1" {
		t.Errorf("the removed task's resources were not kept: %v", got)
	}
	testutil.Eventually(t, 30*time.Second, "the removal logged", func() bool {
		return p.countLog("reload: task removed from the configuration deleted; its resources are kept", "gone") > 0
	})

	// A file with an error: nothing changes, the daemon goes on.
	bad := daemonConfig(t, work, port, c.Addr, `log_level = "DEBUG"`+
		servicesTaskHCL("web", webVars, `"web"`)+"\ntask {\n  name = \"broken\"\n  bogus = 1\n}\n")
	must(t, p.cmd.Process.Signal(syscall.SIGHUP))
	next("RELOADING=1")
	m := next("READY=1")
	if !strings.Contains(m, "STATUS=reload refused: ") || !strings.Contains(m, filepath.Base(bad)+":") {
		t.Errorf("status after a bad file: %q", m)
	}
	testutil.Eventually(t, 30*time.Second, "the refusal logged with the file and line", func() bool {
		return strings.Contains(p.out.String(), "reload refused") && strings.Contains(p.out.String(), filepath.Base(bad)+":")
	})
	for _, name := range []string{"web", "added"} {
		code, body := apiCall(t, "GET", base+"/v1/tasks/"+name, "", nil)
		expectStatus(t, "task "+name+" after a refused reload", 200, code, body)
	}
	if got := readServices(t, webOut); ids(got) != "db-1,web-1" {
		t.Errorf("a refused reload changed the web task: %v", got)
	}
	if n := len(taskEvents(t, base, "web")); n != 2 {
		t.Errorf("the web task ran after a refused reload: %d events", n)
	}
	select {
	case <-p.done:
		t.Fatalf("ctsync exited after a bad file (%d)", p.code)
	default:
	}
	must(t, p.cmd.Process.Signal(syscall.SIGTERM))
	if code := p.wait(t, 90*time.Second); code != 0 {
		t.Errorf("exit code %d", code)
	}
}

// TestAPITasksPersistEndToEnd: a daemon without high availability keeps
// the tasks created through the API in its history database. After a
// restart the task created (and changed through PATCH) is back with its
// settings and its history, and runs nothing when nothing changed; the
// task deleted through the API stays deleted; a task of the file added
// with the name of a stored one wins, and the conflict is logged.
func TestAPITasksPersistEndToEnd(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	c.RegisterService(t, reg("db-1", "db", 9001), "passing")
	work := t.TempDir()
	port := testutil.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	fileOut, fileVars := newTaskDir(t)
	apiOut := t.TempDir()
	tmpOut := t.TempDir()
	laterOut, laterVars := newTaskDir(t)
	cfg := daemonConfig(t, work, port, c.Addr, `log_level = "DEBUG"`+servicesTaskHCL("file", fileVars, `"web"`))
	stop := func(p *proc) {
		t.Helper()
		must(t, p.cmd.Process.Signal(syscall.SIGTERM))
		if code := p.wait(t, 90*time.Second); code != 0 {
			t.Fatalf("ctsync exited with %d", code)
		}
	}
	p := startCtsync(t, work, "start", "-config-file", cfg)
	waitServices(t, fileOut, "web-1")
	for _, tk := range []struct{ name, dir string }{{"api", apiOut}, {"tmp", tmpOut}, {"later", laterOut}} {
		code, body := apiCall(t, "POST", base+"/v1/tasks", newTaskJSON(tk.name, module("services_file"), tk.dir), nil)
		expectStatus(t, "create "+tk.name, 201, code, body)
	}
	waitServices(t, apiOut, "web-1")
	// A change of the task's settings through the API: its condition.
	code, body := apiCall(t, "PATCH", base+"/v1/tasks/api", `{"condition":{"services":{"names":["web","db"]}}}`, nil)
	expectStatus(t, "patch api", 200, code, body)
	waitServices(t, apiOut, "db-1,web-1")
	apiEvs := waitEvents(t, base, "api", 60*time.Second, func(evs []store.Event) bool { return len(evs) == 2 })
	code, body = apiCall(t, "DELETE", base+"/v1/tasks/tmp", "", nil)
	expectStatus(t, "delete tmp", 202, code, body)
	testutil.Eventually(t, 60*time.Second, "tmp gone", func() bool {
		code, _ := apiCall(t, "GET", base+"/v1/tasks/tmp", "", nil)
		return code == 404
	})
	stop(p)

	// Started again, with a task named "later" in the file now.
	daemonConfig(t, work, port, c.Addr, `log_level = "DEBUG"`+servicesTaskHCL("file", fileVars, `"web"`)+
		servicesTaskHCL("later", laterVars, `"db"`))
	p = startCtsync(t, work, "start", "-config-file", cfg)
	testutil.Eventually(t, 90*time.Second, "api considered and skipped", func() bool {
		return p.countLog("desired state unchanged since last apply, skipping run", "api") > 0
	})
	var got struct {
		Task struct {
			Condition struct {
				Services struct {
					Names []string `json:"names"`
				} `json:"services"`
			} `json:"condition"`
		} `json:"task"`
	}
	code, body = apiCall(t, "GET", base+"/v1/tasks/api", "", nil)
	expectStatus(t, "the api task after the restart", 200, code, body)
	must(t, json.Unmarshal([]byte(body), &got))
	if n := got.Task.Condition.Services.Names; strings.Join(n, ",") != "web,db" {
		t.Errorf("the restored task's condition: %v", n)
	}
	if evs := taskEvents(t, base, "api"); len(evs) != 2 || evs[0].ID != apiEvs[0].ID {
		t.Errorf("the restored task's history: %+v", evs)
	}
	code, body = apiCall(t, "GET", base+"/v1/tasks/tmp", "", nil)
	expectStatus(t, "the deleted task after the restart", 404, code, body)
	waitServices(t, laterOut, "db-1") // the file's "later" (db), not the stored one (web)
	testutil.Eventually(t, 30*time.Second, "the conflict logged", func() bool {
		return p.countLog("the stored task is ignored", "later") > 0
	})
	stop(p)
}

// TestPatchTaskEndToEnd: PATCH of a task created through the API with the
// checks of a create: a variable or a module outside api_tasks is refused
// (403) and changes nothing; a task of the configuration file changes only
// in enabled (409 naming the field); a good change runs; ctsync task
// update sends a task file.
func TestPatchTaskEndToEnd(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	c.RegisterService(t, reg("db-1", "db", 9001), "passing")
	work := t.TempDir()
	port := testutil.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	fileOut, fileVars := newTaskDir(t)
	apiOut := t.TempDir()
	allowed := filepath.Join(testutil.RepoRoot(), "e2e", "testdata", "modules")
	cfg := daemonConfig(t, work, port, c.Addr, fmt.Sprintf(`log_level = "DEBUG"
api_tasks {
  allowed_modules   = ["%s/services_*"]
  allowed_variables = ["dir"]
}
`, allowed)+servicesTaskHCL("file", fileVars, `"web"`))
	p := startCtsync(t, work, "start", "-config-file", cfg)
	waitServices(t, fileOut, "web-1")
	code, body := apiCall(t, "POST", base+"/v1/tasks", newTaskJSON("api", module("services_file"), apiOut), nil)
	expectStatus(t, "create", 201, code, body)
	waitServices(t, apiOut, "web-1")
	waitEvents(t, base, "api", 60*time.Second, func(evs []store.Event) bool { return len(evs) == 1 })

	for _, c := range []struct{ what, body, want string }{
		{"a variable outside the allowlist", `{"variables":{"dir":"\"/tmp\"","token":"\"x\""}}`, "(task.variables.token)"},
		{"a module outside the allowlist", fmt.Sprintf(`{"module":%q}`, filepath.Join(t.TempDir(), "mod")), "api_tasks.allowed_modules"},
	} {
		code, body := apiCall(t, "PATCH", base+"/v1/tasks/api", c.body, nil)
		expectStatus(t, c.what, 403, code, body)
		if !strings.Contains(body, c.want) {
			t.Errorf("%s: %s, want %q", c.what, body, c.want)
		}
	}
	code, body = apiCall(t, "PATCH", base+"/v1/tasks/file", `{"condition":{"services":{"names":["db"]}}}`, nil)
	expectStatus(t, "a field of a task of the file", 409, code, body)
	if !strings.Contains(body, "condition") || !strings.Contains(body, "configuration files") {
		t.Errorf("the 409 does not name the field and the files: %s", body)
	}
	code, body = apiCall(t, "PATCH", base+"/v1/tasks/file", `{"enabled":false}`, nil)
	expectStatus(t, "enabled of a task of the file", 200, code, body)
	if n := len(taskEvents(t, base, "api")); n != 1 {
		t.Errorf("a refused change ran the task: %d events", n)
	}

	// ctsync task update with a task file: the condition changes, and the
	// task runs with it.
	taskFile := writeFile(t, work, "api.hcl", fmt.Sprintf(`task {
  name      = "api"
  module    = %q
  variables = { dir = %q }
  condition "services" {
    names = ["web", "db"]
  }
}
`, module("services_file"), apiOut))
	out, code := runCLI(ctsyncBin, []string{"CTS_ADDRESS=" + base}, "", "task", "update", "-task-file", taskFile)
	if code != 0 || !strings.Contains(out, "Task 'api' updated") {
		t.Fatalf("task update: exit %d\n%s", code, out)
	}
	waitServices(t, apiOut, "db-1,web-1")
	if evs := waitEvents(t, base, "api", 60*time.Second, func(evs []store.Event) bool { return len(evs) == 2 }); !evs[0].Success {
		t.Errorf("the run after the update: %+v", evs[0])
	}
	must(t, p.cmd.Process.Signal(syscall.SIGTERM))
	p.wait(t, 90*time.Second)
}

// TestReloadUnderHAEndToEnd: under high availability each member reloads
// its own file, rolled over the cluster one member at a time (follower
// first): a task added to the follower's file waits there (a follower runs
// nothing, and its refresh of the cluster's records keeps the task: it is
// configured now), the leader's reload runs it, and after a failover the
// new leader has it and runs nothing it already applied.
func TestReloadUnderHAEndToEnd(t *testing.T) {
	skipShort(t)
	c := newHACluster(t)
	out, varFile := newTaskDir(t)
	addedOut, addedVars := newTaskDir(t)
	for _, id := range []string{"cts-a", "cts-b"} {
		c.add(&haInstance{id: id}, func(in *haInstance) string { return haConfig(in, varFile) })
	}
	c.register("web-1", "web", 8001)
	c.register("db-1", "db", 9001)
	for _, in := range c.insts {
		in.start(t)
	}
	leader := c.leading(90 * time.Second)
	waitFile(t, out, "web-1", 60*time.Second)
	var follower *haInstance
	for _, in := range c.insts {
		if in != leader {
			follower = in
		}
	}
	addTask := func(in *haInstance) {
		t.Helper()
		writeFile(t, in.work, "config.hcl", haConfig(in, varFile)+servicesTaskHCL("added", addedVars, `"db"`))
		must(t, in.proc().cmd.Process.Signal(syscall.SIGHUP))
		testutil.Eventually(t, 60*time.Second, in.id+" reloaded", func() bool {
			return in.proc().countLog("reload: task added", "added") > 0
		})
	}

	addTask(follower)
	// A change of the cluster's records (a task created through the API on
	// the leader) makes the follower apply them again: the task of its
	// file stays.
	apiOut := t.TempDir()
	code, body := haDo(t, "POST", leader.port, "/v1/tasks", newTaskJSON("api", module("services_file"), apiOut))
	if code != 201 {
		t.Fatalf("create api: %d %s", code, body)
	}
	testutil.Eventually(t, 60*time.Second, "the follower applying the cluster's records", func() bool {
		return follower.proc().countLog("ha: task created through the api added", "api") > 0
	})
	code, body = haDo(t, "PATCH", leader.port, "/v1/tasks/api", `{"condition":{"services":{"names":["web","db"]}}}`)
	if code != 200 {
		t.Fatalf("patch api: %d %s", code, body)
	}
	testutil.Eventually(t, 60*time.Second, "the follower applying the change of the API task", func() bool {
		return follower.proc().countLog("ha: task changed through the api updated", "api") > 0
	})
	if n := follower.proc().countLog("ha: task no longer in the cluster's records removed", "added"); n != 0 {
		t.Fatalf("the follower's refresh removed the task of its file")
	}
	if readServices(t, addedOut) != nil {
		t.Fatalf("the task added to the follower's file ran")
	}

	addTask(leader)
	waitFile(t, addedOut, "db-1", 60*time.Second)
	ran := leader.proc().count("executing task")

	// Failover: the follower leads, with the task, and runs nothing new.
	must(t, leader.proc().cmd.Process.Signal(syscall.SIGTERM))
	leader.proc().wait(t, 90*time.Second)
	next := c.leading(90 * time.Second)
	if next != follower {
		t.Fatalf("%s leads, want %s", next.id, follower.id)
	}
	if tasks := haTasks(t, next.port); !tasks["added"] {
		t.Fatalf("the new leader's tasks: %v", tasks)
	}
	// The settings of the API task changed through PATCH on the old
	// leader are the new leader's too.
	code, body = haDo(t, "GET", next.port, "/v1/tasks/api", "")
	if code != 200 || !strings.Contains(string(body), `"names":["web","db"]`) {
		t.Errorf("the API task on the new leader: %d %s", code, body)
	}
	testutil.Eventually(t, 90*time.Second, "added considered and skipped on the new leader", func() bool {
		return next.proc().countLog("desired state unchanged since last apply, skipping run", "added") > 0
	})
	if n := next.proc().countLog("executing task", "added"); n != 0 {
		t.Errorf("the new leader ran the added task %d times (the old one ran %d tasks)", n, ran)
	}
}
