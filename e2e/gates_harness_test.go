package e2e

// What the safety-gate tests (gates_test.go) share: a daemon with API
// tokens and gated tasks on the per_instance fixture module (one rule file
// per service instance), the held-plan API, and a webhook receiver.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/testutil"
)

// The gate tests' API tokens: "ops" may write (approve, reject), "viewer"
// may only read.
const (
	gateWriteSecret = "gate-ops-secret-0123456789"
	gateReadSecret  = "gate-viewer-secret-0123456789"
	gateWriteName   = "ops"
)

var gateAuth = fmt.Sprintf(`
api_auth {
  token {
    name   = %q
    secret = %q
    access = "write"
  }
  token {
    name   = "viewer"
    secret = %q
    access = "read"
  }
}
`, gateWriteName, gateWriteSecret, gateReadSecret)

// gateTask renders a task on the per_instance module watching the "web"
// service, with blocks (approval {}, policy {}) inside it. Its buffer
// period gathers the deregistrations a test makes one after the other
// into one change, as a catalog emptied at once would be (without it, the
// first deregistration alone is planned, and passes the guard).
func gateTask(name, varFile, blocks string) string {
	return fmt.Sprintf(`
task {
  name           = %q
  module         = %q
  variable_files = [%q]
  condition "services" {
    names = ["web"]
  }
  buffer_period {
    enabled = true
    min     = "2s"
    max     = "8s"
  }
%s
}
`, name, module("per_instance"), varFile, blocks)
}

// gateAPI talks to one daemon's API, with the tokens it was given ("": no
// api_auth).
type gateAPI struct {
	t           *testing.T
	base        string
	read, write string
}

// gated is a running daemon of a gate test.
type gated struct {
	gateAPI
	work, cfg string
	p         *proc
}

// startGated starts a daemon with the gate tests' tokens and body (tasks,
// notifications) and waits for its API.
func startGated(t *testing.T, c *testutil.Consul, body string) *gated {
	t.Helper()
	work := t.TempDir()
	port := testutil.FreePort(t)
	g := &gated{gateAPI: gateAPI{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port), read: gateReadSecret, write: gateWriteSecret}, work: work}
	g.cfg = daemonConfig(t, work, port, c.Addr, gateAuth+body)
	g.p = startCtsync(t, work, "start", "-config-file", g.cfg)
	g.waitUp()
	return g
}

