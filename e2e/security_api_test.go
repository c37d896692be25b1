package e2e

// Tasks created through the API against the real daemon, Consul and
// Terraform (docs/security.md, docs/api): with an allowlist they set only
// the variables and read only the KV keys it allows, no other task's
// outputs and no cts_user_defined_meta; every check of
// configuration loading answers before the 201; a deleted task's name is
// "being deleted" (409) until its last run ends; under high availability a
// create whose record Consul refuses leaves no trace; a JSON configuration
// with a bad provider argument name is a configuration error (exit 15)
// with file:line.

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/testutil"
)

func TestAPITaskAllowlistAndSubmissionChecksEndToEnd(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	_, err := c.Client.KV().Put(&api.KVPair{Key: "secrets/db_password", Value: []byte("hunter2-0123456789")}, nil)
	must(t, err)
	work := t.TempDir()
	port := testutil.FreePort(t)
	cfg := writeFile(t, work, "config.hcl", fmt.Sprintf(`
working_dir = %q
port        = %d
consul {
  address = %q
}
buffer_period {
  enabled = false
}
api_tasks {
  allowed_modules     = ["%s/*"]
  allowed_variables   = ["dir"]
  allowed_kv_prefixes = ["net/"]
}
`, filepath.Join(work, "sync-tasks"), port, c.Addr, filepath.Join(testutil.RepoRoot(), "e2e", "testdata", "modules")))
	p := startCtsync(t, work, "start", "-config-file", cfg)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	testutil.Eventually(t, 60*time.Second, "the API up", func() bool {
		code, _, _ := haGet(port, "/v1/health")
		return code == http.StatusOK
	})
	out := t.TempDir()
	svc := `"condition":{"services":{"names":["web"]}}`
	taskJSON := func(name, mod, rest string) string {
		return fmt.Sprintf(`{"task":{"name":%q,"module":%q,%s}}`, name, module(mod), rest)
	}
	dirVar := fmt.Sprintf(`"dir":%q`, fmt.Sprintf("%q", out))

	// Refused by the allowlist (403 naming the variable or the key), run
	// included: nothing is written, nothing runs.
	pwned := filepath.Join(out, "pwned")
	for _, c := range []struct{ what, body, want string }{
		{"a reload_command variable", taskJSON("evil-var", "services_file",
			`"variables":{`+dirVar+`,"reload_command":`+fmt.Sprintf("%q", fmt.Sprintf("%q", "id > "+pwned))+`},`+svc), `variable \"reload_command\"`},
		{"a KV condition outside the prefixes", taskJSON("evil-kv", "services_file",
			`"variables":{`+dirVar+`},"condition":{"consul_kv":{"path":"secrets/db_password"}}`), `key \"secrets/db_password\"`},
		{"a KV module input outside the prefixes", taskJSON("evil-kvin", "services_file",
			`"variables":{`+dirVar+`},`+svc+`,"module_input":{"consul_kv":{"path":"secrets/","recurse":true}}`), `prefix \"secrets/\"`},
		{"another task's outputs", taskJSON("evil-outs", "services_file",
			`"variables":{`+dirVar+`},`+svc+`,"module_input":{"task_outputs":{"tasks":["slow"]}}`), `task.module_input.task_outputs is not allowed`},
		{"values for the module in cts_user_defined_meta", taskJSON("evil-meta", "services_file",
			`"variables":{`+dirVar+`},"condition":{"services":{"names":["web"],"cts_user_defined_meta":{"cmd":"id"}}}`), `task.condition.services.cts_user_defined_meta is not allowed`},
	} {
		for _, run := range []string{"", "?run=now", "?run=inspect"} {
			code, body := apiCall(t, "POST", base+"/v1/tasks"+run, c.body, nil)
			expectStatus(t, c.what+run, 403, code, body)
			if !strings.Contains(body, c.want) {
				t.Errorf("%s%s: the refusal does not name it: %s", c.what, run, body)
			}
		}
	}

	// Checks of configuration loading, before the 201 (400 naming the field).
	for _, c := range []struct{ what, body, want string }{
		{"a 300-character name", taskJSON(strings.Repeat("n", 300), "services_file", `"variables":{`+dirVar+`},`+svc),
			"name: is 300 characters long"},
		{"a function call in a variable", taskJSON("fn", "services_file", `"variables":{"dir":"upper(\"x\")"},`+svc),
			"variables.dir: must be a literal value"},
		{"a missing local module folder", taskJSON("nomod", "services_missing", `"variables":{`+dirVar+`},`+svc),
			"does not exist"},
	} {
		code, body := apiCall(t, "POST", base+"/v1/tasks", c.body, nil)
		expectStatus(t, c.what, 400, code, body)
		if !strings.Contains(body, c.want) {
			t.Errorf("%s: %s, want %q", c.what, body, c.want)
		}
	}
	code, body := apiCall(t, "GET", base+"/v1/tasks", "", nil)
	expectStatus(t, "list", 200, code, body)
	if strings.Contains(body, `"name"`) {
		t.Errorf("a refused task exists: %s", body)
	}
	for _, name := range []string{"evil-var", "evil-kv", "evil-kvin", "evil-outs", "evil-meta", "fn", "nomod"} {
		if fileExistsAt(work, "sync-tasks", name) {
			t.Errorf("the refused task %s has a working directory", name)
		}
	}
	if fileExistsAt(pwned) || fileExistsAt(out, "services.json") {
		t.Error("a refused task ran")
	}
	if strings.Contains(p.out.String(), "hunter2") {
		t.Error("the secret KV value reached the daemon's output")
	}

	// Delete then create again: 409 "being deleted" while the last run
	// ends, 201 once it is gone.
	gated := taskJSON("slow", "gated", `"variables":{`+dirVar+`},`+svc)
	code, body = apiCall(t, "POST", base+"/v1/tasks", gated, nil)
	expectStatus(t, "create the gated task", 201, code, body)
	testutil.Eventually(t, 60*time.Second, "the gated run started", func() bool { return fileExistsAt(out, "started") })
	code, body = apiCall(t, "DELETE", base+"/v1/tasks/slow", "", nil)
	expectStatus(t, "delete during the run", 202, code, body)
	code, body = apiCall(t, "GET", base+"/v1/tasks/slow", "", nil)
	expectStatus(t, "get while deleting", 404, code, body)
	code, body = apiCall(t, "POST", base+"/v1/tasks", gated, nil)
	expectStatus(t, "create while deleting", 409, code, body)
	if !strings.Contains(body, "being deleted") {
		t.Errorf("409 body: %s", body)
	}
	must(t, os.WriteFile(filepath.Join(out, "gate"), nil, 0o644))
	testutil.Eventually(t, 60*time.Second, "the name free again", func() bool {
		code, _ := apiCall(t, "POST", base+"/v1/tasks", gated, nil)
		return code == http.StatusCreated
	})
	code, body = apiCall(t, "GET", base+"/v1/tasks/slow", "", nil)
	expectStatus(t, "the task created again", 200, code, body)
}

