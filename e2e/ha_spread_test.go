package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// spreadTasks is the number of tasks of the spread tests.
const spreadTasks = 6

// spreadHeader is the part of a spread-mode configuration every spread
// test shares: the instance, Consul through its fault proxy, no buffer, the
// Consul backend and high_availability with spread_tasks in cluster.
func spreadHeader(in *haInstance, consulAddr, logLevel, cluster string) string {
	return fmt.Sprintf(`log_level = %q
id = %q
port = %d
working_dir = %q

consul {
  address = %q
}

buffer_period {
  enabled = false
}

# The same backend address on every instance (their own Consul traffic goes
# through their fault proxies): the backend is part of a task's desired
# state, and a different address would make every move a re-run.
driver "terraform" {
  backend "consul" {
    address = %q
  }
}

high_availability {
  cluster {
    name         = %q
    spread_tasks = true
    storage "consul" {
      session_ttl = %q
    }
  }
  instance {
    address = "127.0.0.1"
  }
}
`, logLevel, in.id, in.port, filepath.Join(in.work, "sync-tasks"), in.proxy.Addr, consulAddr, cluster, haTTL.String())
}

// spreadConfig is an instance's configuration in spread mode: spreadTasks
// tasks of the services_file module, task-i writing into outs[i] when the
// service "svc-i" changes.
func spreadConfig(in *haInstance, consulAddr string, outs []string) string {
	var b strings.Builder
	b.WriteString(spreadHeader(in, consulAddr, "DEBUG", "e2e"))
	for i, out := range outs {
		fmt.Fprintf(&b, `
task {
  name      = "task-%d"
  module    = %q
  variables = { dir = %q }
  condition "services" {
    names = ["svc-%d"]
  }
}
`, i, module("services_file"), out, i)
	}
	return b.String()
}

type spreadStatus struct {
	Owner  *string `json:"owner"`
	Status string  `json:"status"`
}

// spreadOwners reads /v1/status/tasks on one instance: the owner of each
// task; ok once all n tasks have one.
func spreadOwners(port, n int) (map[string]string, bool) {
	code, _, body := haGet(port, "/v1/status/tasks")
	if code != 200 {
		return nil, false
	}
	var m map[string]spreadStatus
	if json.Unmarshal(body, &m) != nil {
		return nil, false
	}
	out := map[string]string{}
	for name, st := range m {
		if st.Owner == nil || *st.Owner == "" {
			return nil, false
		}
		out[name] = *st.Owner
	}
	return out, len(out) == n
}

// applies counts each task's successful runs over every process of the
// cluster.
func (c *haCluster) applies() map[string]int {
	out := map[string]int{}
	for _, in := range c.insts {
		for _, p := range in.procs {
			for _, l := range haLines(p, ` task completed: `) {
				for i := range spreadTasks {
					if strings.Contains(l.text, fmt.Sprintf(" task_name=task-%d ", i)) {
						out[fmt.Sprintf("task-%d", i)]++
					}
				}
			}
		}
	}
	return out
}

