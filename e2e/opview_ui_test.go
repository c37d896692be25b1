package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/testutil"
)

// TestDashboardRunsAndCharts drives the dashboard in headless Chromium
// against the real daemon, Consul and Terraform: a failing task's retry
// and one-line error in the list, "Run now" asking for confirmation, the
// charts drawn with the runs' data, a run's page (what changed in Consul,
// phases, plan, log, error) opened from its link and reloaded, identical
// failures collapsed, the history filter and pages, and the metrics
// summary. Screenshots go to $CTSYNC_ARTIFACTS/ui-runs.
func TestDashboardRunsAndCharts(t *testing.T) {
	skipShort(t)
	chromium := findChromium(t)
	shots := artifactsDir(t, "ui-runs")
	c := testutil.StartConsul(t)
	webDir, webVars := newTaskDir(t)
	_, brokenVars := newTaskDir(t)
	work := t.TempDir()
	port := testutil.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := daemonConfig(t, work, port, c.Addr, fmt.Sprintf(`
retry {
  max_delay = "3s"
}
task {
  name           = "web"
  module         = %q
  variable_files = [%q]
  condition "services" {
    names = ["web"]
  }
}
task {
  name   = "firewall"
  module = %q
  condition "services" {
    names = ["web"]
  }
}
task {
  name           = "broken"
  module         = %q
  variable_files = [%q]
  variables      = { not_in_module = "x" }
  condition "services" {
    names = ["web"]
  }
}
`, module("services_file"), webVars, module("failing_apply"), module("services_file"), brokenVars))
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	startCtsync(t, work, "start", "-config-file", cfg)
	waitServices(t, webDir, "web-1")
	// Two failures of the firewall task at least: they are collapsed.
	waitEvents(t, base, "firewall", 60*time.Second, func(evs []store.Event) bool { return len(evs) >= 2 })

	b := newBrowser(t, chromium, shots)
	const summary = "Error: local-exec provisioner error: exit status 3. Output: 503 Service Unavailable"

	// ---- the list: error summary, pending retry, runs per minute ----
	b.do("open the dashboard", chromedp.Navigate(base+"/ui/"))
	b.waitText(row("firewall")+" td.result .err-summary", summary, 30*time.Second)
	b.wait("the retry in the next-run column", fmt.Sprintf(`/retry \d+/.test((document.querySelector(%s) || {}).innerText || '')`,
		jsString(row("firewall")+" td.next-run")), 30*time.Second)
	if got := b.text(row("firewall") + " td.result"); strings.Contains(got, "firewall APPLY") {
		t.Errorf("the list shows the provisioner's command line: %q", got)
	}
	// A terminal failure (the module refuses an argument) says so.
	b.waitText(row("broken")+" td.result .err-summary", "Unsupported argument", 60*time.Second)
	if got := b.text(row("broken") + " td.result .err-summary"); !strings.Contains(got, "terminal") {
		t.Errorf("the terminal failure's error line %q does not say terminal", got)
	}
	if got := b.text(row("web") + " td.next-run"); got != "on change" {
		t.Errorf("web next run %q, want on change", got)
	}
	b.wait("the runs-per-minute chart drawn with data",
		`(f => f && +f.dataset.points > 0 && !!f.querySelector('canvas'))(document.getElementById('chart-runs'))`, 30*time.Second)
	t.Logf("list: %s", b.shot("01-list-retry-chart"))

	// ---- a task page: Run now asks first ----
	b.do("open web", chromedp.Navigate(base+"/ui/#/tasks/web"))
	b.wait("web history", `document.querySelectorAll('#history tbody tr').length >= 1`, 30*time.Second)
	before := len(taskEvents(t, base, "web"))
	b.click("#run-now")
	b.wait("the confirmation", `!!document.querySelector('#run-confirm #confirm-run')`, 10*time.Second)
	b.click("#cancel-run")
	b.wait("the confirmation to close", `!document.querySelector('#run-confirm')`, 10*time.Second)
	if n := len(taskEvents(t, base, "web")); n != before {
		t.Fatalf("cancelled Run now ran the task (%d events, was %d)", n, before)
	}
	b.act("#run-now", "Run succeeded")
	runNowID := taskEvents(t, base, "web")[0].ID
	// A change in Consul: its run records what changed.
	c.RegisterService(t, reg("web-2", "web", 8002), "passing")
	waitServices(t, webDir, "web-1,web-2")
	evs := waitEvents(t, base, "web", 30*time.Second, func(evs []store.Event) bool { return len(evs) >= before+2 })
	changed := evs[0]
	b.do("reload web", chromedp.Reload())
	b.wait("the duration chart drawn with the runs",
		fmt.Sprintf(`(f => f && +f.dataset.points >= %d && !!f.querySelector('canvas'))(document.getElementById('chart-duration'))`, before+2), 30*time.Second)
	b.wait("the latency chart drawn", `(f => f && /^[1-9]\d*,0$/.test(f.dataset.seriesPoints) && !!f.querySelector('canvas'))(document.getElementById('chart-latency'))`, 30*time.Second)
	if got := b.text("#chart-duration figcaption"); !strings.HasSuffix(got, " runs, 100% succeeded") {
		t.Errorf("the duration chart's caption %q, want the success rate 100%%", got)
	}
	t.Logf("task page: %s", b.shot("02-task-charts"))

	// The history says what changed in Consul before each run.
	if got := b.text(fmt.Sprintf(`#history tbody tr[data-event=%s] td.changes`, jsString(changed.ID))); !strings.HasPrefix(got, "web-2") || !strings.HasSuffix(got, " added") || strings.Contains(got, ",") {
		t.Errorf("the history's changes of the run after web-2 registered: %q, want web-2 added", got)
	}

	// ---- the run page, from its link in the history ----
	b.click(fmt.Sprintf(`#history tbody tr[data-event=%s] a.run-link`, jsString(changed.ID)))
	b.waitText("#run-title", changed.ID, 30*time.Second)
	b.waitText("#changes", "web-2", 10*time.Second)
	if got := b.text("#changes"); !strings.Contains(got, "1 added") {
		t.Errorf("changes %q, want web-2 added", got)
	}
	b.waitText("#run-log", "Apply complete!", 30*time.Second)
	for _, p := range []string{"plan", "apply"} {
		if got := b.text(fmt.Sprintf(`#phases tr[data-phase=%q] td.phase-duration`, p)); got == "" {
			t.Errorf("no %s phase with a duration", p)
		}
	}
	if got := b.text("#run-trigger"); got != "health/service/web" {
		t.Errorf("trigger %q", got)
	}
	if got := b.text("#run-latency"); got == "" {
		t.Error("no reaction latency")
	}
	link, _ := b.eval(`document.getElementById('run-url').value`).(string)
	if want := base + "/ui/runs/web/" + changed.ID; link != want {
		t.Errorf("run link %q, want %q", link, want)
	}
	t.Logf("run page: %s", b.shot("03-run-page"))

	// ---- the pasted link, and a reload, open the same run ----
	b.do("open the run's link", chromedp.Navigate(link))
	b.waitText("#run-title", changed.ID, 30*time.Second)
	if loc, _ := b.eval(`location.pathname + location.hash`).(string); loc != "/ui/#/runs/web/"+changed.ID {
		t.Errorf("the link led to %q", loc)
	}
	b.do("reload the run page", chromedp.Reload())
	b.waitText("#run-title", changed.ID, 30*time.Second)
	b.waitText("#changes", "web-2", 10*time.Second)

	// Who triggered a run: the dashboard's Run now, no api_auth.
	b.do("open the Run now run", chromedp.Navigate(base+"/ui/#/runs/web/"+runNowID))
	b.waitText("#run-actor", "an API request", 30*time.Second)
	if got := b.text("#run-trigger"); got != "api" {
		t.Errorf("the Run now run's trigger %q, want api", got)
	}

	// ---- a terminal failure on its task page ----
	b.do("open broken", chromedp.Navigate(base+"/ui/#/tasks/broken"))
	b.waitText("#last-error", "Unsupported argument", 30*time.Second)
	b.waitText("dl.details", "yes: waits for a change", 10*time.Second)
	if got := b.text("#history tbody tr:first-child td.error"); !strings.Contains(got, "terminal") {
		t.Errorf("the terminal run's history row %q", got)
	}
	if got := b.eval(`!!document.querySelector('#retry-info')`); got != false {
		t.Error("a terminal failure shows a pending retry")
	}

	// ---- the failing task: collapsed failures, filter, its run page ----
	b.do("open firewall", chromedp.Navigate(base+"/ui/#/tasks/firewall"))
	b.wait("collapsed identical failures", `!!document.querySelector('#history tbody tr:first-child .repeat')`, 30*time.Second)
	b.waitText("#last-error", summary, 10*time.Second)
	b.waitText("#chart-duration figcaption", " runs, 0% succeeded", 10*time.Second)
	// The reaction latency of failed runs is its own (red) series.
	b.wait("the failed runs' latency drawn apart", `/^0,[1-9]/.test(document.getElementById('chart-latency').dataset.seriesPoints || '')`, 10*time.Second)
	b.wait("the retry on the task page", `/attempt \d+/.test((document.querySelector('#retry-info') || {}).innerText || '')`, 30*time.Second)
	rows := b.eval(`document.querySelectorAll('#history tbody tr').length`).(float64)
	total := len(taskEvents(t, base, "firewall"))
	if int(rows) >= total {
		t.Errorf("%d history rows for %d identical failures: not collapsed", int(rows), total)
	}
	if got := b.text("#history tbody tr:first-child td.error"); !strings.HasPrefix(got, summary) || strings.Contains(got, "firewall APPLY") {
		t.Errorf("history error cell %q", got)
	}
	b.eval(`(s => { s.value = 'success'; s.dispatchEvent(new Event('change')); return true; })(document.getElementById('result-filter'))`)
	b.waitText("#page-info", "0–0 of 0", 10*time.Second)
	t.Logf("failing task: %s", b.shot("04-failing-task"))
	failedID := taskEvents(t, base, "firewall")[0].ID
	b.do("open a failed run", chromedp.Navigate(base+"/ui/#/runs/firewall/"+failedID))
	b.waitText("#run-error-summary", summary, 30*time.Second)
	if got := b.text("#run-plan"); !strings.Contains(got, "+1") {
		t.Errorf("the failed apply's plan %q, want +1", got)
	}
	if got, _ := b.eval(`document.getElementById("run-error").textContent`).(string); !strings.Contains(got, "exit status 3") {
		t.Errorf("full error %q", got)
	}
	t.Logf("failed run: %s", b.shot("05-failed-run"))

	// Disabled, the failing task is not retried, and its page says so
	// instead of "no: retried".
	b.do("open firewall", chromedp.Navigate(base+"/ui/#/tasks/firewall"))
	b.act("#disable", "Task disabled.")
	b.waitText("#no-retry", "not retried while the task is disabled", 30*time.Second)
	if got := b.text("dl.details"); strings.Contains(got, "no: retried") || strings.Contains(got, "attempt ") {
		t.Errorf("a disabled failing task shows a retry:\n%s", got)
	}
	if st := taskStatus(t, base, "firewall"); !st.Dirty || st.Terminal || st.Retry != nil {
		t.Errorf("disabled failing task's status: %+v", st)
	}

	// ---- pages of 20 runs ----
	for n := len(taskEvents(t, base, "web")); n <= 20; {
		resp, err := http.Post(base+"/v1/tasks/web/run", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			n++
		case http.StatusConflict: // running or queued: the next attempt waits for it
			time.Sleep(100 * time.Millisecond)
		default:
			t.Fatalf("run %d of web: %s", n+1, resp.Status)
		}
	}
	total = len(taskEvents(t, base, "web"))
	b.do("open web", chromedp.Navigate(base+"/ui/#/tasks/web"))
	b.waitText("#page-info", fmt.Sprintf("1–20 of %d", total), 30*time.Second)
	if n := b.eval(`document.querySelectorAll('#history tbody tr').length`).(float64); n != 20 {
		t.Errorf("the first page has %v runs, want 20", n)
	}
	newest := b.eval(`document.querySelector('#history tbody tr').dataset.event`)
	b.click("#older-page")
	b.waitText("#page-info", fmt.Sprintf("21–%d of %d", total, total), 10*time.Second)
	b.wait("the older runs", fmt.Sprintf(`document.querySelectorAll('#history tbody tr').length === %d`, total-20), 10*time.Second)
	if b.eval(`document.getElementById('older-page').disabled`) != true || b.eval(`document.getElementById('newer-page').disabled`) != false {
		t.Error("on the last page, Older is not disabled or Newer is")
	}
	b.click("#newer-page")
	b.waitText("#page-info", "1–20 of ", 10*time.Second)
	if got := b.eval(`document.querySelector('#history tbody tr').dataset.event`); got != newest {
		t.Errorf("back on the first page, the newest run is %v, want %v", got, newest)
	}

	// Times within a second of now read "now", not "0s ago" for a
	// moment still to come.
	for expr, want := range map[string]string{
		`fmtAgo(new Date(Date.now() + 400).toISOString())`:                                      "now",
		`fmtAgo(new Date(Date.now() - 400).toISOString())`:                                      "now",
		`fmtAgo(new Date(Date.now() + 5000).toISOString())`:                                     "in 5s",
		`fmtAgo(new Date(Date.now() - 5000).toISOString())`:                                     "5s ago",
		`retryBadge({attempt: 2, next_at: new Date(Date.now() + 400).toISOString()}).innerText`: "retry 2 due now",
	} {
		if got := b.eval(expr); got != want {
			t.Errorf("%s = %v, want %q", expr, got, want)
		}
	}

	// ---- metrics as a summary ----
	b.do("open metrics", chromedp.Navigate(base+"/ui/#/metrics"))
	b.waitText("#metrics-summary", "Runs", 30*time.Second)
	b.waitText(`#metrics-tasks tr[data-task="firewall"]`, "yes", 10*time.Second) // dirty
	t.Logf("metrics: %s", b.shot("06-metrics"))
	if d := b.dialogCount(); len(d) > 0 {
		t.Errorf("JavaScript dialogs opened: %q", d)
	}
}
