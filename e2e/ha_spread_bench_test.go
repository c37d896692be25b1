package e2e

// The spread mode benchmark (issue 16): T tasks of a heavy module (each
// apply burns CPU in a local-exec, e2e/testdata/modules/cpu_burn), all
// watching one service, on N = 1, 2, 3 ctsync instances of one cluster on
// this machine. Per N it reports the time from one catalog change to all T
// applied, the CPU seconds per apply (every instance and the Terraform
// processes it waited for), the largest share of tasks on one member, and
// the Consul requests per second in steady state, counted at each
// instance's proxy (its only way to Consul), next to docs/ha.md's
// N × (2 + N) / H. Between the Ns a member joins (the time until it owns
// its share, and no task re-run); at the end one leaves (SIGTERM).
//
//	CTSYNC_SPREAD_TASKS    T (default 12)
//	CTSYNC_SPREAD_BURN     awk loop iterations per apply (default 50,000,000)
//	CTSYNC_SPREAD_ROUNDS   changes per N (default 2; the median is reported)
//	CTSYNC_SPREAD_WINDOW   seconds of the steady-state request count (default 30)
//
// Run: CTSYNC_BENCH=1 go test -run '^TestSpreadBench$' -v -timeout 60m ./e2e/

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/ha"
	"github.com/ctsync/ctsync/internal/testutil"
)

func spreadBenchConfig(in *haInstance, consulAddr string, outs []string, burn int) string {
	var b strings.Builder
	b.WriteString(spreadHeader(in, consulAddr, "INFO", "bench"))
	for i, out := range outs {
		fmt.Fprintf(&b, `
task {
  name      = "task-%02d"
  module    = %q
  variables = { dir = %q, burn = %d }
  condition "services" {
    names = ["bench"]
  }
}
`, i, module("cpu_burn"), out, burn)
	}
	return b.String()
}

// procTreeCPU is the CPU seconds of a process and of the children it has
// waited for (utime, stime, cutime, cstime).
func procTreeCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	var ticks float64
	for _, i := range []int{11, 12, 13, 14} {
		v, _ := strconv.ParseFloat(f[i], 64)
		ticks += v
	}
	return ticks / 100 // USER_HZ
}

// requestKind groups a Consul request of the steady state.
func requestKind(k string) string {
	switch {
	case strings.HasPrefix(k, "PUT /v1/session/renew/"):
		return "session renew"
	case k == "PUT /v1/txn":
		return "txn"
	case strings.Contains(k, "/spread/"):
		return "spread folder read"
	case strings.Contains(k, "/bench/state"):
		return "state read"
	case strings.HasPrefix(k, "GET /v1/health/"), strings.HasPrefix(k, "GET /v1/catalog/"):
		return "catalog watch"
	}
	return k
}

