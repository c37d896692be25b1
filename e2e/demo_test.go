package e2e

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// TestDemoKeepsRunning runs scripts/demo.sh (make demo) as a user would:
// after its scripted changes it prints the dashboard's URL and keeps
// Consul, nginx and ctsync running, the dashboard answering, until Ctrl-C
// (SIGINT to its process group), which stops everything, removes its
// temporary folder and exits 0. No request through the load balancer that
// it shows gets a 502 (it waits for nginx's reloads to finish). Its output
// goes through a pipe, as in `make demo | tee demo.log`, and, as tee does
// on Ctrl-C, the reader goes away first: the clean-up still stops nginx
// and removes the folder.
func TestDemoKeepsRunning(t *testing.T) {
	skipShort(t)
	if _, err := exec.LookPath("nginx"); err != nil {
		if _, err := os.Stat("/usr/sbin/nginx"); err != nil {
			t.Skip("no nginx: make demo installs it (TOOLS_NGINX=1 scripts/tools.sh)")
		}
	}
	// As from a terminal, the script starts with Ctrl-C's signal at its
	// default: a test binary started in the background (make test's shards,
	// CI) may have inherited SIGINT ignored, and a shell that starts with a
	// signal ignored can neither trap nor receive it.
	cmd := exec.Command("env", "--default-signal=INT", "bash", filepath.Join(testutil.RepoRoot(), "scripts", "demo.sh"))
	cmd.Env = append(os.Environ(), "CTSYNC_BIN="+ctsyncBin, "CTSYNC_DEMO_EXIT=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan error, 1)
	t.Cleanup(func() {
		// A failed test: Ctrl-C, whose trap stops everything (nginx runs
		// as a daemon, out of the process group), then SIGKILL.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		select {
		case err := <-done:
			done <- err
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		<-done
	})
	var out syncBuffer
	lines := make(chan string, 256)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			out.Write([]byte(sc.Text() + "\n"))
			select {
			case lines <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		done <- cmd.Wait()
		close(lines)
	}()

	// The dashboard's URL, then the promise to keep running.
	dashRe := regexp.MustCompile(`^\s*dashboard\s+(http://127\.0\.0\.1:\d+/ui/)`)
	var dashboard string
	timeout := time.After(testutil.Scale(4 * time.Minute))
	for waiting := true; waiting; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the demo ended before Ctrl-C:\n%s\n%s", out.String(), stderr.String())
			}
			if m := dashRe.FindStringSubmatch(l); m != nil {
				dashboard = m[1]
			}
			// The last line of the closing words.
			if strings.HasPrefix(strings.TrimSpace(l), "ctsync's log ") {
				waiting = false
			}
		case <-timeout:
			t.Fatalf("the demo did not reach its end within 4 minutes:\n%s\n%s", out.String(), stderr.String())
		}
	}
	if dashboard == "" || !strings.Contains(out.String(), "Everything keeps running until you press Ctrl-C") {
		t.Fatalf("no dashboard URL, or no word of running until Ctrl-C:\n%s", out.String())
	}
	// Still running a moment later: the dashboard answers, with the task.
	testutil.Eventually(t, 30*time.Second, "the dashboard and the task's status", func() bool {
		for _, u := range []string{dashboard, strings.TrimSuffix(dashboard, "ui/") + "v1/status/tasks/nginx-web"} {
			resp, err := http.Get(u)
			if err != nil {
				return false
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || (strings.Contains(u, "/v1/") && !strings.Contains(string(body), `"status":"successful"`)) {
				return false
			}
		}
		return true
	})
	m := regexp.MustCompile(`ctsync's log\s+(/tmp/ctsync-demo\.[^/]+)/ctsync\.log`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no demo folder printed:\n%s", out.String())
	}

	// What the load balancer answered: backends only, never a 502.
	blocks := strings.Split(out.String(), "six requests through the load balancer")
	if len(blocks) != 4 {
		t.Fatalf("want three traffic samples:\n%s", out.String())
	}
	for _, b := range blocks[1:] {
		if n := strings.Count(b, "    hello from web-"); n != 6 || strings.Contains(b, "502") || strings.Contains(b, "Bad Gateway") {
			t.Errorf("a traffic sample with %d answers from backends of 6, or a 502:\n%s", n, b)
		}
	}
	pidText, err := os.ReadFile(filepath.Join(m[1], "nginx", "nginx.pid"))
	if err != nil {
		t.Fatal(err)
	}
	nginxPID, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err != nil {
		t.Fatal(err)
	}

	// Ctrl-C, under `| tee`: the reader of the output is gone first.
	stdout.Close()
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		done <- err // for the cleanup
		if err != nil {
			t.Errorf("the demo exited with %v after Ctrl-C:\n%s\n%s", err, out.String(), stderr.String())
		}
	case <-time.After(testutil.Scale(60 * time.Second)):
		t.Fatalf("the demo did not stop after Ctrl-C:\n%s\n%s", out.String(), stderr.String())
	}
	if !strings.Contains(stderr.String(), "stopped consul, ctsync and nginx; removed "+m[1]) {
		t.Errorf("no clean-up line on standard error:\n%s", stderr.String())
	}
	if err := syscall.Kill(nginxPID, 0); err != syscall.ESRCH {
		t.Errorf("nginx's master (pid %d) still runs after Ctrl-C: %v", nginxPID, err)
		_ = syscall.Kill(nginxPID, syscall.SIGKILL)
	}
	if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
		t.Errorf("the demo's folder %s is still there (%v)", m[1], err)
	}
	if resp, err := http.Get(dashboard); err == nil {
		resp.Body.Close()
		t.Errorf("the dashboard still answers after Ctrl-C")
	}
}

// TestToolsEnvRelocatable: the .tools/env.sh that scripts/tools.sh writes
// names no absolute path: sourced from a copy of the checkout, from any
// directory and through a relative path, it points PATH, CTSYNC_TOOLS and
// Terraform's configuration (and its provider mirror) at the copy's tools.
func TestToolsEnvRelocatable(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), "scripts", "tools.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)cat > "\$TOOLS/env\.sh" <<'ENV'\n(.*?)\nENV\n`).FindSubmatch(src)
	if m == nil {
		t.Fatal("scripts/tools.sh writes no env.sh heredoc")
	}
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tools := filepath.Join(root, "copy", ".tools")
	if err := os.MkdirAll(tools, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tools, "env.sh"), append(m[1], '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, path string }{
		{"/", filepath.Join(tools, "env.sh")},
		{filepath.Join(root, "copy"), ".tools/env.sh"},
	} {
		sh := exec.Command("bash", "-c", `source "$1" && printf '%s\n%s\n%s\n' "$CTSYNC_TOOLS" "$TF_CLI_CONFIG_FILE" "${PATH%%:*}" && cat "$TF_CLI_CONFIG_FILE"`, "bash", c.path)
		sh.Dir = c.dir
		sh.Env = append(os.Environ(), "CTSYNC_TOOLS=/elsewhere", "TF_CLI_CONFIG_FILE=/elsewhere/terraformrc")
		b, err := sh.CombinedOutput()
		if err != nil {
			t.Fatalf("source %s in %s: %v\n%s", c.path, c.dir, err, b)
		}
		got := strings.SplitN(string(b), "\n", 4)
		if len(got) < 4 || got[0] != tools || got[1] != tools+"/terraformrc" || got[2] != tools+"/bin" ||
			!strings.Contains(got[3], `path    = "`+tools+`/mirror"`) {
			t.Errorf("source %s in %s:\n%s", c.path, c.dir, b)
		}
	}
}