// Under high availability (leader mode) a create whose record cannot be
// saved in Consul (larger than its transaction limit: 413) leaves no
// trace: not listed, not in Consul, nothing run; an oversized description is refused before
// anything; the same request with small values then succeeds.
func TestHACreateIsAtomicEndToEnd(t *testing.T) {
	skipShort(t)
	c := newHACluster(t)
	_, varFile := newTaskDir(t)
	for _, id := range []string{"cts-a", "cts-b"} {
		c.add(&haInstance{id: id}, func(in *haInstance) string { return haConfig(in, varFile) })
	}
	for _, in := range c.insts {
		in.start(t)
	}
	leader := c.leading(60 * time.Second)
	out := t.TempDir()
	body := func(description string, vars map[string]string) string {
		var vs []string
		vs = append(vs, fmt.Sprintf(`"dir":%q`, fmt.Sprintf("%q", out)))
		for k, v := range vars {
			vs = append(vs, fmt.Sprintf(`%q:%q`, k, fmt.Sprintf("%q", v)))
		}
		return fmt.Sprintf(`{"task":{"name":"big","description":%q,"module":%q,"variables":{%s},"condition":{"services":{"names":["web"]}}}}`,
			description, module("services_file"), strings.Join(vs, ","))
	}
	noTrace := func(what string) {
		t.Helper()
		code, _, b := haGet(leader.port, "/v1/tasks/big")
		if code != http.StatusNotFound {
			t.Fatalf("%s: the task is there: %d %s", what, code, b)
		}
		pairs, _, err := c.consul.Client.KV().List("consul-terraform-sync/", nil)
		must(t, err)
		for _, kv := range pairs {
			if strings.Contains(kv.Key, "/big") {
				t.Fatalf("%s: a trace in consul: %s", what, kv.Key)
			}
		}
		if fileExistsAt(out, "services.json") {
			t.Fatalf("%s: the module ran", what)
		}
		for _, in := range c.insts {
			if fileExistsAt(in.work, "sync-tasks", "big") || len(haLines(in.proc(), ` executing task: `, "task_name=big ")) > 0 {
				t.Fatalf("%s: %s ran the task", what, in.id)
			}
		}
	}

	// An oversized description: 400 naming the field, before anything.
	code, b := haDo(t, "POST", leader.port, "/v1/tasks", body(strings.Repeat("d", 600<<10), nil))
	if code != http.StatusBadRequest || !strings.Contains(string(b), "task.description") {
		t.Fatalf("oversized description: %d %s", code, b)
	}
	noTrace("after the oversized description")

	// Values within the API's limits whose record is larger than Consul
	// accepts: the save fails, nothing happened.
	big := map[string]string{}
	for i := range 10 {
		big[fmt.Sprintf("blob%d", i)] = strings.Repeat("x", 60<<10)
	}
	for _, run := range []string{"", "?run=now"} {
		code, b = haDo(t, "POST", leader.port, "/v1/tasks"+run, body("small", big))
		if code != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "too large to be saved in consul") {
			t.Fatalf("record too large for consul%s: %d %.300s", run, code, b)
		}
		noTrace("after the failed save" + run)
	}

	// The same request, small: created, and it runs.
	c.register("web-1", "web", 8001)
	code, b = haDo(t, "POST", leader.port, "/v1/tasks", body("small", nil))
	if code != http.StatusCreated {
		t.Fatalf("retry: %d %s", code, b)
	}
	waitServices(t, out, "web-1")
	pairs, _, err := c.consul.Client.KV().List("consul-terraform-sync/", nil)
	must(t, err)
	found := false
	for _, kv := range pairs {
		found = found || strings.HasSuffix(kv.Key, "/tasks/big")
	}
	if !found {
		t.Fatal("the created task has no record in consul")
	}
}

