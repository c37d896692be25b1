package e2e

// Spread mode under faults in the middle of applies, with the heartbeat
// fixture module (ha_faults_test.go): every task appends
// "<instance id> <unix ns>" to its own heartbeat file every 250 ms while it
// applies. An owner is cut from Consul, SIGKILLed, SIGTERMed, and a member
// joins, each while tasks are applying; the heartbeats of one task must
// never come from two instances at overlapping times.

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// spreadBeats is how many heartbeats an apply of the spread fault test
// writes (every 250 ms: 12 s of side effects).
const spreadBeats = 48

// spreadHeartbeatConfig is spreadConfig with the heartbeat module: task-i
// writes its services into outs[i] and its heartbeats into
// outs[i]/heartbeats.
func spreadHeartbeatConfig(in *haInstance, consulAddr string, outs []string) string {
	var b strings.Builder
	b.WriteString(spreadHeader(in, consulAddr, "DEBUG", "e2e"))
	for i, out := range outs {
		fmt.Fprintf(&b, `
task {
  name      = "task-%d"
  module    = %q
  variables = { dir = %q, heartbeats = %q, beats = %d }
  condition "services" {
    names = ["svc-%d"]
  }
}
`, i, module("heartbeat"), out, filepath.Join(out, "heartbeats"), spreadBeats, i)
	}
	return b.String()
}

