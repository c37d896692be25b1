package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// haTTL is the session TTL of the cluster: Consul's default-like 15s, the
// value the failover numbers in docs/performance.md are measured with.
const haTTL = 15 * time.Second

// haInstance is one ctsync of the cluster: its own working directory, API
// port and fault proxy in front of the one Consul; the same configuration
// otherwise. procs holds every process it ran (it is restarted).
type haInstance struct {
	id    string
	port  int
	proxy *testutil.FaultProxy
	cfg   string
	work  string
	procs []*proc
	kills []time.Time // when a process of it was killed (SIGKILL)
	extra string      // more high_availability settings
	mod   string      // the task's fixture module (default services_file)
	quiet bool        // its output is not printed when the test fails (the soak saves it)
	bin   string      // the binary it runs (default ctsyncBin)
}

func (in *haInstance) proc() *proc { return in.procs[len(in.procs)-1] }

func haConfig(in *haInstance, webVarFile string) string {
	mod := in.mod
	if mod == "" {
		mod = "services_file"
	}
	return fmt.Sprintf(`log_level = "DEBUG"
id = %q
port = %d
working_dir = %q

consul {
  address = %q
}

buffer_period {
  enabled = false
}

high_availability {
  cluster {
    name = "e2e"
    storage "consul" {
      session_ttl = %q
    }
  }
  instance {
    address = "127.0.0.1"
  }
  %s
}

task {
  name           = "web-task"
  module         = %q
  variable_files = [%q]
  condition "services" {
    names = ["web"]
  }
}
`, in.id, in.port, filepath.Join(in.work, "sync-tasks"), in.proxy.Addr, haTTL.String(), in.extra, module(mod), webVarFile)
}

func (in *haInstance) start(t *testing.T, flags ...string) *proc {
	t.Helper()
	// CTSYNC_E2E_ID tells the heartbeat fixture module who runs it.
	bin := in.bin
	if bin == "" {
		bin = ctsyncBin
	}
	p := startBinary(t, bin, in.work, []string{"CTSYNC_E2E_ID=" + in.id}, append([]string{"start", "-config-file", in.cfg}, flags...)...)
	p.quiet = in.quiet
	in.procs = append(in.procs, p)
	return p
}

// logLine is one slog text line with its time.
type logLine struct {
	at   time.Time
	text string
}

// logTime is the time at the start of a log line (hclog's format).
var logTime = regexp.MustCompile(`^(\d{4}-\d\d-\d\dT\S+) \[`)

// parseLogTime parses logTime's match.
func parseLogTime(v string) (time.Time, error) {
	return time.Parse("2006-01-02T15:04:05.000Z0700", v)
}

func haLines(p *proc, subs ...string) []logLine {
	var out []logLine
next:
	for _, l := range strings.Split(p.out.String(), "\n") {
		for _, s := range subs {
			if !strings.Contains(l, s) {
				continue next
			}
		}
		m := logTime.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		at, err := parseLogTime(m[1])
		if err != nil {
			continue
		}
		out = append(out, logLine{at, l})
	}
	return out
}

// haCluster is the three instances.
type haCluster struct {
	t      *testing.T
	consul *testutil.Consul
	insts  []*haInstance
	// logsSaved: the test writes the logs itself (the soak), so they are
	// not printed when it fails.
	logsSaved bool
}

// newHACluster starts the cluster's Consul. The output of every process of
// its instances is printed when the test fails (or with CTSYNC_HA_LOGS set).
func newHACluster(t *testing.T) *haCluster {
	return newHAClusterWith(t, testutil.ConsulOptions{})
}

// newHAClusterWith is newHACluster with the Consul agent's options.
func newHAClusterWith(t *testing.T, o testutil.ConsulOptions) *haCluster {
	c := &haCluster{t: t, consul: testutil.StartConsulWith(t, o)}
	t.Cleanup(func() {
		if (t.Failed() && !c.logsSaved) || os.Getenv("CTSYNC_HA_LOGS") != "" {
			for _, in := range c.insts {
				for i, p := range in.procs {
					t.Logf("==== %s (process %d) ====\n%s", in.id, i+1, p.out.String())
				}
			}
		}
	})
	return c
}

