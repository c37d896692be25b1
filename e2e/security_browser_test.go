package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ctsync/ctsync/internal/testutil"
)

// evilPage is a page of another origin that tries to create a task on the
// daemon (auth off, the CTS default) the three ways a page can: a "simple"
// no-cors fetch with a text/plain JSON body, a fetch with a JSON body
// (needs a CORS preflight), and a text/plain form posted into a frame.
const evilPage = `<!doctype html><html><head><title>loading</title></head><body>
<iframe name="sink"></iframe>
<script>
const target = %q;
const body = JSON.stringify({task: {name: %q, module: %q, condition: {services: {names: ["web"]}}}});
(async () => {
  let simple = 'sent', cors = 'sent';
  try { await fetch(target + '/v1/tasks', {method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'}, body}); }
  catch (e) { simple = 'error'; }
  try { const r = await fetch(target + '/v1/tasks', {method: 'POST', headers: {'Content-Type': 'application/json'}, body}); cors = 'read ' + r.status; }
  catch (e) { cors = 'blocked'; }
  const f = document.createElement('form');
  f.method = 'POST'; f.enctype = 'text/plain'; f.target = 'sink'; f.action = target + '/v1/tasks';
  const i = document.createElement('input');
  i.name = body.slice(0, -2) + ',"x":"'; i.value = '"}}';
  f.append(i); document.body.append(f); f.submit();
  document.title = 'done simple=' + simple + ' cors=' + cors;
})();
</script></body></html>`

// TestBrowserCannotCreateTaskCrossSite drives headless Chromium to a page
// of another origin and checks that none of its attempts creates a task,
// and that the daemon saw and refused them (the browser did send them).
func TestBrowserCannotCreateTaskCrossSite(t *testing.T) {
	skipShort(t)
	chromium := findChromium(t)
	c := testutil.StartConsul(t)
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	work := t.TempDir()
	port := testutil.FreePort(t)
	cfg := writeFile(t, work, "config.hcl", fmt.Sprintf(`
log_level   = "DEBUG"
working_dir = %q
port        = %d
consul {
  address = %q
}
`, filepath.Join(work, "sync-tasks"), port, c.Addr))
	p := startCtsync(t, work, "start", "-config-file", cfg)
	target := fmt.Sprintf("http://127.0.0.1:%d", port)
	testutil.Eventually(t, 30*time.Second, "the API", func() bool {
		resp, err := http.Get(target + "/v1/health")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})

	// The attacker's page: another origin (localhost, another port).
	page := fmt.Sprintf(evilPage, target, "pwned", module("services_file"))
	evil := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = fmt.Fprint(w, page)
	}))
	ln, err := net.Listen("tcp", "localhost:0")
	must(t, err)
	evil.Listener = ln
	evil.Start()
	t.Cleanup(evil.Close)
	evilURL := "http://localhost:" + fmt.Sprint(ln.Addr().(*net.TCPAddr).Port) + "/"

	b := newBrowser(t, chromium, t.TempDir())
	b.do("open the other origin's page", chromedp.Navigate(evilURL))
	b.wait("the page's attempts", `document.title.startsWith('done')`, 30*time.Second)
	title, _ := b.eval(`document.title`).(string)
	t.Logf("page: %s", title)
	if !strings.Contains(title, "cors=blocked") {
		t.Errorf("the page could read the API's answer to a cross-origin request: %s", title)
	}
	// The no-cors fetch and the form reached the daemon and were refused.
	testutil.Eventually(t, 30*time.Second, "two refused cross-origin writes", func() bool {
		return p.count("cross-origin write refused") >= 2
	})
	if code, body := apiCall(t, "GET", target+"/v1/tasks/pwned", "", nil); code != 404 {
		t.Fatalf("a page of another origin created a task: %d %s", code, body)
	}
	if strings.Contains(p.out.String(), "task created through the api") {
		t.Errorf("the daemon logged a task creation")
	}
}

// An API that listens beyond loopback without api_auth (the CTS default:
// every interface, no token) is said at start (WARN), in GET /v1/status
// "warnings" and in the dashboard's banner; with tokens none of the three.
func TestExposureWarningAtStartAndOnDashboard(t *testing.T) {
	skipShort(t)
	chromium := findChromium(t)
	c := testutil.StartConsul(t)
	const warning = "without api_auth: anyone who can reach port"
	start := func(extra string) (*proc, string) {
		t.Helper()
		work := t.TempDir()
		port := testutil.FreePort(t)
		cfg := writeFile(t, work, "config.hcl", fmt.Sprintf(`
working_dir = %q
port        = %d
consul {
  address = %q
}
%s`, filepath.Join(work, "sync-tasks"), port, c.Addr, extra))
		p := startCtsync(t, work, "start", "-config-file", cfg)
		base := fmt.Sprintf("http://127.0.0.1:%d", port)
		testutil.Eventually(t, 30*time.Second, "the API", func() bool {
			code, _, _ := haGet(port, "/v1/health")
			return code == http.StatusOK
		})
		return p, base
	}

	open, base := start("")
	open.waitOutput(t, 30*time.Second, "[WARN]", "listens beyond loopback", warning)
	code, body := apiCall(t, "GET", base+"/v1/status", "", nil)
	expectStatus(t, "status", 200, code, body)
	if !strings.Contains(body, `"warnings":[`) || !strings.Contains(body, warning) {
		t.Errorf("GET /v1/status lacks the warning: %s", body)
	}
	b := newBrowser(t, chromium, t.TempDir())
	b.do("open the dashboard", chromedp.Navigate(base+"/"))
	b.waitText("#setup-warning", warning, 30*time.Second)
	if hidden, _ := b.eval(`document.getElementById('setup-warning').hidden`).(bool); hidden {
		b.fail("the warning banner is hidden")
	}

	const secret = "exposure-token-0123456789abcdef"
	closed, base := start(fmt.Sprintf("api_auth {\n  token {\n    name   = \"ops\"\n    secret = %q\n    access = \"read\"\n  }\n}\n", secret))
	code, body = apiCall(t, "GET", base+"/v1/status", "", map[string]string{"Authorization": "Bearer " + secret})
	expectStatus(t, "status with a token", 200, code, body)
	if strings.Contains(body, "warnings") {
		t.Errorf("a warning with api_auth set: %s", body)
	}
	closed.waitOutput(t, 30*time.Second, "api listening")
	if closed.count("listens beyond loopback") > 0 {
		t.Errorf("the start-up warned with api_auth set")
	}
}