// Spread mode with 3 (then 2, 1, 2) real instances and 6 tasks of the
// heartbeat module, each fault made while the victim is applying:
//
//  1. partition: the owner's link to Consul is cut. It stops running its
//     tasks (its last side effect) before any other member takes one over,
//     which happens within the failover bound; the tasks converge. The link
//     heals and it gets its share back.
//  2. SIGKILL of an owner (its Terraform and provisioner shells are killed
//     by its fence watchdog; the new owner clears the state lock).
//  3. SIGTERM of an owner: it finishes its runs and hands its tasks over.
//  4. two members join while the last one applies every task.
//
// After each, every task converges to the catalog, and no task's
// heartbeats ever come from two instances at once.
func TestSpreadFaultsHeartbeat(t *testing.T) {
	skipShort(t)
	c := newHACluster(t)
	outs := make([]string, spreadTasks)
	hbs := make([]string, spreadTasks)
	for i := range outs {
		outs[i] = t.TempDir()
		hbs[i] = filepath.Join(outs[i], "heartbeats")
	}
	for _, id := range []string{"cts-a", "cts-b", "cts-c", "cts-d"} {
		c.add(&haInstance{id: id}, func(in *haInstance) string { return spreadHeartbeatConfig(in, c.consul.Addr, outs) })
	}
	measure := func(k string, d time.Duration) { t.Logf("MEASURED %-58s %s", k, d.Round(time.Millisecond)) }
	byID := map[string]*haInstance{}
	for _, in := range c.insts {
		byID[in.id] = in
	}
	alive := func(in *haInstance) bool {
		if len(in.procs) == 0 {
			return false
		}
		select {
		case <-in.proc().done:
			return false
		default:
			return true
		}
	}
	// owners waits until every live member names an owner for every task,
	// the same everywhere, each of them live, and returns it.
	owners := func(what string) map[string]string {
		t.Helper()
		var o map[string]string
		testutil.Eventually(t, 90*time.Second, what, func() bool {
			o = nil
			for _, in := range c.insts {
				if !alive(in) {
					continue
				}
				got, ok := spreadOwners(in.port, spreadTasks)
				if !ok || (o != nil && fmt.Sprint(got) != fmt.Sprint(o)) {
					return false
				}
				o = got
			}
			for _, id := range o {
				if !alive(byID[id]) {
					return false
				}
			}
			return o != nil
		})
		return o
	}
	// idle waits until no live member linked to Consul has a run in
	// progress (a cut one is not asked: it runs nothing).
	idle := func() {
		t.Helper()
		for _, in := range c.insts {
			if alive(in) && !in.proxy.IsCut() {
				waitIdle(t, in)
			}
		}
	}
	tasksOf := func(o map[string]string, id string) []int {
		var out []int
		for i := range spreadTasks {
			if o[fmt.Sprintf("task-%d", i)] == id {
				out = append(out, i)
			}
		}
		return out
	}
	gen := 1
	catalog := func(i int) string {
		var ids []string
		for g := 1; g <= gen; g++ {
			ids = append(ids, fmt.Sprintf("svc-%d-%d", i, g))
		}
		return strings.Join(ids, ",")
	}
	// change registers one more instance of every task's service.
	change := func() {
		gen++
		for i := range spreadTasks {
			c.register(fmt.Sprintf("svc-%d-%d", i, gen), fmt.Sprintf("svc-%d", i), 9000+100*gen+i)
		}
	}
	converge := func(fault string, since time.Time) {
		t.Helper()
		var last time.Time
		for i := range spreadTasks {
			last = waitFile(t, outs[i], catalog(i), 180*time.Second)
		}
		measure(fault+": fault -> every task converged", last.Sub(since))
	}
	// waitApplying waits for a heartbeat of in in any of the tasks, after
	// the counts in from, and returns the task.
	beatCounts := func() []int {
		n := make([]int, spreadTasks)
		for i := range n {
			n[i] = len(readBeats(hbs[i]))
		}
		return n
	}
	waitApplying := func(in *haInstance, tasks []int, from []int) int {
		t.Helper()
		got := -1
		testutil.Eventually(t, 90*time.Second, in.id+" applying one of its tasks", func() bool {
			for _, i := range tasks {
				for _, b := range readBeats(hbs[i])[min(from[i], len(readBeats(hbs[i]))):] {
					if b.id == in.id {
						got = i
						return true
					}
				}
			}
			return false
		})
		return got
	}
	// checkBeats fails when two instances' heartbeats of one task
	// interleave, and reports each hand-over after since.
	checkBeats := func(fault string, since time.Time) {
		t.Helper()
		for i, hb := range hbs {
			for _, s := range beatSwitches(readBeats(hb)) {
				if s.next.Sub(s.last) < 300*time.Millisecond {
					t.Errorf("%s: task-%d: %s beat at %s and %s at %s: two instances applying it at once", fault, i,
						s.from, s.last.Format(time.StampMilli), s.to, s.next.Format(time.StampMilli))
				}
				if s.next.After(since) {
					measure(fmt.Sprintf("%s: task-%d %s's last side effect -> %s's first", fault, i, s.from, s.to), s.next.Sub(s.last))
				}
			}
		}
	}
	// firstLine returns the time of the first log line of in matching subs at or after
	// since (zero when none).
	firstLine := func(in *haInstance, since time.Time, subs ...string) time.Time {
		for _, p := range in.procs {
			for _, l := range haLines(p, subs...) {
				if !l.at.Before(since) {
					return l.at
				}
			}
		}
		return time.Time{}
	}

	for i := range spreadTasks {
		c.register(fmt.Sprintf("svc-%d-1", i), fmt.Sprintf("svc-%d", i), 9100+i)
	}
	for _, in := range c.insts[:3] {
		in.start(t)
	}
	start := time.Now()
	converge("start", start)
	own := owners("every member showing every task's owner")
	t.Logf("owners: %v", own)
	idle()

	// 1. Partition of an owner in the middle of an apply.
	part := byID[own["task-0"]]
	partTasks := tasksOf(own, part.id)
	from := beatCounts()
	change()
	busy := waitApplying(part, partTasks, from)
	cut := time.Now()
	part.proxy.Cut()
	t.Logf("cut %s (owner of %v) while it applies task-%d", part.id, partTasks, busy)
	var took time.Time // the first takeover of one of its tasks by another member
	testutil.Eventually(t, 60*time.Second, "the partitioned owner's tasks taken over", func() bool {
		for _, i := range partTasks {
			for _, in := range c.insts {
				if in != part && alive(in) {
					at := firstLine(in, cut, ` ha: owning task: `, "how=takeover", fmt.Sprintf(" task_name=task-%d ", i))
					if !at.IsZero() && (took.IsZero() || at.Before(took)) {
						took = at
					}
				}
			}
		}
		return !took.IsZero()
	})
	stopped := firstLine(part, cut, ` ha: stopped running tasks: `)
	if stopped.IsZero() || !stopped.Before(took) {
		t.Fatalf("the partitioned %s did not stop running its tasks (at %s) before another member took one over at %s",
			part.id, stopped.Format(time.StampMilli), took.Format(time.StampMilli))
	}
	measure("partition: cut -> the owner stops running its tasks", stopped.Sub(cut))
	measure("partition: cut -> first takeover by another member", took.Sub(cut))
	// The failover bound: the others expel it T after the last heartbeat
	// they saw (at most the cut), then take its keys over.
	if d := took.Sub(cut); d > haTTL+3*time.Second {
		t.Errorf("takeover %s after the cut, want <= TTL (%s) + 3 s", d, haTTL)
	}
	// Its side effects ended before anyone took a task over: its last
	// heartbeat of any task is before the first takeover.
	for _, i := range partTasks {
		bs := readBeats(hbs[i])
		for j := len(bs) - 1; j >= 0; j-- {
			if bs[j].id == part.id {
				if !bs[j].at.Before(took) {
					t.Errorf("task-%d: the partitioned %s beat at %s, after the takeover at %s", i, part.id,
						bs[j].at.Format(time.StampMilli), took.Format(time.StampMilli))
				}
				if bs[j].at.After(cut) {
					measure(fmt.Sprintf("partition: cut -> %s's last side effect of task-%d", part.id, i), bs[j].at.Sub(cut))
				}
				break
			}
		}
	}
	converge("partition", cut)
	idle()
	checkBeats("partition", cut)
	part.proxy.Restore()
	healed := time.Now()
	// Its own view is stale until it has read the folder again: wait until
	// it has locked a key since, and every member agrees.
	testutil.Eventually(t, 90*time.Second, part.id+" owning tasks again after the link healed", func() bool {
		if firstLine(part, healed, ` ha: owning task: `).IsZero() {
			return false
		}
		var o map[string]string
		for _, in := range c.insts {
			if !alive(in) {
				continue
			}
			got, ok := spreadOwners(in.port, spreadTasks)
			if !ok || (o != nil && fmt.Sprint(got) != fmt.Sprint(o)) {
				return false
			}
			o = got
		}
		return len(tasksOf(o, part.id)) > 0
	})
	measure("partition: healed -> owns tasks again", time.Since(healed))
	own = owners("owners agreed after the partition")
	idle()

	// 2. SIGKILL of an owner in the middle of an apply.
	var kill *haInstance
	for _, id := range own {
		if id != part.id {
			kill = byID[id]
			break
		}
	}
	from = beatCounts()
	change()
	waitApplying(kill, tasksOf(own, kill.id), from)
	killed := time.Now()
	if err := kill.proc().cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	kill.kills = append(kill.kills, killed)
	change() // applied by the new owners only (the killed member's Terraform had the previous catalog)
	converge("SIGKILL", killed)
	own = owners("owners agreed after the SIGKILL")
	idle()
	checkBeats("SIGKILL", killed)

	// 3. SIGTERM of an owner in the middle of an apply: its runs finish,
	// then its tasks move.
	var term *haInstance
	for _, id := range own {
		term = byID[id]
		break
	}
	from = beatCounts()
	change()
	waitApplying(term, tasksOf(own, term.id), from)
	sig := time.Now()
	if err := term.proc().cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	change()
	if code := term.proc().wait(t, 90*time.Second); code != 0 {
		t.Fatalf("%s exited with %d after SIGTERM", term.id, code)
	}
	measure("SIGTERM: signal -> exited (its runs finished, tasks released)", time.Since(sig))
	converge("SIGTERM", sig)
	own = owners("owners agreed after the SIGTERM")
	idle()
	checkBeats("SIGTERM", sig)

	// 4. Join: one member is left, applying every task; the SIGKILLed
	// instance comes back and a new one starts. The tasks they take that
	// were running move once their run ends.
	var last *haInstance
	for _, id := range own {
		last = byID[id]
	}
	from = beatCounts()
	change()
	waitApplying(last, tasksOf(own, last.id), from)
	joined := time.Now()
	kill.start(t)
	c.insts[3].start(t)
	change()
	testutil.Eventually(t, 90*time.Second, "the joining instances owning tasks", func() bool {
		o, ok := spreadOwners(last.port, spreadTasks)
		return ok && len(tasksOf(o, kill.id)) > 0 && len(tasksOf(o, c.insts[3].id)) > 0
	})
	measure("join: start -> both new members own tasks", time.Since(joined))
	converge("join", joined)
	owners("owners agreed after the join")
	idle()
	checkBeats("join", joined)

	c.noOverlapPerTask()
	n := 0
	for _, hb := range hbs {
		n += len(readBeats(hb))
	}
	t.Logf("%d heartbeats over %d tasks", n, spreadTasks)
	for _, in := range c.insts {
		for _, p := range in.procs {
			if strings.Contains(p.out.String(), "panic") {
				t.Fatalf("%s panicked", in.id)
			}
		}
	}
}
