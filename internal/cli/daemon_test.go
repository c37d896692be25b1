package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// fakeAgent is just enough of a Consul agent for the daemon: a leader that
// appears on demand, blocking health queries that never change, and the
// agent service endpoints, which it records.
type fakeAgent struct {
	mu    sync.Mutex
	ready bool
	calls []string
	regs  []map[string]any
}

func (f *fakeAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	ready := f.ready
	if strings.HasPrefix(r.URL.Path, "/v1/agent/") {
		f.calls = append(f.calls, r.Method+" "+r.URL.Path)
		if r.URL.Path == "/v1/agent/service/register" {
			var m map[string]any
			b, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(b, &m)
			f.regs = append(f.regs, m)
		}
	}
	f.mu.Unlock()
	switch {
	case r.URL.Path == "/v1/status/leader":
		if !ready {
			http.Error(w, "No cluster leader", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte(`"127.0.0.1:8300"`))
	case strings.HasPrefix(r.URL.Path, "/v1/agent/"):
		w.WriteHeader(200)
	case strings.HasPrefix(r.URL.Path, "/v1/health/service/"):
		if idx := r.URL.Query().Get("index"); idx != "" && idx != "0" {
			<-r.Context().Done() // nothing ever changes
			return
		}
		w.Header().Set("X-Consul-Index", "7")
		_, _ = w.Write([]byte("[]"))
	default:
		w.Header().Set("X-Consul-Index", "7")
		_, _ = w.Write([]byte("{}"))
	}
}

func (f *fakeAgent) snapshot() ([]string, []map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...), append([]map[string]any(nil), f.regs...)
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// lockedBuffer is a bytes.Buffer safe for the daemon's concurrent logging.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDaemonServesAPIAndRegisters runs `ctsync start` against a fake Consul
// agent: the API answers before Consul is ready, the daemon registers
// itself once Consul is there, the task commands work against it, and
// SIGINT deregisters and exits 0.
func TestDaemonServesAPIAndRegisters(t *testing.T) {
	if _, err := exec.LookPath("terraform"); err != nil {
		t.Skip("needs a terraform binary on PATH (start checks for it)")
	}
	agent := &fakeAgent{}
	consulSrv := httptest.NewServer(agent)
	defer consulSrv.Close()
	port := freePort(t)
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "ctsync.hcl")
	cfg := fmt.Sprintf(`
log_level   = "debug"
port        = %d
id          = "cts-test"
working_dir = %q
consul {
  address = %q
}
task {
  name    = "t"
  module  = %q
  enabled = false
  condition "services" {
    names = ["web"]
  }
}
`, port, filepath.Join(dir, "sync"), consulSrv.URL, t.TempDir())
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	logs := &lockedBuffer{}
	exit := make(chan int, 1)
	go func() { exit <- Run([]string{"start", "-config-file", cfgFile}, io.Discard, logs) }()

	addr := fmt.Sprintf("http://127.0.0.1:%d", port)
	t.Setenv("CTS_ADDRESS", addr)
	waitFor(t, "the API to answer while Consul is not ready", exit, logs, func() bool {
		resp, err := http.Get(addr + "/v1/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if !strings.Contains(logs.String(), fmt.Sprintf("[INFO]  api: api listening: address=[::]:%d", port)) {
		t.Errorf("no 'api listening' line with the address:\n%s", logs)
	}
	if calls, _ := agent.snapshot(); len(calls) != 0 {
		t.Fatalf("registered before consul was ready: %v", calls)
	}

	agent.mu.Lock()
	agent.ready = true
	agent.mu.Unlock()
	waitFor(t, "self-registration", exit, logs, func() bool { _, regs := agent.snapshot(); return len(regs) == 1 })
	_, regs := agent.snapshot()
	reg := regs[0]
	if reg["ID"] != "cts-test" || reg["Name"] != "consul-terraform-sync" || reg["Port"] != float64(port) {
		t.Errorf("registration %v", reg)
	}
	checks, _ := reg["Checks"].([]any)
	if len(checks) != 1 || checks[0].(map[string]any)["HTTP"] != fmt.Sprintf("http://localhost:%d/v1/health", port) {
		t.Errorf("checks %v", reg["Checks"])
	}

	// The CLI against the daemon.
	code, out, errOut := run(t, "", "status")
	if code != ExitOK || !strings.Contains(out, "t     no ") {
		t.Errorf("status: %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = run(t, "", "task", "create", "-auto-approve", "-task-file", filepath.Join(dir, "none.hcl"))
	if code != ExitError || !strings.Contains(errOut, "none.hcl") {
		t.Errorf("create with a missing file: %d %s", code, errOut)
	}

	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exit:
		if code != ExitOK {
			t.Errorf("exit %d\n%s", code, logs)
		}
	case <-time.After(testutil.Scale(30 * time.Second)):
		t.Fatalf("daemon did not stop\n%s", logs)
	}
	// The service is deregistered at exit and not registered again after
	// that. (The registration watch's last blocking read may reach the
	// agent after the deregistration: it was sent before it, on another
	// connection, and its answer is no longer read.)
	calls, _ := agent.snapshot()
	dereg := slices.Index(calls, "PUT /v1/agent/service/deregister/cts-test")
	if dereg < 0 || slices.Contains(calls[dereg+1:], "PUT /v1/agent/service/register") {
		t.Errorf("agent calls %v", calls)
	}
	if _, err := http.Get(addr + "/v1/health"); err == nil {
		t.Error("API still serving after exit")
	}
}

// TestDaemonPortInUse checks that a port in use stops the daemon with 11.
func TestDaemonPortInUse(t *testing.T) {
	if _, err := exec.LookPath("terraform"); err != nil {
		t.Skip("needs a terraform binary on PATH (start checks for it)")
	}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "ctsync.hcl")
	cfg := fmt.Sprintf("port = %d\nworking_dir = %q\nconsul {\n  address = \"127.0.0.1:1\"\n}\n",
		ln.Addr().(*net.TCPAddr).Port, filepath.Join(dir, "sync"))
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	if code := Run([]string{"start", "-config-file", cfgFile}, io.Discard, logs); code != ExitError {
		t.Fatalf("exit %d\n%s", code, logs)
	}
	if !strings.Contains(logs.String(), "address already in use") {
		t.Errorf("logs:\n%s", logs)
	}
}

// waitFor polls cond until it holds; it fails early if the daemon exits.
func waitFor(t *testing.T, what string, exit chan int, logs *lockedBuffer, cond func() bool) {
	t.Helper()
	defer func() {
		if t.Failed() {
			t.Logf("the daemon's log:\n%s", logs)
		}
	}()
	testutil.Eventually(t, 20*time.Second, what, func() bool {
		select {
		case code := <-exit:
			t.Fatalf("daemon exited (%d) while waiting for %s\n%s", code, what, logs)
		default:
		}
		return cond()
	})
}
