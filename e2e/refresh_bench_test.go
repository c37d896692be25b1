package e2e

// The refresh scenario of `make bench` (issue 39): how long a change of one
// instance takes to reach a slow device when the task's module manages N
// objects, with the refresh policy "always" (every run reads every object,
// as CTS) and "auto" (a catalog change is applied with -refresh=false), side
// by side in one daemon; then how an object deleted out of band is
// restored by the next drift check.
//
// The device is the device test provider (tools/device-provider, from the
// tools mirror: testutil.DeviceMirror), every read and write taking
// CTSYNC_REFRESH_DELAY (default 50ms), tasks at parallelism 10. Two
// services of N instances each (catalog transactions on external nodes);
// task "always" manages svc-0's, task "auto" svc-1's, one object per
// instance, in one device directory. A round changes the port of one
// instance of svc-0, waits until the device holds the new value and the
// run is recorded, then the same for svc-1: change -> applied is from the
// Consul write to the object's new value on the device (polled every 5 ms).
// Knobs:
//
//	CTSYNC_REFRESH_SIZES   instance counts N (default "400,2000")
//	CTSYNC_REFRESH_ROUNDS  rounds per N (default 3)
//	CTSYNC_REFRESH_DELAY   the device's read and write delay (default 50ms)
//	CTSYNC_REFRESH_DRIFT   drift check interval of the drift part (default 20s)
//	CTSYNC_BENCH_OUT       output folder (default docs/bench): refresh.csv
//
// Run: make bench-refresh, or
//
//	CTSYNC_BENCH=1 go test -run '^TestRefreshBench$' -v -timeout 60m ./e2e/

import (
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/testutil"
)

// refreshBenchModule makes one device object per instance, named by the
// instance's id.
const refreshBenchModule = `terraform {
  required_providers {
    device = { source = "ctsync/device" }
  }
}

variable "services" {}

resource "device_object" "instance" {
  for_each = var.services
  name     = each.value.id
  value    = "${each.value.address}:${each.value.port}"
}
`

// refreshRow is one measured change (or drift restore).
type refreshRow struct {
	instances int
	policy    string // always, auto, drift
	round     int
	applied   time.Duration // change (or deletion) -> the device holds the value
	run       time.Duration // the run's own duration (event), the drift check's for drift
	reads     int           // objects read by the run (its log)
	targeted  string        // the run's targeted note ("targeted 1 of 2,000 ...; full check: ..."), if it was
	load      string
}

// targetedNote is a run log's line saying the run was targeted, without
// its timestamp ("" when it was not).
func targetedNote(log string) string {
	i := strings.Index(log, "Z targeted ")
	if i < 0 {
		return ""
	}
	note, _, _ := strings.Cut(log[i+2:], "\n")
	return note
}

func refreshSizes(t *testing.T) []int {
	s := os.Getenv("CTSYNC_REFRESH_SIZES")
	if s == "" {
		return []int{400, 2000}
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			t.Fatalf("CTSYNC_REFRESH_SIZES: %q", s)
		}
		out = append(out, n)
	}
	return out
}

func TestRefreshBench(t *testing.T) {
	benchEnabled(t)
	skipShort(t)
	outDir := os.Getenv("CTSYNC_BENCH_OUT")
	if outDir == "" {
		outDir = filepath.Join(testutil.RepoRoot(), "docs", "bench")
	}
	delay := os.Getenv("CTSYNC_REFRESH_DELAY")
	if delay == "" {
		delay = "50ms"
	}
	drift := os.Getenv("CTSYNC_REFRESH_DRIFT")
	if drift == "" {
		drift = "20s"
	}
	rounds := envInt("CTSYNC_REFRESH_ROUNDS", 3)
	var rows []refreshRow
	for _, n := range refreshSizes(t) {
		t.Run(fmt.Sprintf("instances_%d", n), func(t *testing.T) {
			rows = append(rows, refreshBenchRun(t, n, rounds, delay, drift)...)
		})
	}
	writeRefreshBench(t, outDir, rows)
}

