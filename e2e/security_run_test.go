package e2e

// The daemon's own safety at run time, with the real daemon, Consul and
// Terraform: run logs and terraform.log are redacted as they are written,
// SIGHUP reloads of tokens and the client CA are checked and all or
// nothing, provisioner children that a killed daemon left are ended before
// the next run, the self-registration comes back when the agent loses it,
// and an API open to the network without tokens is reported at start.

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ctsync/ctsync/internal/api/testcerts"
	"github.com/ctsync/ctsync/internal/testutil"
)

// echoSecretsModule's provisioner prints the Consul token and a task_env
// value from its environment, which must reach the run log redacted.
const echoSecretsModule = `
variable "services" {
  type = any
}

resource "terraform_data" "echo" {
  triggers_replace = keys(var.services)
  provisioner "local-exec" {
    command = "echo \"consul token: $CONSUL_HTTP_TOKEN\"; echo \"task env: $ECHO_SECRET\"; echo \"json: {\\\"t\\\": \\\"$ECHO_SECRET\\\"}\""
  }
}
`

// failingEchoModule's provisioner prints the secret and fails: Terraform's
// error message then holds it, and so would the run's event (the run
// history file under the working directory) if it were not redacted.
const failingEchoModule = `
variable "services" {
  type = any
}

resource "terraform_data" "fail" {
  triggers_replace = keys(var.services)
  provisioner "local-exec" {
    command = "echo \"task env: $ECHO_SECRET\"; exit 3"
  }
}
`

// Every file under the working directory is free of the secrets after
// runs whose provisioners echo them (run logs, init.log, terraform.log with
// persist_log, the run history with a failed run's error), while the run
// log shows where they were.
func TestRunLogsOnDiskRedacted(t *testing.T) {
	skipShort(t)
	token := "acl-" + uuid.NewString()
	c := testutil.StartConsulWith(t, testutil.ConsulOptions{ACLToken: token})
	secrets := secretSet{
		"Consul ACL token": token,
		"task_env secret":  "T4skEnv-S3cret-" + uuid.NewString(),
	}
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	conf := t.TempDir() // outside the working directory: it holds the secrets
	work := filepath.Join(t.TempDir(), "sync-tasks")
	mod := filepath.Join(t.TempDir(), "echo")
	must(t, os.MkdirAll(mod, 0o755))
	writeFile(t, mod, "main.tf", echoSecretsModule)
	failMod := filepath.Join(t.TempDir(), "fail")
	must(t, os.MkdirAll(failMod, 0o755))
	writeFile(t, failMod, "main.tf", failingEchoModule)
	cfg := writeFile(t, conf, "config.hcl", fmt.Sprintf(`
log_level   = "DEBUG"
working_dir = %q
port        = %d
consul {
  address = %q
  token   = %q
}
buffer_period {
  enabled = false
}
driver "terraform" {
  persist_log = true
}
terraform_provider "local" {
  task_env {
    ECHO_SECRET = %q
  }
}
task {
  name      = "echo"
  module    = %q
  providers = ["local"]
  condition "services" {
    names = ["web"]
  }
}
task {
  name      = "fail"
  module    = %q
  providers = ["local"]
  condition "services" {
    names = ["web"]
  }
}
`, work, testutil.FreePort(t), c.Addr, token, secrets["task_env secret"], mod, failMod))
	p := startCtsync(t, conf, "start", "-config-file", cfg)
	waitRuns(t, p, "echo", 1)
	testutil.Eventually(t, 90*time.Second, "a successful run of echo", func() bool { return p.successes("echo") >= 1 })
	// A second run (a catalog change) appends to terraform.log.
	c.RegisterService(t, reg("web-2", "web", 8002), "passing")
	testutil.Eventually(t, 90*time.Second, "a second successful run", func() bool { return p.successes("echo") >= 2 })
	p.waitOutput(t, 90*time.Second, "error applying task", "task_name=fail", "exit status 3")
	secrets.check(t, "the daemon's output", []byte(p.out.String()))

	runLogs, files, redactedLines := 0, 0, 0
	err := filepath.WalkDir(work, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		if strings.Contains(path, string(filepath.Separator)+".terraform"+string(filepath.Separator)+"providers") {
			return nil // provider binaries
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		rel, _ := filepath.Rel(work, path)
		secrets.check(t, rel, b)
		if filepath.Base(filepath.Dir(path)) == "logs" && d.Name() != "init.log" {
			runLogs++
			for _, want := range []string{"consul token: [redacted]", "task env: [redacted]", `json: {"t": "[redacted]"}`} {
				// Each kind counts once per log.
				if bytes.Contains(b, []byte(want)) {
					redactedLines++
				}
			}
		}
		return nil
	})
	must(t, err)
	if runLogs < 3 || redactedLines < 7 {
		t.Errorf("%d run logs, %d redacted lines: the provisioner's output is not in the run logs", runLogs, redactedLines)
	}
	// The run history (events of the failed run included) was among the
	// files read.
	if _, err := os.Stat(filepath.Join(work, "ctsync-history.db")); err != nil {
		t.Errorf("no run history under the working directory: %v", err)
	}
	if st, err := os.Stat(filepath.Join(work, "echo", "terraform.log")); err != nil || st.Size() < 10000 {
		t.Errorf("terraform.log: %v %v", st, err)
	}
	t.Logf("%d files checked, %d run logs", files, runLogs)
}

