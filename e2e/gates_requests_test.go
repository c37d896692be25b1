package e2e

// The requests that start or decide a gated task's run answer for that
// run: task run / POST .../run report the run they started (held for
// approval: its plan, exit 17), and an approval answers once recorded,
// before the apply ends.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/testutil"
)

// runAnswer is the body of POST /v1/tasks/{name}/run.
type runAnswer struct {
	Event   *store.Event `json:"event"`
	RunID   string       `json:"run_id"`
	Status  string       `json:"status"`
	Plan    *gate.Plan   `json:"plan"`
	Message string       `json:"message"`
}

func (a gateAPI) runNow(name string) (int, runAnswer, string) {
	a.t.Helper()
	code, body := a.do("POST", "/v1/tasks/"+name+"/run", a.write)
	var r runAnswer
	if code == http.StatusOK || code == http.StatusAccepted {
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			a.t.Fatalf("POST /v1/tasks/%s/run: %v\n%s", name, err, body)
		}
	}
	return code, r, body
}

// task run on a task whose plan is held: the new run's plan is held too,
// and the command says so, with the run's id, the plan to approve and exit
// 17 — never "run complete" with an older event. POST .../run answers 202
// with the held plan, whose id is the run's; once the task applies again,
// it answers 200 with the event of the run it started.
func TestGateTaskRunHeldReportsTheRun(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	g, dir, p := startEmptyCatalog(t, c, "", "")
	env := []string{"CTS_ADDRESS=" + g.base, "CTS_TOKEN=" + gateWriteSecret}

	o, code := runCLI(ctsyncBin, env, "", "task", "run", "-auto-approve", "web")
	if code != 17 || !strings.Contains(o, "held for approval") || strings.Contains(o, "run complete") || strings.Contains(o, "succeeded") {
		t.Fatalf("task run of a held task (exit %d, want 17 and held for approval):\n%s", code, o)
	}
	m := regexp.MustCompile(`run (\S+) applied nothing`).FindStringSubmatch(o)
	np := g.waitPending("web", emptyCatalogReason, p.ID)
	if m == nil || m[1] != np.ID {
		t.Fatalf("task run names run %v, the held plan is %s:\n%s", m, np.ID, o)
	}
	if !strings.Contains(o, "task approve -plan="+np.ID+" web") || !strings.Contains(o, emptyCatalogReason) {
		t.Errorf("task run does not say why the run is held and how to approve it:\n%s", o)
	}
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "after task run of a held task")

	code, r, body := g.runNow("web")
	if code != http.StatusAccepted || r.Status != "held" || r.Event != nil || r.Plan == nil || r.Plan.ID != r.RunID ||
		r.RunID == np.ID || r.Plan.Reason != emptyCatalogReason {
		t.Fatalf("POST run of a held task: %d %s; want 202, status held, the new plan's id as run_id", code, body)
	}
	held := g.waitPending("web", emptyCatalogReason, p.ID, np.ID)
	if held.ID != r.RunID {
		t.Fatalf("POST run answered run %s, the held plan is %s", r.RunID, held.ID)
	}
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "after POST run of a held task")

	if code, body := g.decide("web", held.ID, "approve", gateWriteSecret); code != http.StatusOK {
		t.Fatalf("approve: %d %s", code, body)
	}
	waitRules(t, dir, "web-1")
	g.waitQuiet("web")
	seen := g.eventIDs("web")
	code, r, body = g.runNow("web")
	if code != http.StatusOK || r.Status != "succeeded" || r.Event == nil || r.Event.ID != r.RunID || seen[r.RunID] || !r.Event.Success {
		t.Fatalf("POST run: %d %s; want 200 with the event of the new run", code, body)
	}
	o, code = runCLI(ctsyncBin, env, "", "task", "run", "-auto-approve", "web")
	m = regexp.MustCompile(`Run (\S+): apply succeeded`).FindStringSubmatch(o)
	if code != 0 || m == nil || m[1] == r.RunID || seen[m[1]] {
		t.Fatalf("task run of a task that applies (exit %d): want a new run's id:\n%s", code, o)
	}
}

