package e2e

// Issue 35 ("one request must never stop the daemon, and every gate fails
// closed"), against the real daemon, Consul and Terraform: inputs nested
// too deep are refused before a parser recurses on them (API bodies, task
// variables, configuration files, task records in Consul KV under high
// availability); approval.expire has the configuration's rule in the API;
// a policy that fails at run time, or runs past its time limit, denies the
// run; deleting a task does not wait for its policy; the bare credential
// of a webhook's Authorization header is redacted; a request's own value
// is never answered as a secret.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/testutil"
)

// limitsCall sends a request with a JSON body and the token secret ("":
// none); it returns the status and body (0 when the daemon did not answer).
func limitsCall(t *testing.T, base, method, path, secret, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	must(t, err)
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 5 * time.Minute}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// echoTask is a task on the echo module (Terraform's built-in
// terraform_data only: no provider to install) whose plan shows its
// values, with blocks inside it.
func echoTask(name, values, blocks string) string {
	return fmt.Sprintf(`
task {
  name   = %q
  module = %q
  variables = {
    values = %s
  }
  condition "services" {
    names               = ["web"]
    use_as_module_input = false
  }
%s
}
`, name, module("echo"), values, blocks)
}

// deepTaskBody is a POST /v1/tasks body whose variable x is n `[` deep.
func deepTaskBody(name string, n int) string {
	return fmt.Sprintf(`{"task":{"name":%q,"module":%q,"variables":{"x":%q},"condition":{"services":{"names":["web"]}}}}`,
		name, module("echo"), strings.Repeat("[", n))
}

// 1 (API and configuration files): deep values are refused with 400
// naming the field, concurrent ones too, and the daemon keeps serving
// with the memory it had; a 20,000-deep value is refused at submission
// instead of failing every run; a configuration file too deep is a
// configuration error naming file:line. 6: approval.expire 5 and "0s" are
// refused, naming the field.
func TestDeepInputsRefusedEndToEnd(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	work := t.TempDir()
	port := testutil.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := daemonConfig(t, work, port, c.Addr, "") // the default: no api_auth
	p := startCtsync(t, work, "start", "-config-file", cfg)
	gateAPI{t: t, base: base}.waitUp()

	code, body := limitsCall(t, base, "POST", "/v1/tasks", "", deepTaskBody("deep", 65000))
	if code != http.StatusBadRequest || !strings.Contains(body, "variables.x") || !strings.Contains(body, "nests deeper than 64 levels") {
		t.Fatalf("65,000-deep variable: %d %.300s", code, body)
	}
	code, body = limitsCall(t, base, "POST", "/v1/tasks", "", deepTaskBody("deep", 20000))
	if code != http.StatusBadRequest || !strings.Contains(body, "variables.x") {
		t.Fatalf("20,000-deep variable: %d %.300s (it must be refused at submission, not fail every run)", code, body)
	}
	code, body = limitsCall(t, base, "POST", "/v1/tasks", "", `{"task":`+strings.Repeat("[", 65000))
	if code != http.StatusBadRequest || !strings.Contains(body, "nests deeper than 64 levels") {
		t.Fatalf("65,000-deep body: %d %.300s", code, body)
	}
	var wg sync.WaitGroup
	codes := make([]int, 4)
	for i := range codes {
		wg.Go(func() {
			codes[i], _ = limitsCall(t, base, "POST", "/v1/tasks", "", deepTaskBody(fmt.Sprintf("deep%d", i), 30000))
		})
	}
	wg.Wait()
	for i, code := range codes {
		if code != http.StatusBadRequest {
			t.Fatalf("concurrent deep request %d: %d", i, code)
		}
	}
	// Four such requests pushed the daemon's RSS to 2.26 GB.
	if peak := (&floorDaemon{p: p}).peakRSS(); peak > 400 {
		t.Fatalf("the daemon's peak RSS is %.0f MiB after the deep requests", peak)
	} else {
		t.Logf("the daemon's peak RSS: %.0f MiB", peak)
	}
	// approval.expire: the configuration's rule.
	valid := fmt.Sprintf(`"name":"gated","module":%q,"variables":{"values":"[\"10.0.0.0/8\"]"},"condition":{"services":{"names":["web"],"use_as_module_input":false}}`, module("echo"))
	for _, expire := range []string{`5`, `"0s"`, `"5ns"`} {
		code, body := limitsCall(t, base, "POST", "/v1/tasks", "", `{"task":{`+valid+`,"approval":{"required":true,"expire":`+expire+`}}}`)
		if code != http.StatusBadRequest || !strings.Contains(body, "task.approval.expire") {
			t.Fatalf("expire %s: %d %s", expire, code, body)
		}
	}
	if code, body := limitsCall(t, base, "POST", "/v1/tasks", "", `{"task":{`+valid+`,"approval":{"required":true,"expire":"1h"}}}`); code != http.StatusCreated {
		t.Fatalf("expire 1h: %d %s", code, body)
	}
	select {
	case <-p.done:
		t.Fatalf("the daemon exited:\n%s", p.out.String())
	default:
	}
	if code, body := limitsCall(t, base, "GET", "/v1/tasks", "", ""); code != http.StatusOK || strings.Contains(body, `"deep`) {
		t.Fatalf("after the deep requests: %d %s", code, body)
	}

	// A configuration file nested too deep: exit 15 naming file:line.
	deepCfg := writeFile(t, work, "deep.hcl", strings.Replace(readFile(t, cfg), "buffer_period {", "task {\n  name = \"d\"\n  module = \"./m\"\n  variables = {\n    x = "+strings.Repeat("[", 65000)+"\n  }\n}\nbuffer_period {", 1))
	dp := startCtsync(t, work, "start", "-config-file", deepCfg)
	if code := dp.wait(t, 60*time.Second); code != 15 || !strings.Contains(dp.out.String(), "deep.hcl:") || !strings.Contains(dp.out.String(), "nests deeper than 64 levels") {
		t.Fatalf("deep configuration file: exit %d\n%.2000s", code, dp.out.String())
	}
}

