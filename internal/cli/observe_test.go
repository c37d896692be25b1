package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// TestDaemonObserve runs `ctsync start` with log_format = "json" against a
// fake Consul agent: every log line is a JSON object, /metrics serves the
// ctsync metrics (with the Consul requests the daemon made), / leads to
// the dashboard, and secrets stay out of the logs.
func TestDaemonObserve(t *testing.T) {
	if _, err := exec.LookPath("terraform"); err != nil {
		t.Skip("needs a terraform binary on PATH (start checks for it)")
	}
	agent := &fakeAgent{ready: true}
	consulSrv := httptest.NewServer(agent)
	t.Cleanup(consulSrv.Close) // after the daemon stopped: its blocking queries end with it
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(hook.Close)
	port := freePort(t)
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "ctsync.hcl")
	cfg := fmt.Sprintf(`
log_level   = "debug"
log_format  = "json"
port        = %d
working_dir = %q
consul {
  address = %q
  token   = "consul-token-secret"
  service_registration {
    enabled = false
  }
}
notification "webhook" {
  name    = "ops"
  url     = "%s/hook/secret-path"
  headers = { Authorization = "Bearer header-secret" }
}
task {
  name    = "t"
  module  = %q
  enabled = false
  condition "services" {
    names = ["web"]
  }
  drift_detection {
    interval = "1h"
  }
}
`, port, filepath.Join(dir, "sync"), consulSrv.URL, hook.URL, t.TempDir())
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	logs := &lockedBuffer{}
	exit := make(chan int, 1)
	go func() { exit <- Run([]string{"start", "-config-file", cfgFile}, io.Discard, logs) }()
	stopped := false
	t.Cleanup(func() {
		if !stopped { // the test failed early: stop the daemon
			_ = syscall.Kill(os.Getpid(), syscall.SIGINT)
			select {
			case <-exit:
			case <-time.After(testutil.Scale(30 * time.Second)):
			}
		}
	})
	addr := fmt.Sprintf("http://127.0.0.1:%d", port)

	var metrics string
	waitFor(t, "metrics with the watch of the task", exit, logs, func() bool {
		resp, err := http.Get(addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		metrics = string(b)
		return resp.StatusCode == 200 && strings.Contains(metrics, "ctsync_watch_views 1") &&
			strings.Contains(metrics, `ctsync_consul_requests_total{blocking="false",code="200",endpoint="health"}`)
	})
	for _, want := range []string{
		"ctsync_is_leader 1",
		`ctsync_task_runs_total{kind="apply",task="t"} 0`,
		`ctsync_task_drifted{task="t"} 0`,
		`ctsync_consul_requests_total{blocking="false",code="200",endpoint="health"}`,
		"ctsync_consul_request_duration_seconds_bucket",
		"go_goroutines",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("/: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, err = http.Get(addr + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), `<script src="app.js"`) {
		t.Errorf("/ui/: %d\n%s", resp.StatusCode, page)
	}
	// The task's drift_detection is in the API.
	resp, err = http.Get(addr + "/v1/tasks/t")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"drift_detection":{"interval":"1h0m0s","remediate":false}`) {
		t.Errorf("task: %s", body)
	}

	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exit:
		stopped = true
		if code != ExitOK {
			t.Errorf("exit %d\n%s", code, logs)
		}
	case <-time.After(testutil.Scale(30 * time.Second)):
		t.Fatalf("daemon did not stop\n%s", logs)
	}

	out := logs.String()
	n := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Errorf("log line is not JSON: %q", sc.Text())
			continue
		}
		if line["msg"] == nil || line["level"] == nil || line["time"] == nil {
			t.Errorf("log line lacks msg, level or time: %q", sc.Text())
		}
		n++
	}
	if n < 3 || !strings.Contains(out, `"msg":"ctsync started"`) {
		t.Errorf("%d JSON log lines; logs:\n%s", n, out)
	}
	for _, secret := range []string{"consul-token-secret", "header-secret", "secret-path"} {
		if strings.Contains(out, secret) {
			t.Errorf("logs contain %q", secret)
		}
	}
}
