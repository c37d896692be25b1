// Package e2e runs the real ctsync binary against a real Consul agent and
// the real Terraform binary. The tests are skipped with -short.
package e2e

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// ctsyncBin is the binary built once for the whole package.
var ctsyncBin string

// ctsyncPlainBin is the same binary without the race detector, built only
// for the soak when ctsyncBin has it ("" otherwise).
var ctsyncPlainBin string

// binEnv names a ctsync binary built beforehand that the tests use instead
// of building their own: scripts/e2e-shards.sh builds it once for all of
// its shards (each a process of this package), with the policy helper
// ctsync-policy next to it.
const binEnv = "CTSYNC_E2E_BIN"

func TestMain(m *testing.M) {
	flag.Parse()
	// -test.list only names the tests: nothing to build.
	listing := flag.Lookup("test.list") != nil && flag.Lookup("test.list").Value.String() != ""
	if prebuilt := os.Getenv(binEnv); prebuilt != "" && !listing && os.Getenv("CTSYNC_E2E_RACE") == "" {
		if _, err := os.Stat(prebuilt); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", binEnv, err)
			os.Exit(1)
		}
		ctsyncBin = prebuilt
		os.Exit(m.Run())
	}
	if !testing.Short() && !listing {
		dir, err := os.MkdirTemp("", "ctsync-e2e-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		ctsyncBin = filepath.Join(dir, "ctsync")
		args := []string{"build", "-o", ctsyncBin}
		if os.Getenv("CTSYNC_E2E_RACE") != "" {
			// The soak (make soak) runs the daemon with the race detector.
			args = append(args, "-race")
		}
		builds := [][]string{args}
		if os.Getenv("CTSYNC_E2E_RACE") != "" && os.Getenv("CTSYNC_SOAK") != "" {
			// The soak's witness runs without the race detector, whose own
			// memory grows in a long-running process (golang/go#37233), so
			// that its RSS measures the daemon.
			ctsyncPlainBin = filepath.Join(dir, "ctsync-plain")
			builds = append(builds, []string{"build", "-o", ctsyncPlainBin})
		}
		// The policy helper, next to the daemon where it looks first, as
		// every package installs it: the gate tests run the real one.
		builds = append(builds, []string{"build", "-o", filepath.Join(dir, "ctsync-policy"), "./cmd/ctsync-policy"})
		for _, a := range builds {
			if !strings.HasSuffix(a[len(a)-1], "ctsync-policy") {
				a = append(a, "./cmd/ctsync")
			}
			build := exec.Command("go", a...)
			build.Dir = testutil.RepoRoot()
			build.Stdout, build.Stderr = os.Stderr, os.Stderr
			if err := build.Run(); err != nil {
				fmt.Fprintln(os.Stderr, "building ctsync:", err)
				os.Exit(1)
			}
		}
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: needs Consul and Terraform")
	}
}

// syncBuffer collects a process's output for assertions.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is a running ctsync.
type proc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	code int
	// quiet: the output is not printed when the test fails (the test
	// saves it itself).
	quiet bool
}

// env is what every ctsync process gets: the tools on PATH and the
// Terraform provider mirror.
func env() []string {
	e := append(os.Environ(), testutil.TerraformEnv()...)
	return append(e, "PATH="+filepath.Join(testutil.ToolsDir(), "bin")+":"+os.Getenv("PATH"))
}

// startCtsync runs `ctsync <args>` in dir; it is killed when the test ends.
func startCtsync(t testing.TB, dir string, args ...string) *proc {
	t.Helper()
	return startCtsyncEnv(t, dir, nil, args...)
}

// startCtsyncEnv is startCtsync with extra environment variables (later
// entries win over the harness's).
func startCtsyncEnv(t testing.TB, dir string, extraEnv []string, args ...string) *proc {
	t.Helper()
	return startBinary(t, ctsyncBin, dir, extraEnv, args...)
}

// startBinary is startCtsyncEnv with the binary given.
func startBinary(t testing.TB, bin, dir string, extraEnv []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Env = append(env(), extraEnv...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start ctsync: %v", err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(40 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() && !p.quiet {
			t.Logf("ctsync output:\n%s", p.out.String())
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	timeout = testutil.Scale(timeout)
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		t.Fatalf("ctsync did not exit within %s; output:\n%s", timeout, p.out.String())
		return -1
	}
}

// runCLI runs the binary bin (the ctsync binary under some name) as an
// operator would: env on top of this process's environment, stdin as
// standard input; it returns the combined output and the exit code.
func runCLI(bin string, env []string, stdin string, args ...string) (string, int) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	code := 0
	if err := cmd.Run(); err != nil {
		code = cmd.ProcessState.ExitCode()
	}
	return b.String(), code
}

// withFlags puts flags right after the command words of args ("status",
// "task <subcommand>"): as in CTS, flags come before a task name.
func withFlags(args []string, flags ...string) []string {
	n := min(1, len(args))
	if len(args) > 1 && args[0] == "task" {
		n = 2
	}
	out := append([]string(nil), args[:n]...)
	out = append(out, flags...)
	return append(out, args[n:]...)
}

// count returns how many times s occurs in the output.
func (p *proc) count(s string) int { return strings.Count(p.out.String(), s) }

// module returns the absolute path of a fixture module.
func module(name string) string {
	return filepath.Join(testutil.RepoRoot(), "e2e", "testdata", "modules", name)
}

// writeFile writes content to dir/name and returns the path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// readServices decodes the services.json a fixture module wrote, or nil
// when there is none yet or it is being written (the provider truncates the
// file, then writes it: a reader can see it empty or half written).
func readServices(t *testing.T, dir string) map[string]task.Service {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "services.json"))
	if err != nil {
		return nil
	}
	var m map[string]task.Service
	if err := json.Unmarshal(b, &m); err != nil {
		return nil
	}
	return m
}

// ids returns the sorted service IDs in a services map.
func ids(m map[string]task.Service) string {
	var out []string
	for _, s := range m {
		out = append(out, s.ID)
	}
	sortStrings(out)
	return strings.Join(out, ",")
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// waitServices waits until the module's output has exactly the given IDs.
func waitServices(t *testing.T, dir, want string) map[string]task.Service {
	t.Helper()
	var got map[string]task.Service
	testutil.Eventually(t, 60*time.Second, "module output with services "+want, func() bool {
		got = readServices(t, dir)
		return got != nil && ids(got) == want
	})
	return got
}

// taskConfig renders a config with one services task per name in tasks.
type taskSpec struct {
	name, module, services, extra string
}

func config(t testing.TB, consulAddr, workDir string, tasks ...taskSpec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "log_level = \"DEBUG\"\nworking_dir = %q\nport = %d\n\nconsul {\n  address = %q\n}\n\nbuffer_period {\n  enabled = false\n}\n", workDir, testutil.FreePort(t), consulAddr)
	for _, tk := range tasks {
		fmt.Fprintf(&b, "\ntask {\n  name = %q\n  module = %q\n  %s\n  condition \"services\" {\n    names = [%s]\n  }\n}\n", tk.name, tk.module, tk.extra, tk.services)
	}
	return b.String()
}
