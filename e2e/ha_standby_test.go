package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/testutil"
)

// cpuTime is a process's user + system CPU time so far, from /proc.
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const hz = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / hz
}

// holdLeadership makes the test the cluster's leader: it holds the lock key
// with its own session and rewrites it every second (a heartbeat), so that
// the ctsync under test stays a follower. It stops when the test ends.
func holdLeadership(t *testing.T, c *testutil.Consul, key string) {
	t.Helper()
	sess, _, err := c.Client.Session().Create(&api.SessionEntry{Name: "e2e fake leader", TTL: "15s", Behavior: api.SessionBehaviorDelete, Checks: []string{}}, nil)
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	put := func(beat int) bool {
		v, _ := json.Marshal(map[string]any{"id": "e2e-leader", "beat": beat, "since": time.Now().UTC()})
		ok, _, err := c.Client.KV().Acquire(&api.KVPair{Key: key, Value: v, Session: sess}, nil)
		return err == nil && ok
	}
	if !put(0) {
		t.Fatal("the fake leader cannot take the lock")
	}
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for beat := 1; ; beat++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			_, _, _ = c.Client.Session().Renew(sess, nil)
			put(beat)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_, _ = c.Client.Session().Destroy(sess, nil)
	})
}

// A follower is idle: with 100 tasks (90 on services, 10 on schedules) its
// CPU use over 30 s stays under 1 % of a core. The leader is the test
// itself (it holds the lock), so nothing runs Terraform meanwhile. It is a
// measurement, so it runs with the benchmarks (make bench); the regression
// it found (a follower spinning on a schedule tick) is guarded in make test
// by internal/reconcile TestStandbyScheduleDoesNotSpin, without timing.
func TestHAStandbyCPU(t *testing.T) {
	skipShort(t)
	if os.Getenv("CTSYNC_BENCH") != "1" {
		t.Skip("a CPU measurement: runs with CTSYNC_BENCH=1 (make bench)")
	}
	c := testutil.StartConsul(t)
	holdLeadership(t, c, "consul-terraform-sync/e2e/leader")
	for i := range 10 {
		c.RegisterService(t, reg(fmt.Sprintf("svc-%d-1", i), fmt.Sprintf("svc-%d", i), 9000+i), api.HealthPassing)
	}
	work := t.TempDir()
	_, varFile := newTaskDir(t)
	port := testutil.FreePort(t)
	var b strings.Builder
	fmt.Fprintf(&b, `log_level = "INFO"
id = "cts-standby"
port = %d
working_dir = %q
consul {
  address = %q
}
high_availability {
  cluster {
    name = "e2e"
  }
}
`, port, filepath.Join(work, "sync-tasks"), c.Addr)
	for i := range 100 {
		cond := fmt.Sprintf("condition \"services\" {\n    names = [\"svc-%d\"]\n  }", i%10)
		if i >= 90 {
			cond = "condition \"schedule\" {\n    cron = \"*/10 * * * * *\"\n  }\n  module_input \"services\" {\n    names = [\"svc-0\"]\n  }"
		}
		fmt.Fprintf(&b, "\ntask {\n  name = \"task-%03d\"\n  module = %q\n  variable_files = [%q]\n  %s\n}\n", i, module("services_file"), varFile, cond)
	}
	cfg := writeFile(t, work, "config.hcl", b.String())
	p := startCtsync(t, work, "start", "-config-file", cfg)
	// Up: it follows and serves its copy of the cluster's 100 tasks.
	testutil.Eventually(t, 60*time.Second, "the follower serving its 100 tasks", func() bool {
		code, hdr, body := haGet(port, "/v1/status/tasks?stale")
		var m map[string]any
		return code == 200 && hdr.Get("X-Ctsync-Stale") == "true" && json.Unmarshal(body, &m) == nil && len(m) == 100
	})
	pid := p.cmd.Process.Pid
	// The first seconds (start-up, watches starting) are not measured;
	// then the window itself.
	pause := func(d time.Duration) {
		select {
		case <-p.done:
			t.Fatalf("ctsync exited:\n%s", p.out.String())
		case <-time.After(d):
		}
	}
	pause(5 * time.Second)
	before, t0 := cpuTime(t, pid), time.Now()
	pause(30 * time.Second)
	used, elapsed := cpuTime(t, pid)-before, time.Since(t0)
	pct := 100 * used.Seconds() / elapsed.Seconds()
	t.Logf("MEASURED standby CPU, 100 tasks (10 on schedules every 10 s): %s in %s = %.2f%% of a core", used, elapsed.Round(time.Millisecond), pct)
	if pct >= 1 {
		t.Errorf("a follower used %.2f%% of a core, want < 1%%", pct)
	}
	if n := p.count(` executing task: `); n != 0 {
		t.Errorf("a follower ran %d tasks", n)
	}
}
