package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tfe "github.com/hashicorp/go-tfe"

	"github.com/ctsync/ctsync/internal/testutil"
)

// tfcHATTL is the session TTL of the terraform-cloud HA test: Consul's
// minimum, so that the takeover comes while the remote run still applies.
const tfcHATTL = 10 * time.Second

// tfcSlowSleep is how long the first apply of the slow module takes: well
// beyond the takeover (TTL + lock-delay after the kill).
const tfcSlowSleep = 30

func tfcHAConfig(in *haInstance, o *testutil.OTF, consulAddr string) string {
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
    name = "tfc"
    storage "consul" {
      session_ttl = %q
    }
  }
  instance {
    address = "127.0.0.1"
  }
}
driver "terraform-cloud" {
  hostname     = %q
  organization = %q
  token        = %q
  workspaces {
    prefix = "cts-"
  }
}
task {
  name      = "web"
  module    = %q
  variables = {
    sleep = "%d"
  }
  condition "services" {
    names = ["web"]
  }
}
`, in.id, in.port, filepath.Join(in.work, "sync"), consulAddr, tfcHATTL.String(), o.URL, o.Organization, o.Token,
		filepath.Join(testutil.RepoRoot(), "internal", "driver", "tfc", "testdata", "slow"), tfcSlowSleep)
}

// tfcEvent is the part of an event the terraform-cloud tests look at.
type tfcEvent struct {
	ID        string `json:"id"`
	Success   bool   `json:"success"`
	Kind      string `json:"kind"`
	Trigger   string `json:"trigger"`
	TFCRunURL string `json:"tfc_run_url"`
	Plan      *struct {
		Add     int `json:"add"`
		Change  int `json:"change"`
		Destroy int `json:"destroy"`
	} `json:"plan"`
}

func tfcEvents(port int, taskName string) []tfcEvent {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/tasks/%s/events", port, taskName))
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var body struct {
		Events []tfcEvent `json:"events"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil {
		return nil
	}
	return body.Events
}

// tfcRuns lists the workspace's runs through the TFE API, newest first.
func tfcRuns(t *testing.T, c *tfe.Client, org, name string) []*tfe.Run {
	t.Helper()
	ctx := context.Background()
	ws, err := c.Workspaces.Read(ctx, org, name)
	if err != nil {
		return nil
	}
	list, err := c.Runs.List(ctx, ws.ID, &tfe.RunListOptions{ListOptions: tfe.ListOptions{PageSize: 100}})
	if err != nil {
		t.Fatalf("runs of %s: %v", name, err)
	}
	return list.Items
}

// Two ctsync instances in HA on the terraform-cloud driver. The leader's
// remote run is applying (a provisioner sleeps) when the leader is
// SIGKILLed; the new leader finds that run through the run record in
// Consul KV, waits for it, and records its outcome: the workspace has
// exactly one run for the change. A later change runs normally.
func TestTFCFailoverAdoptsRemoteRun(t *testing.T) {
	skipShort(t)
	o := testutil.StartOTF(t)
	tc := o.Client(t)
	c := newHACluster(t)
	for _, id := range []string{"tfc-a", "tfc-b"} {
		in := &haInstance{id: id, port: testutil.FreePort(t), work: t.TempDir()}
		in.cfg = writeFile(t, in.work, "config.hcl", tfcHAConfig(in, o, c.consul.Addr))
		c.insts = append(c.insts, in)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("CTSYNC_HA_LOGS") != "" {
			t.Logf("==== otfd ====\n%s", o.Logs())
		}
	})
	runs := func() []*tfe.Run { return tfcRuns(t, tc, o.Organization, "cts-web") }

	c.register("web-1", "web", 8001)
	start := time.Now()
	for _, in := range c.insts {
		in.start(t)
	}
	leader, _ := c.leaderSince(start, 60*time.Second)

	// The leader's run applies (its provisioner sleeps).
	var first *tfe.Run
	testutil.Eventually(t, 90*time.Second, "the leader's remote run applying", func() bool {
		rs := runs()
		if len(rs) == 1 && rs[0].Status == tfe.RunApplying {
			first = rs[0]
			return true
		}
		return false
	})
	if n := len(haLines(leader.proc(), ` queued a remote run: `, "run_id="+first.ID)); n != 1 {
		t.Fatalf("the leader logged %d queued runs with id %s", n, first.ID)
	}
	kill := time.Now()
	if err := leader.proc().cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	leader.kills = append(leader.kills, kill)
	next, at := c.leaderSince(kill, 60*time.Second)
	if next == leader {
		t.Fatalf("%s leads again", leader.id)
	}
	t.Logf("MEASURED SIGKILL -> new leader: %s", at.Sub(kill).Round(100*time.Millisecond))

	// The new leader waits for the old leader's run instead of queuing
	// its own (or, on a machine so slow that the 30 s apply ended before
	// the new leader looked, takes its result).
	testutil.Eventually(t, 60*time.Second, "the new leader adopting the recorded run", func() bool {
		if len(haLines(next.proc(), ` waiting for the run recorded for this configuration instead of queuing another: `, "run_id="+first.ID)) > 0 {
			return true
		}
		if len(haLines(next.proc(), ` the run recorded for this configuration has already ended`, "run_id="+first.ID)) > 0 {
			t.Logf("the recorded run had ended when the new leader looked")
			return true
		}
		return false
	})
	var ev tfcEvent
	testutil.Eventually(t, 90*time.Second, "the new leader recording the adopted run", func() bool {
		for _, e := range tfcEvents(next.port, "web") {
			if e.Kind == "apply" && e.Success {
				ev = e
				return true
			}
		}
		return false
	})
	adopted := time.Now()
	if !strings.HasSuffix(ev.TFCRunURL, "/runs/"+first.ID) || ev.Trigger != "failover" {
		t.Errorf("the new leader's event: %+v, want run %s, trigger failover", ev, first.ID)
	}
	rs := runs()
	if len(rs) != 1 || rs[0].ID != first.ID || rs[0].Status != tfe.RunApplied {
		ids := []string{}
		for _, r := range rs {
			ids = append(ids, r.ID+" "+string(r.Status))
		}
		t.Fatalf("workspace runs after the failover: %q, want exactly %s applied", ids, first.ID)
	}
	if got := tfcState(t, tc, o.Organization, "cts-web"); got != "slow:web-1" {
		t.Fatalf("state %q", got)
	}
	if n := len(haLines(next.proc(), ` queued a remote run: `)); n != 0 {
		t.Fatalf("the new leader queued %d runs for the change", n)
	}
	t.Logf("MEASURED kill -> adopted run's outcome recorded by the new leader: %s", adopted.Sub(kill).Round(100*time.Millisecond))

	// Business as usual afterwards: a change is one new run.
	c.register("web-2", "web", 8002)
	testutil.Eventually(t, 90*time.Second, "the next change applied", func() bool {
		return tfcState(t, tc, o.Organization, "cts-web") == "slow:web-1,web-2"
	})
	testutil.Eventually(t, 30*time.Second, "its run recorded", func() bool {
		n := 0
		for _, e := range tfcEvents(next.port, "web") {
			if e.Kind == "apply" && e.Success {
				n++
			}
		}
		return n == 2
	})
	if rs := runs(); len(rs) != 2 {
		t.Fatalf("%d runs after one more change, want 2", len(rs))
	}
}