// Spread mode with three real instances: the tasks are spread, each applied
// once; any member shows every task's owner and forwards a write to the
// owner; a SIGKILLed owner's tasks move and a change is applied by the new
// owner; SIGTERM hands tasks over; a new instance joins without re-running
// unchanged tasks; no task's runs ever overlap on two instances.
func TestSpreadTasks(t *testing.T) {
	skipShort(t)
	c := newHACluster(t)
	outs := make([]string, spreadTasks)
	for i := range outs {
		outs[i] = t.TempDir()
	}
	for _, id := range []string{"cts-a", "cts-b", "cts-c", "cts-d"} {
		c.add(&haInstance{id: id}, func(in *haInstance) string { return spreadConfig(in, c.consul.Addr, outs) })
	}
	for i := range spreadTasks {
		c.register(fmt.Sprintf("svc-%d-1", i), fmt.Sprintf("svc-%d", i), 9000+i)
	}
	start := time.Now()
	for _, in := range c.insts[:3] {
		in.start(t)
	}
	for i := range spreadTasks {
		waitFile(t, outs[i], fmt.Sprintf("svc-%d-1", i), 90*time.Second)
	}
	t.Logf("MEASURED start -> %d tasks applied on 3 instances: %s", spreadTasks, time.Since(start).Round(time.Millisecond))
	var owners map[string]string
	testutil.Eventually(t, 30*time.Second, "every member showing every task's owner", func() bool {
		var ok bool
		for _, in := range c.insts[:3] {
			var o map[string]string
			if o, ok = spreadOwners(in.port, spreadTasks); !ok {
				return false
			}
			if owners != nil && fmt.Sprint(o) != fmt.Sprint(owners) {
				owners = o
				return false
			}
			owners = o
		}
		return true
	})
	per := map[string]int{}
	for _, o := range owners {
		per[o]++
	}
	t.Logf("owners: %v (%v)", owners, per)
	if len(per) < 2 {
		t.Errorf("%d tasks not spread: %v", spreadTasks, per)
	}
	c.allIdle()
	for name, n := range c.applies() {
		if n != 1 {
			t.Errorf("%s applied %d times at start", name, n)
		}
	}

	// A write on a member that does not own the task reaches the owner.
	var owner, other *haInstance
	for _, in := range c.insts[:3] {
		if owners["task-0"] == in.id {
			owner = in
		} else if other == nil {
			other = in
		}
	}
	req, _ := http.NewRequest("PATCH", fmt.Sprintf("http://127.0.0.1:%d/v1/tasks/task-0", other.port), strings.NewReader(`{"enabled":false}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Ctsync-Owner") != fmt.Sprintf("127.0.0.1:%d", owner.port) {
		t.Fatalf("PATCH on a non-owner: %d %v", resp.StatusCode, resp.Header)
	}
	code, _, body := haGet(owner.port, "/v1/tasks/task-0")
	if code != 200 || !strings.Contains(string(body), `"enabled":false`) {
		t.Fatalf("task-0 on its owner after the forwarded disable: %d %s", code, body)
	}
	req, _ = http.NewRequest("PATCH", fmt.Sprintf("http://127.0.0.1:%d/v1/tasks/task-0", other.port), strings.NewReader(`{"enabled":true}`))
	req.Header.Set("Content-Type", "application/json")
	if resp, err = http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("re-enable: %v %v", err, resp)
	}
	resp.Body.Close()

	// SIGKILL the owner of task-1; change every task; all applied, each once
	// more (the killed owner's by their new owners after the takeover).
	victim := c.insts[0]
	for _, in := range c.insts[:3] {
		if owners["task-1"] == in.id {
			victim = in
		}
	}
	c.allIdle()
	before := c.applies()
	kill := time.Now()
	if err := victim.proc().cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	victim.kills = append(victim.kills, kill)
	for i := range spreadTasks {
		c.register(fmt.Sprintf("svc-%d-2", i), fmt.Sprintf("svc-%d", i), 9100+i)
	}
	for i := range spreadTasks {
		waitFile(t, outs[i], fmt.Sprintf("svc-%d-1,svc-%d-2", i, i), 90*time.Second)
	}
	t.Logf("MEASURED SIGKILL of %s -> every change applied: %s", victim.id, time.Since(kill).Round(time.Millisecond))
	c.allIdle() // the files are written before the runs are recorded
	after := c.applies()
	for i := range spreadTasks {
		name := fmt.Sprintf("task-%d", i)
		if after[name]-before[name] != 1 {
			t.Errorf("%s applied %d times for one change", name, after[name]-before[name])
		}
	}

	// A new instance joins: it takes its share without re-running anything.
	before = c.applies()
	join := time.Now()
	c.insts[3].start(t)
	testutil.Eventually(t, 60*time.Second, "the new instance owning tasks", func() bool {
		o, ok := spreadOwners(c.insts[3].port, spreadTasks)
		if !ok {
			return false
		}
		for _, id := range o {
			if id == c.insts[3].id {
				return true
			}
		}
		return false
	})
	t.Logf("MEASURED join -> the new instance owns tasks: %s", time.Since(join).Round(time.Millisecond))
	waitIdle(t, c.insts[3])
	if after := c.applies(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the join re-ran tasks: %v -> %v", before, after)
	}

	// SIGTERM of a member: its tasks are handed over at once.
	var term *haInstance
	for _, in := range c.insts[:3] {
		if in != victim {
			term = in
			break
		}
	}
	sig := time.Now()
	if err := term.proc().cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := term.proc().wait(t, 60*time.Second); code != 0 {
		t.Fatalf("%s exited with %d", term.id, code)
	}
	testutil.Eventually(t, 30*time.Second, "tasks owned by the remaining members", func() bool {
		o, ok := spreadOwners(c.insts[3].port, spreadTasks)
		if !ok {
			return false
		}
		for _, id := range o {
			if id == term.id || id == victim.id {
				return false
			}
		}
		return true
	})
	t.Logf("MEASURED SIGTERM of %s -> its tasks owned elsewhere: %s", term.id, time.Since(sig).Round(time.Millisecond))
	for i := range spreadTasks {
		c.register(fmt.Sprintf("svc-%d-3", i), fmt.Sprintf("svc-%d", i), 9200+i)
	}
	for i := range spreadTasks {
		waitFile(t, outs[i], fmt.Sprintf("svc-%d-1,svc-%d-2,svc-%d-3", i, i, i), 90*time.Second)
	}
	c.noOverlapPerTask()
}

// allIdle waits until no live instance has a run in progress.
func (c *haCluster) allIdle() {
	c.t.Helper()
	for _, in := range c.insts {
		if len(in.procs) == 0 {
			continue
		}
		select {
		case <-in.proc().done:
			continue
		default:
		}
		waitIdle(c.t, in)
	}
}

// noOverlapPerTask fails if two instances ever ran the same task at the
// same time.
func (c *haCluster) noOverlapPerTask() {
	c.t.Helper()
	rs := c.runs()
	taskOf := map[string]string{}
	for _, in := range c.insts {
		for _, p := range in.procs {
			for _, l := range haLines(p, ` executing task: `, "run_id=") {
				m := runIDRe.FindStringSubmatch(l.text)
				for i := range spreadTasks {
					if m != nil && strings.Contains(l.text, fmt.Sprintf(" task_name=task-%d ", i)) {
						taskOf[m[1]] = fmt.Sprintf("task-%d", i)
					}
				}
			}
		}
	}
	for i, a := range rs {
		for _, b := range rs[i+1:] {
			if a.inst != b.inst && taskOf[a.run] == taskOf[b.run] && a.start.Before(b.end) && b.start.Before(a.end) {
				c.t.Errorf("%s ran on two instances at once: %s %s and %s %s", taskOf[a.run], a.inst, a.run, b.inst, b.run)
			}
		}
	}
}