// add prepares an instance (in gives its id, and its module when not the
// default): a free API port, a fault proxy of its own to Consul, a working
// folder, and the configuration cfg writes for it.
func (c *haCluster) add(in *haInstance, cfg func(*haInstance) string) *haInstance {
	in.port = testutil.FreePort(c.t)
	in.proxy = testutil.StartFaultProxy(c.t, c.consul.Addr)
	in.work = c.t.TempDir()
	in.cfg = writeFile(c.t, in.work, "config.hcl", cfg(in))
	c.insts = append(c.insts, in)
	return in
}

// leaderSince waits for an instance to log "ha: acquired leadership" after
// since, and returns it with the log time.
func (c *haCluster) leaderSince(since time.Time, timeout time.Duration) (*haInstance, time.Time) {
	c.t.Helper()
	var who *haInstance
	var at time.Time
	testutil.Eventually(c.t, timeout, "an instance acquiring leadership", func() bool {
		for _, in := range c.insts {
			for _, l := range haLines(in.proc(), ` ha: acquired leadership: `) {
				if !l.at.Before(since) {
					who, at = in, l.at
					return true
				}
			}
		}
		return false
	})
	return who, at
}

// leading waits until one instance's API serves /v1/tasks (it leads and
// its controller is active) and the others refuse.
func (c *haCluster) leading(timeout time.Duration) *haInstance {
	c.t.Helper()
	var who *haInstance
	testutil.Eventually(c.t, timeout, "exactly one instance serving the task API", func() bool {
		who = nil
		n := 0
		for _, in := range c.insts {
			select {
			case <-in.proc().done:
				continue
			default:
			}
			code, _, _ := haGet(in.port, "/v1/tasks")
			if code == 200 {
				who = in
				n++
			}
		}
		return n == 1
	})
	return who
}

func haGet(port int, path string) (int, http.Header, []byte) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
	if err != nil {
		return 0, nil, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// waitIdle waits until the leader has no run in progress or queued: every
// run it logged has ended, and its API shows no task active.
func waitIdle(t *testing.T, in *haInstance) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, in.id+" idle", func() bool {
		started := len(haLines(in.proc(), ` executing task: `))
		ended := len(haLines(in.proc(), ` task completed: `)) + len(haLines(in.proc(), ` error applying task: `))
		if started != ended {
			return false
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/status/tasks", in.port))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var tasks map[string]struct {
			Active bool `json:"active"`
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&tasks) != nil {
			return false
		}
		for _, st := range tasks {
			if st.Active {
				return false
			}
		}
		return true
	})
}

// runInterval is one Terraform run of one instance, from its logs.
type runInterval struct {
	inst, run  string
	start, end time.Time
}

var runIDRe = regexp.MustCompile(` run_id=(\S+)`)

// runs returns every run of every process of the cluster. A run without an
// end (its process was killed) ends at the kill, or at the test's end.
func (c *haCluster) runs() []runInterval {
	var out []runInterval
	for _, in := range c.insts {
		for pi, p := range in.procs {
			open := map[string]time.Time{}
			for _, l := range haLines(p, "run_id=") {
				m := runIDRe.FindStringSubmatch(l.text)
				if m == nil {
					continue
				}
				switch {
				case strings.Contains(l.text, ` executing task: `):
					open[m[1]] = l.at
				case strings.Contains(l.text, ` task completed: `), strings.Contains(l.text, ` error applying task: `):
					if st, ok := open[m[1]]; ok {
						out = append(out, runInterval{in.id, m[1], st, l.at})
						delete(open, m[1])
					}
				}
			}
			end := time.Now()
			select {
			case <-p.done: // exited: its runs ended with its last words
				if ls := haLines(p); len(ls) > 0 {
					end = ls[len(ls)-1].at
				}
			default:
			}
			if pi < len(in.kills) {
				end = in.kills[pi]
			}
			for id, st := range open {
				out = append(out, runInterval{in.id, id, st, end})
			}
		}
	}
	return out
}