// An approval answers once it is recorded, not after the apply: the
// module's apply waits for a file the test writes only after the answer.
func TestGateApproveAnswersBeforeTheApplyEnds(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	registerWeb(t, c, 1)
	dir, varFile := newTaskDir(t)
	g := startGated(t, c, fmt.Sprintf(`
task {
  name           = "slow"
  module         = %q
  variable_files = [%q]
  condition "services" {
    names = ["web"]
  }
  approval {
    required = true
  }
}
`, module("gated"), varFile))
	p := g.waitPending("slow", "approval required")
	if fileExistsAt(dir, "started") {
		t.Fatal("the held plan was applied")
	}
	type answer struct {
		code int
		body string
	}
	answered := make(chan answer, 1)
	go func() {
		code, body := g.decide("slow", p.ID, "approve", gateWriteSecret)
		answered <- answer{code, body}
	}()
	var a answer
	select {
	case a = <-answered:
	case <-time.After(testutil.Scale(90 * time.Second)):
		writeFile(t, dir, "gate", "")
		t.Fatal("the approval did not answer within 90s while the apply waited")
	}
	if a.code != http.StatusOK || !strings.Contains(a.body, `"state":"approved"`) {
		t.Fatalf("approve: %d %s", a.code, a.body)
	}
	if fileExistsAt(dir, "services.json") {
		t.Fatal("the apply ended before the approval answered")
	}
	// The apply goes on after the answer: it starts, and ends once let go.
	testutil.Eventually(t, 2*time.Minute, "the approved apply started", func() bool { return fileExistsAt(dir, "started") })
	if st := g.status("slow"); !st.Active {
		t.Errorf("the task is not active while its approved plan is applied: %s", st.raw)
	}
	writeFile(t, dir, "gate", "")
	testutil.Eventually(t, 2*time.Minute, "the approved apply finished", func() bool { return fileExistsAt(dir, "services.json") })
	ev := g.waitNewEvent("slow", nil, "recorded with its approver", func(ev store.Event) bool { return ev.Actor == gateWriteName })
	if !ev.Success {
		t.Fatalf("the approved run failed: %+v", ev)
	}
}

// doBody sends a request with a JSON body and the write token.
func (a gateAPI) doBody(method, path, body string) (int, string) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.base+path, strings.NewReader(body))
	must(a.t, err)
	req.Header.Set("Authorization", "Bearer "+a.write)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// startDestroyable starts a daemon whose task "web" (max_destroy_percent =
// 50) has applied web-1..web-4 and is idle.
func startDestroyable(t *testing.T, c *testutil.Consul) (*gated, string, []string) {
	t.Helper()
	dir, varFile := newTaskDir(t)
	registerWeb(t, c, 1, 2, 3, 4)
	g := startGated(t, c, gateTask("web", varFile, `
  approval {
    max_destroy_percent = 50
  }`))
	waitRules(t, dir, "web-1,web-2,web-3,web-4")
	g.waitQuiet("web")
	return g, dir, []string{"CTS_ADDRESS=" + g.base, "CTS_TOKEN=" + gateWriteSecret}
}

const destroyReason = "task deletion with destroy: plan destroys 4 of 4 resources (max_destroy_percent 50)"

// task delete -destroy of a task with max_destroy_percent = 50 destroys
// nothing: its destroy plan (4 of 4) is held, the command says so and how
// to approve, exit 17; the task is kept, waiting. Approving the plan
// destroys everything and deletes the task.
func TestGateDestroyHeldThenApproved(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	g, dir, env := startDestroyable(t, c)

	o, code := runCLI(ctsyncBin, env, "", "task", "delete", "-destroy", "-auto-approve", "web")
	if code != 17 || !strings.Contains(o, "held for approval") || !strings.Contains(o, "nothing was destroyed") {
		t.Fatalf("task delete -destroy (exit %d, want 17 and held for approval):\n%s", code, o)
	}
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "after a held destroy")
	p := g.waitPending("web", destroyReason)
	if !p.DeletesTask || p.Destroy != 4 || !strings.Contains(o, "task approve -plan="+p.ID+" web") {
		t.Fatalf("held plan %+v; CLI output:\n%s", p, o)
	}
	st := g.waitStatus("web", "waiting", func(st gateStatus) bool { return st.Status == "waiting" })
	if st.Held == nil || st.Held.ID != p.ID {
		t.Errorf("status while the destroy is held: %s", st.raw)
	}
	// The API answers the same for the held task, and nothing is destroyed.
	code, body := g.do("DELETE", "/v1/tasks/web?destroy=true", gateWriteSecret)
	if code != http.StatusAccepted || !strings.Contains(body, `"status":"held"`) || !strings.Contains(body, p.ID) {
		t.Fatalf("DELETE ?destroy=true of a task whose destroy is held: %d %s", code, body)
	}
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "after a second delete")

	o, code = runCLI(ctsyncBin, env, "", "task", "approve", "-auto-approve", "web")
	if code != 0 || !strings.Contains(o, "deletes the task") {
		t.Fatalf("task approve of the destroy plan (exit %d):\n%s", code, o)
	}
	testutil.Eventually(t, 2*time.Minute, "the task deleted", func() bool {
		code, _ := g.do("GET", "/v1/status/tasks/web", gateReadSecret)
		return code == http.StatusNotFound
	})
	waitRules(t, dir, "")
}

