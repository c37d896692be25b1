package e2e

// The soak's checkers (soak_test.go): pure functions over what the soak
// recorded (side-effect records, catalog versions, faults, events), so that
// they are tested on their own (TestSoakCheckers) and a violation they
// report can be reproduced from the recorded data.

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/stat"
)

// soakRecord is one line of the soak module's side-effect log:
// "beat|done <instance> <task> <run> <digest> <unix ns>".
type soakRecord struct {
	kind, inst, task, run, digest string
	at                            time.Time
}

func parseSoakRecords(b []byte) []soakRecord {
	var out []soakRecord
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) != 6 || (f[0] != "beat" && f[0] != "done") {
			continue
		}
		ns, err := strconv.ParseInt(f[5], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, soakRecord{f[0], f[1], f[2], f[3], f[4], time.Unix(0, ns)})
	}
	slices.SortStableFunc(out, func(a, b soakRecord) int { return a.at.Compare(b.at) })
	return out
}

func readSoakRecords(path string) []soakRecord {
	b, _ := os.ReadFile(path)
	return parseSoakRecords(b)
}

// soakRun is one apply's side effects: from its first heartbeat to its
// "done" record (or its last heartbeat, when it never finished).
type soakRun struct {
	task, inst, run, digest string
	start, end              time.Time
	done                    bool
}

// soakRuns groups the records by apply, in order of start.
func soakRuns(recs []soakRecord) []soakRun {
	idx := map[string]int{}
	var out []soakRun
	for _, r := range recs {
		k := r.task + "/" + r.run
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, soakRun{task: r.task, inst: r.inst, run: r.run, digest: r.digest, start: r.at, end: r.at})
		}
		if r.at.After(out[i].end) {
			out[i].end = r.at
		}
		if r.kind == "done" {
			out[i].done = true
		}
	}
	slices.SortStableFunc(out, func(a, b soakRun) int { return a.start.Compare(b.start) })
	return out
}

// soakViolation is a broken invariant, at the time it shows. known names
// the documented daemon limitation it is an instance of (empty: none); see
// SOAK_KNOWN.
type soakViolation struct {
	at    time.Time
	what  string
	known string
}

// soakConsulDownMidApply is the documented case of docs/reliability.md
// ("Not covered yet"): Consul, the state backend, goes away while a run
// applies, after the module's side effects happened; the owner or leader
// steps down and its fence stops Terraform before it could save the state
// (SIGINT, then SIGKILL within the kill bound). The run is reported failed,
// which it is in Terraform's terms (no state saved), and the next run
// applies again. A run Terraform finished all the same is reported applied
// and is not this case.
const soakConsulDownMidApply = "consul-down-mid-apply"

// soakOverlaps: no two applies of one task have side effects at the same
// time (whichever members run them).
func soakOverlaps(runs []soakRun) []soakViolation {
	var out []soakViolation
	last := map[string]soakRun{} // the run of each task that ends last so far
	for _, r := range runs {
		p, ok := last[r.task]
		if ok && r.start.Before(p.end) {
			out = append(out, soakViolation{at: r.start, what: fmt.Sprintf("%s: apply %s on %s [%s, %s] overlaps apply %s on %s [%s, %s]",
				r.task, p.run, p.inst, p.start.Format(soakStamp), p.end.Format(soakStamp),
				r.run, r.inst, r.start.Format(soakStamp), r.end.Format(soakStamp))})
		}
		if !ok || r.end.After(p.end) {
			last[r.task] = r
		}
	}
	return out
}

const soakStamp = "15:04:05.000"

// soakDigest is what the soak module writes as a catalog version: the md5
// of the sorted service IDs joined by ",".
func soakDigest(ids []string) string {
	s := slices.Clone(ids)
	slices.Sort(s)
	h := md5.Sum([]byte(strings.Join(s, ",")))
	return hex.EncodeToString(h[:])
}

// soakVersion is one catalog version of a task's service, as Consul
// answered it: from when it was seen until the next one (to is zero while
// it stands).
type soakVersion struct {
	task, digest, ids string
	from, to          time.Time
}

