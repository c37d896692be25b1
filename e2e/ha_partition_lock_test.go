package e2e

// A task's owner cut from Consul in the middle of an apply, in leader mode
// and in spread mode: the new owner's first apply must start within
// 2 x session TTL of the cut, although the cut owner's Terraform (whose
// backend address is the cut owner's link too) could not release its state
// lock; and the two owners' side effects must never overlap.

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// partTTL is the session TTL of the partition tests (the 10 s,
// Consul's minimum).
const partTTL = 10 * time.Second

// partConfig is an instance's configuration: Consul through its own fault
// proxy, and Terraform's consul backend through it too (the default backend
// takes ctsync's Consul address), one task of the heartbeat module.
func partConfig(in *haInstance, spread bool, out string) string {
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
    name         = "e2e"
    spread_tasks = %t
    storage "consul" {
      session_ttl = %q
    }
  }
  instance {
    address = "127.0.0.1"
  }
}

task {
  name      = "task-0"
  module    = %q
  variables = { dir = %q, heartbeats = %q, beats = 48 }
  condition "services" {
    names = ["web"]
  }
}
`, in.id, in.port, filepath.Join(in.work, "sync-tasks"), in.proxy.Addr, spread, partTTL.String(),
		module("heartbeat"), out, filepath.Join(out, "heartbeats"))
}

func TestHAPartitionStateLock(t *testing.T) {
	skipShort(t)
	t.Run("leader", func(t *testing.T) { testPartitionStateLock(t, false) })
	t.Run("spread", func(t *testing.T) { testPartitionStateLock(t, true) })
}

func testPartitionStateLock(t *testing.T, spread bool) {
	c := newHACluster(t)
	out := t.TempDir()
	hb := filepath.Join(out, "heartbeats")
	a := c.add(&haInstance{id: "cts-a"}, func(in *haInstance) string { return partConfig(in, spread, out) })
	b := c.add(&haInstance{id: "cts-b"}, func(in *haInstance) string { return partConfig(in, spread, out) })
	measure := func(k string, d time.Duration) { t.Logf("MEASURED %-50s %s", k, d.Round(time.Millisecond)) }
	n := 0
	var ids []string
	register := func() string {
		n++
		id := fmt.Sprintf("web-%d", n)
		c.register(id, "web", 8000+n)
		ids = append(ids, id)
		return strings.Join(ids, ",")
	}
	// runner is the instance that runs the task now: the leader, or the
	// task's owner as every live member sees it.
	runner := func() *haInstance {
		t.Helper()
		if !spread {
			return c.leading(60 * time.Second)
		}
		var who *haInstance
		testutil.Eventually(t, 60*time.Second, "both members naming the task's owner", func() bool {
			oa, ok1 := spreadOwners(a.port, 1)
			ob, ok2 := spreadOwners(b.port, 1)
			if !ok1 || !ok2 || oa["task-0"] != ob["task-0"] {
				return false
			}
			for _, in := range c.insts {
				if in.id == oa["task-0"] {
					who = in
				}
			}
			return who != nil
		})
		return who
	}
	stop := func(in *haInstance) {
		t.Helper()
		if err := in.proc().cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := in.proc().wait(t, 60*time.Second); code != 0 {
			t.Fatalf("%s exited with %d after SIGTERM", in.id, code)
		}
	}

	// Warm-up: both instances run the task once, so that the measured
	// failover does not include a first `terraform init`.
	want := register()
	a.start(t)
	waitFile(t, out, want, 120*time.Second)
	b.start(t)
	waitIdle(t, runner())
	stop(a)
	want = register()
	waitBeat(t, hb, b.id, 0, 120*time.Second)
	waitFile(t, out, want, 120*time.Second)
	a.start(t)
	r := runner()
	waitIdle(t, r)
	other := c.other(r)
	if spread { // a follower serves no task status
		waitIdle(t, other)
	}

	// The cut, while r applies a change.
	from := len(readBeats(hb))
	want = register()
	waitBeat(t, hb, r.id, from, 90*time.Second)
	cut := time.Now()
	r.proxy.Refuse()
	var first time.Time
	testutil.Eventually(t, 120*time.Second, other.id+"'s first side effect after the cut", func() bool {
		for _, bt := range readBeats(hb) {
			if bt.id == other.id && bt.at.After(cut) {
				first = bt.at
				return true
			}
		}
		return false
	})
	measure("cut -> new owner's first side effect", first.Sub(cut))
	var last time.Time
	for _, bt := range readBeats(hb) {
		if bt.id == r.id && bt.at.After(cut) {
			last = bt.at
		}
	}
	if !last.IsZero() {
		measure("cut -> cut owner's last side effect", last.Sub(cut))
		measure("cut owner's last side effect -> new owner's first", first.Sub(last))
		if !last.Before(first) {
			t.Errorf("the cut %s beat at %s, after %s's first beat at %s: two owners' Terraform at once",
				r.id, last.Format(time.StampMilli), other.id, first.Format(time.StampMilli))
		}
	}
	if d := first.Sub(cut); d > 2*partTTL {
		t.Errorf("the new owner's first apply began %s after the cut, want <= 2 x TTL = %s", d, 2*partTTL)
	}
	if ls := haLines(other.proc(), "cleared the terraform state lock of a stopped run", "task_name=task-0"); len(ls) == 0 {
		t.Errorf("%s did not clear the cut owner's Terraform state lock", other.id)
	} else {
		t.Logf("%s", ls[0].text)
	}
	done := waitFile(t, out, want, 120*time.Second)
	measure("cut -> converged", done.Sub(cut))
	// No interleaving anywhere in the run, warm-up included.
	for _, s := range beatSwitches(readBeats(hb)) {
		if s.next.Sub(s.last) < 300*time.Millisecond {
			t.Errorf("%s beat at %s and %s at %s: two instances applying at once",
				s.from, s.last.Format(time.StampMilli), s.to, s.next.Format(time.StampMilli))
		}
	}
	r.proxy.Restore()
	for _, in := range c.insts {
		for _, p := range in.procs {
			if strings.Contains(p.out.String(), "panic") {
				t.Fatalf("%s panicked", in.id)
			}
		}
	}
}
