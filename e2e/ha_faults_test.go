package e2e

// Faults of an HA cluster in the middle of an apply whose side effect is
// spread over time: the heartbeat fixture module appends
// "<instance id> <unix ns>" to one shared file every 250 ms while it
// applies. Two instances must never beat at overlapping times, and every
// fault must end with the task converged to the catalog without a further
// change.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// beat is one heartbeat line of the fixture module.
type beat struct {
	id string
	at time.Time
}

func readBeats(path string) []beat {
	b, _ := os.ReadFile(path)
	var out []beat
	for _, l := range strings.Split(string(b), "\n") {
		id, ns, ok := strings.Cut(strings.TrimSpace(l), " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(ns, 10, 64)
		if err != nil {
			continue
		}
		out = append(out, beat{id, time.Unix(0, n)})
	}
	slices.SortFunc(out, func(a, b beat) int { return a.at.Compare(b.at) })
	return out
}

// beatSwitch is a hand-over in the heartbeat file: the last beat of one
// instance before the first beat of another.
type beatSwitch struct {
	from, to   string
	last, next time.Time
}

// beatSwitches returns every change of instance in the time-sorted beats.
// Two instances applying at once would show as switches only ~0-250 ms
// apart, back and forth.
func beatSwitches(bs []beat) []beatSwitch {
	var out []beatSwitch
	for i := 1; i < len(bs); i++ {
		if bs[i].id != bs[i-1].id {
			out = append(out, beatSwitch{bs[i-1].id, bs[i].id, bs[i-1].at, bs[i].at})
		}
	}
	return out
}

// waitBeat waits for a heartbeat of id after the first n beats of the file
// and returns the beat count then.
func waitBeat(t *testing.T, path, id string, n int, timeout time.Duration) int {
	t.Helper()
	var got int
	testutil.Eventually(t, timeout, id+" applying (a heartbeat)", func() bool {
		bs := readBeats(path)
		got = len(bs)
		for _, b := range bs[min(n, len(bs)):] {
			if b.id == id {
				return true
			}
		}
		return false
	})
	return got
}

func (c *haCluster) other(in *haInstance) *haInstance {
	for _, o := range c.insts {
		if o != in {
			return o
		}
	}
	return nil
}

// Two instances, default TTL, the heartbeat module (12 s of side effects
// per apply). The leader loses its link to Consul (bytes dropped,
// connections left open) in the middle of an apply; then the new leader is
// SIGSTOPped for 3 x TTL in the middle of an apply (its watchdog kills its
// Terraform) and continued; then Consul restarts (and forgets everything) in
// the middle of an apply. After each fault the task converges, and no
// instance's heartbeat is ever interleaved with another's.
func TestHAFaultsMidApply(t *testing.T) {
	skipShort(t)
	c := newHACluster(t)
	out := t.TempDir()
	hb := filepath.Join(out, "heartbeats")
	varFile := writeFile(t, out, "task.tfvars", fmt.Sprintf("dir = %q\nheartbeats = %q\nbeats = 48\n", out, hb))
	for _, id := range []string{"cts-a", "cts-b"} {
		c.add(&haInstance{id: id, mod: "heartbeat"}, func(in *haInstance) string { return haConfig(in, varFile) })
	}
	measure := func(k string, d time.Duration) { t.Logf("MEASURED %-52s %s", k, d.Round(time.Millisecond)) }
	// checkBeats fails on interleaved heartbeats and reports the gap at
	// each hand-over after since.
	checkBeats := func(fault string, since time.Time) {
		t.Helper()
		for _, s := range beatSwitches(readBeats(hb)) {
			if s.next.Sub(s.last) < 300*time.Millisecond {
				t.Errorf("%s: %s beat at %s and %s at %s: two instances applying at once", fault,
					s.from, s.last.Format(time.StampMilli), s.to, s.next.Format(time.StampMilli))
			}
			if s.next.After(since) {
				measure(fault+": old leader's last side effect -> new one's first", s.next.Sub(s.last))
			}
		}
	}
	registered := []string{}
	register := func(id string) {
		c.register(id, "web", 8000+int(id[4]-'0'))
		registered = append(registered, id)
	}

	register("web-1")
	for _, in := range c.insts {
		in.start(t)
	}
	leader := c.leading(60 * time.Second)
	waitFile(t, out, "web-1", 120*time.Second)

	// 1. Blackhole: the leader's bytes to and from Consul are dropped.
	waitIdle(t, leader)
	n := len(readBeats(hb))
	register("web-2")
	waitBeat(t, hb, leader.id, n, 60*time.Second)
	cut := time.Now()
	leader.proxy.Drop()
	next, at := c.leaderSince(cut, 60*time.Second)
	if next == leader {
		t.Fatalf("the partitioned leader %s acquired again", leader.id)
	}
	measure("drop: cut -> new leader acquired", at.Sub(cut))
	done := waitFile(t, out, "web-1,web-2", 120*time.Second)
	measure("drop: cut -> converged", done.Sub(cut))
	checkBeats("drop", cut)
	leader.proxy.Restore()
	if l := c.leading(30 * time.Second); l != next {
		t.Fatalf("after the link healed %s leads, want %s", l.id, next.id)
	}
	leader = next

	// 2. SIGSTOP of the leader for 3 x TTL during an apply. Its fence
	// watchdog kills its Terraform within the kill bound; the other
	// instance takes over, runs the task again (clearing the dead
	// Terraform's state lock), and applies a change made meanwhile;
	// SIGCONT: the old leader finds it lost the lead and follows.
	waitIdle(t, leader)
	n = len(readBeats(hb))
	register("web-3")
	waitBeat(t, hb, leader.id, n, 60*time.Second)
	stop := time.Now()
	if err := leader.proc().cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	next, at = c.leaderSince(stop, 60*time.Second)
	if next == leader {
		t.Fatalf("the stopped leader %s acquired again", leader.id)
	}
	measure("sigstop: stop -> new leader acquired", at.Sub(stop))
	register("web-4")
	done = waitFile(t, out, "web-1,web-2,web-3,web-4", 120*time.Second)
	measure("sigstop: stop -> converged", done.Sub(stop))
	// The fault lasts 3 x TTL: this sleep is the pause itself.
	time.Sleep(time.Until(stop.Add(3 * haTTL)))
	if err := leader.proc().cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	cont := time.Now()
	leader.proc().waitOutput(t, 30*time.Second, ` ha: lost leadership: `)
	if l := c.leading(30 * time.Second); l != next {
		t.Fatalf("after SIGCONT %s leads, want %s", l.id, next.id)
	}
	if ls := haLines(leader.proc(), ` ha: acquired leadership: `); len(ls) > 0 && ls[len(ls)-1].at.After(cont) {
		t.Fatalf("%s acquired the lead after SIGCONT", leader.id)
	}
	checkBeats("sigstop", stop)
	// The stopped leader's watchdog killed its Terraform (and the
	// provisioner's shell) the kill bound after the stop, not at the end of
	// its 12 s of side effects.
	var lastStopped time.Time
	for _, bt := range readBeats(hb) {
		if bt.id == leader.id && bt.at.After(stop) {
			lastStopped = bt.at
		}
	}
	if !lastStopped.IsZero() {
		measure("sigstop: stop -> stopped leader's last side effect", lastStopped.Sub(stop))
		if kill := (haTTL - haTTL/2) / 2; lastStopped.Sub(stop) > kill+2*time.Second {
			t.Errorf("the stopped leader beat %s after the stop, want its watchdog to kill it within the kill bound (%s) + 2 s",
				lastStopped.Sub(stop).Round(time.Millisecond), kill)
		}
	}
	leader = next

	// 3. Consul restarts mid-apply and forgets everything (a dev agent):
	// sessions, the lock, the Terraform state, the catalog.
	waitIdle(t, leader)
	n = len(readBeats(hb))
	register("web-5")
	waitBeat(t, hb, leader.id, n, 60*time.Second)
	restarted := time.Now()
	c.consul.Restart()
	for _, id := range registered {
		c.register(id, "web", 8000+int(id[4]-'0'))
	}
	_, at = c.leaderSince(restarted, 60*time.Second)
	measure("consul restart: restart -> leader acquired", at.Sub(restarted))
	done = waitFile(t, out, "web-1,web-2,web-3,web-4,web-5", 120*time.Second)
	measure("consul restart: restart -> converged", done.Sub(restarted))
	c.leading(30 * time.Second)
	checkBeats("consul restart", restarted)
	t.Logf("%d heartbeats, %d hand-overs", len(readBeats(hb)), len(beatSwitches(readBeats(hb))))
	for _, in := range c.insts {
		for _, p := range in.procs {
			if strings.Contains(p.out.String(), "panic") {
				t.Fatalf("%s panicked", in.id)
			}
		}
	}
}