// soakFault is one injected fault, from its start to its end (an instant
// one ends when it starts).
type soakFault struct {
	kind, target, detail string
	from, to             time.Time
}

// soakLost: every catalog version that stood longer than the bound reached
// its task: the task's applied version (the digest of its last "done"
// record) was that version at some time between the version's start and
// its end plus the bound. A version that stood while a fault was in
// progress gets faultBound instead. Versions shorter than their bound may
// be superseded. It also returns the convergence times: version seen ->
// the first apply of it finished.
func soakLost(versions []soakVersion, runs []soakRun, faults []soakFault, bound, faultBound time.Duration, end time.Time) ([]soakViolation, []time.Duration) {
	done := map[string][]soakRun{}
	for _, r := range runs {
		if r.done {
			done[r.task] = append(done[r.task], r)
		}
	}
	for _, rs := range done {
		slices.SortFunc(rs, func(a, b soakRun) int { return a.end.Compare(b.end) })
	}
	var out []soakViolation
	var conv []time.Duration
	for _, v := range versions {
		to := v.to
		if to.IsZero() {
			to = end
		}
		b := bound
		for _, f := range faults {
			if f.from.Before(v.from.Add(bound)) && !f.to.Before(v.from.Add(-bound)) {
				b = faultBound
				break
			}
		}
		rs := done[v.task]
		reached := false
		// Already applied when it appeared (it came back to the applied one).
		var applied string
		for _, r := range rs {
			if r.end.After(v.from) {
				break
			}
			applied = r.digest
		}
		if applied == v.digest {
			reached = true
		}
		for _, r := range rs {
			if r.end.After(v.from) && r.digest == v.digest && !r.end.After(to.Add(b)) {
				if !reached {
					conv = append(conv, r.end.Sub(v.from))
				}
				reached = true
				break
			}
		}
		if !reached && to.Sub(v.from) >= b && end.Sub(v.from) >= b {
			out = append(out, soakViolation{at: v.from, what: fmt.Sprintf("%s: catalog version [%s] stood %s (from %s), longer than the bound %s, and was never applied",
				v.task, v.ids, to.Sub(v.from).Round(time.Millisecond), v.from.Format(soakStamp), b)})
		}
	}
	return out, conv
}