// A rejected destroy keeps the task and everything it manages; the task
// runs again (enabled as before).
func TestGateDestroyHeldThenRejected(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	g, dir, _ := startDestroyable(t, c)

	code, body := g.do("DELETE", "/v1/tasks/web?destroy=true", gateWriteSecret)
	var r struct {
		Status string     `json:"status"`
		Plan   *gate.Plan `json:"plan"`
	}
	if code != http.StatusAccepted || json.Unmarshal([]byte(body), &r) != nil || r.Status != "held" || r.Plan == nil ||
		r.Plan.Reason != destroyReason || !r.Plan.DeletesTask {
		t.Fatalf("DELETE ?destroy=true: %d %s; want 202 with the held destroy plan", code, body)
	}
	if code, body := g.decide("web", r.Plan.ID, "reject", gateWriteSecret); code != http.StatusOK {
		t.Fatalf("reject: %d %s", code, body)
	}
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "after the rejected destroy")
	// Kept and enabled: a change runs it.
	g.waitStatus("web", "kept, enabled", func(st gateStatus) bool { return st.Status != "" && st.Status != "waiting" })
	registerWeb(t, c, 5)
	waitRules(t, dir, "web-1,web-2,web-3,web-4,web-5")
}

// A daemon killed (SIGKILL) while a task created through the API holds a
// plan leaves its files; the restarted daemon, which does not have the
// task, removes them at start-up.
func TestGateKilledHeldPlanOfAPITaskRemoved(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	registerWeb(t, c, 1)
	dir, _ := newTaskDir(t)
	g := startGated(t, c, "")
	body := fmt.Sprintf(`{"task":{"name":"api-held","module":%q,"variables":{"dir":%q},"condition":{"services":{"names":["web"]}},"approval":{"required":true}}}`,
		module("per_instance"), fmt.Sprintf("%q", dir))
	if code, b := g.doBody("POST", "/v1/tasks", body); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	p := g.waitPending("api-held", "approval required")
	planDir := filepath.Join(g.work, "sync", "api-held", ".ctsync-plan")
	files := []string{filepath.Join(planDir, "held-"+p.ID+".tfplan"), filepath.Join(planDir, "held-"+p.ID+".tfvars")}
	for _, f := range files {
		if !fileExistsAt(f) {
			t.Fatalf("the held plan's file %s is missing", f)
		}
	}
	must(t, g.p.cmd.Process.Signal(syscall.SIGKILL))
	g.p.wait(t, 60*time.Second)

	g.p = startCtsync(t, g.work, "start", "-config-file", g.cfg)
	g.waitUp()
	g.p.waitOutput(t, 30*time.Second, "removed the held plans a previous ctsync left", "plans=1")
	for _, f := range files {
		if fileExistsAt(f) {
			t.Errorf("the killed daemon's held plan file %s of an API task is still there after the restart", f)
		}
	}
}

// High availability, leader mode: a deletion with destroy held on the
// leader stays recorded with its destroy pending; the leader is killed,
// and the new leader holds the same destroy plan (its record is in Consul
// KV) — nothing is destroyed — until it is approved there: then the
// destroy is planned again, has the same changes, everything is destroyed
// and the task deleted.
func TestGateHADestroyHeldOverFailover(t *testing.T) {
	skipShort(t)
	c, dir, leader := startGatedHACluster(t, "")

	api1 := gateAPI{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", leader.port)}
	code, body := api1.do("DELETE", "/v1/tasks/web-task?destroy=true", "")
	if code != http.StatusAccepted || !strings.Contains(body, `"status":"held"`) {
		t.Fatalf("DELETE ?destroy=true on the leader: %d %s; want 202 held", code, body)
	}
	reason := "task deletion with destroy: plan destroys 4 of 4 resources (max_destroy_percent 50)"
	held := api1.waitPending("web-task", reason)

	kill := time.Now()
	must(t, leader.proc().cmd.Process.Kill())
	leader.kills = append(leader.kills, kill)
	next, _ := c.leaderSince(kill, 60*time.Second)
	if next == leader {
		t.Fatalf("the killed leader %s leads again", leader.id)
	}
	api2 := gateAPI{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", next.port)}
	again := api2.waitPendingUnless("web-task", reason, rulesChanged(dir, "web-1,web-2,web-3,web-4"))
	if again.ID != held.ID || !again.DeletesTask {
		t.Fatalf("the new leader's held plan is not the deletion's destroy: %+v", again)
	}
	expectRules(t, dir, "web-1,web-2,web-3,web-4", "after the failover, before approval")
	if code, body := api2.decide("web-task", again.ID, "approve", ""); code != http.StatusOK {
		t.Fatalf("approve on the new leader: %d %s", code, body)
	}
	waitRules(t, dir, "")
	testutil.Eventually(t, 2*time.Minute, "the task deleted on the new leader", func() bool {
		code, _ := api2.do("GET", "/v1/status/tasks/web-task", "")
		return code == http.StatusNotFound
	})
}
