package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/testutil"
)

// Hostile values registered in Consul and written in the configuration:
// the dashboard must show them as text.
const (
	xssScript = `<script>alert(1)</script>`
	xssImg    = `"><img src=x onerror=alert(1)>`
)

// findChromium returns the browser binary: $CTSYNC_CHROMIUM, else chromium
// (scripts/tools.sh installs the Debian package) or Chrome on PATH.
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CTSYNC_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium found: run scripts/tools.sh (it installs the Debian chromium package) or set CTSYNC_CHROMIUM")
	return ""
}

// browser drives one headless Chromium tab.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string

	mu      sync.Mutex
	dialogs []string // JavaScript dialogs that opened (an alert is an injection)
}

func newBrowser(t *testing.T, bin, shots string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx, shots: shots}
	// Start the browser with a context without a timeout (it lives as
	// long as the context of the first Run).
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting chromium (%s): %v", bin, err)
	}
	go func() {
		for ev, err := range chromedp.Events(ctx, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.dialogs = append(b.dialogs, string(ev.Type)+": "+ev.Message)
			b.mu.Unlock()
			go func() {
				_ = chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
					_, err := cdp.Call(ctx, t, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
					return err
				}))
			}()
		}
	}()
	return b
}

// fail saves a screenshot and the page text, then fails the test.
func (b *browser) fail(format string, args ...any) {
	b.t.Helper()
	b.shot("failure")
	text, _ := chromedp.Run(b.timeout(5*time.Second), chromedp.Evaluate[string](`document.body ? document.body.innerText : ''`))
	b.t.Fatalf(format+"\npage text:\n%s", append(args, text)...)
}

// timeout is the browser's context with a deadline of d (scaled, see
// testutil.Scale).
func (b *browser) timeout(d time.Duration) context.Context {
	return b.within(testutil.Scale(d))
}

// within is the browser's context with a deadline of d as it is.
func (b *browser) within(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(b.ctx, d)
	b.t.Cleanup(cancel)
	return ctx
}

func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.timeout(60*time.Second), actions...); err != nil {
		b.fail("%s: %v", what, err)
	}
}

