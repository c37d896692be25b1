package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	consulapi "github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/testutil"
)

// daemonConfig writes work/config.hcl: a daemon on port with its
// working_dir under work, the Consul at consulAddr, no self-registration,
// no buffer period, and then body (tasks and other blocks).
func daemonConfig(t *testing.T, work string, port int, consulAddr, body string) string {
	t.Helper()
	return writeFile(t, work, "config.hcl", fmt.Sprintf(`working_dir = %q
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
`, filepath.Join(work, "sync"), port, consulAddr)+body)
}

// artifactsDir is where a browser test saves its screenshots:
// $CTSYNC_ARTIFACTS/<name>, else a temporary folder.
func artifactsDir(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("CTSYNC_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	dir = filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// taskStatus reads GET /v1/status/tasks/{name}.
func taskStatus(t *testing.T, base, name string) api.TaskStatus {
	t.Helper()
	resp, err := http.Get(base + "/v1/status/tasks/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]api.TaskStatus
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m[name]
}

// failingApplyConfig is a daemon with one task whose applies plan a
// resource and then fail in its provisioner (retried after 2 s, 4 s ...).
func failingApplyConfig(t *testing.T, consulAddr, work string, port int) string {
	return daemonConfig(t, work, port, consulAddr, fmt.Sprintf(`
retry {
  max_delay = "4s"
}
task {
  name   = "firewall"
  module = %q
  condition "services" {
    names = ["web"]
  }
}
`, module("failing_apply")))
}

// TestFailedRunAtAGlance: a task whose apply fails in a provisioner (real
// Consul, real Terraform). Its status, ctsync status and the failed
// webhook say the last result and Terraform's one-line diagnostic with
// what the provisioner printed (not its command line), and the pending
// retry; the failed run keeps the plan it had, its phases and
// what changed in Consul since the previous run.
func TestFailedRunAtAGlance(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	work := t.TempDir()
	port := testutil.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	hook := newHookSink(t)
	startCtsync(t, work, "start", "-config-file", failingApplyConfig(t, c.Addr, work, port),
		"-config-file", writeFile(t, work, "hook.hcl", hook.block("failed")))

	var st api.TaskStatus
	deadline := time.Now().Add(testutil.Scale(90 * time.Second))
	for {
		if resp, err := http.Get(base + "/v1/health"); err == nil {
			resp.Body.Close()
			if st = taskStatus(t, base, "firewall"); st.Retry != nil && st.LastRun != nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pending retry shown: %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	const summary = "Error: local-exec provisioner error: exit status 3. Output: 503 Service Unavailable"
	if st.LastRun.Success || st.LastRun.ErrorSummary != summary || st.LastRun.Terminal {
		t.Errorf("last run %+v, want a failure summarised as %q, not terminal", st.LastRun, summary)
	}
	if st.Retry.LastError != summary || st.Retry.Attempt < 1 || st.Retry.NextAt.Before(st.LastRun.EndTime) {
		t.Errorf("retry %+v", st.Retry)
	}
	if p := st.LastRun.Plan; p == nil || p.Add != 1 {
		t.Errorf("the failed apply's plan summary: %+v, want +1", p)
	}

	// The failed webhook's text is the same line.
	hook.wait(t, "firewall", "the failure with its one-line error", func(n hookNote) bool {
		return n.Type == "failed" && n.Text == `ctsync: task "firewall" failed: `+summary
	})

	// ctsync status says the same: the pending retry (not "on change") and
	// the one-line error.
	var out string
	testutil.Eventually(t, 60*time.Second, "ctsync status showing the retry", func() bool {
		var code int
		out, code = runCLI(ctsyncBin, []string{"CTS_ADDRESS=" + base}, "", "status")
		return code == 0 && regexp.MustCompile(`(?m)^firewall .*failed.* retry \d+ in `).MatchString(out)
	})
	if !strings.Contains(out, "firewall: "+summary+"\n") || strings.Contains(out, "firewall APPLY") {
		t.Errorf("ctsync status lacks the error summary, or shows the command line:\n%s", out)
	}

	// A change while it fails: the next run records what changed.
	c.RegisterService(t, reg("web-2", "web", 8002), "passing")
	evs := waitEvents(t, base, "firewall", 60*time.Second, func(evs []store.Event) bool {
		return len(evs) > 0 && evs[0].Changes != nil && evs[0].Changes.Services != nil
	})
	ev := evs[0]
	if d := ev.Changes.Services; d.AddedCount != 1 || !strings.HasPrefix(d.Added[0], "web-2") {
		t.Errorf("changes %+v, want web-2 added", d)
	}
	if strings.Contains(ev.ErrorSummary, "firewall") || ev.ErrorSummary != summary {
		t.Errorf("error summary %q", ev.ErrorSummary)
	}
	if ev.Error == nil || !strings.Contains(ev.Error.Message, "exit status 3") {
		t.Errorf("the full error keeps the detail: %+v", ev.Error)
	}
	var names []string
	for _, p := range ev.Phases {
		names = append(names, p.Name)
		if p.EndTime.Before(p.StartTime) {
			t.Errorf("phase %+v ends before it starts", p)
		}
	}
	if got := strings.Join(names, ","); got != "plan,apply" && got != "init,plan,apply" {
		t.Errorf("phases %s, want plan,apply", got)
	}
	if ev.DetectedAt == nil || ev.DetectedAt.After(ev.StartTime) {
		t.Errorf("detected_at %v, start %v", ev.DetectedAt, ev.StartTime)
	}
	if ev.Plan == nil || ev.Plan.Add+ev.Plan.Destroy == 0 {
		t.Errorf("failed apply plan %+v", ev.Plan)
	}
}

// TestRunRecordsTheTokenName: with api_auth, a run asked through the API
// (POST .../run, and task enable with a run) records the token's name, and
// so does the CLI; runs caused by Consul changes record none. The
// dashboard's run page, signed in, says "token <name>".
func TestRunRecordsTheTokenName(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	dir, vars := newTaskDir(t)
	work := t.TempDir()
	port := testutil.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	const secret = "ops-secret-0123456789abcdef"
	cfg := daemonConfig(t, work, port, c.Addr, fmt.Sprintf(`
api_auth {
  token {
    name   = "ops-oncall"
    secret = %q
    access = "write"
  }
}
task {
  name           = "web"
  module         = %q
  variable_files = [%q]
  condition "services" {
    names = ["web"]
  }
}
`, secret, module("services_file"), vars))
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	startCtsync(t, work, "start", "-config-file", cfg)
	waitServices(t, dir, "web-1")

	authGet := func(path string, v any) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	var first api.EventsResponse
	for deadline := time.Now().Add(testutil.Scale(30 * time.Second)); len(first.Events) == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first run was not recorded")
		}
		authGet("/v1/tasks/web/events", &first)
	}
	if len(first.Events) != 1 || first.Events[0].Actor != "" {
		t.Fatalf("the run caused by Consul: %+v", first.Events)
	}

	out, code := runCLI(ctsyncBin, []string{"CTS_ADDRESS=" + base, "CTS_TOKEN=" + secret}, "", "task", "disable", "web")
	if code != 0 {
		t.Fatalf("task disable: %d %s", code, out)
	}
	out, code = runCLI(ctsyncBin, []string{"CTS_ADDRESS=" + base, "CTS_TOKEN=" + secret}, "", "task", "enable", "-auto-approve", "web")
	if code != 0 {
		t.Fatalf("task enable: %d %s", code, out)
	}
	// Enabling queues the task (it runs if its inputs moved while it was
	// off); until that is done, a run request is refused with 409 (the task
	// is active). The test is about the actor a run records, not that race:
	// it asks once the task is idle again.
	testutil.Eventually(t, 60*time.Second, "the task idle after enable", func() bool {
		var m map[string]api.TaskStatus
		authGet("/v1/status/tasks/web", &m)
		return m["web"].Enabled && !m["web"].Active
	})
	req, _ := http.NewRequest("POST", base+"/v1/tasks/web/run", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("run: %d", resp.StatusCode)
	}
	var evs api.EventsResponse
	authGet("/v1/tasks/web/events", &evs)
	if len(evs.Events) < 2 {
		t.Fatalf("events %+v", evs.Events)
	}
	for _, ev := range evs.Events[:len(evs.Events)-1] {
		if ev.Trigger == "api" && ev.Actor != "ops-oncall" {
			t.Errorf("run %s (trigger api) records actor %q, want ops-oncall", ev.ID, ev.Actor)
		}
	}
	if evs.Events[0].Trigger != "api" || evs.Events[0].Actor != "ops-oncall" {
		t.Errorf("POST run: %+v", evs.Events[0])
	}

	// The dashboard's run page names the token, after signing in.
	t.Run("dashboard", func(t *testing.T) {
		b := newBrowser(t, findChromium(t), artifactsDir(t, "ui-actor"))
		b.do("open the run", chromedp.Navigate(base+"/ui/#/runs/web/"+evs.Events[0].ID))
		b.wait("the token form", `!!document.querySelector('#token-input')`, 30*time.Second)
		b.do("sign in", chromedp.SendKeys(chromedp.CSS("#token-input"), secret), chromedp.Click(chromedp.CSS("#token-submit")))
		b.waitText("#run-actor", "token ops-oncall", 30*time.Second)
		b.shot("run-actor")
	})
}

// TestRunRecordsConsulKVChanges: a run caused by Consul KV (real Consul,
// real Terraform) records the keys added, changed and removed since the
// task's previous run, as the run page shows them.
func TestRunRecordsConsulKVChanges(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	work := t.TempDir()
	port := testutil.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	vars := writeFile(t, work, "kv.tfvars", fmt.Sprintf("dir = %q\n", t.TempDir()))
	cfg := daemonConfig(t, work, port, c.Addr, fmt.Sprintf(`
task {
  name           = "kv"
  module         = %q
  variable_files = [%q]
  condition "consul-kv" {
    path    = "cfg"
    recurse = true
  }
}
`, module("compat_kv"), vars))
	put := func(k, v string) {
		t.Helper()
		if _, err := c.Client.KV().Put(&consulapi.KVPair{Key: k, Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	put("cfg/a", "1")
	put("cfg/old", "x")
	startCtsync(t, work, "start", "-config-file", cfg)
	waitEvents(t, base, "kv", 60*time.Second, func(evs []store.Event) bool { return len(evs) == 1 && evs[0].Success })

	// One transaction: a key added, one changed, one removed.
	ops := consulapi.KVTxnOps{
		{Verb: consulapi.KVSet, Key: "cfg/b", Value: []byte("2")},
		{Verb: consulapi.KVSet, Key: "cfg/a", Value: []byte("10")},
		{Verb: consulapi.KVDelete, Key: "cfg/old"},
	}
	if ok, _, _, err := c.Client.KV().Txn(ops, nil); err != nil || !ok {
		t.Fatalf("KV transaction: %v %v", ok, err)
	}
	evs := waitEvents(t, base, "kv", 60*time.Second, func(evs []store.Event) bool { return len(evs) == 2 })
	ev := evs[0]
	if !ev.Success || ev.Changes == nil || ev.Changes.ConsulKV == nil {
		t.Fatalf("the run after the KV change: %+v", ev)
	}
	d := ev.Changes.ConsulKV
	if !slices.Equal(d.Added, []string{"cfg/b"}) || !slices.Equal(d.Removed, []string{"cfg/old"}) || len(d.Changed) != 1 ||
		!strings.HasPrefix(d.Changed[0], "cfg/a") || d.AddedCount != 1 || d.RemovedCount != 1 || d.ChangedCount != 1 {
		t.Errorf("KV changes %+v, want cfg/b added, cfg/a changed, cfg/old removed", d)
	}
	if ev.Changes.Services != nil {
		t.Errorf("services changes recorded for a KV task: %+v", ev.Changes.Services)
	}
}