// 1 (high availability): a task record in Consul KV whose variable is
// 65,000 `[` deep (written there directly, as whoever can write the KV
// folder could) is skipped with an error naming its key; the members keep
// running and the leadership moves and stays as usual.
func TestHADeepKVRecordSkippedEndToEnd(t *testing.T) {
	skipShort(t)
	c := newHACluster(t)
	member := func(id string) *haInstance {
		return c.add(&haInstance{id: id}, func(in *haInstance) string {
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
    name = "e2e"
    storage "consul" {
      session_ttl = %q
    }
  }
  instance {
    address = "127.0.0.1"
  }
}
`, in.id, in.port, filepath.Join(in.work, "sync-tasks"), in.proxy.Addr, haTTL.String()) + echoTask("web-task", `["10.0.0.0/8"]`, "")
		})
	}
	c.register("web-1", "web", 8001)
	first := member("cts-a")
	first.start(t)
	if c.leading(90*time.Second) != first {
		t.Fatal("cts-a does not lead")
	}
	// The cluster's records live beside the task's run state.
	var prefix string
	testutil.Eventually(t, 90*time.Second, "the run state of web-task in consul", func() bool {
		pairs, _, err := c.consul.Client.KV().List("consul-terraform-sync/", nil)
		if err != nil {
			return false
		}
		for _, kv := range pairs {
			if p, ok := strings.CutSuffix(kv.Key, "/run/web-task"); ok {
				prefix = p
				return true
			}
		}
		return false
	})
	rec := []byte(fmt.Sprintf(`{"spec":{"name":"deep","module":%q,"enabled":true,"variables":{"x":%q},"condition":{"services":{"names":["web"]}}}}`,
		module("echo"), strings.Repeat("[", 65000)))
	key := prefix + "/tasks/deep"
	_, err := c.consul.Client.KV().Put(&api.KVPair{Key: key, Value: rec}, nil)
	must(t, err)

	// The second member starts, the first steps down: the second leads
	// with the record there, then the first comes back.
	member("cts-b").start(t)
	must(t, first.proc().cmd.Process.Signal(syscall.SIGTERM))
	first.proc().wait(t, 90*time.Second)
	second := c.leading(120 * time.Second)
	if second == first {
		t.Fatal("the stopped member leads")
	}
	testutil.Eventually(t, 90*time.Second, "the bad record logged with its key", func() bool {
		return strings.Contains(second.proc().out.String(), key) && strings.Contains(second.proc().out.String(), "nests deeper than 64 levels")
	})
	first.start(t)
	// Both keep running; the leader keeps leading and serves web-task only.
	deadline := time.Now().Add(testutil.Scale(20 * time.Second))
	for time.Now().Before(deadline) {
		for _, in := range c.insts {
			select {
			case <-in.proc().done:
				t.Fatalf("%s exited:\n%s", in.id, in.proc().out.String())
			default:
			}
		}
		time.Sleep(time.Second)
	}
	if who := c.leading(60 * time.Second); who != second {
		t.Fatalf("leadership moved to %s", who.id)
	}
	if got := haTasks(t, second.port); len(got) != 1 || !got["web-task"] {
		t.Fatalf("tasks on the leader: %v", got)
	}
	if n := strings.Count(second.proc().out.String(), " ha: acquired leadership: "); n != 1 {
		t.Fatalf("the leader acquired leadership %d times", n)
	}
}

// 2 and 3: a policy dividing by a count that is zero on an empty state
// fails the run, nothing applied (terminal); a policy that runs past its
// time limit (nested numbers.range) fails the run naming the limit,
// nothing applied, and is retried (not terminal: a helper that hung, a
// loaded machine, give the same error); deleting a task
// whose policy is being evaluated returns at once.
func TestPolicyFailsClosedEndToEnd(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	work := t.TempDir()
	port := testutil.FreePort(t)
	pol := mkdir(t, work, "policies")
	writeFile(t, pol, "div.rego", `package ctsync

deny contains msg if {
	resources := object.get(input.plan, ["prior_state", "values", "root_module", "resources"], [])
	share := 100 * count(input.plan.resource_changes) / count(resources)
	share > 50
	msg := sprintf("the plan changes %d%% of the state", [share])
}
`)
	writeFile(t, pol, "slow.rego", `package ctsync

deny contains msg if {
	some i in numbers.range(1, 200000)
	some j in numbers.range(1, 200000)
	i * j == -1
	msg := "never"
}
`)
	g := &gated{gateAPI: gateAPI{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port), read: gateReadSecret, write: gateWriteSecret}, work: work}
	g.cfg = daemonConfig(t, work, port, c.Addr, gateAuth+
		echoTask("div", `["10.0.0.0/8"]`, "  policy {\n    files = [\"policies/div.rego\"]\n  }")+
		echoTask("slow", `["10.0.0.0/8"]`, "  policy {\n    files = [\"policies/slow.rego\"]\n    timeout = \"3s\"\n  }")+
		echoTask("slower", `["10.0.0.0/8"]`, "  policy {\n    files = [\"policies/slow.rego\"]\n    timeout = \"10m\"\n  }"))
	registerWeb(t, c, 1)
	g.p = startCtsync(t, work, "start", "-config-file", g.cfg)
	g.waitUp()

	ev := g.waitNewEvent("div", nil, "the division by zero", func(ev store.Event) bool { return !ev.Success })
	if ev.Error == nil || !strings.Contains(ev.Error.Message, "divide by zero") || !ev.Terminal {
		t.Fatalf("div: event %+v (error %+v), want a terminal failure naming the division by zero", ev, ev.Error)
	}
	ev = g.waitNewEvent("slow", nil, "the time limit", func(ev store.Event) bool { return !ev.Success })
	if ev.Error == nil || !strings.Contains(ev.Error.Message, "did not finish within 3s") || ev.Terminal {
		t.Fatalf("slow: event %+v (error %+v), want a failure naming the time limit, not terminal", ev, ev.Error)
	}
	// Nothing applied: no task has a successful run, and the state of
	// each (Consul backend) holds no resource.
	for _, name := range []string{"div", "slow"} {
		for _, ev := range g.events(name) {
			if ev.Success {
				t.Fatalf("%s: a successful run %+v", name, ev)
			}
		}
	}
	pairs, _, err := c.Client.KV().List("consul-terraform-sync/terraform", nil)
	must(t, err)
	for _, kv := range pairs {
		if bytes.Contains(kv.Value, []byte("terraform_data")) {
			t.Fatalf("a state holds a resource: %s", kv.Key)
		}
	}
	// slower evaluates for up to 10 minutes: a DELETE stops it.
	g.waitStatus("slower", "running its policy", func(st gateStatus) bool { return st.Active })
	start := time.Now()
	code, body := limitsCall(t, g.base, "DELETE", "/v1/tasks/slower", gateWriteSecret, "")
	if code != http.StatusOK && code != http.StatusAccepted && code != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	testutil.Eventually(t, 60*time.Second, "slower gone", func() bool {
		code, _ := limitsCall(t, g.base, "GET", "/v1/tasks/slower", gateReadSecret, "")
		return code == http.StatusNotFound
	})
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the deletion took %v", d)
	}
}

// 7: the bare token of a webhook's "Bearer ..." header is redacted where a
// module prints it; a value a request supplies is shown as the request
// wrote it, whether or not it is a secret (the read token's), so the
// plan answers nothing about the guess.
func TestRedactionBareTokenAndOracleEndToEnd(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	hook := newHookSink(t)
	const hookToken = "hook-token-0123456789abcdef"
	work := t.TempDir()
	port := testutil.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	// The webhook block with an Authorization header; a configured task
	// whose variable holds the bare token (a module printing it).
	hookBlock := strings.Replace(hook.block("failed"), "{\n", fmt.Sprintf("{\n  headers = {\n    Authorization = %q\n  }\n", "Bearer "+hookToken), 1)
	cfg := daemonConfig(t, work, port, c.Addr, gateAuth+hookBlock+echoTask("printer", fmt.Sprintf(`["%s"]`, hookToken), "  approval {\n    required = true\n  }"))
	registerWeb(t, c, 1)
	p := startCtsync(t, work, "start", "-config-file", cfg)
	g := gateAPI{t: t, base: base, read: gateReadSecret, write: gateWriteSecret}
	g.waitUp()
	held := g.waitPlan("printer", "held", func(p gate.Plan) bool { return p.State == gate.Pending })
	if strings.Contains(held.Text, hookToken) || !strings.Contains(held.Text, "[redacted]") {
		t.Fatalf("the held plan's text: want the bare webhook token redacted: %s", held.Text)
	}
	if strings.Contains(p.out.String(), hookToken) {
		t.Fatal("the bare webhook token in the daemon's output")
	}

	// The oracle: a write token holder guesses the read token's secret,
	// in the plan of run=inspect and in the held plan of a task it
	// creates with approval required.
	taskBody := func(name, guess, approval string) string {
		return fmt.Sprintf(`{"task":{"name":%q,"module":%q,"variables":{"values":%q},%s"condition":{"services":{"names":["web"],"use_as_module_input":false}}}}`,
			name, module("echo"), fmt.Sprintf(`[%q]`, guess), approval)
	}
	inspect := func(guess string) string {
		t.Helper()
		code, out := limitsCall(t, base, "POST", "/v1/tasks?run=inspect", gateWriteSecret, taskBody("probe", guess, ""))
		if code != http.StatusOK {
			t.Fatalf("inspect: %d %s", code, out)
		}
		var r struct {
			Run struct {
				Plan string `json:"plan"`
			} `json:"run"`
		}
		must(t, json.Unmarshal([]byte(out), &r))
		if !strings.Contains(r.Run.Plan, "terraform_data.echo") {
			t.Fatalf("no plan: %s", out)
		}
		return r.Run.Plan
	}
	heldPlan := func(name, guess string) string {
		t.Helper()
		code, out := limitsCall(t, base, "POST", "/v1/tasks", gateWriteSecret, taskBody(name, guess, `"approval":{"required":true},`))
		if code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", name, code, out)
		}
		return g.waitPlan(name, "held", func(p gate.Plan) bool { return p.State == gate.Pending }).Text
	}
	const wrongGuess = "not-the-read-secret-0123456789"
	for what, pair := range map[string][2]string{
		"inspect":   {inspect(wrongGuess), inspect(gateReadSecret)},
		"held plan": {heldPlan("wrong", wrongGuess), heldPlan("right", gateReadSecret)},
	} {
		wrong, right := pair[0], pair[1]
		if strings.Contains(right, "[redacted]") || !strings.Contains(right, gateReadSecret) || !strings.Contains(wrong, wrongGuess) {
			t.Fatalf("%s: the plan answers the guess:\nwrong guess: %s\nright guess: %s", what, wrong, right)
		}
	}
	// The secret is still redacted where the request did not put it.
	if strings.Contains(p.out.String(), "Bearer "+gateWriteSecret) {
		t.Fatal("a token in the daemon's output")
	}
}

// sayModule's plan shows the task's values, and its provisioner prints
// them at every apply (the resource is replaced each time): into the run
// log and, with log = true, the daemon's log.
const sayModule = `
variable "services" {
  type    = any
  default = {}
}

variable "values" {
  type = list(string)
}

resource "terraform_data" "say" {
  input            = var.values
  triggers_replace = timestamp()
  provisioner "local-exec" {
    command = "echo \"said: ${join(",", var.values)}\""
  }
}
`

// The values a request gives a task's variables are shown as written in
// that task's own text only: when one is exactly a configured secret (the
// webhook's bearer token), the daemon's log and another task's run log
// and terraform.log still show "[redacted]" for it, while the task's own
// run log and plan show the value as the request wrote it.
func TestRedactionProtectOnlyTheTasksOwnTextEndToEnd(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	hook := newHookSink(t)
	const hookToken = "hook-token-fedcba9876543210"
	work := t.TempDir()
	say := t.TempDir()
	writeFile(t, say, "main.tf", sayModule)
	port := testutil.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	hookBlock := strings.Replace(hook.block("failed"), "{\n", fmt.Sprintf("{\n  headers = {\n    Authorization = %q\n  }\n", "Bearer "+hookToken), 1)
	// Terraform's output is forwarded to the daemon's log (log = true) and
	// its TRACE log kept (persist_log = true).
	drv := "driver \"terraform\" {\n  log         = true\n  persist_log = true\n}\n"
	printer := fmt.Sprintf(`
task {
  name   = "printer"
  module = %q
  variables = {
    values = ["%s"]
  }
  condition "services" {
    names               = ["web"]
    use_as_module_input = false
  }
}
`, say, hookToken)
	cfg := daemonConfig(t, work, port, c.Addr, gateAuth+hookBlock+drv+printer)
	registerWeb(t, c, 1)
	p := startCtsync(t, work, "start", "-config-file", cfg)
	g := gateAPI{t: t, base: base, read: gateReadSecret, write: gateWriteSecret}
	g.waitUp()
	g.waitQuiet("printer")
	runLog := func(name string, ev store.Event) string {
		t.Helper()
		code, text := limitsCall(t, base, "GET", "/v1/tasks/"+name+"/events/"+ev.ID+"/log", gateReadSecret, "")
		if code != http.StatusOK {
			t.Fatalf("%s's run log: %d %s", name, code, text)
		}
		return text
	}

	// A write token holder creates a task whose variable is the secret:
	// its own run log and plans show it as written.
	taskBody := func(name, approval string) string {
		return fmt.Sprintf(`{"task":{"name":%q,"module":%q,"variables":{"values":%q},%s"condition":{"services":{"names":["web"],"use_as_module_input":false}}}}`,
			name, say, fmt.Sprintf(`[%q]`, hookToken), approval)
	}
	if code, out := limitsCall(t, base, "POST", "/v1/tasks", gateWriteSecret, taskBody("mine", "")); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, out)
	}
	mine := g.waitNewEvent("mine", nil, "that succeeded", func(ev store.Event) bool { return ev.Success })
	if text := runLog("mine", mine); !strings.Contains(text, "said: "+hookToken) {
		t.Fatalf("the task's own run log: want its value as written:\n%s", text)
	}
	if code, out := limitsCall(t, base, "POST", "/v1/tasks", gateWriteSecret, taskBody("mine-held", `"approval":{"required":true},`)); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, out)
	}
	held := g.waitPlan("mine-held", "held", func(p gate.Plan) bool { return p.State == gate.Pending })
	if !strings.Contains(held.Text, hookToken) {
		t.Fatalf("the task's own held plan: want its value as written: %s", held.Text)
	}

	// Another task's run, while those exist: its run log, on disk and
	// served, and its terraform.log still redact the secret.
	seen := g.eventIDs("printer")
	if code, _, out := g.runNow("printer"); code != http.StatusOK {
		t.Fatalf("run printer: %d %s", code, out)
	}
	ev := g.waitNewEvent("printer", seen, "that succeeded", func(ev store.Event) bool { return ev.Success })
	if text := runLog("printer", ev); strings.Contains(text, hookToken) || !strings.Contains(text, "said: [redacted]") {
		t.Errorf("printer's run log: want the secret redacted:\n%s", text)
	}
	logs, _ := filepath.Glob(filepath.Join(work, "sync", "printer", "logs", "*.log"))
	logs = append(logs, filepath.Join(work, "sync", "printer", "terraform.log"))
	for _, f := range logs {
		if b, err := os.ReadFile(f); err != nil || strings.Contains(string(b), hookToken) {
			t.Errorf("%s (%v): holds the secret", f, err)
		}
	}
	// The daemon's log: Terraform's output of every task went through it,
	// the provisioners' lines included.
	testutil.Eventually(t, time.Minute, "the daemon's log to show the provisioners' lines", func() bool {
		return strings.Count(p.out.String(), "(local-exec): said: ") >= 3
	})
	if out := p.out.String(); strings.Contains(out, hookToken) || strings.Count(out, "(local-exec): said: [redacted]") < 3 {
		t.Errorf("the daemon's log: want the secret redacted:\n%s", out)
	}
}