// refreshBenchRun measures one instance count.
func refreshBenchRun(t *testing.T, n, rounds int, delay, drift string) []refreshRow {
	c := testutil.StartConsul(t)
	loadCatalog(t, c, 2, n)
	work := t.TempDir()
	dev, mod := filepath.Join(work, "device"), filepath.Join(work, "module")
	for _, d := range []string{dev, mod} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, mod, "main.tf", refreshBenchModule)
	rc := testutil.DeviceCLIConfig(t, work)
	port := testutil.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	config := func(driftBlock string) string {
		var tasks strings.Builder
		for s, policy := range []string{"always", "auto"} {
			fmt.Fprintf(&tasks, `
task {
  name        = %q
  module      = %q
  providers   = ["device"]
  refresh     = %q
  parallelism = 10
  condition "services" {
    names = [%q]
  }
%s}
`, policy, mod, policy, serviceName(s), map[bool]string{true: driftBlock}[policy == "auto"])
		}
		return writeFile(t, work, "config.hcl", deviceConfig("INFO", work, port, c.Addr, dev, delay, tasks.String()))
	}
	start := func(cfg string) *proc {
		p := startCtsyncEnv(t, work, []string{"TF_CLI_CONFIG_FILE=" + rc}, "start", "-config-file", cfg)
		p.quiet = true
		return p
	}
	objects := func() int {
		ents, _ := os.ReadDir(dev)
		k := 0
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), ".") {
				k++
			}
		}
		return k
	}

	began := time.Now()
	p := start(config(""))
	deadline := time.Now().Add(testutil.Scale(30 * time.Minute))
	for objects() < 2*n {
		if time.Now().After(deadline) {
			t.Fatalf("initial applies: %d of %d objects\n%s", objects(), 2*n, p.out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, name := range []string{"always", "auto"} {
		waitEvents(t, base, name, 10*time.Minute, func(evs []store.Event) bool { return len(evs) > 0 && evs[0].Success })
	}
	t.Logf("%d instances: initial applies (2 x %d objects) took %s", n, n, time.Since(began).Round(time.Second))

	var rows []refreshRow
	logs := func(task, id string) string {
		b, _ := os.ReadFile(filepath.Join(work, "sync-tasks", task, "logs", id+".log"))
		return string(b)
	}
	for r := 0; r < rounds; r++ {
		for s, policy := range []string{"always", "auto"} {
			i := (r * 7) % n
			id := instanceID(s, i)
			newPort := 20000 + r
			before := len(taskEvents(t, base, policy))
			t0 := time.Now()
			ops := instanceOps(s, i, api.HealthPassing)
			ops[0].Service.Service.Port = newPort
			if ok, resp, _, err := c.Client.Txn().Txn(ops, nil); err != nil || !ok {
				t.Fatalf("change: %v %+v", err, resp)
			}
			file := filepath.Join(dev, id)
			want := fmt.Sprintf(":%d", newPort)
			deadline := time.Now().Add(testutil.Scale(20 * time.Minute))
			for {
				if b, err := os.ReadFile(file); err == nil && strings.HasSuffix(string(b), want) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: %s never got port %d", policy, id, newPort)
				}
				time.Sleep(5 * time.Millisecond)
			}
			applied := time.Since(t0)
			evs := waitEvents(t, base, policy, 20*time.Minute, func(evs []store.Event) bool {
				return len(evs) > before && evs[0].Kind == "apply" && evs[0].EndTime.After(t0)
			})
			ev := evs[0]
			if !ev.Success {
				t.Fatalf("%s: run %s failed: %s", policy, ev.ID, ev.ErrorSummary)
			}
			log := logs(policy, ev.ID)
			row := refreshRow{instances: n, policy: policy, round: r, applied: applied, run: ev.EndTime.Sub(ev.StartTime),
				reads: reads(log), targeted: targetedNote(log), load: loadAvg()}
			t.Logf("%d instances, %s, round %d: change -> applied %.2f s, run %.2f s, %d objects read, %s (load %s)",
				n, policy, r, row.applied.Seconds(), row.run.Seconds(), row.reads, map[bool]string{true: "not targeted", false: row.targeted}[row.targeted == ""], row.load)
			rows = append(rows, row)
			if policy == "auto" {
				// A second change right after the first is applied,
				// before the first's full check; then the check, waited
				// for so that the next round runs alone.
				second, check := secondChange(t, c, base, dev, logs, n, r, s, (i+1)%n, 30000+r)
				rows = append(rows, second, check)
			}
		}
	}

	// Drift: the daemon again, with drift checks on task "auto" (a
	// restart runs nothing: the desired state is unchanged). One object
	// deleted out of band, timed until the device holds it again.
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(t, 2*time.Minute)
	p = start(config(fmt.Sprintf("  drift_detection {\n    interval  = %q\n    remediate = true\n  }\n", drift)))
	waitEvents(t, base, "auto", 10*time.Minute, func(evs []store.Event) bool { return len(evs) > 0 })
	id := instanceID(1, n/2)
	file := filepath.Join(dev, id)
	value, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	before := len(taskEvents(t, base, "auto"))
	t0 := time.Now()
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(testutil.Scale(20 * time.Minute))
	for {
		if b, err := os.ReadFile(file); err == nil && string(b) == string(value) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("drift: %s not restored\n%s", id, p.out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	restored := time.Since(t0)
	evs := waitEvents(t, base, "auto", 20*time.Minute, func(evs []store.Event) bool {
		return len(evs) >= before+2 && evs[0].Kind == "apply" && evs[0].EndTime.After(t0)
	})
	row := refreshRow{instances: n, policy: "drift", applied: restored, load: loadAvg()}
	for _, ev := range evs[:len(evs)-before] {
		if ev.Kind == "drift" {
			row.run = ev.EndTime.Sub(ev.StartTime)
		}
	}
	row.reads = reads(logs("auto", evs[0].ID))
	t.Logf("%d instances, drift (checks every %s): deleted -> restored %.2f s; the drift check's plan %.2f s; the remediation read %d objects (load %s)",
		n, drift, restored.Seconds(), row.run.Seconds(), row.reads, row.load)
	return append(rows, row)
}

// secondChange measures, for task "auto", a change of instance i of
// service s made as soon as the round's first change is on the device:
// change -> applied ("auto-second"), and then the full check the task
// runs afterwards ("auto-check": from the second change to the check's
// end, and the check's own run time).
func secondChange(t *testing.T, c *testutil.Consul, base, dev string, logs func(task, id string) string, n, round, s, i, newPort int) (refreshRow, refreshRow) {
	t.Helper()
	id := instanceID(s, i)
	t0 := time.Now()
	ops := instanceOps(s, i, api.HealthPassing)
	ops[0].Service.Service.Port = newPort
	if ok, resp, _, err := c.Client.Txn().Txn(ops, nil); err != nil || !ok {
		t.Fatalf("second change: %v %+v", err, resp)
	}
	file, want := filepath.Join(dev, id), fmt.Sprintf(":%d", newPort)
	deadline := time.Now().Add(testutil.Scale(20 * time.Minute))
	for {
		if b, err := os.ReadFile(file); err == nil && strings.HasSuffix(string(b), want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("auto: %s never got port %d", id, newPort)
		}
		time.Sleep(5 * time.Millisecond)
	}
	applied := time.Since(t0)
	var run, check store.Event
	waitEvents(t, base, "auto", 20*time.Minute, func(evs []store.Event) bool {
		run, check = store.Event{}, store.Event{}
		for _, ev := range evs {
			switch {
			case ev.Kind != "apply" || !ev.StartTime.After(t0):
			case ev.Trigger == "check" && check.ID == "":
				check = ev
			case ev.Trigger != "check":
				run = ev
			}
		}
		return run.ID != "" && check.ID != "" && check.StartTime.After(run.StartTime)
	})
	if !run.Success || !check.Success {
		t.Fatalf("auto: second change %s (%v) or check %s (%v) failed", run.ID, run.Success, check.ID, check.Success)
	}
	log, clog := logs("auto", run.ID), logs("auto", check.ID)
	second := refreshRow{instances: n, policy: "auto-second", round: round, applied: applied, run: run.EndTime.Sub(run.StartTime),
		reads: reads(log), targeted: targetedNote(log), load: loadAvg()}
	done := refreshRow{instances: n, policy: "auto-check", round: round, applied: check.EndTime.Sub(t0), run: check.EndTime.Sub(check.StartTime),
		reads: reads(clog), targeted: checkNote(clog), load: loadAvg()}
	t.Logf("%d instances, auto, round %d: second change -> applied %.2f s (run %.2f s, %s); its check ended %.2f s after the change, run %.2f s, %s (load %s)",
		n, round, second.applied.Seconds(), second.run.Seconds(), second.targeted, done.applied.Seconds(), done.run.Seconds(), done.targeted, done.load)
	return second, done
}

// checkNote is a check run's note ("full check: ..."), without its
// timestamp.
func checkNote(log string) string {
	i := strings.LastIndex(log, "Z full check: ")
	if i < 0 {
		return ""
	}
	note, _, _ := strings.Cut(log[i+2:], "\n")
	return note
}

// writeRefreshBench writes refresh.csv and logs the table of medians with
// the slope per 1,000 instances.
func writeRefreshBench(t *testing.T, dir string, rows []refreshRow) {
	if len(rows) == 0 {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "refresh.csv"))
	if err != nil {
		t.Fatal(err)
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"instances", "policy", "round", "change_to_applied_s", "run_s", "objects_read", "targeted", "load"})
	for _, r := range rows {
		_ = w.Write([]string{strconv.Itoa(r.instances), r.policy, strconv.Itoa(r.round), fmt.Sprintf("%.3f", r.applied.Seconds()),
			fmt.Sprintf("%.3f", r.run.Seconds()), strconv.Itoa(r.reads), r.targeted, r.load})
	}
	w.Flush()
	f.Close()

	host, _ := os.Hostname()
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %s, %d CPUs, %s\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), host, runtime.NumCPU(), terraformVersion())
	med := map[string]map[int]time.Duration{"always": {}, "auto": {}}
	var ns []int
	med["auto-second"] = map[int]time.Duration{}
	for _, policy := range []string{"always", "auto", "auto-second"} {
		byN := map[int][]time.Duration{}
		for _, r := range rows {
			if r.policy == policy {
				byN[r.instances] = append(byN[r.instances], r.applied)
			}
		}
		for n, d := range byN {
			med[policy][n] = median(d)
			if !slices.Contains(ns, n) {
				ns = append(ns, n)
			}
		}
	}
	slices.Sort(ns)
	b.WriteString("| instances | always (median) | auto (median) | auto / always | auto, second change (median) |\n|---|---|---|---|---|\n")
	for _, n := range ns {
		a, u := med["always"][n], med["auto"][n]
		fmt.Fprintf(&b, "| %d | %.2f s | %.2f s | %.3f | %.2f s |\n", n, a.Seconds(), u.Seconds(), u.Seconds()/a.Seconds(), med["auto-second"][n].Seconds())
	}
	if len(ns) >= 2 {
		lo, hi := ns[0], ns[len(ns)-1]
		for _, policy := range []string{"always", "auto"} {
			slope := (med[policy][hi] - med[policy][lo]).Seconds() / float64(hi-lo) * 1000
			fmt.Fprintf(&b, "slope %s: %.3f s per 1,000 instances\n", policy, slope)
		}
	}
	t.Logf("refresh benchmark (%s):\n%s", filepath.Join(dir, "refresh.csv"), b.String())
}