// noOverlap fails if two instances ever ran Terraform at the same time.
func (c *haCluster) noOverlap() int {
	c.t.Helper()
	rs := c.runs()
	for i, a := range rs {
		for _, b := range rs[i+1:] {
			if a.inst != b.inst && a.start.Before(b.end) && b.start.Before(a.end) {
				c.t.Errorf("runs on two instances at once: %s %s [%s, %s] and %s %s [%s, %s]",
					a.inst, a.run, a.start.Format(time.StampMilli), a.end.Format(time.StampMilli),
					b.inst, b.run, b.start.Format(time.StampMilli), b.end.Format(time.StampMilli))
			}
		}
	}
	return len(rs)
}

func (c *haCluster) register(id, name string, port int) {
	c.t.Helper()
	c.consul.RegisterService(c.t, reg(id, name, port), api.HealthPassing)
}

func (c *haCluster) deregister(id string) {
	c.t.Helper()
	if err := c.consul.Client.Agent().ServiceDeregister(id); err != nil {
		c.t.Fatal(err)
	}
}

// waitFile waits until the module's output has exactly the IDs and returns
// when it saw them.
func waitFile(t *testing.T, dir, want string, timeout time.Duration) time.Time {
	t.Helper()
	testutil.Eventually(t, timeout, "module output with "+want, func() bool {
		got := haReadServices(dir)
		return got != nil && ids(got) == want
	})
	return time.Now()
}

// haReadServices is readServices that tolerates a file being written.
func haReadServices(dir string) map[string]task.Service {
	b, err := os.ReadFile(filepath.Join(dir, "services.json"))
	if err != nil {
		return nil
	}
	var m map[string]task.Service
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	return m
}

