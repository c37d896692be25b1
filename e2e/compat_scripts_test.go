package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/api/testcerts"
	"github.com/ctsync/ctsync/internal/testutil"
)

// What scripts written for CTS look for, against the real daemon: the binary
// installed as consul-terraform-sync names itself so; task commands end
// with CTS's "==> 'NAME' <action> complete!" and a refused prompt with
// "Cancelled ..."; errors carry CTS's headline and the HTTP status line or
// the HTTP client's own TLS error, also when task create is given a stray
// argument; a body that does not match the schema carries CTS's phrases;
// plain HTTP to the TLS port gets Go's (and so CTS's) 400.
func TestCompatScriptOutputs(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	out, varFile := newTaskDir(t)
	work := t.TempDir()
	certs := testcerts.Generate(t)
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
tls {
  cert = %q
  key  = %q
}
task {
  name           = "web-task"
  module         = %q
  variable_files = [%q]
  condition "services" {
    names = ["web"]
  }
}
`, filepath.Join(work, "sync-tasks"), port, c.Addr, certs.ServerCert, certs.ServerKey, module("services_file"), varFile))

	// Installed under CTS's name.
	cts := filepath.Join(t.TempDir(), "consul-terraform-sync")
	must(t, os.Symlink(ctsyncBin, cts))
	run := func(stdin string, args ...string) (string, int) {
		t.Helper()
		return runCLI(cts, []string{fmt.Sprintf("CTS_ADDRESS=https://127.0.0.1:%d", port), "CTS_CACERT=" + certs.CACert}, stdin, args...)
	}
	if o, code := run("", "-version"); code != 0 || !strings.HasPrefix(o, "consul-terraform-sync v") || !strings.Contains(o, "Compatible with Terraform") || !strings.Contains(o, "ctsync") {
		t.Fatalf("-version as consul-terraform-sync (exit %d):\n%s", code, o)
	}
	if o, _ := run("", "task", "disable", "-help"); !strings.Contains(o, "consul-terraform-sync task disable") || !strings.Contains(o, "\n    -ca-path\n        ") {
		t.Fatalf("task disable -help:\n%s", o)
	}
	// CTS's usage lines, naming the binary as invoked.
	for args, first := range map[string]string{
		"-help":              "Usage CLI: consul-terraform-sync <command> [-help] [options]\n",
		"-once -help":        "Usage CLI: consul-terraform-sync <command> [-help] [options]\n",
		"-config-file=x -h":  "Usage CLI: consul-terraform-sync <command> [-help] [options]\n",
		"start -help":        "Usage CLI: consul-terraform-sync start [-help] [options]\n",
		"task enable -help":  "Usage: consul-terraform-sync task enable [-help] [options] <task name>\n",
		"task disable -help": "Usage: consul-terraform-sync task disable [-help] [options] <task name>\n",
		"task delete -help":  "Usage: consul-terraform-sync task delete [-help] [options] <task name>\n",
		"task create -help":  "Usage: consul-terraform-sync task create [-help] [options] -task-file=<task config>\n",
	} {
		if o, code := run("", strings.Fields(args)...); code != 0 || !strings.HasPrefix(o, first) {
			t.Errorf("%s (exit %d):\n%s", args, code, o)
		}
	}
	if o, code := run("", "task", "create"); code != 13 ||
		!strings.Contains(o, "    no task file provided\n    For additional help try 'consul-terraform-sync task create --help'\n") {
		t.Errorf("task create without -task-file (exit %d):\n%s", code, o)
	}

	startCompat(t, work, nil, "start", "-config-file", cfg)
	waitServices(t, out, "web-1")
	// The first run may still be recording its outcome (the task is
	// active: 409): disable once it is idle.
	var o string
	code := -1
	testutil.Eventually(t, 30*time.Second, "task disable", func() bool {
		o, code = run("", "task", "disable", "web-task")
		return code == 0 || !strings.Contains(o, "409 Conflict")
	})
	if code != 0 || !strings.HasSuffix(strings.TrimSpace(o), "'web-task' disable complete!") {
		t.Fatalf("task disable (exit %d):\n%s", code, o)
	}
	if o, _ := run("no\n", "task", "delete", "web-task"); !strings.Contains(o, "Cancelled deleting task 'web-task'") {
		t.Fatalf("refused prompt:\n%s", o)
	}
	if o, code := run("", "task", "enable", "-auto-approve", "web-task"); code != 0 || !strings.HasSuffix(strings.TrimSpace(o), "'web-task' enable complete!") {
		t.Fatalf("task enable (exit %d):\n%s", code, o)
	}

	// CTS's error lines, and a stray argument of task create does not stop
	// it before the request (CTS's TLS error scenarios): the HTTP client's
	// own error is what is printed.
	_, newVars := newTaskDir(t)
	// A whole configuration file as task file (CTS uses its task).
	taskFile := writeFile(t, work, "new.hcl", fmt.Sprintf(`log_level = "INFO"
task {
  name           = "new"
  module         = %q
  variable_files = [%q]
  condition "services" {
    names = ["web"]
  }
}
`, module("services_file"), newVars))
	if o, code := run("yes\n", "task", "delete", "nope"); code != 11 ||
		!strings.Contains(o, "==> Error: unable to delete 'nope'\n    404 Not Found: a task with name 'nope' does not exist") {
		t.Fatalf("task delete of an unknown task (exit %d):\n%s", code, o)
	}
	if o, code := run("", "task", "create", "-auto-approve", "-task-file="+taskFile, "stray"); code != 0 ||
		!strings.Contains(o, "==> Task 'new' created\n") || !strings.Contains(o, "==> Warning: ignoring arguments after the flags: 'stray'") ||
		!strings.Contains(o, "new.hcl:1: log_level: ignored: only the task block of a task file is used\n") {
		t.Fatalf("task create with a stray argument (exit %d):\n%s", code, o)
	}
	for name, c := range map[string]struct {
		env  []string
		want string
	}{
		"plain HTTP": {[]string{fmt.Sprintf("CTS_ADDRESS=http://127.0.0.1:%d", port)}, "sent an HTTP request to an HTTPS server"},
		"unknown CA": {[]string{fmt.Sprintf("CTS_ADDRESS=https://127.0.0.1:%d", port), "CTS_CACERT="}, "signed by unknown authority"},
	} {
		o, code := runCLI(cts, c.env, "", "task", "create", "-auto-approve", "-task-file="+taskFile, "stray")
		if code != 11 || !strings.Contains(o, "==> Error: unable to generate plan for 'new'") || !strings.Contains(o, c.want) {
			t.Errorf("%s: task create (exit %d):\n%s", name, code, o)
		}
	}

	// The API: a body that does not match the schema.
	pem, err := os.ReadFile(certs.CACert)
	must(t, err)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	client := &http.Client{Timeout: testutil.Scale(10 * time.Second), Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Post(fmt.Sprintf("https://127.0.0.1:%d/v1/tasks", port), "", strings.NewReader(`{"task":{"name":"x","module":true}}`))
	must(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "request body has an error: doesn't match schema") ||
		!strings.Contains(string(b), "value must be a string") || !strings.Contains(string(b), "task.module") {
		t.Fatalf("schema error: %d %s", resp.StatusCode, b)
	}

	// Plain HTTP to the TLS port, every method.
	for _, m := range []string{"GET", "PATCH", "DELETE"} {
		req, _ := http.NewRequest(m, fmt.Sprintf("http://127.0.0.1:%d/v1/tasks/web-task", port), nil)
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "Client sent an HTTP request to an HTTPS server") {
			t.Fatalf("plain %s to the TLS port: %d %s", m, resp.StatusCode, b)
		}
	}
}
