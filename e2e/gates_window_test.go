package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/testutil"
)

// rulesOf names the rule files web-from..web-10, as waitRules wants them
// (sorted).
func rulesOf(from int) string {
	var ids []string
	for n := from; n <= 10; n++ {
		ids = append(ids, fmt.Sprintf("web-%d", n))
	}
	slices.Sort(ids)
	return strings.Join(ids, ",")
}

// The trickle of issue 37 with the real daemon, Consul and Terraform: ten
// instances leave one at a time, each removal applied before the next, with
// max_destroy_percent = 50 and the default window (1h). Judged alone each
// plan destroys 1 of n and would apply down to the last; with the window the
// 6th is held (6 of 10 within the window), its reason and the window's
// counts served. The window is kept in the store: a restart of the daemon in
// the middle of the trickle (bbolt, working_dir) does not reset it.
func TestGateWindowHoldsTheTrickle(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	dir, varFile := newTaskDir(t)
	registerWeb(t, c, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	g := startGated(t, c, gateTask("web", varFile, `
  approval {
    max_destroy_percent = 50
  }`))
	waitRules(t, dir, rulesOf(1)) // adds only
	g.waitQuiet("web")
	for n := 1; n <= 5; n++ {
		deregister(t, c, fmt.Sprintf("web-%d", n))
		waitRules(t, dir, rulesOf(n+1))
		g.waitQuiet("web")
		if n == 3 { // the window survives a restart
			must(t, g.p.cmd.Process.Signal(syscall.SIGTERM))
			if code := g.p.wait(t, 60*time.Second); code != 0 {
				t.Fatalf("exit %d after SIGTERM", code)
			}
			g.p = startCtsync(t, g.work, "start", "-config-file", g.cfg)
			g.waitUp()
			g.waitQuiet("web")
		}
	}
	if code, p, _ := g.plan("web"); code == http.StatusOK && p.State == gate.Pending {
		t.Fatalf("a plan held before the 6th removal: %+v", p)
	}
	deregister(t, c, "web-6")
	const reason = "6 of 10"
	p := g.waitPlanUnless("web", "the 6th removal held by the window", func(p gate.Plan) bool {
		return p.State == gate.Pending
	}, rulesChanged(dir, rulesOf(6)))
	if p.Rule != gate.RuleMaxDestroyPercent || p.Window == nil || p.Window.Destroyed != 5 || p.Window.HighWater != 10 || p.Destroy != 1 ||
		!strings.Contains(p.Reason, reason) {
		t.Fatalf("held plan %+v (window %+v): want max_destroy_percent, 5 destroyed before of 10, reason naming %q", p, p.Window, reason)
	}
	expectRules(t, dir, rulesOf(6), "while the 6th removal is held")
	if code, body := g.decide("web", p.ID, "approve", gateWriteSecret); code != http.StatusOK {
		t.Fatalf("approve: %d %s", code, body)
	}
	waitRules(t, dir, rulesOf(7))
}

// The window is kept in Consul KV under high availability: two removals
// applied one at a time on the leader (1 of 4, then 2 of 4 within the
// window: let through), the leader is killed, and the third removal — 1 of
// 2 alone, let through were the window lost — is held by the new leader
// with the destroys the old one applied (3 of 4).
func TestGateWindowKeptOverFailover(t *testing.T) {
	skipShort(t)
	c, dir, leader := startGatedHACluster(t, "")
	c.deregister("web-4")
	waitRules(t, dir, "web-1,web-2,web-3")
	waitIdle(t, leader)
	c.deregister("web-3")
	waitRules(t, dir, "web-1,web-2")
	waitIdle(t, leader)

	kill := time.Now()
	must(t, leader.proc().cmd.Process.Kill())
	leader.kills = append(leader.kills, kill)
	next, _ := c.leaderSince(kill, 60*time.Second)
	if next == leader {
		t.Fatalf("the killed leader %s leads again", leader.id)
	}
	waitIdle(t, next)
	c.deregister("web-2")
	api2 := gateAPI{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", next.port)}
	p := api2.waitPlanUnless("web-task", "the 3rd removal held by the window", func(p gate.Plan) bool {
		return p.State == gate.Pending
	}, rulesChanged(dir, "web-1,web-2"))
	if p.Rule != gate.RuleMaxDestroyPercent || p.Window == nil || p.Window.Destroyed != 2 || p.Window.HighWater != 4 || p.Destroy != 1 {
		t.Fatalf("the new leader's held plan %+v (window %+v): want the 2 destroyed before of 4", p, p.Window)
	}
	expectRules(t, dir, "web-1,web-2", "while the 3rd removal is held")
	if code, body := api2.decide("web-task", p.ID, "approve", ""); code != http.StatusOK {
		t.Fatalf("approve on the new leader: %d %s", code, body)
	}
	waitRules(t, dir, "web-1")
	waitIdle(t, next)
	c.noOverlap()
}