// Three real ctsync instances and one Consul: SIGTERM, SIGKILL and a network
// cut of the leader, then a Consul restart; services change during each.
// The module's output must follow the catalog, and two instances must
// never run Terraform at the same time.
func TestHighAvailability(t *testing.T) {
	skipShort(t)
	c := newHACluster(t)
	out, varFile := newTaskDir(t)
	for _, id := range []string{"cts-a", "cts-b", "cts-c"} {
		c.add(&haInstance{id: id}, func(in *haInstance) string { return haConfig(in, varFile) })
	}
	measured := map[string]time.Duration{}
	defer func() {
		keys := make([]string, 0, len(measured))
		for k := range measured {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			t.Logf("MEASURED %-40s %s", k, measured[k].Round(time.Millisecond))
		}
	}()

	c.register("web-1", "web", 8001)
	c.register("web-2", "web", 8002)
	start := time.Now()
	for _, in := range c.insts {
		in.start(t)
	}
	first, at := c.leaderSince(start, 60*time.Second)
	measured["first election after start"] = at.Sub(start)
	leader := c.leading(30 * time.Second)
	if leader != first {
		t.Fatalf("%s acquired the lock but %s serves the API", first.id, leader.id)
	}
	waitFile(t, out, "web-1,web-2", 60*time.Second)

	// Followers refuse the task API and name the leader; the cluster
	// status works everywhere.
	for _, in := range c.insts {
		if in == leader {
			continue
		}
		code, hdr, body := haGet(in.port, "/v1/tasks")
		want := fmt.Sprintf("redirect requests to leader '%s' at 127.0.0.1:%d", leader.id, leader.port)
		if code != 400 || !strings.Contains(string(body), want) || hdr.Get("X-Ctsync-Leader") != fmt.Sprintf("127.0.0.1:%d", leader.port) {
			t.Fatalf("follower %s: %d %s %v", in.id, code, body, hdr)
		}
		var st struct {
			ClusterName string `json:"cluster_name"`
			Members     []struct {
				ID      string `json:"id"`
				Leader  bool   `json:"leader"`
				Address string `json:"address"`
			} `json:"members"`
		}
		code, _, body = haGet(in.port, "/v1/status/cluster")
		if code != 200 || json.Unmarshal(body, &st) != nil || st.ClusterName != "e2e" || len(st.Members) != 3 {
			t.Fatalf("cluster status on %s: %d %s", in.id, code, body)
		}
		for _, m := range st.Members {
			if m.Leader != (m.ID == leader.id) || (m.Leader && m.Address == "") {
				t.Fatalf("cluster status on %s: %s", in.id, body)
			}
		}
	}

	// A task created through the API on the leader survives every
	// failover: it is saved in Consul and the next leader adds it.
	apiOut := t.TempDir()
	body := fmt.Sprintf(`{"task":{"name":"api-task","module":%q,"variables":{"dir":%q},"condition":{"services":{"names":["api"]}}}}`,
		module("services_file"), fmt.Sprintf("%q", apiOut))
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/tasks", leader.port), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("create api-task: %d", resp.StatusCode)
	}
	c.register("api-1", "api", 9001)
	waitFile(t, apiOut, "api-1", 60*time.Second)

	// 1. SIGTERM: the leader finishes, releases the lock, a follower takes
	// it at once.
	waitIdle(t, leader)
	sig := time.Now()
	if err := leader.proc().cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	c.register("web-3", "web", 8003)
	c.deregister("web-1")
	next, at := c.leaderSince(sig, 30*time.Second)
	measured["SIGTERM hand-over (signal -> acquired)"] = at.Sub(sig)
	if next == leader {
		t.Fatalf("%s took the lead back", leader.id)
	}
	applied := waitFile(t, out, "web-2,web-3", 60*time.Second)
	measured["SIGTERM: signal -> changes applied"] = applied.Sub(sig)
	if code := leader.proc().wait(t, 40*time.Second); code != 0 {
		t.Fatalf("%s exited with %d after SIGTERM", leader.id, code)
	}
	leader.start(t) // back as a follower
	leader = c.leading(30 * time.Second)
	if leader != next {
		t.Fatalf("the lead moved from %s to %s without a fault", next.id, leader.id)
	}

	// 2. SIGKILL: a follower takes over T after the last heartbeat it saw.
	waitIdle(t, leader)
	kill := time.Now()
	if err := leader.proc().cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	leader.kills = append(leader.kills, kill)
	c.register("web-4", "web", 8004)
	c.register("api-2", "api", 9002)
	next, at = c.leaderSince(kill, 60*time.Second)
	measured["SIGKILL failover (kill -> acquired)"] = at.Sub(kill)
	if d := at.Sub(kill); d > haTTL+time.Second {
		t.Errorf("failover after SIGKILL took %s, want <= TTL + lock-delay (%s)", d, haTTL+time.Second)
	}
	applied = waitFile(t, out, "web-2,web-3,web-4", 60*time.Second)
	measured["SIGKILL: acquired -> changes applied"] = applied.Sub(at)
	waitFile(t, apiOut, "api-1,api-2", 60*time.Second)
	leader.proc().wait(t, 5*time.Second)
	leader.start(t)
	leader = c.leading(30 * time.Second)

	// 3. Network cut between the leader and Consul: it steps down on its
	// own before anyone can take over; a follower takes over.
	waitIdle(t, leader)
	cut := time.Now()
	leader.proxy.Cut()
	c.register("web-5", "web", 8005)
	c.deregister("web-2")
	next, at = c.leaderSince(cut, 60*time.Second)
	if next == leader {
		t.Fatalf("the cut leader %s acquired again", leader.id)
	}
	lost := haLines(leader.proc(), ` ha: lost leadership: `)
	if len(lost) == 0 || lost[len(lost)-1].at.Before(cut) || !lost[len(lost)-1].at.Before(at) {
		t.Fatalf("the cut leader did not step down before %s took over at %s: %v", next.id, at.Format(time.StampMilli), lost)
	}
	down := lost[len(lost)-1].at
	measured["cut: cut -> old leader stepped down"] = down.Sub(cut)
	measured["cut: step-down -> takeover"] = at.Sub(down)
	measured["cut: cut -> acquired"] = at.Sub(cut)
	if d := down.Sub(cut); d > haTTL/2+haTTL/6 {
		t.Errorf("step-down %s after the cut, want <= TTL/2 after the last heartbeat", d)
	}
	applied = waitFile(t, out, "web-3,web-4,web-5", 60*time.Second)
	measured["cut: acquired -> changes applied"] = applied.Sub(at)
	leader.proxy.Restore()
	healed := time.Now()
	cutOne := leader
	leader = c.leading(30 * time.Second)
	if leader != next {
		t.Fatalf("after the link healed %s leads, want %s", leader.id, next.id)
	}
	// The healed instance has read the lock key again once it names the
	// new leader to API callers: from then on it cannot take the lock
	// while the new leader holds it.
	testutil.Eventually(t, 30*time.Second, cutOne.id+" to see "+next.id+" lead", func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/status/tasks", cutOne.port))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "'"+next.id+"'")
	})
	for _, in := range c.insts {
		if ls := haLines(in.proc(), ` ha: acquired leadership: `); len(ls) > 0 && ls[len(ls)-1].at.After(healed) {
			t.Fatalf("%s acquired the lead after the link healed", in.id)
		}
	}

	// 4. Consul restarts and forgets everything (a dev agent): sessions,
	// the lock, the stored state, the catalog. The cluster elects a leader
	// again and follows the new catalog.
	waitIdle(t, leader)
	restarted := time.Now()
	c.consul.Restart() // returns once the new agent has a leader
	measured["consul restart: the agent's own restart"] = time.Since(restarted)
	for _, id := range []string{"web-3", "web-5", "web-6"} {
		c.register(id, "web", 8000+int(id[4]-'0'))
	}
	_, at = c.leaderSince(restarted, 60*time.Second)
	measured["consul restart: restarted -> acquired"] = at.Sub(restarted)
	applied = waitFile(t, out, "web-3,web-5,web-6", 90*time.Second)
	measured["consul restart: restarted -> applied"] = applied.Sub(restarted)
	c.leading(30 * time.Second)

	n := c.noOverlap()
	t.Logf("%d runs checked for overlap", n)
	for _, in := range c.insts {
		for _, p := range in.procs {
			if strings.Contains(p.out.String(), "panic") {
				t.Fatalf("%s panicked", in.id)
			}
		}
	}
}