// SIGHUP: a token file that would give the read token the write token's
// secret is refused as a whole (both tokens keep working as before, the
// error is logged); a new client CA is taken (a client certificate it
// signed is accepted from then on); a broken server key is refused with the
// token change of the same reload, and a renewed certificate is served
// after the next one.
func TestSIGHUPReloadChecked(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	first, second := testcerts.Generate(t), testcerts.Generate(t)
	conf := t.TempDir()
	const ops, dash = "ops-secret-0123456789abcdef", "dash-secret-0123456789abcdef"
	opsFile := writeFile(t, conf, "ops.token", ops+"\n")
	dashFile := writeFile(t, conf, "dash.token", dash+"\n")
	caB, err := os.ReadFile(first.CACert)
	must(t, err)
	caFile := writeFile(t, conf, "client-ca.pem", string(caB))
	// The server's certificate and key, copies that SIGHUP reads again.
	installServer := func(f testcerts.Files) {
		t.Helper()
		for src, dst := range map[string]string{f.ServerCert: "server.pem", f.ServerKey: "server-key.pem"} {
			b, err := os.ReadFile(src)
			must(t, err)
			writeFile(t, conf, dst, string(b))
		}
	}
	installServer(first)
	port := testutil.FreePort(t)
	cfg := writeFile(t, conf, "config.hcl", fmt.Sprintf(`
working_dir = %q
port        = %d
consul {
  address = %q
}
tls {
  enabled         = true
  cert            = %q
  key             = %q
  ca_cert         = %q
  verify_incoming = true
}
api_auth {
  token {
    name        = "ops"
    secret_file = %q
    access      = "write"
  }
  token {
    name        = "dash"
    secret_file = %q
    access      = "read"
  }
}
`, filepath.Join(conf, "sync-tasks"), port, c.Addr, filepath.Join(conf, "server.pem"), filepath.Join(conf, "server-key.pem"), caFile, opsFile, dashFile))
	p := startCtsync(t, conf, "start", "-config-file", cfg)
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	call := func(client *http.Client, method, path, token string) int {
		t.Helper()
		req, err := http.NewRequest(method, base+path, nil)
		must(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	firstClient := mtlsClient(t, first)
	testutil.Eventually(t, 60*time.Second, "the API", func() bool { return call(firstClient, "GET", "/v1/status", dash) == 200 })
	asBefore := func() {
		t.Helper()
		if code := call(firstClient, "POST", "/v1/tasks/nope/run", ops); code != 404 {
			t.Errorf("write token on a write: %d, want 404 (allowed, no such task)", code)
		}
		if code := call(firstClient, "POST", "/v1/tasks/nope/run", dash); code != 403 {
			t.Errorf("read token on a write: %d, want 403", code)
		}
	}
	asBefore()

	// The read token's file gets the write token's secret.
	writeFile(t, conf, "dash.token", ops+"\n")
	must(t, p.cmd.Process.Signal(syscall.SIGHUP))
	p.waitOutput(t, 30*time.Second, "reload refused", `token "dash" has the same secret as token "ops"`)
	asBefore()
	if code := call(firstClient, "GET", "/v1/status", dash); code != 200 {
		t.Errorf("the read token's old secret after a refused reload: %d", code)
	}
	if strings.Contains(p.out.String(), ops) || strings.Contains(p.out.String(), dash) {
		t.Error("a token secret is in the daemon's output")
	}

	// A new client CA: the client that CA signed gets in.
	writeFile(t, conf, "dash.token", dash+"\n")
	caB, err = os.ReadFile(second.CACert)
	must(t, err)
	writeFile(t, conf, "client-ca.pem", string(caB))
	secondClient := mtlsClient(t, testcerts.Files{CACert: first.CACert, ClientCert: second.ClientCert, ClientKey: second.ClientKey})
	secondClient.Transport.(*http.Transport).DisableKeepAlives = true
	if code := call(secondClient, "GET", "/v1/status", dash); code != -1 {
		t.Fatalf("a client of the new CA got in before the reload: %d", code)
	}
	must(t, p.cmd.Process.Signal(syscall.SIGHUP))
	p.waitOutput(t, 30*time.Second, "token files and TLS files reloaded")
	if code := call(secondClient, "GET", "/v1/status", dash); code != 200 {
		t.Errorf("a client of the new CA after the reload: %d, want 200", code)
	}

	// A broken server key, with a new read token secret in the same
	// reload: refused as a whole (logged), the certificate and every token
	// in force stay.
	const dash2 = "dash-secret-renewed-0123456789"
	writeFile(t, conf, "dash.token", dash2+"\n")
	writeFile(t, conf, "server-key.pem", "not a key\n")
	must(t, p.cmd.Process.Signal(syscall.SIGHUP))
	testutil.Eventually(t, 30*time.Second, "the second reload refused", func() bool { return p.count("reload refused") >= 2 })
	if code := call(secondClient, "GET", "/v1/status", dash); code != 200 {
		t.Errorf("the old certificate and read token after a refused reload: %d, want 200", code)
	}
	if code := call(secondClient, "GET", "/v1/status", dash2); code != 401 {
		t.Errorf("the new read token after a refused reload: %d, want 401", code)
	}

	// A renewed certificate and key: served from the next handshake on,
	// with the new token.
	installServer(second)
	renewed := mtlsClient(t, testcerts.Files{CACert: second.CACert, ClientCert: second.ClientCert, ClientKey: second.ClientKey})
	renewed.Transport.(*http.Transport).DisableKeepAlives = true
	if code := call(renewed, "GET", "/v1/status", dash2); code != -1 {
		t.Fatalf("the renewed certificate is served before the reload: %d", code)
	}
	must(t, p.cmd.Process.Signal(syscall.SIGHUP))
	testutil.Eventually(t, 30*time.Second, "the third reload", func() bool { return p.count("token files and TLS files reloaded") >= 2 })
	if code := call(renewed, "GET", "/v1/status", dash2); code != 200 {
		t.Errorf("the renewed certificate and the new token after the reload: %d, want 200", code)
	}
	if code := call(secondClient, "GET", "/v1/status", dash); code != -1 {
		t.Errorf("the old certificate is still served after the reload: %d", code)
	}
	if strings.Contains(p.out.String(), dash2) {
		t.Error("a token secret is in the daemon's output")
	}
	p.running(t)
}

// sleepModule's provisioner sleeps the first time only (a marker file in
// the task's directory, with the sleep's pid), so the run after a restart
// can finish; that run fails if the first sleep still runs when it starts
// (a zombie that no one has reaped yet does not count).
const sleepModule = `
variable "services" {
  type = any
}

resource "terraform_data" "slow" {
  provisioner "local-exec" {
    command = "if [ -e slept ]; then s=$(cut -d' ' -f3 /proc/$(cat slept)/stat 2>/dev/null); if [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo OLD-SLEEP-STILL-RUNS; exit 1; fi; exit 0; fi; echo $$ > slept; exec sleep 300"
  }
}
`

// killedWithSleep starts the daemon with the task "slow" (sleepModule),
// waits for its provisioner's sleep and kills the daemon with SIGKILL: the
// sleep is left running. It returns the Consul agent, the configuration's
// folder and file, the task's directory and the sleep's pid.
func killedWithSleep(t *testing.T) (c *testutil.Consul, conf, cfg, taskDir string, sleepPid int) {
	t.Helper()
	c = testutil.StartConsul(t)
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	conf = t.TempDir()
	work := filepath.Join(conf, "sync-tasks")
	mod := filepath.Join(t.TempDir(), "slow")
	must(t, os.MkdirAll(mod, 0o755))
	writeFile(t, mod, "main.tf", sleepModule)
	state := t.TempDir()
	cfg = writeFile(t, conf, "config.hcl", fmt.Sprintf(`
log_level   = "DEBUG"
working_dir = %q
port        = %d
consul {
  address = %q
}
buffer_period {
  enabled = false
}
driver "terraform" {
  backend "local" {
    path          = %q
    workspace_dir = %q
  }
}
task {
  name   = "slow"
  module = %q
  condition "services" {
    names = ["web"]
  }
}
`, work, testutil.FreePort(t), c.Addr, filepath.Join(state, "default.tfstate"), filepath.Join(state, "ws"), mod))
	p := startCtsync(t, conf, "start", "-config-file", cfg)
	p.waitOutput(t, 30*time.Second, "[WARN]", "listens beyond loopback", "without api_auth")

	taskDir, err := filepath.EvalSymlinks(work)
	must(t, err)
	taskDir = filepath.Join(taskDir, "slow")
	testutil.Eventually(t, 90*time.Second, "the provisioner's sleep", func() bool {
		sleepPid = processIn(taskDir, "sleep")
		return sleepPid > 0
	})
	must(t, p.cmd.Process.Kill())
	p.wait(t, 10*time.Second)
	// Terraform died with the daemon (parent-death signal); its child did
	// not.
	if !alive(sleepPid) {
		t.Fatalf("the provisioner's sleep (pid %d) ended with the daemon: nothing to clean up", sleepPid)
	}

	return c, conf, cfg, taskDir, sleepPid
}

// kill -9 of the daemon while a provisioner runs `sleep`: Terraform dies
// with the daemon but the sleep stays. Started again, the daemon ends it
// before the task's next run starts. Deregistering the daemon's own service
// by hand: it comes back. Without api_auth, the start-up warns that the API
// is open to the network.
func TestKilledDaemonLeftoversAndRegistration(t *testing.T) {
	skipShort(t)
	c, conf, cfg, taskDir, sleepPid := killedWithSleep(t)

	p2 := startCtsync(t, conf, "start", "-config-file", cfg)
	testutil.Eventually(t, 90*time.Second, "a successful run after the restart", func() bool { return p2.successes("slow") >= 1 })
	if alive(sleepPid) {
		t.Fatalf("the old sleep (pid %d) still runs", sleepPid)
	}
	// The run's provisioner found the old sleep gone (it fails otherwise),
	// and the daemon said what it did.
	if p2.count("OLD-SLEEP-STILL-RUNS") > 0 || len(p2.lines("error applying task")) > 0 {
		t.Errorf("a run started while the old sleep still ran")
	}
	p2.waitOutput(t, time.Second, "[WARN]", "ending terraform processes that a previous ctsync left running", "task_name=slow")
	if _, err := os.Stat(filepath.Join(taskDir, ".ctsync-run")); !os.IsNotExist(err) {
		t.Errorf("the run record is left after the run: %v", err)
	}

	// The self-registration, deregistered by hand, comes back.
	id := ""
	testutil.Eventually(t, 30*time.Second, "the daemon's service", func() bool {
		id = agentServiceID(t, c, "consul-terraform-sync")
		return id != ""
	})
	must(t, c.Client.Agent().ServiceDeregister(id))
	p2.waitOutput(t, 30*time.Second, "no longer has ctsync's service; registering it again")
	testutil.Eventually(t, 30*time.Second, "the service registered again", func() bool {
		return agentServiceID(t, c, "consul-terraform-sync") == id
	})
	p2.running(t)
}

// processIn returns the pid of a live process named comm whose working
// directory is dir, or 0.
func processIn(dir, comm string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		name, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		cwd, _ := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if strings.TrimSpace(string(name)) == comm && cwd == dir && alive(pid) {
			return pid
		}
	}
	return 0
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && len(b) > i+2 && b[i+2] != 'Z'
}

// agentServiceID returns the ID of the agent's service named name, or "".
func agentServiceID(t *testing.T, c *testutil.Consul, name string) string {
	t.Helper()
	svcs, err := c.Client.Agent().ServicesWithFilter(fmt.Sprintf("Service == %q", name))
	if err != nil {
		return ""
	}
	for id := range svcs {
		return id
	}
	return ""
}

// A task that does not run after the restart (here disabled in the
// configuration) keeps nothing running either: the start-up ends the
// killed daemon's leftovers of every task, before anything runs.
func TestKilledDaemonLeftoversEndedForATaskThatDoesNotRun(t *testing.T) {
	skipShort(t)
	_, conf, cfg, _, sleepPid := killedWithSleep(t)
	b, err := os.ReadFile(cfg)
	must(t, err)
	writeFile(t, conf, "config.hcl", strings.Replace(string(b), `name   = "slow"`, "name   = \"slow\"\n  enabled = false", 1))
	p := startCtsync(t, conf, "start", "-config-file", cfg)
	p.waitOutput(t, 60*time.Second, "[WARN]", "ending terraform processes that a previous ctsync left running", "task_name=slow")
	testutil.Eventually(t, 30*time.Second, "the old sleep ended", func() bool { return !alive(sleepPid) })
	p.waitOutput(t, 30*time.Second, "api listening")
	if len(p.lines("executing task")) > 0 {
		t.Error("the disabled task ran")
	}
	p.running(t)
}