func (b *browser) click(sel string) {
	b.t.Helper()
	b.do("click "+sel, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
}

// eval returns the value of a JavaScript expression.
func (b *browser) eval(expr string) any {
	b.t.Helper()
	v, err := chromedp.Run(b.timeout(30*time.Second), chromedp.Evaluate[any](expr))
	if err != nil {
		b.fail("evaluate %s: %v", expr, err)
	}
	return v
}

// text returns the innerText of the first element matching sel, or "".
func (b *browser) text(sel string) string {
	b.t.Helper()
	s, _ := b.eval(fmt.Sprintf(`(document.querySelector(%s) || {}).innerText || ''`, jsString(sel))).(string)
	return s
}

// wait polls a JavaScript expression until it is truthy. A poll that
// started while the page was still loading loses its JavaScript context
// ("Cannot find context"): it is started again.
func (b *browser) wait(what, expr string, timeout time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(testutil.Scale(timeout))
	for {
		_, err := chromedp.Run(b.within(time.Until(deadline)+5*time.Second),
			chromedp.Poll[any](expr, chromedp.WithPollingTimeout(time.Until(deadline)), chromedp.WithPollingInterval(50*time.Millisecond)))
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "Cannot find context") || time.Now().After(deadline) {
			b.fail("waiting for %s (%s): %v", what, expr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitText waits until the element's text contains want.
func (b *browser) waitText(sel, want string, timeout time.Duration) {
	b.t.Helper()
	b.wait(fmt.Sprintf("%s to show %q", sel, want),
		fmt.Sprintf(`((document.querySelector(%s) || {}).innerText || '').includes(%s)`, jsString(sel), jsString(want)), timeout)
}

// act clicks a button of the task page until its message shows want: a
// task that is running (a drift check, a run) answers "is active", and
// the click is repeated.
func (b *browser) act(sel, want string) {
	b.t.Helper()
	deadline := time.Now().Add(testutil.Scale(60 * time.Second))
	for {
		b.click(sel)
		if sel == "#run-now" { // "Run now" asks for confirmation first
			b.wait("the run confirmation", `!!document.querySelector('#confirm-run')`, 10*time.Second)
			b.click("#confirm-run")
		}
		b.wait(fmt.Sprintf("%s to answer %q", sel, want), fmt.Sprintf(
			`(t => t.includes(%s) || t.includes('is active'))((document.querySelector('#message') || {}).innerText || '')`,
			jsString(want)), 60*time.Second)
		if strings.Contains(b.text("#message"), want) {
			return
		}
		if time.Now().After(deadline) {
			b.fail("%s: the task stayed active", sel)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func (b *browser) shot(name string) string {
	b.t.Helper()
	png, err := chromedp.Run(b.timeout(30*time.Second), chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return ""
	}
	p := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
	}
	return p
}

func (b *browser) dialogCount() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.dialogs...)
}

func jsString(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}

// row is the CSS selector of a task's row in the task list.
func row(task string) string { return `tr[data-task=` + jsString(task) + `]` }

// TestDashboard runs the real daemon against a real Consul and real
// Terraform and drives the dashboard in headless Chromium: the task list,
// run now, disable, enable with a plan preview, the run log, the drift
// badge, and hostile values from Consul and the configuration shown as
// text. Screenshots go to $CTSYNC_ARTIFACTS/ui (else a temporary folder).
func TestDashboard(t *testing.T) {
	skipShort(t)
	chromium := findChromium(t)
	began := time.Now()
	shots := t.TempDir()
	if dir := os.Getenv("CTSYNC_ARTIFACTS"); dir != "" {
		shots = filepath.Join(dir, "ui")
		if err := os.MkdirAll(shots, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots: %s", shots)

	c := testutil.StartConsul(t)
	webDir, webVars := newTaskDir(t)
	evilDir, evilVars := newTaskDir(t)
	_, schedVars := newTaskDir(t)
	work := t.TempDir()
	port := testutil.FreePort(t)
	desc := "<b>web</b> balancer " + xssImg
	cfg := writeFile(t, work, "config.hcl", fmt.Sprintf(`
log_level   = "DEBUG"
working_dir = %q
port        = %d
consul {
  address = %q
  service_registration {
    enabled = false
  }
}
buffer_period {
  enabled = false
}
task {
  name           = "web-task"
  description    = %q
  module         = %q
  variable_files = [%q]
  condition "services" {
    names = ["web"]
  }
  drift_detection {
    interval = "2s"
  }
}
task {
  name           = "evil-task"
  module         = %q
  variable_files = [%q]
  condition "services" {
    regexp = "onerror"
  }
}
task {
  name   = "failing-task"
  module = %q
  condition "services" {
    names = ["web"]
  }
}
task {
  name           = "nightly"
  module         = %q
  variable_files = [%q]
  condition "schedule" {
    cron = "0 3 * * *"
  }
  module_input "services" {
    names = ["web"]
  }
}
`, filepath.Join(work, "sync-tasks"), port, c.Addr, desc, module("services_file"), webVars,
		module("services_file"), evilVars, module("failing"), module("services_file"), schedVars))

	c.RegisterService(t, &api.AgentServiceRegistration{ID: "web-1", Name: "web", Address: "127.0.0.1", Port: 8001,
		Tags: []string{xssScript, xssImg}, Meta: map[string]string{"note": xssScript}}, "passing")
	c.RegisterService(t, &api.AgentServiceRegistration{ID: "evil-1", Name: xssImg, Address: "127.0.0.1", Port: 8002,
		Tags: []string{xssScript}}, "passing")
	startCtsync(t, work, "start", "-config-file", cfg)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitServices(t, webDir, "web-1")
	waitServices(t, evilDir, "evil-1")
	ready := time.Now()

	b := newBrowser(t, chromium, shots)

	// ---- the task list ----
	b.do("open /", chromedp.Navigate(base+"/"))
	b.wait("four task rows", `document.querySelectorAll('#tasks tbody tr').length === 4`, 30*time.Second)
	if loc := b.eval(`location.pathname`); loc != "/ui/" {
		t.Errorf("/ led to %v, want /ui/", loc)
	}
	b.waitText(row("web-task")+" td.status", "successful", 30*time.Second)
	b.waitText(row("evil-task")+" td.status", "successful", 30*time.Second)
	b.wait("failing-task errored or critical", fmt.Sprintf(`/errored|critical/.test((document.querySelector(%s) || {}).innerText)`,
		jsString(row("failing-task")+" td.status")), 60*time.Second)
	b.waitText("#cluster", "single instance", 10*time.Second)
	for sel, want := range map[string]string{
		row("web-task") + " td.enabled":    "yes",
		row("web-task") + " td.result":     "success",
		row("web-task") + " td.drift":      "in sync",
		row("web-task") + " .desc":         desc,
		row("failing-task") + " td.drift":  "off",
		row("failing-task") + " td.result": "failed",
	} {
		if got := b.text(sel); !strings.Contains(got, want) {
			t.Errorf("%s shows %q, want %q", sel, got, want)
		}
	}
	if got := b.text(row("nightly") + " td.next-run"); !strings.HasPrefix(got, "in ") {
		t.Errorf("nightly next run shows %q", got)
	}
	if got := b.text(row("web-task") + " td.trigger"); got == "" {
		t.Errorf("web-task shows no trigger")
	}
	t.Logf("list screenshot: %s", b.shot("01-task-list"))

	// ---- a task: run now ----
	b.click(row("web-task") + " td.name a")
	b.waitText("#task-name", "web-task", 10*time.Second)
	if got := b.text("#task-desc"); got != desc {
		t.Errorf("task description shows %q, want %q", got, desc)
	}
	b.wait("history", `document.querySelectorAll('#history tbody tr').length >= 1`, 10*time.Second)
	runs := int(b.eval(`Array.from(document.querySelectorAll('#history tbody tr td.kind')).filter(td => td.innerText !== 'drift').length`).(float64))
	b.act("#run-now", "Run succeeded")
	b.wait("a new run in the history", fmt.Sprintf(
		`Array.from(document.querySelectorAll('#history tbody tr td.kind')).filter(td => td.innerText !== 'drift').length === %d`, runs+1), 10*time.Second)
	if got := b.text("#history tbody tr:first-child td.trigger"); got != "api" {
		t.Errorf("newest run's trigger %q, want api", got)
	}
	if got := b.text("#history tbody tr:last-child td.plan-cell"); got != "+1 ~0 -0" {
		t.Errorf("first run's plan summary %q, want +1 ~0 -0", got)
	}
	if got := b.text("#history tbody tr:first-child td.hash"); len(got) != 12 {
		t.Errorf("inputs hash cell %q", got)
	}

	// ---- disable, then enable with a plan preview ----
	b.act("#disable", "Task disabled.")
	b.wait("the enable button", `!!document.querySelector('#enable')`, 30*time.Second)
	if enabled := taskEnabled(t, base, "web-task"); enabled {
		t.Fatal("web-task is still enabled after Disable")
	}
	c.RegisterService(t, &api.AgentServiceRegistration{ID: "web-2", Name: "web", Address: "127.0.0.1", Port: 8002}, "passing")
	// The plan shows the new instance once the watch has it.
	deadline := time.Now().Add(testutil.Scale(30 * time.Second))
	for {
		b.click("#enable")
		b.wait("the plan preview", `!!document.querySelector('#plan-preview pre.plan-text')`, 60*time.Second)
		if plan := b.text("#plan-preview pre.plan-text"); strings.Contains(plan, "Plan:") {
			break
		} else if time.Now().After(deadline) {
			b.fail("the plan preview never showed the new instance: %s", plan)
		}
		b.click("#cancel-enable")
		b.wait("the preview to close", `!document.querySelector('#plan-preview')`, 10*time.Second)
		time.Sleep(300 * time.Millisecond)
	}
	if got := b.text("#confirm-enable"); got != "Enable and apply" {
		t.Errorf("confirm button %q", got)
	}
	if !strings.Contains(b.text("#plan-preview pre.plan-text"), "web-2") {
		t.Errorf("the plan does not mention web-2")
	}
	if taskEnabled(t, base, "web-task") {
		t.Error("the plan preview enabled the task")
	}
	t.Logf("plan preview screenshot: %s", b.shot("02-enable-plan-preview"))
	b.click("#confirm-enable")
	b.waitText("#message", "Task enabled and applied.", 60*time.Second)
	waitServices(t, webDir, "web-1,web-2")
	if !taskEnabled(t, base, "web-task") {
		t.Error("web-task is not enabled after Enable and apply")
	}
	b.wait("the disable button", `!!document.querySelector('#disable')`, 10*time.Second)

	// ---- the run log ----
	b.click("#history tbody tr:first-child .view-log")
	b.waitText("#log", "Apply complete!", 30*time.Second)
	if got := b.text("#log"); !strings.Contains(got, "terraform apply") {
		t.Errorf("the log viewer shows %q", got[:min(len(got), 200)])
	}
	t.Logf("task page screenshot: %s", b.shot("03-task-page-log"))
	// The periodic refresh keeps the log where the reader scrolled it.
	// The log of one apply can be shorter than the viewer: a style rule
	// (the refresh builds the viewer anew; the page's CSP refuses inline
	// style sheets, not the CSS object model) makes it low enough to scroll.
	b.eval(`(() => { document.styleSheets[0].insertRule('#log { max-height: 3em !important; }', document.styleSheets[0].cssRules.length);
		const l = document.getElementById('log'); l.scrollTop = 30; window.__pos = l.scrollTop; window.__rendered = false;
		render().then(() => { window.__rendered = true; }); return l.scrollTop; })()`)
	b.wait("a refresh that keeps the log's scroll position",
		`window.__rendered && window.__pos >= 20 && document.getElementById('log').scrollTop === window.__pos`, 10*time.Second)

	// ---- drift: the module's file is removed behind Terraform's back ----
	if err := os.Remove(filepath.Join(webDir, "services.json")); err != nil {
		t.Fatal(err)
	}
	b.do("back to the list", chromedp.Navigate(base+"/ui/#/"))
	b.waitText(row("web-task")+" td.drift", "drifted", 60*time.Second)
	t.Logf("drift screenshot: %s", b.shot("04-drifted"))

	// ---- hostile values from Consul ----
	b.do("open evil-task", chromedp.Navigate(base+"/ui/#/tasks/evil-task"))
	b.wait("evil-task history", `document.querySelectorAll('#history tbody tr .view-log').length >= 1`, 30*time.Second)
	if stray, _ := b.eval(`Array.from(document.getElementById('main').childNodes).filter(n => n.nodeType === 3).map(n => n.textContent).join('|')`).(string); stray != "" {
		t.Errorf("stray text in the task page: %q", stray)
	}
	// The run log names resources, not the values from Consul (Terraform's
	// machine-readable apply output); the plan preview above and the held
	// plan (TestDashboardApprovesHeldPlan) show values, as text.
	b.click("#history tbody tr:first-child .view-log")
	b.waitText("#log", "Apply complete!", 30*time.Second)
	t.Logf("hostile values screenshot: %s", b.shot("05-hostile-values"))
	b.do("back to the list", chromedp.Navigate(base+"/ui/#/"))
	b.waitText(row("web-task")+" .desc", desc, 30*time.Second)
	for _, check := range []struct{ what, expr string }{
		{"no <img> element", `document.images.length === 0`},
		{"only the dashboard's own scripts", `document.scripts.length === 3 && Array.from(document.scripts).every(s => s.src.startsWith(location.origin + '/ui/'))`},
		{"no <b> element from the description", `document.querySelectorAll('main b').length === 0`},
	} {
		if ok, _ := b.eval(check.expr).(bool); !ok {
			t.Errorf("injection: want %s", check.what)
		}
	}
	if d := b.dialogCount(); len(d) > 0 {
		t.Errorf("JavaScript dialogs opened (injected code ran): %q", d)
	}

	// The metrics agree with the dashboard.
	m := get(t, base+"/metrics")
	for _, want := range []string{`ctsync_task_drifted{task="web-task"} 1`, `ctsync_task_runs_failed_total{kind="apply",task="failing-task"}`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	t.Logf("dashboard test: %s in the browser, %s in all", time.Since(ready).Round(time.Second), time.Since(began).Round(time.Second))
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func taskEnabled(t *testing.T, base, name string) bool {
	t.Helper()
	var r struct {
		Task struct {
			Enabled bool `json:"enabled"`
		} `json:"task"`
	}
	if err := json.Unmarshal([]byte(get(t, base+"/v1/tasks/"+name)), &r); err != nil {
		t.Fatal(err)
	}
	return r.Task.Enabled
}