// A JSON configuration file with an invalid provider argument or variable
// name, or a local module folder that does not exist, is a configuration
// error (exit 15) naming file:line, not a run-time failure.
func TestJSONConfigBadNamesExit15EndToEnd(t *testing.T) {
	skipShort(t)
	work := t.TempDir()
	for _, c := range []struct{ content, want string }{
		{`{
  "consul": {"address": "127.0.0.1:1"},
  "terraform_provider": [{"local": {
    "bad name": "x"
  }}],
  "task": [{"name": "t", "module": "./m", "providers": ["local"], "condition": {"services": {"names": ["web"]}}}]
}`, `config.json:4: terraform_provider "local".bad name: argument name "bad name" is not a valid name`},
		{`{
  "consul": {"address": "127.0.0.1:1"},
  "task": [{"name": "t", "module": "./m", "condition": {"services": {"names": ["web"]}},
    "variables": {"bad var": "1"}}]
}`, `config.json:4: task "t".variables.bad var: "bad var" is not a valid name`},
		{`{
  "consul": {"address": "127.0.0.1:1"},
  "task": [{"name": "t",
    "module": "./m", "condition": {"services": {"names": ["web"]}}}]
}`, `config.json:4: task "t".module: local module "./m" does not exist`},
	} {
		cfg := writeFile(t, work, "config.json", c.content)
		p := startCtsync(t, work, "start", "-config-file", cfg)
		if code := p.wait(t, 60*time.Second); code != 15 {
			t.Fatalf("exit %d, want 15; output:\n%s", code, p.out.String())
		}
		if !strings.Contains(p.out.String(), c.want) {
			t.Errorf("output lacks %q:\n%s", c.want, p.out.String())
		}
	}
}

// In spread mode, a create sent to any member is carried out by the
// task's owner in one step: a record Consul cannot take (413) leaves the
// task on no member; the same request, small, creates it on every member
// and it runs once.
func TestSpreadCreateIsAtomicEndToEnd(t *testing.T) {
	skipShort(t)
	c := newHACluster(t)
	for _, id := range []string{"cts-a", "cts-b"} {
		c.add(&haInstance{id: id}, func(in *haInstance) string { return spreadHeader(in, c.consul.Addr, "DEBUG", "e2e") })
	}
	c.register("web-1", "web", 8001)
	for _, in := range c.insts {
		in.start(t)
	}
	testutil.Eventually(t, 90*time.Second, "both members serving", func() bool {
		for _, in := range c.insts {
			if code, _, _ := haGet(in.port, "/v1/tasks"); code != http.StatusOK {
				return false
			}
		}
		return true
	})
	out := t.TempDir()
	body := func(vars string) string {
		return fmt.Sprintf(`{"task":{"name":"spread-big","module":%q,"variables":{"dir":%q%s},"condition":{"services":{"names":["web"]}}}}`,
			module("services_file"), fmt.Sprintf("%q", out), vars)
	}
	var big strings.Builder
	for i := range 10 {
		fmt.Fprintf(&big, `,"blob%d":%q`, i, fmt.Sprintf("%q", strings.Repeat("x", 60<<10)))
	}
	for _, in := range c.insts {
		code, b := haDo(t, "POST", in.port, "/v1/tasks", body(big.String()))
		if code != http.StatusRequestEntityTooLarge {
			t.Fatalf("record too large, sent to %s: %d %.300s", in.id, code, b)
		}
	}
	for _, in := range c.insts {
		if code, _, b := haGet(in.port, "/v1/tasks/spread-big"); code != http.StatusNotFound {
			t.Fatalf("%s shows the refused task: %d %s", in.id, code, b)
		}
	}
	if fileExistsAt(out, "services.json") {
		t.Fatal("the refused task ran")
	}
	code, b := haDo(t, "POST", c.insts[1].port, "/v1/tasks", body(""))
	if code != http.StatusCreated {
		t.Fatalf("retry: %d %s", code, b)
	}
	waitServices(t, out, "web-1")
	testutil.Eventually(t, 30*time.Second, "the task on every member", func() bool {
		for _, in := range c.insts {
			if code, _, _ := haGet(in.port, "/v1/tasks/spread-big"); code != http.StatusOK {
				return false
			}
		}
		return true
	})
	c.allIdle()
	n := 0
	for _, in := range c.insts {
		n += len(haLines(in.proc(), ` task completed: `, " task_name=spread-big "))
	}
	if n != 1 {
		t.Errorf("spread-big applied %d times", n)
	}
}
