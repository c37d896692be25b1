package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// task delete -destroy waits for the destroy and reports its result: a
// destroy that fails (Terraform's own error) keeps the task, disabled, and
// the command exits 11 with the error.
func TestCLIDeleteDestroyReportsFailure(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	out, varFile := newTaskDir(t)
	work := t.TempDir()
	cfg := config(t, c.Addr, filepath.Join(work, "sync-tasks"),
		taskSpec{name: "sticky", module: module("destroy_failing"), services: `"web"`,
			extra: fmt.Sprintf("variable_files = [%q]", varFile)})
	port := regexp.MustCompile(`port = (\d+)`).FindStringSubmatch(cfg)[1]
	p := startCtsync(t, work, "start", "-config-file", writeFile(t, work, "config.hcl", cfg))
	testutil.Eventually(t, 60*time.Second, "the task applied", func() bool { return fileExistsAt(out, "created") })
	env := []string{"CTS_ADDRESS=http://127.0.0.1:" + port}
	testutil.Eventually(t, 30*time.Second, "the first run recorded", func() bool {
		o, _ := runCLI(ctsyncBin, env, "", "status", "sticky")
		return strings.Contains(o, "successful")
	})

	o, code := runCLI(ctsyncBin, env, "", "task", "delete", "-auto-approve", "-destroy", "sticky")
	if code != 11 || !strings.Contains(o, "==> Waiting for terraform destroy of task 'sticky'") ||
		!strings.Contains(o, "==> Error: the destroy of 'sticky' failed: the task is kept, disabled\n") ||
		!strings.Contains(o, "this destroy always fails") {
		t.Fatalf("task delete -destroy (exit %d):\n%s", code, o)
	}
	if o, code := runCLI(ctsyncBin, env, "", "status", "sticky"); code != 0 || !strings.Contains(o, "sticky") {
		t.Fatalf("the task is gone after a failed destroy (exit %d):\n%s", code, o)
	}
	if n := p.count("destroyed task infrastructure"); n != 1 {
		t.Fatalf("%d destroys in the log, want 1:\n%s", n, p.out.String())
	}
}
