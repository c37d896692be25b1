package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// Task chaining with the real Consul and Terraform: the downstream task
// "down" watches the same service as "up" and receives up's outputs; every
// change is applied by up first, then by down with up's new outputs (its
// file always pairs up's ids with its own).
func TestChainWithRealTerraform(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	out, varFile := newTaskDir(t)
	work := t.TempDir()
	cfg := writeFile(t, work, "config.hcl", config(t, c.Addr, filepath.Join(work, "sync-tasks"),
		taskSpec{name: "down", module: module("chain_down"), services: `"web"`,
			extra: fmt.Sprintf("variable_files = [%q]\n  module_input \"task-outputs\" {\n    tasks = [\"up\"]\n  }", varFile)},
		taskSpec{name: "up", module: module("chain_up"), services: `"web"`}))
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	p := startCtsync(t, work, "start", "-config-file", cfg)

	read := func() string {
		b, _ := os.ReadFile(filepath.Join(out, "chain.txt"))
		return string(b)
	}
	waitChain := func(want string) time.Time {
		t.Helper()
		testutil.Eventually(t, 90*time.Second, "chain.txt = "+want, func() bool { return read() == want })
		return time.Now()
	}
	waitChain("web-1|web-1|1")

	for _, step := range []struct {
		change func()
		want   string
	}{
		{func() { c.RegisterService(t, reg("web-2", "web", 8002), "passing") }, "web-1,web-2|web-1,web-2|2"},
		{func() { c.SetCheck(t, "web-1", "critical", "down") }, "web-2|web-2|1"},
	} {
		before := len(haLines(p, ` executing task: `, "task_name=down"))
		upBefore := len(haLines(p, ` task completed: `, "task_name=up"))
		step.change()
		waitChain(step.want)
		// down's applying run came after up's run of the change ended.
		downRuns := haLines(p, ` executing task: `, "task_name=down")[before:]
		upDone := haLines(p, ` task completed: `, "task_name=up")[upBefore:]
		if len(downRuns) == 0 || len(upDone) == 0 {
			t.Fatalf("after the change: %d runs of down, %d successes of up", len(downRuns), len(upDone))
		}
		if downRuns[0].at.Before(upDone[0].at) {
			t.Fatalf("down started at %s, before up applied the change at %s", downRuns[0].at.Format(time.StampMilli), upDone[0].at.Format(time.StampMilli))
		}
		if len(downRuns) != 1 {
			t.Errorf("down ran %d times for one change, want 1:\n%s", len(downRuns), strings.Join(lineTexts(downRuns), "\n"))
		}
	}
}

func lineTexts(ls []logLine) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.text
	}
	return out
}

// A task with depends_on and no condition (a ctsync extension): its only
// trigger is its upstream. It runs after each change up applies, with up's
// outputs, once per change, and the API shows it with an empty condition.
func TestChainTaskWithoutCondition(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	out, varFile := newTaskDir(t)
	work := t.TempDir()
	base := config(t, c.Addr, filepath.Join(work, "sync-tasks"), taskSpec{name: "up", module: module("chain_up"), services: `"web"`})
	var port int
	if _, err := fmt.Sscanf(base[strings.Index(base, "port = "):], "port = %d", &port); err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, work, "config.hcl", base+fmt.Sprintf(`
task {
  name           = "after"
  module         = %q
  variable_files = [%q]
  depends_on     = ["up"]
  module_input "task-outputs" {
    tasks = ["up"]
  }
}
`, module("chain_down"), varFile))
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	startCtsync(t, work, "start", "-config-file", cfg)
	read := func() string {
		b, _ := os.ReadFile(filepath.Join(out, "chain.txt"))
		return string(b)
	}
	testutil.Eventually(t, 90*time.Second, "after to run with up's outputs", func() bool { return read() == "web-1||1" })
	testutil.Eventually(t, 30*time.Second, "after's run to be recorded", func() bool { return len(apiEvents(t, port, "after")) == 1 })
	if body := apiBody(t, port, "/v1/tasks/after"); !strings.Contains(body, `"condition":{}`) || !strings.Contains(body, `"depends_on":["up"]`) {
		t.Fatalf("GET /v1/tasks/after: %s", body)
	}

	// The same through the CLI (task create -task-file), with depends_on
	// only: created and run once, then run after each apply of up.
	_, laterVars := newTaskDir(t)
	taskFile := writeFile(t, work, "later.hcl", fmt.Sprintf(`
task {
  name           = "later"
  module         = %q
  variable_files = [%q]
  depends_on     = ["up"]
}
`, module("services_file"), laterVars))
	if o, code := runCLI(ctsyncBin, []string{fmt.Sprintf("CTS_ADDRESS=http://127.0.0.1:%d", port)}, "",
		"task", "create", "-auto-approve", "-task-file", taskFile); code != 0 || !strings.Contains(o, "==> Task 'later' created") {
		t.Fatalf("task create of a task with depends_on and no condition: exit %d\n%s", code, o)
	}
	testutil.Eventually(t, 30*time.Second, "later's first run to be recorded", func() bool { return len(apiEvents(t, port, "later")) == 1 })

	c.RegisterService(t, reg("web-2", "web", 8002), "passing")
	testutil.Eventually(t, 90*time.Second, "after to run with up's new outputs", func() bool { return read() == "web-1,web-2||2" })
	testutil.Eventually(t, 30*time.Second, "after's second run to be recorded", func() bool { return len(apiEvents(t, port, "after")) >= 2 })
	testutil.Eventually(t, 30*time.Second, "up's second run to be recorded", func() bool { return len(apiEvents(t, port, "up")) >= 2 })
	testutil.Eventually(t, 60*time.Second, "later to run after up's apply", func() bool { return len(apiEvents(t, port, "later")) >= 2 })
	if n := len(apiEvents(t, port, "after")); n != 2 {
		t.Fatalf("after ran %d times for two changes of up, want 2", n)
	}
	if n := len(apiEvents(t, port, "later")); n != 2 {
		t.Fatalf("later ran %d times (its creation and one change of up), want 2", n)
	}
}