func TestSpreadBench(t *testing.T) {
	benchEnabled(t)
	nTasks := envInt("CTSYNC_SPREAD_TASKS", 12)
	burn := envInt("CTSYNC_SPREAD_BURN", 50_000_000)
	rounds := envInt("CTSYNC_SPREAD_ROUNDS", 2)
	window := time.Duration(envInt("CTSYNC_SPREAD_WINDOW", 30)) * time.Second
	c := newHACluster(t)
	outs := make([]string, nTasks)
	names := make([]string, nTasks)
	for i := range outs {
		outs[i] = t.TempDir()
		names[i] = fmt.Sprintf("task-%02d", i)
	}
	for _, id := range []string{"cts-a", "cts-b", "cts-c"} {
		c.add(&haInstance{id: id}, func(in *haInstance) string { return spreadBenchConfig(in, c.consul.Addr, outs, burn) }).proxy.CountRequests()
	}
	live := func() []*haInstance {
		var out []*haInstance
		for _, in := range c.insts {
			if len(in.procs) == 0 {
				continue
			}
			select {
			case <-in.proc().done:
			default:
				out = append(out, in)
			}
		}
		return out
	}
	succeeded := func() (int, time.Time) {
		n, last := 0, time.Time{}
		for _, in := range c.insts {
			for _, p := range in.procs {
				for _, l := range haLines(p, ` task completed: `) {
					n++
					if l.at.After(last) {
						last = l.at
					}
				}
			}
		}
		return n, last
	}
	cpu := func() float64 {
		var s float64
		for _, in := range live() {
			s += procTreeCPU(in.proc().cmd.Process.Pid)
		}
		return s
	}
	// assigned waits until every live member shows the assignment that
	// weighted rendezvous hashing gives the live members.
	assigned := func(what string, timeout time.Duration) map[string]string {
		t.Helper()
		var cands []ha.Candidate
		for _, in := range live() {
			cands = append(cands, ha.Candidate{ID: in.id, Weight: 1})
		}
		want := ha.Assign(names, cands)
		testutil.Eventually(t, timeout, what, func() bool {
			for _, in := range live() {
				o, ok := spreadOwners(in.port, nTasks)
				if !ok || fmt.Sprint(o) != fmt.Sprint(want) {
					return false
				}
			}
			return true
		})
		return want
	}
	gen := 0
	register := func() {
		gen++
		c.register(fmt.Sprintf("bench-%d", gen), "bench", 10000+gen)
	}
	waitAll := func(timeout time.Duration) {
		t.Helper()
		want := fmt.Sprintf(`"bench-%d"`, gen)
		testutil.Eventually(t, timeout, fmt.Sprintf("all %d tasks applied bench-%d", nTasks, gen), func() bool {
			for _, out := range outs {
				b, _ := os.ReadFile(filepath.Join(out, "services.json"))
				if !strings.Contains(string(b), want) {
					return false
				}
			}
			return true
		})
	}

	register()
	c.insts[0].start(t)
	waitAll(20 * time.Minute)
	c.allIdle()

	var report []string
	report = append(report, "| N | largest share | change → all applied (s) | CPU s per apply | load (1 5 15) | Consul req/s measured | N(2+N)/H |",
		"|---|---|---|---|---|---|---|")
	for n := 1; n <= len(c.insts); n++ {
		if n > 1 {
			before, _ := succeeded()
			join := time.Now()
			c.insts[n-1].start(t)
			assigned(fmt.Sprintf("%s owning its share", c.insts[n-1].id), 120*time.Second)
			t.Logf("MEASURED join of member %d: start -> every member shows the new assignment: %s (load %s)", n, time.Since(join).Round(time.Millisecond), loadAvg())
			c.allIdle()
			if after, _ := succeeded(); after != before {
				t.Errorf("the join of member %d re-ran %d tasks", n, after-before)
			}
		}
		own := assigned("the assignment", 120*time.Second)
		shares := map[string]int{}
		for _, id := range own {
			shares[id]++
		}
		largest := 0
		for _, s := range shares {
			largest = max(largest, s)
		}
		var walls []time.Duration
		var cpus []float64
		loads := []string{}
		for range rounds {
			c.allIdle()
			before, _ := succeeded()
			cpu0 := cpu()
			load := loadAvg()
			register()
			t0 := time.Now()
			waitAll(20 * time.Minute)
			testutil.Eventually(t, 5*time.Minute, "every run recorded", func() bool {
				n, _ := succeeded()
				return n >= before+nTasks
			})
			c.allIdle()
			got, last := succeeded()
			if got != before+nTasks {
				t.Errorf("N=%d: %d applies for one change of %d tasks", n, got-before, nTasks)
			}
			per := (cpu() - cpu0) / float64(nTasks)
			walls = append(walls, last.Sub(t0))
			cpus = append(cpus, per)
			loads = append(loads, load)
			t.Logf("MEASURED N=%d T=%d shares %v: change -> all applied %s, %.2f CPU s per apply, load %s",
				n, nTasks, shares, last.Sub(t0).Round(time.Millisecond), per, load)
		}
		// Steady state: no change, every member idle; the window is the
		// measurement itself.
		c.allIdle()
		req0 := map[string]int{}
		for _, in := range live() {
			for k, v := range in.proxy.Requests() {
				req0[requestKind(k)] += v
			}
		}
		load := loadAvg()
		time.Sleep(window)
		kinds := map[string]int{}
		total := 0
		for _, in := range live() {
			for k, v := range in.proxy.Requests() {
				kinds[requestKind(k)] += v
			}
		}
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(kinds)) {
			d := kinds[k] - req0[k]
			if d == 0 {
				continue
			}
			total += d
			parts = append(parts, fmt.Sprintf("%s %.2f/s", k, float64(d)/window.Seconds()))
		}
		rate := float64(total) / window.Seconds()
		formula := float64(n*(2+n)) / (haTTL / 3).Seconds()
		t.Logf("MEASURED N=%d steady state over %s: %.2f Consul requests/s (%s); formula N(2+N)/H = %.2f; load %s",
			n, window, rate, strings.Join(parts, ", "), formula, load)
		report = append(report, fmt.Sprintf("| %d | %d of %d | %.1f | %.2f | %s | %.2f | %.2f |",
			n, largest, nTasks, median(walls).Seconds(), medianF(cpus), strings.Join(loads, " / "), rate, formula))
	}

	// Leave: SIGTERM of the last member; its tasks owned by the others.
	leaver := c.insts[len(c.insts)-1]
	sig := time.Now()
	if err := leaver.proc().cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := leaver.proc().wait(t, 60*time.Second); code != 0 {
		t.Fatalf("%s exited with %d", leaver.id, code)
	}
	assigned("the others owning the leaver's tasks", 60*time.Second)
	t.Logf("MEASURED leave (SIGTERM, idle) -> every member shows the new assignment: %s (load %s)", time.Since(sig).Round(time.Millisecond), loadAvg())
	t.Logf("spread bench, %s, %d CPUs, T=%d tasks of cpu_burn (burn %d), TTL %s:\n%s",
		time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), nTasks, burn, haTTL, strings.Join(report, "\n"))
}
