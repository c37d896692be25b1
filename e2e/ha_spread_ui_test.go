package e2e

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ctsync/ctsync/internal/testutil"
)

// The dashboard in spread mode, in headless Chromium, on a member that
// does not own every task: the task list has an Owner column naming each
// task's owner, the task page names it, the cluster summary says the tasks
// are spread and lists each member's task count; when an owner leaves
// (SIGTERM) the page follows its tasks to the other member.
func TestSpreadDashboard(t *testing.T) {
	skipShort(t)
	chromium := findChromium(t)
	c := newHACluster(t)
	outs := make([]string, spreadTasks)
	for i := range outs {
		outs[i] = t.TempDir()
		c.register(fmt.Sprintf("svc-%d-1", i), fmt.Sprintf("svc-%d", i), 9000+i)
	}
	for _, id := range []string{"cts-a", "cts-b"} {
		c.add(&haInstance{id: id}, func(in *haInstance) string { return spreadConfig(in, c.consul.Addr, outs) }).start(t)
	}
	for i := range spreadTasks {
		waitFile(t, outs[i], fmt.Sprintf("svc-%d-1", i), 90*time.Second)
	}
	var owners map[string]string
	testutil.Eventually(t, 30*time.Second, "both members showing the same owners", func() bool {
		a, ok1 := spreadOwners(c.insts[0].port, spreadTasks)
		b, ok2 := spreadOwners(c.insts[1].port, spreadTasks)
		owners = a
		return ok1 && ok2 && fmt.Sprint(a) == fmt.Sprint(b)
	})
	per := map[string]int{}
	for _, id := range owners {
		per[id]++
	}
	if len(per) != 2 {
		t.Fatalf("the %d tasks are not spread over both members: %v", spreadTasks, owners)
	}
	shots := t.TempDir()
	if dir := os.Getenv("CTSYNC_ARTIFACTS"); dir != "" {
		shots = dir + "/ui"
		if err := os.MkdirAll(shots, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b := newBrowser(t, chromium, shots)
	viewer := c.insts[1]
	b.do("open the dashboard", chromedp.Navigate(fmt.Sprintf("http://127.0.0.1:%d/ui/", viewer.port)))
	b.wait("the task rows", fmt.Sprintf(`document.querySelectorAll('#tasks tbody tr').length === %d`, spreadTasks), 30*time.Second)
	if h := b.eval(`[...document.querySelectorAll('#tasks thead th')].map(th => th.textContent).join(',')`); h != "Task,Owner,Status,Enabled,Last run,Result,Trigger,Next run,Drift" {
		t.Errorf("task list columns: %v", h)
	}
	for name, id := range owners {
		b.waitText(row(name)+" td.owner", id, 15*time.Second)
	}
	b.waitText("#cluster summary", "tasks spread", 15*time.Second)
	if got := b.text("#cluster summary"); !strings.Contains(got, "2 members") || strings.Contains(got, "leader") {
		t.Errorf("cluster summary: %q", got)
	}
	for id, n := range per {
		want := fmt.Sprintf("%d task", n)
		got, _ := b.eval(fmt.Sprintf(`(document.querySelector('#cluster li[data-member=%s]') || {}).textContent || ''`, jsString(id))).(string)
		if !strings.Contains(got, want) {
			t.Errorf("cluster member %s: %q, want %q", id, got, want)
		}
	}
	b.shot("spread-tasks")

	// The task page names the owner.
	b.do("open task-0", chromedp.Navigate(fmt.Sprintf("http://127.0.0.1:%d/ui/#/tasks/task-0", viewer.port)))
	b.wait("the owner of task-0 on its page", fmt.Sprintf(
		`[...document.querySelectorAll('dl.details dt')].some(dt => dt.innerText === 'Owner' && dt.nextElementSibling.innerText === %s)`,
		jsString(owners["task-0"])), 30*time.Second)

	// The other member leaves: the list follows its tasks to the viewer.
	leaver := c.insts[0]
	if err := leaver.proc().cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := leaver.proc().wait(t, 60*time.Second); code != 0 {
		t.Fatalf("%s exited with %d", leaver.id, code)
	}
	b.do("open the task list", chromedp.Navigate(fmt.Sprintf("http://127.0.0.1:%d/ui/#/", viewer.port)))
	b.wait("every task owned by "+viewer.id, fmt.Sprintf(
		`(cells => cells.length === %d && cells.every(td => td.innerText.trim() === %s))([...document.querySelectorAll('#tasks td.owner')])`,
		spreadTasks, jsString(viewer.id)), 30*time.Second)
	b.shot("spread-tasks-after-leave")
	if d := b.dialogCount(); len(d) > 0 {
		t.Errorf("dialogs opened: %v", d)
	}
}
