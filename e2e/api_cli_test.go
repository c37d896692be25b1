package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
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

// The CLI and the API end to end: the real daemon serving its API over
// mutual TLS, a real Consul and real Terraform; every task command with its
// prompt answered on standard input, and the main endpoints.
func TestAPIAndCLIEndToEnd(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	out, varFile := newTaskDir(t)
	out2, varFile2 := newTaskDir(t)
	work := t.TempDir()
	certs := testcerts.Generate(t)
	port := testutil.FreePort(t)
	cfg := writeFile(t, work, "config.hcl", fmt.Sprintf(`
log_level   = "INFO"
working_dir = %q
port        = %d
consul {
  address = %q
}
buffer_period {
  enabled = false
}
tls {
  cert            = %q
  key             = %q
  verify_incoming = true
  ca_cert         = %q
}
task {
  name           = "web-task"
  module         = %q
  variable_files = [%q]
  condition "services" {
    names = ["web"]
  }
}
`, filepath.Join(work, "sync-tasks"), port, c.Addr, certs.ServerCert, certs.ServerKey, certs.CACert,
		module("services_file"), varFile))
	p := startCtsync(t, work, "start", "-config-file", cfg)
	waitServices(t, out, "web-1")
	addr := fmt.Sprintf("https://127.0.0.1:%d", port)

	// The CLI, as an operator runs it: the same binary, TLS from CTS's
	// environment variables, answers on standard input.
	cli := func(stdin string, env []string, args ...string) (string, int) {
		t.Helper()
		return runCLI(ctsyncBin, append([]string{"CTS_ADDRESS=" + addr, "CTS_CACERT=" + certs.CACert}, env...), stdin, args...)
	}
	withCert := []string{"CTS_CLIENT_CERT=" + certs.ClientCert, "CTS_CLIENT_KEY=" + certs.ClientKey}
	mustCLI := func(stdin string, args ...string) string {
		t.Helper()
		o, code := cli(stdin, withCert, args...)
		if code != 0 {
			t.Fatalf("ctsync %s: exit %d\n%s", strings.Join(args, " "), code, o)
		}
		return o
	}

	// Mutual TLS: no client certificate, no answer.
	if o, code := cli("", nil, "status"); code == 0 {
		t.Fatalf("status without a client certificate succeeded:\n%s", o)
	}
	// The module's file is written during the apply; the run is recorded
	// when it ends.
	var o string
	testutil.Eventually(t, 30*time.Second, "the status table to show the first run", func() bool {
		o = mustCLI("", "status")
		return strings.Contains(o, "web-task") && strings.Contains(o, "successful")
	})

	// Disable, change the catalog, enable with the plan approved.
	mustCLI("", "task", "disable", "web-task")
	if got := apiGet(t, certs, addr+"/v1/tasks/web-task")["task"].(map[string]any)["enabled"]; got != false {
		t.Fatalf("enabled = %v after disable", got)
	}
	c.RegisterService(t, reg("web-2", "web", 8002), "passing")
	o = mustCLI("yes\n", "task", "enable", "web-task")
	if !strings.Contains(o, "web-2") || !strings.Contains(o, "Only 'yes' will be accepted") {
		t.Fatalf("enable did not show the plan and the prompt:\n%s", o)
	}
	waitServices(t, out, "web-1,web-2")

	// Create a task from a file, approving its plan.
	taskFile := writeFile(t, work, "second.hcl", fmt.Sprintf(`
task {
  name           = "second"
  module         = %q
  variable_files = [%q]
  condition "services" {
    names = ["web"]
  }
}
`, module("services_file"), varFile2))
	o = mustCLI("yes\n", "task", "create", "-task-file", taskFile)
	if !strings.Contains(o, "local_file.services") {
		t.Fatalf("create did not show the plan:\n%s", o)
	}
	waitServices(t, out2, "web-1,web-2")

	// The API: health, status, events, a run, its log.
	if _, err := apiDo(t, certs, "GET", addr+"/v1/health"); err != nil {
		t.Fatal(err)
	}
	sum := apiGet(t, certs, addr+"/v1/status")["task_summary"].(map[string]any)
	if sum["status"].(map[string]any)["successful"].(float64) != 2 {
		t.Fatalf("status summary %v", sum)
	}
	st := apiGet(t, certs, addr+"/v1/status/tasks/second?include=events")["second"].(map[string]any)
	if st["status"] != "successful" || len(st["events"].([]any)) == 0 {
		t.Fatalf("status of second: %v", st)
	}
	if _, err := apiDo(t, certs, "POST", addr+"/v1/tasks/second/run"); err != nil {
		t.Fatal(err)
	}
	evs := apiGet(t, certs, addr+"/v1/tasks/second/events")["events"].([]any)
	if len(evs) < 2 {
		t.Fatalf("%d events after a run", len(evs))
	}
	id := evs[0].(map[string]any)["id"].(string)
	logText, err := apiDo(t, certs, "GET", addr+"/v1/tasks/second/events/"+id+"/log")
	if err != nil || !strings.Contains(logText, "terraform apply") {
		t.Fatalf("run log: %v\n%s", err, logText)
	}
	// The same log from the CLI: the latest run, then a run by its id.
	if o := mustCLI("", "task", "logs", "second"); !strings.Contains(o, "==> Latest run of 'second': "+id+", apply succeeded") ||
		!strings.Contains(o, "terraform apply") {
		t.Fatalf("task logs:\n%s", o)
	}
	older := evs[len(evs)-1].(map[string]any)["id"].(string)
	if o := mustCLI("", "task", "logs", "-run", older, "second"); !strings.Contains(o, "terraform apply") || strings.Contains(o, "Latest run") {
		t.Fatalf("task logs -run:\n%s", o)
	}

	// Delete: "no" keeps the task; -destroy with "yes" removes the task, its
	// infrastructure (the module's file) and its state.
	if o, _ := cli("no\n", withCert, "task", "delete", "second"); !strings.Contains(o, "Cancelled") {
		t.Fatalf("delete answered no:\n%s", o)
	}
	apiGet(t, certs, addr+"/v1/tasks/second")
	if o := mustCLI("yes\n", "task", "delete", "-destroy", "second"); !strings.Contains(o,
		"==> Task 'second' deleted: its infrastructure was destroyed and its Terraform state removed.\n") {
		t.Fatalf("task delete -destroy did not report the destroy:\n%s", o)
	}
	testutil.Eventually(t, 2*time.Minute, "the task, its infrastructure and its state to go", func() bool {
		_, err := os.Stat(filepath.Join(out2, "services.json"))
		_, apiErr := apiDo(t, certs, "GET", addr+"/v1/tasks/second")
		kv, _, _ := c.Client.KV().Get("consul-terraform-sync/terraform-env:second", nil)
		_, dirErr := os.Stat(filepath.Join(work, "sync-tasks", "second"))
		return os.IsNotExist(err) && apiErr != nil && strings.Contains(apiErr.Error(), "404") &&
			kv == nil && os.IsNotExist(dirErr)
	})
	if p.count("panic") > 0 {
		t.Fatalf("the daemon panicked:\n%s", p.out.String())
	}
}

func tlsClient(t *testing.T, certs testcerts.Files) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(certs.CACert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cert, err := tls.LoadX509KeyPair(certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}
}

// apiDo sends a request with the client certificate and returns the body;
// a status other than 2xx is an error naming it.
func apiDo(t *testing.T, certs testcerts.Files, method, url string) (string, error) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tlsClient(t, certs).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return string(b), fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	return string(b), nil
}

func apiGet(t *testing.T, certs testcerts.Files, url string) map[string]any {
	t.Helper()
	b, err := apiDo(t, certs, "GET", url)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(b), &m); err != nil {
		t.Fatalf("%s: %v\n%s", url, err, b)
	}
	return m
}