// soakEvent is the part of a run event the soak looks at.
type soakEvent struct {
	ID        string    `json:"id"`
	TaskName  string    `json:"task_name"`
	Success   bool      `json:"success"`
	StartTime time.Time `json:"start_time"`
	EndTime   time.Time `json:"end_time"`
	Error     *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// soakAppliedAndFailed: no run is reported failed whose apply finished
// inside it (a "done" record of the task between the event's start and
// end, from an apply that started inside it). One during which Consul
// restarted is marked as the known limitation soakConsulDownMidApply.
func soakAppliedAndFailed(events []soakEvent, runs []soakRun, faults []soakFault) []soakViolation {
	var out []soakViolation
	for _, ev := range events {
		if ev.Success || ev.StartTime.IsZero() || ev.EndTime.IsZero() {
			continue
		}
		for _, r := range runs {
			if r.task == ev.TaskName && r.done && !r.start.Before(ev.StartTime) && !r.end.After(ev.EndTime) {
				msg := ""
				if ev.Error != nil {
					msg = ev.Error.Message
				}
				known := ""
				for _, f := range faults {
					// Only the fence's interrupt of a Terraform that had not
					// finished (it would have been reported applied) during a
					// Consul restart is the documented case.
					if f.kind == fConsul && f.from.Before(ev.EndTime) && f.to.After(ev.StartTime) && strings.Contains(msg, "stopped leading") {
						known = soakConsulDownMidApply
					}
				}
				out = append(out, soakViolation{at: ev.EndTime, what: fmt.Sprintf("%s: event %s reported failed (%q) but apply %s on %s finished inside it at %s",
					ev.TaskName, ev.ID, msg, r.run, r.inst, r.end.Format(soakStamp)), known: known})
			}
		}
	}
	return out
}

// soakSample is one reading of a member process's resources.
type soakSample struct {
	at         time.Time
	rss        float64 // MiB
	heap       float64 // MiB of Go heap in use (go_memstats_heap_inuse_bytes); -1 when /metrics did not answer
	fds        int
	goroutines int // -1 when /metrics did not answer
	owned      int // tasks the member ran then (spread: owned, leader: all or none); -1 unknown
}

// soakSlopeBounds are the growth allowed per minute over a process's life
// after its warm-up (documented in docs/reliability.md). Each resource is
// taken as its minimum over each minute (the floor between runs: a run in
// progress holds pipes, goroutines and memory), and a least-squares line is
// fitted to those minima. Only processes that lived minWindow after the
// warm-up are judged: over a few minutes the heap (and the race
// detector's shadow memory) is still growing to its working size.
//
// The memory bound applies to the RSS of a process built without the race
// detector (the witness), and to the Go heap in use of a -race build: the
// race detector's own memory, outside the Go heap, grows in a long-running
// process and is not returned (golang/go#37233; Go's race detector
// documentation: its allocations "will not show up in the output of
// runtime.ReadMemStats"), so a -race build's RSS is reported, not judged.
var soakSlopeBounds = struct {
	rss, goroutines, fds float64
	warmup, minWindow    time.Duration
}{rss: 1.5, goroutines: 0.5, fds: 0.5, warmup: 2 * time.Minute, minWindow: 8 * time.Minute}

// soakSlope is the growth per minute of each resource over a process's
// life after its warm-up, and the window it covers (ok: long enough to
// judge).
//
// Goroutines and open files follow the number of tasks a member runs (each
// owned task has its lease, its driver, its watches), which the faults move
// from member to member; gor and fds are their slopes on time at equal
// load: a least-squares fit of the per-minute minima on time and on the
// tasks the member ran at each minimum (rawGor, rawFds: on time alone).
type soakSlope struct {
	rss, heap, gor, fds float64
	rawGor, rawFds      float64
	window              time.Duration
	ok                  bool
}

// soakFitAtLoad fits y = a + b·x + c·load by least squares and returns b,
// the slope on x at equal load; with a load that does not vary (or cannot
// be told apart from x) it is the slope on x alone.
func soakFitAtLoad(x, load, y []float64) float64 {
	_, alone := stat.LinearRegression(x, y, nil, false)
	if len(y) < 4 || stat.Variance(load, nil) == 0 {
		return alone
	}
	a := mat.NewDense(len(y), 3, nil)
	for i := range y {
		a.Set(i, 0, 1)
		a.Set(i, 1, x[i])
		a.Set(i, 2, load[i])
	}
	var qr mat.QR
	qr.Factorize(a)
	if c := mat.Cond(a, 2); math.IsInf(c, 1) || c > 1e12 {
		return alone
	}
	var beta mat.Dense
	if err := qr.SolveTo(&beta, false, mat.NewDense(len(y), 1, y)); err != nil {
		return alone
	}
	return beta.At(1, 0)
}

// soakSlopes returns the slopes (per minute) of the per-minute minima of
// RSS, Go heap, goroutines and file descriptors after the warm-up, the
// window they cover, and whether it is long enough to judge.
func soakSlopes(s []soakSample) soakSlope {
	if len(s) == 0 {
		return soakSlope{}
	}
	t0 := s[0].at.Add(soakSlopeBounds.warmup)
	type minute struct{ rss, heap, gor, fds, gorLoad, fdsLoad float64 }
	mins := map[int]*minute{}
	var keys []int
	var out soakSlope
	for _, v := range s {
		if v.at.Before(t0) {
			continue
		}
		k := int(v.at.Sub(t0) / time.Minute)
		m, seen := mins[k]
		if !seen {
			m = &minute{rss: math.Inf(1), heap: math.Inf(1), gor: math.Inf(1), fds: math.Inf(1), gorLoad: -1, fdsLoad: -1}
			mins[k] = m
			keys = append(keys, k)
		}
		m.rss = min(m.rss, v.rss)
		if float64(v.fds) < m.fds {
			m.fds, m.fdsLoad = float64(v.fds), float64(v.owned)
		}
		if v.goroutines >= 0 && float64(v.goroutines) < m.gor {
			m.gor, m.gorLoad = float64(v.goroutines), float64(v.owned)
		}
		if v.heap >= 0 {
			m.heap = min(m.heap, v.heap)
		}
		out.window = v.at.Sub(t0)
	}
	if len(keys) < 2 {
		return out
	}
	// slope fits a line through the minutes where get has a value.
	slope := func(get func(*minute) float64) float64 {
		var x, y []float64
		for _, k := range keys {
			if v := get(mins[k]); !math.IsInf(v, 1) {
				x, y = append(x, float64(k)), append(y, v)
			}
		}
		if len(x) < 2 {
			return 0
		}
		_, b := stat.LinearRegression(x, y, nil, false)
		return b
	}
	out.rss = slope(func(m *minute) float64 { return m.rss })
	out.heap = slope(func(m *minute) float64 { return m.heap })
	out.rawGor = slope(func(m *minute) float64 { return m.gor })
	out.rawFds = slope(func(m *minute) float64 { return m.fds })
	// atLoad is the slope on time at equal load, over the minutes where
	// get and its load are known.
	atLoad := func(get, load func(*minute) float64) float64 {
		var x, l, y []float64
		for _, k := range keys {
			m := mins[k]
			if v := get(m); !math.IsInf(v, 1) && load(m) >= 0 {
				x, l, y = append(x, float64(k)), append(l, load(m)), append(y, v)
			}
		}
		if len(x) < 2 {
			return 0
		}
		return soakFitAtLoad(x, l, y)
	}
	out.gor = atLoad(func(m *minute) float64 { return m.gor }, func(m *minute) float64 { return m.gorLoad })
	out.fds = atLoad(func(m *minute) float64 { return m.fds }, func(m *minute) float64 { return m.fdsLoad })
	out.ok = out.window >= soakSlopeBounds.minWindow
	return out
}

// soakPercentile is the p-th percentile (nearest rank) of ds.
func soakPercentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// The checkers on made-up data: each invariant holds on a clean history
// and is reported broken on one that breaks it.
func TestSoakCheckers(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	line := func(kind, inst, task, run, dg string, s float64) string {
		return fmt.Sprintf("%s %s %s %s %s %d", kind, inst, task, run, dg, at(s).UnixNano())
	}
	a, b := soakDigest([]string{"x-2", "x-1"}), soakDigest([]string{"x-1"})
	if a != soakDigest([]string{"x-1", "x-2"}) {
		t.Fatal("digest depends on order")
	}
	log := strings.Join([]string{
		line("beat", "cts-a", "task-0", "r1", a, 1), line("beat", "cts-a", "task-0", "r1", a, 1.25), line("done", "cts-a", "task-0", "r1", a, 2),
		line("beat", "cts-b", "task-0", "r2", b, 5), "garbage line", line("done", "cts-b", "task-0", "r2", b, 6),
		line("beat", "cts-c", "task-1", "r3", a, 1.5),
	}, "\n")
	runs := soakRuns(parseSoakRecords([]byte(log)))
	if len(runs) != 3 || !runs[0].done || runs[0].end != at(2) || runs[1].run != "r3" || runs[1].done {
		t.Fatalf("runs: %+v", runs)
	}
	if v := soakOverlaps(runs); len(v) != 0 {
		t.Fatalf("overlap on a clean history: %v", v)
	}
	bad := soakRuns(parseSoakRecords([]byte(log + "\n" + line("beat", "cts-c", "task-0", "r4", b, 1.8))))
	if v := soakOverlaps(bad); len(v) != 1 || !strings.Contains(v[0].what, "r4 on cts-c") {
		t.Fatalf("overlap not found: %v", v)
	}

	vs := []soakVersion{{task: "task-0", digest: a, from: at(0.5), to: at(4)}, {task: "task-0", digest: b, from: at(4)}}
	lost, conv := soakLost(vs, runs, nil, 3*time.Second, 20*time.Second, at(10))
	if len(lost) != 0 || len(conv) != 2 || conv[0] != 1500*time.Millisecond {
		t.Fatalf("lost %v conv %v", lost, conv)
	}
	c := soakDigest([]string{"x-3"})
	vs = append(vs[:1], soakVersion{task: "task-0", digest: b, from: at(4), to: at(4.5)}, soakVersion{task: "task-0", digest: c, from: at(4.5)})
	lost, _ = soakLost(vs, runs, nil, 3*time.Second, 20*time.Second, at(10))
	if len(lost) != 1 || !strings.Contains(lost[0].what, "never applied") {
		t.Fatalf("a version standing 5.5 s and never applied: %v", lost)
	}
	// During a fault the bound is the longer one.
	lost, _ = soakLost(vs, runs, []soakFault{{kind: "sigkill", from: at(4), to: at(6)}}, 3*time.Second, 20*time.Second, at(10))
	if len(lost) != 0 {
		t.Fatalf("a fault's bound not used: %v", lost)
	}

	evs := []soakEvent{{ID: "e1", TaskName: "task-0", Success: false, StartTime: at(0.9), EndTime: at(2.1)}}
	if v := soakAppliedAndFailed(evs, runs, nil); len(v) != 1 || v[0].known != "" {
		t.Fatalf("applied and failed not found: %v", v)
	}
	restart := []soakFault{{kind: fConsul, from: at(1.5), to: at(8)}}
	if v := soakAppliedAndFailed(evs, runs, restart); len(v) != 1 || v[0].known != "" {
		t.Fatalf("any failure during a Consul restart taken as the documented case: %v", v)
	}
	evs[0].Error = &struct {
		Message string `json:"message"`
	}{"apply: interrupted: this instance stopped leading"}
	if v := soakAppliedAndFailed(evs, runs, restart); len(v) != 1 || v[0].known != soakConsulDownMidApply {
		t.Fatalf("the fence stopping Terraform during a Consul restart is the documented case: %v", v)
	}
	evs[0].Error = nil
	evs[0].Success = true
	if v := soakAppliedAndFailed(evs, runs, nil); len(v) != 0 {
		t.Fatal(v)
	}

	// 20 minutes, a sample every 10 s: RSS grows 6 MiB/min, the fds are
	// 12 between runs and 20 during one (every third sample).
	var samples []soakSample
	for i := range 120 {
		fd := 12
		if i%3 == 0 {
			fd = 20
		}
		samples = append(samples, soakSample{at: at(float64(i * 10)), rss: 50 + float64(i), heap: 8 + float64(i)/6, fds: fd, goroutines: 30, owned: -1})
	}
	sl := soakSlopes(samples)
	if !sl.ok || math.Abs(sl.rss-6) > 0.01 || math.Abs(sl.heap-1) > 0.01 || sl.gor != 0 || sl.fds != 0 || sl.window < 17*time.Minute {
		t.Fatalf("slopes %+v", sl)
	}
	// Goroutines that follow the tasks a member runs (+2 per task, the
	// member running 3 tasks, then 6, then 8) are flat at equal load; the
	// same with +1 goroutine a minute is not.
	load := make([]soakSample, 120)
	for i := range load {
		owned := 3
		if i >= 40 && i < 80 {
			owned = 6
		} else if i >= 80 {
			owned = 8
		}
		load[i] = soakSample{at: at(float64(i * 10)), rss: 50, heap: 8, fds: 20 + owned, goroutines: 40 + 2*owned, owned: owned}
	}
	if sl := soakSlopes(load); math.Abs(sl.gor) > 0.01 || math.Abs(sl.fds) > 0.01 || sl.rawGor < 0.5 {
		t.Fatalf("resources that follow the load: %+v", sl)
	}
	for i := range load {
		load[i].goroutines += i / 6
	}
	if sl := soakSlopes(load); math.Abs(sl.gor-1) > 0.05 {
		t.Fatalf("goroutines growing 1/min at equal load: %+v", sl)
	}
	if soakSlopes(samples[:60]).ok {
		t.Fatal("10 minutes with a 2-minute warm-up judged")
	}
	if p := soakPercentile([]time.Duration{3, 1, 2, 4}, 50); p != 2 {
		t.Fatalf("p50 %v", p)
	}
}
