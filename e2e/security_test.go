package e2e

// The API's access rules against the real daemon with a real Consul and
// real Terraform (docs/security.md): tokens with read and write access,
// token files reloaded on SIGHUP, the module allowlist (run=inspect
// included), task creation switched off, cross-origin writes and foreign
// Host names refused without auth, no wildcard CORS, and the CLI's -token
// / CTS_TOKEN.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// apiCall is one request to the daemon; it returns the status and body.
func apiCall(t *testing.T, method, url, body string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	must(t, err)
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func expectStatus(t *testing.T, what string, want int, got int, body string) {
	t.Helper()
	if got != want {
		t.Errorf("%s: status %d, want %d; body %s", what, got, want, body)
	}
}

func newTaskJSON(name, module, dir string) string {
	// Variables are HCL expressions: a string value is quoted.
	return fmt.Sprintf(`{"task":{"name":%q,"module":%q,"variables":{"dir":%q},"condition":{"services":{"names":["web"]}}}}`,
		name, module, fmt.Sprintf("%q", dir))
}

func TestAPITokensAndAllowlistEndToEnd(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	work := t.TempDir()
	out, varFile := newTaskDir(t)
	apiOut := t.TempDir()
	port := testutil.FreePort(t)
	opsSecret, opsSecret2 := "ops-Secret-"+uuidish(), "ops-Secret-rotated-"+uuidish()
	dashSecret := "dash-Secret-" + uuidish()
	tokenFile := writeFile(t, work, "ops.token", opsSecret+"\n")
	must(t, os.Chmod(tokenFile, 0o600))
	allowed := filepath.Join(testutil.RepoRoot(), "e2e", "testdata", "modules")
	cfg := writeFile(t, work, "config.hcl", fmt.Sprintf(`
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
  log = true
}
api_auth {
  token {
    name        = "ops"
    secret_file = %q
    access      = "write"
  }
  token {
    name   = "dashboard"
    secret = "{{ env \"CTSYNC_E2E_DASH_TOKEN\" }}"
    access = "read"
  }
}
api_tasks {
  allowed_modules   = ["%s/services_*"]
  allowed_variables = ["dir"]
}
task {
  name           = "web-task"
  module         = %q
  variable_files = [%q]
  condition "services" {
    names = ["web"]
  }
}
`, filepath.Join(work, "sync-tasks"), port, c.Addr, tokenFile, allowed, module("services_file"), varFile))
	p := startCtsyncEnv(t, work, []string{"CTSYNC_E2E_DASH_TOKEN=" + dashSecret}, "start", "-config-file", cfg)
	waitServices(t, out, "web-1")
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	bearer := func(s string) map[string]string { return map[string]string{"Authorization": "Bearer " + s} }

	// Health is open (Consul's check); everything else needs a token.
	code, body := apiCall(t, "GET", base+"/v1/health", "", nil)
	expectStatus(t, "health without a token", 200, code, body)
	for _, path := range []string{"/v1/status", "/v1/tasks", "/v1/status/tasks", "/metrics"} {
		code, body = apiCall(t, "GET", base+path, "", nil)
		expectStatus(t, "GET "+path+" without a token", 401, code, body)
		if path != "/metrics" && !strings.Contains(body, `"error":{"message":"missing API token`) {
			t.Errorf("GET %s: not the CTS error shape: %s", path, body)
		}
		code, body = apiCall(t, "GET", base+path, "", bearer("not-a-token-0123456789"))
		expectStatus(t, "GET "+path+" with an unknown token", 401, code, body)
		code, body = apiCall(t, "GET", base+path, "", bearer(dashSecret))
		expectStatus(t, "GET "+path+" with the read token", 200, code, body)
	}
	code, _ = apiCall(t, "GET", base+"/ui/", "", nil)
	expectStatus(t, "the dashboard's page", 200, code, "")

	// A read token cannot write; a write token can.
	code, body = apiCall(t, "POST", base+"/v1/tasks", newTaskJSON("api-task", module("services_file"), apiOut), bearer(dashSecret))
	expectStatus(t, "create with the read token", 403, code, body)
	code, body = apiCall(t, "PATCH", base+"/v1/tasks/web-task", `{"enabled":false}`, bearer(dashSecret))
	expectStatus(t, "disable with the read token", 403, code, body)
	code, body = apiCall(t, "POST", base+"/v1/tasks?run=now", newTaskJSON("api-task", module("services_file"), apiOut), bearer(opsSecret))
	expectStatus(t, "create with the write token", 201, code, body)
	waitServices(t, apiOut, "web-1")

	// The allowlist: another module is refused, run=inspect included, and
	// nothing runs.
	evilOut := t.TempDir()
	for _, run := range []string{"", "?run=now", "?run=inspect"} {
		code, body = apiCall(t, "POST", base+"/v1/tasks"+run, newTaskJSON("evil", module("failing"), evilOut), bearer(opsSecret))
		expectStatus(t, "create with a module outside the allowlist "+run, 403, code, body)
		if !strings.Contains(body, "api_tasks.allowed_modules") {
			t.Errorf("refusal message: %s", body)
		}
	}
	code, _ = apiCall(t, "GET", base+"/v1/tasks/evil", "", bearer(dashSecret))
	expectStatus(t, "the refused task", 404, code, "")

	// The CLI: CTS_TOKEN, -token, and a hint without one.
	cli := func(env []string, args ...string) (int, string) {
		cmd := exec.Command(ctsyncBin, withFlags(args, "-http-addr", base)...)
		cmd.Env = append(os.Environ(), env...)
		b, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(b)
	}
	if code, outp := cli([]string{"CTS_TOKEN=" + dashSecret}, "status"); code != 0 || !strings.Contains(outp, "web-task") {
		t.Errorf("status with CTS_TOKEN: %d %s", code, outp)
	}
	if code, outp := cli(nil, "status"); code == 0 || !strings.Contains(outp, "CTS_TOKEN") {
		t.Errorf("status without a token: %d %s", code, outp)
	}
	if code, outp := cli(nil, "task", "disable", "-token", dashSecret, "web-task"); code == 0 || !strings.Contains(outp, "read access") {
		t.Errorf("disable with the read token: %d %s", code, outp)
	}
	if code, outp := cli([]string{"CTS_TOKEN=" + opsSecret}, "task", "disable", "web-task"); code != 0 {
		t.Errorf("disable with the write token: %d %s", code, outp)
	}

	// SIGHUP reloads the token file: the old secret stops working.
	must(t, os.WriteFile(tokenFile, []byte(opsSecret2+"\n"), 0o600))
	must(t, p.cmd.Process.Signal(syscall.SIGHUP))
	testutil.Eventually(t, 30*time.Second, "the rotated token to be accepted", func() bool {
		code, _ := apiCall(t, "GET", base+"/v1/status", "", bearer(opsSecret2))
		return code == 200
	})
	code, body = apiCall(t, "GET", base+"/v1/status", "", bearer(opsSecret))
	expectStatus(t, "the old token after the reload", 401, code, body)
	code, body = apiCall(t, "PATCH", base+"/v1/tasks/web-task", `{"enabled":true}`, bearer(opsSecret2))
	expectStatus(t, "enable with the rotated token", 200, code, body)

	// The audit log names tokens, never their secrets.
	logs := p.out.String()
	for _, want := range []string{`"api write"`, "token=ops"} {
		if !strings.Contains(logs, want) && !strings.Contains(logs, strings.ReplaceAll(want, `"`, "")) {
			t.Errorf("the log lacks %s", want)
		}
	}
	if !strings.Contains(logs, "write refused to a read token") || !strings.Contains(logs, "token=dashboard") {
		t.Errorf("the refusals of the read token are not logged")
	}
	for name, s := range map[string]string{"ops": opsSecret, "ops rotated": opsSecret2, "dashboard": dashSecret} {
		if strings.Contains(logs, s) {
			t.Errorf("the %s token's secret is in the daemon's output", name)
		}
	}
}

// uuidish is a random-enough suffix for secrets.
func uuidish() string { return fmt.Sprintf("%x", time.Now().UnixNano()) + "-0123456789" }

func TestBrowserRulesWithoutAuthEndToEnd(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	work := t.TempDir()
	port := testutil.FreePort(t)
	cfg := writeFile(t, work, "config.hcl", fmt.Sprintf(`
working_dir = %q
port        = %d
consul {
  address = %q
}
api_tasks {
  create = false
}
api_http {
  allowed_hosts = ["ctsync.test"]
}
`, filepath.Join(work, "sync-tasks"), port, c.Addr))
	p := startCtsync(t, work, "start", "-config-file", cfg)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	testutil.Eventually(t, 30*time.Second, "the API", func() bool {
		resp, err := http.Get(base + "/v1/health")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	body := newTaskJSON("x", module("services_file"), t.TempDir())

	// A "simple" cross-site request, and one from an old browser that
	// sends only Origin: refused before anything else.
	for _, hdr := range []map[string]string{
		{"Content-Type": "text/plain", "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
		{"Content-Type": "text/plain", "Origin": "http://evil.example"},
	} {
		code, b := apiCall(t, "POST", base+"/v1/tasks", body, hdr)
		expectStatus(t, "a cross-origin POST", 403, code, b)
		if !strings.Contains(b, "cross-origin request refused") {
			t.Errorf("message: %s", b)
		}
	}
	// What curl --data sends reaches the handler (which refuses: create = false).
	code, b := apiCall(t, "POST", base+"/v1/tasks", body, map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
	expectStatus(t, "curl --data with api_tasks.create = false", 403, code, b)
	if !strings.Contains(b, "create = false") {
		t.Errorf("message: %s", b)
	}
	// DNS rebinding: a foreign Host is refused, except for the health check.
	code, b = apiCall(t, "GET", base+"/v1/status", "", map[string]string{"Host": "evil.example"})
	expectStatus(t, "a foreign Host", 403, code, b)
	code, b = apiCall(t, "GET", base+"/v1/health", "", map[string]string{"Host": "evil.example"})
	expectStatus(t, "health with a foreign Host", 200, code, b)
	for _, host := range []string{"localhost", "ctsync.test", fmt.Sprintf("127.0.0.1:%d", port)} {
		code, b = apiCall(t, "GET", base+"/v1/status", "", map[string]string{"Host": host})
		expectStatus(t, "Host "+host, 200, code, b)
	}
	// No wildcard CORS, preflight included.
	req, _ := http.NewRequest("OPTIONS", base+"/v1/tasks", nil)
	req.Header.Set("Origin", "http://evil.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	resp.Body.Close()
	if v := resp.Header.Get("Access-Control-Allow-Origin"); v != "" {
		t.Errorf("Access-Control-Allow-Origin: %q", v)
	}
	// The PATCH of a plain-HTTP client to an HTTPS server is covered in
	// TestPlainHTTPToTLSPort (internal/api); here the daemon logs each
	// refused write.
	if n := p.count("cross-origin write refused"); n < 2 {
		t.Errorf("%d cross-origin refusals logged", n)
	}
	var st map[string]any
	_, b = apiCall(t, "GET", base+"/v1/status", "", nil)
	if json.Unmarshal([]byte(b), &st) != nil {
		t.Errorf("status: %s", b)
	}
}