func haDo(t *testing.T, method string, port int, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d%s", port, path), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// haTasks returns the leader's tasks: name -> enabled.
func haTasks(t *testing.T, port int) map[string]bool {
	t.Helper()
	code, body := haDo(t, "GET", port, "/v1/tasks", "")
	var r struct {
		Tasks []struct {
			Name    string `json:"name"`
			Enabled bool   `json:"enabled"`
		} `json:"tasks"`
	}
	if code != 200 || json.Unmarshal(body, &r) != nil {
		t.Fatalf("GET /v1/tasks: %d %s", code, body)
	}
	out := map[string]bool{}
	for _, tk := range r.Tasks {
		out[tk.Name] = tk.Enabled
	}
	return out
}

// Task changes made through the API outlive the instance that made them
// (the whole cluster restarts here), a restarted leader does not re-run
// what it applied, -reset-storage makes the configuration the cluster's
// again, and rerun_all_on_failover runs every task on becoming leader.
func TestHAStoredStateAcrossRestarts(t *testing.T) {
	skipShort(t)
	c := newHACluster(t)
	out, varFile := newTaskDir(t)
	in := c.add(&haInstance{id: "cts-a"}, func(in *haInstance) string { return haConfig(in, varFile) })
	restart := func(flags ...string) *proc {
		t.Helper()
		if len(in.procs) > 0 {
			_ = in.proc().cmd.Process.Signal(syscall.SIGTERM)
			if code := in.proc().wait(t, 40*time.Second); code != 0 {
				t.Fatalf("exit code %d", code)
			}
		}
		p := in.start(t, flags...)
		c.leading(30 * time.Second)
		return p
	}
	runs := func(p *proc, task string) int { return len(haLines(p, ` executing task: `, "task_name="+task+" ")) }

	c.register("web-1", "web", 8001)
	c.register("api-1", "api", 9001)
	restart()
	waitFile(t, out, "web-1", 60*time.Second)
	apiOut := t.TempDir()
	body := fmt.Sprintf(`{"task":{"name":"api-task","module":%q,"variables":{"dir":%q},"condition":{"services":{"names":["api"]}}}}`,
		module("services_file"), fmt.Sprintf("%q", apiOut))
	if code, b := haDo(t, "POST", in.port, "/v1/tasks", body); code != 201 {
		t.Fatalf("create: %d %s", code, b)
	}
	waitFile(t, apiOut, "api-1", 60*time.Second)
	waitIdle(t, in)
	if code, b := haDo(t, "PATCH", in.port, "/v1/tasks/web-task", `{"enabled":false}`); code != 200 {
		t.Fatalf("disable: %d %s", code, b)
	}

	// The whole cluster restarts: the API changes are still there, and
	// nothing runs again (the inputs are those last applied); the run
	// history, kept in Consul KV, too.
	eventIDs := func(task string) []string {
		t.Helper()
		code, b := haDo(t, "GET", in.port, "/v1/tasks/"+task+"/events", "")
		var r struct {
			Events []struct {
				ID string `json:"id"`
			} `json:"events"`
		}
		if err := json.Unmarshal(b, &r); code != 200 || err != nil {
			t.Fatalf("events of %s: %d %v %s", task, code, err, b)
		}
		var ids []string
		for _, ev := range r.Events {
			ids = append(ids, ev.ID)
		}
		return ids
	}
	before := map[string][]string{"web-task": eventIDs("web-task"), "api-task": eventIDs("api-task")}
	p := restart()
	for task, ids := range before {
		got := eventIDs(task)
		if len(ids) == 0 || slices.ContainsFunc(ids, func(id string) bool { return !slices.Contains(got, id) }) {
			t.Errorf("the runs of %s after a restart: %v, before: %v", task, got, ids)
		}
	}
	if got := haTasks(t, in.port); len(got) != 2 || got["web-task"] || !got["api-task"] {
		t.Fatalf("tasks after a restart: %v", got)
	}
	waitIdle(t, in)
	testutil.Eventually(t, 60*time.Second, "api-task considered and skipped", func() bool {
		return len(haLines(p, "desired state unchanged since last apply, skipping run", "task_name=api-task ")) > 0
	})
	if n := runs(p, "api-task") + runs(p, "web-task"); n != 0 {
		t.Fatalf("%d runs after a restart with nothing changed", n)
	}

	// -reset-storage: the configuration wins; every task runs once (the
	// applied hashes are gone too).
	p = restart("-reset-storage")
	if got := haTasks(t, in.port); len(got) != 1 || !got["web-task"] {
		t.Fatalf("tasks after -reset-storage: %v", got)
	}
	testutil.Eventually(t, 60*time.Second, "web-task running after the reset", func() bool { return runs(p, "web-task") > 0 })
	if !strings.Contains(p.out.String(), "-reset-storage: the cluster's stored state was deleted") {
		t.Fatal("no reset in the log")
	}
	waitIdle(t, in)

	// rerun_all_on_failover: every task runs on becoming leader.
	in.extra = "rerun_all_on_failover = true"
	in.cfg = writeFile(t, in.work, "config.hcl", haConfig(in, varFile))
	p = restart()
	testutil.Eventually(t, 60*time.Second, "web-task re-run on becoming leader", func() bool { return runs(p, "web-task") > 0 })
	waitIdle(t, in)
	c.noOverlap()
}
