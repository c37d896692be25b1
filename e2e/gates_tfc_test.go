package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	tfe "github.com/hashicorp/go-tfe"

	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/testutil"
)

// startGatedTFC starts OTF (running the remote runs with the real
// terraform binary), Consul with web-1 registered and a daemon whose task
// "web" (driver "terraform-cloud") has approval { required = true }, and
// waits for the plan of its first run to be held, failing at once if it is
// applied instead. It returns the daemon's API, the OTF client, the
// workspace's state reader and the held plan.
func startGatedTFC(t *testing.T) (gateAPI, *testutil.OTF, *tfe.Client, func() string, gate.Plan) {
	t.Helper()
	g, o, tc, state, p, _ := startGatedTFCDaemon(t)
	return g, o, tc, state, p
}

// startGatedTFCDaemon is startGatedTFC, also returning a function that
// stops the daemon (SIGTERM) and starts it again over the same working
// directory, returning the new process.
func startGatedTFCDaemon(t *testing.T) (gateAPI, *testutil.OTF, *tfe.Client, func() string, gate.Plan, func() *proc) {
	t.Helper()
	o := testutil.StartOTF(t)
	c := testutil.StartConsul(t)
	tc := o.Client(t)
	dir := t.TempDir()
	port := testutil.FreePort(t)
	cfg := strings.Replace(tfcConfig(o, c.Addr, filepath.Join(dir, "sync"), port, o.Organization, o.Token),
		"  condition \"services\" {", "  approval {\n    required = true\n  }\n  condition \"services\" {", 1)
	cfgFile := writeFile(t, dir, "c.hcl", cfg)
	c.RegisterService(t, &api.AgentServiceRegistration{ID: "web-1", Name: "web", Address: "10.0.0.1", Port: 80}, "passing")
	pr := startCtsync(t, dir, "start", "-config-file", cfgFile)
	restart := func() *proc {
		t.Helper()
		must(t, pr.cmd.Process.Signal(syscall.SIGTERM))
		if code := pr.wait(t, 60*time.Second); code != 0 {
			t.Fatalf("exit %d after SIGTERM", code)
		}
		pr = startCtsync(t, dir, "start", "-config-file", cfgFile)
		return pr
	}
	g := gateAPI{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	g.waitUp()
	state := func() string { return tfcState(t, tc, o.Organization, "cts-web") }
	p := g.waitPendingUnless("web", "approval required", func() string {
		if s := state(); s != "<none>" && s != "<no workspace>" {
			return "applied instead of held: state " + s
		}
		return ""
	})
	return g, o, tc, state, p, restart
}

// A held plan with driver "terraform-cloud" over a restart: the record
// keeps the workspace's unconfirmed run, so the restarted daemon holds the
// same plan, queues no other run, and approving it confirms that run.
func TestGateTFCRestartConfirmsTheSameRun(t *testing.T) {
	skipShort(t)
	g, o, tc, state, p, restart := startGatedTFCDaemon(t)
	runs := func() []*tfe.Run { return tfcRuns(t, tc, o.Organization, "cts-web") }
	before := runs()
	if len(before) != 1 || before[0].Status != tfe.RunPlanned {
		t.Fatalf("the workspace's runs before the restart: %d, want the one held run", len(before))
	}
	pr := restart()
	pr.waitOutput(t, 60*time.Second, "held plan restored from the store", "plan="+p.ID, "driver_plan_kept=true")
	again := g.waitPendingUnless("web", "approval required", func() string {
		if s := state(); s != "<none>" && s != "<no workspace>" {
			return "applied instead of held: state " + s
		}
		return ""
	})
	if again.ID != p.ID {
		t.Fatalf("the plan held after the restart %s, want %s", again.ID, p.ID)
	}
	if code, body := g.decide("web", p.ID, "approve", ""); code != http.StatusOK {
		t.Fatalf("approve after the restart: %d %s", code, body)
	}
	testutil.Eventually(t, 90*time.Second, "the approved run applied", func() bool { return state() == "none:web-1" })
	after := runs()
	if len(after) != 1 || after[0].ID != before[0].ID {
		t.Fatalf("the workspace has %d runs after the approval, want the held run %s alone", len(after), before[0].ID)
	}
}

// The safety gates with driver "terraform-cloud": approval { required =
// true } holds the workspace's run unconfirmed, nothing is applied;
// approving it confirms exactly that run, which applies.
func TestGateTFCApprove(t *testing.T) {
	skipShort(t)
	g, _, _, state, p := startGatedTFC(t)
	if p.Add != 1 || !strings.Contains(p.Text, "terraform_data.ids") {
		t.Errorf("held plan %+v: want 1 to add, the plan's log naming terraform_data.ids", p)
	}
	if s := state(); s != "<none>" && s != "<no workspace>" {
		t.Fatalf("state %q while the plan is held", s)
	}
	if code, body := g.decide("web", p.ID, "approve", ""); code != http.StatusOK {
		t.Fatalf("approve: %d %s", code, body)
	}
	testutil.Eventually(t, 90*time.Second, "the approved run applied", func() bool { return state() == "none:web-1" })
	if code, cur, _ := g.plan("web"); code == http.StatusOK && cur.State == gate.Pending {
		t.Fatalf("a plan is still pending after the approval: %+v", cur)
	}
}

// The reject path with driver "terraform-cloud": the held plan is the
// workspace's own run, planned but unconfirmed; rejecting it discards that
// run and leaves the workspace without state.
func TestGateTFCRejectDiscardsRun(t *testing.T) {
	skipShort(t)
	g, o, tc, state, p := startGatedTFC(t)
	// latestRun is the workspace's newest run.
	latestRun := func() *tfe.Run {
		ws, err := tc.Workspaces.Read(context.Background(), o.Organization, "cts-web")
		if err != nil {
			return nil
		}
		rl, err := tc.Runs.List(context.Background(), ws.ID, nil)
		if err != nil || len(rl.Items) == 0 {
			return nil
		}
		newest := rl.Items[0]
		for _, r := range rl.Items {
			if r.CreatedAt.After(newest.CreatedAt) {
				newest = r
			}
		}
		return newest
	}
	if r := latestRun(); r == nil || r.Status != tfe.RunPlanned {
		t.Fatalf("the held plan's remote run is %+v, want one in status planned (unconfirmed)", r)
	}
	if code, body := g.decide("web", p.ID, "reject", ""); code != http.StatusOK {
		t.Fatalf("reject: %d %s", code, body)
	}
	testutil.Eventually(t, 60*time.Second, "the rejected plan's run discarded", func() bool {
		r := latestRun()
		return r != nil && r.Status == tfe.RunDiscarded
	})
	if s := state(); s != "<none>" {
		t.Fatalf("state %q after reject, want none", s)
	}
}