func (a gateAPI) waitUp() {
	a.t.Helper()
	testutil.Eventually(a.t, 60*time.Second, "the API up", func() bool {
		resp, err := http.Get(a.base + "/v1/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// do sends a request with the token secret ("" : none); it returns the
// status and body (status 0 when the daemon did not answer).
func (a gateAPI) do(method, path, secret string) (int, string) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.base+path, nil)
	must(a.t, err)
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// plan reads GET /v1/tasks/{name}/plan with the read token: the status,
// the task's newest held plan, whatever its state (on 200: {"plan":
// gate.Plan}) and the body.
func (a gateAPI) plan(name string) (int, gate.Plan, string) {
	a.t.Helper()
	code, body := a.do("GET", "/v1/tasks/"+name+"/plan", a.read)
	var r struct {
		Plan *gate.Plan `json:"plan"`
	}
	if code == http.StatusOK {
		if err := json.Unmarshal([]byte(body), &r); err != nil || r.Plan == nil {
			a.t.Fatalf("GET /v1/tasks/%s/plan: not a plan (%v):\n%s", name, err, body)
		}
		return code, *r.Plan, body
	}
	return code, gate.Plan{}, body
}

// waitPlan waits until GET /v1/tasks/{name}/plan answers a plan that ok
// accepts, and returns it.
func (a gateAPI) waitPlan(name, what string, ok func(gate.Plan) bool) gate.Plan {
	a.t.Helper()
	return a.waitPlanUnless(name, what, ok, nil)
}

// waitPlanUnless is waitPlan that fails at once when broken (if not nil)
// returns a reason, e.g. that the run was applied instead of held.
func (a gateAPI) waitPlanUnless(name, what string, ok func(gate.Plan) bool, broken func() string) gate.Plan {
	a.t.Helper()
	var last string
	within := testutil.Scale(2 * time.Minute)
	deadline := time.Now().Add(within)
	for {
		code, got, body := a.plan(name)
		if code == http.StatusOK && ok(got) {
			return got
		}
		last = fmt.Sprintf("%d %s", code, body)
		if broken != nil {
			if why := broken(); why != "" {
				a.t.Fatalf("%s: waiting for a held plan of %s %s: %s; last answer: %s", a.base, name, what, why, last)
			}
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("%s: no held plan of %s %s within %s; last answer: %s", a.base, name, what, within, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitPending waits for a pending plan of the task held for reason and
// different from the plans in not.
func (a gateAPI) waitPending(name, reason string, not ...string) gate.Plan {
	a.t.Helper()
	return a.waitPendingUnless(name, reason, nil, not...)
}

// waitPendingUnless is waitPending that fails at once when broken returns
// a reason.
func (a gateAPI) waitPendingUnless(name, reason string, broken func() string, not ...string) gate.Plan {
	a.t.Helper()
	return a.waitPlanUnless(name, "pending for "+strings.Join(append([]string{reason}, not...), " / not "), func(p gate.Plan) bool {
		return p.State == gate.Pending && p.Reason == reason && !slices.Contains(not, p.ID)
	}, broken)
}

// rulesChanged returns a broken func for waitPlanUnless: it reports the
// module's files no longer being want (the run was applied, not held).
func rulesChanged(dir, want string) func() string {
	return func() string {
		if got := ruleIDs(dir); got != want {
			return fmt.Sprintf("applied instead of held: rule files for %q, were %q", got, want)
		}
		return ""
	}
}

// decide POSTs /v1/tasks/{name}/plan/{id}/{verb} (approve, reject) with
// the token secret.
func (a gateAPI) decide(name, id, verb, secret string) (int, string) {
	a.t.Helper()
	return a.do("POST", "/v1/tasks/"+name+"/plan/"+id+"/"+verb, secret)
}

// gateStatus is a task's entry in GET /v1/status/tasks/{name}.
type gateStatus struct {
	Status  string `json:"status"`
	Waiting string `json:"waiting"`
	Active  bool   `json:"active"`
	// Held is the pending held plan at a glance.
	Held *struct {
		ID     string `json:"id"`
		Reason string `json:"reason"`
	} `json:"held"`
	raw string
}

func (a gateAPI) status(name string) gateStatus {
	a.t.Helper()
	code, body := a.do("GET", "/v1/status/tasks/"+name, a.read)
	var m map[string]gateStatus
	if code != http.StatusOK || json.Unmarshal([]byte(body), &m) != nil {
		return gateStatus{raw: fmt.Sprintf("%d %s", code, body)}
	}
	st := m[name]
	st.raw = body
	return st
}

// waitStatus waits until the task's status satisfies ok.
func (a gateAPI) waitStatus(name, what string, ok func(gateStatus) bool) gateStatus {
	a.t.Helper()
	var st gateStatus
	testutil.Eventually(a.t, 2*time.Minute, name+" "+what, func() bool {
		st = a.status(name)
		return ok(st)
	})
	return st
}

// waitQuiet waits until the task's last run is over and it is not
// queued: status successful, not active.
func (a gateAPI) waitQuiet(name string) {
	a.t.Helper()
	a.waitStatus(name, "successful and idle", func(st gateStatus) bool { return st.Status == "successful" && !st.Active })
}

// events reads GET /v1/tasks/{name}/events (newest first).
func (a gateAPI) events(name string) []store.Event {
	a.t.Helper()
	code, body := a.do("GET", "/v1/tasks/"+name+"/events", a.read)
	var r struct {
		Events []store.Event `json:"events"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &r) != nil {
		return nil
	}
	return r.Events
}

// eventIDs returns the ids of the task's recorded runs, to tell the runs
// that follow an action from those before it.
func (a gateAPI) eventIDs(name string) map[string]bool {
	a.t.Helper()
	ids := map[string]bool{}
	for _, ev := range a.events(name) {
		ids[ev.ID] = true
	}
	return ids
}

// waitNewEvent waits for a run of the task that is not in seen and that ok
// accepts, and returns it.
func (a gateAPI) waitNewEvent(name string, seen map[string]bool, what string, ok func(store.Event) bool) store.Event {
	a.t.Helper()
	var got store.Event
	testutil.Eventually(a.t, 2*time.Minute, name+": a run "+what, func() bool {
		for _, ev := range a.events(name) {
			if !seen[ev.ID] && ev.IsRun() && ok(ev) { // not the gates' audit events
				got = ev
				return true
			}
		}
		return false
	})
	return got
}

// ruleIDs lists the instances whose rule file the per_instance module
// wrote in dir, sorted and comma-separated.
func ruleIDs(dir string) string {
	files, _ := filepath.Glob(filepath.Join(dir, "*.rule"))
	out := make([]string, 0, len(files))
	for _, f := range files {
		out = append(out, strings.TrimSuffix(filepath.Base(f), ".rule"))
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// waitRules waits until exactly the instances want have a rule file.
func waitRules(t *testing.T, dir, want string) {
	t.Helper()
	testutil.Eventually(t, 2*time.Minute, "rule files for "+want, func() bool { return ruleIDs(dir) == want })
}

// expectRules fails unless exactly the instances want have a rule file.
func expectRules(t *testing.T, dir, want, what string) {
	t.Helper()
	if got := ruleIDs(dir); got != want {
		t.Fatalf("%s: rule files for %q, want %q", what, got, want)
	}
}

// registerWeb registers web instances web-<n> for each n.
func registerWeb(t *testing.T, c *testutil.Consul, ns ...int) {
	t.Helper()
	for _, n := range ns {
		c.RegisterService(t, reg(fmt.Sprintf("web-%d", n), "web", 8000+n), api.HealthPassing)
	}
}

// deregister removes service instances from the agent.
func deregister(t *testing.T, c *testutil.Consul, ids ...string) {
	t.Helper()
	for _, id := range ids {
		must(t, c.Client.Agent().ServiceDeregister(id))
	}
}

// hookSink is a webhook receiver: it records every notification.
type hookSink struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []hookNote
}

// hookNote is a webhook notification's payload: for type approval, what
// happened to which plan; for type policy, the deny messages.
type hookNote struct {
	Type     string `json:"type"`
	Task     string `json:"task"`
	Text     string `json:"text"`
	Approval *struct {
		Action string `json:"action"`
		Plan   struct {
			ID        string `json:"id"`
			State     string `json:"state"`
			Reason    string `json:"reason"`
			DecidedBy string `json:"decided_by"`
		} `json:"plan"`
		NewerPlan string `json:"newer_plan"`
	} `json:"approval"`
	Removal *struct {
		Action string `json:"action"`
		Count  int    `json:"count"`
	} `json:"removal"`
	Policy *struct {
		Action   string   `json:"action"`
		Messages []string `json:"messages"`
	} `json:"policy"`
}

func newHookSink(t *testing.T) *hookSink {
	h := &hookSink{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n hookNote
		if json.NewDecoder(r.Body).Decode(&n) == nil {
			h.mu.Lock()
			h.got = append(h.got, n)
			h.mu.Unlock()
		}
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// block is a notification block sending the events to the receiver.
func (h *hookSink) block(events ...string) string {
	q := make([]string, len(events))
	for i, e := range events {
		q[i] = fmt.Sprintf("%q", e)
	}
	return fmt.Sprintf(`
notification "webhook" {
  name    = "gates"
  url     = %q
  events  = [%s]
  retries = 0
}
`, h.srv.URL, strings.Join(q, ", "))
}

// wait waits for a notification about the task that ok accepts.
func (h *hookSink) wait(t *testing.T, task, what string, ok func(hookNote) bool) hookNote {
	t.Helper()
	var n hookNote
	testutil.Eventually(t, 60*time.Second, "a webhook notification for "+task+": "+what, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, g := range h.got {
			if g.Task == task && ok(g) {
				n = g
				return true
			}
		}
		return false
	})
	return n
}

// approval accepts an approval notification with the action about plan id.
func approval(action, id string) func(hookNote) bool {
	return func(n hookNote) bool {
		return n.Type == "approval" && n.Approval != nil && n.Approval.Action == action && n.Approval.Plan.ID == id
	}
}

// metric reads a per-task counter (task="name") from /metrics, -1 when it
// is not there.
func (a gateAPI) metric(metric, name string) float64 {
	a.t.Helper()
	return a.series(fmt.Sprintf("%s{task=%q}", metric, name))
}

// series reads one series (a metric name with its labels, as /metrics
// prints them) from /metrics, -1 when it is not there.
func (a gateAPI) series(series string) float64 {
	a.t.Helper()
	code, body := a.do("GET", "/metrics", a.read)
	if code != http.StatusOK {
		return -1
	}
	prefix := series + " "
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// waitMetric waits until the task's counter reads want.
func (a gateAPI) waitMetric(metric, name string, want float64) {
	a.t.Helper()
	testutil.Eventually(a.t, 30*time.Second, fmt.Sprintf("%s{task=%q} = %v", metric, name, want), func() bool {
		return a.metric(metric, name) == want
	})
}

// removeRule deletes an instance's rule file behind Terraform's back.
func removeRule(t *testing.T, dir, id string) {
	t.Helper()
	must(t, os.Remove(filepath.Join(dir, id+".rule")))
}

// mkdir makes dir/name and returns it.
func mkdir(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	must(t, os.MkdirAll(p, 0o755))
	return p
}
