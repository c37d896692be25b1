package e2e

// Faults around the Terraform state lock (consul backend, CTS location):
// someone else holds it, or the Terraform of a killed ctsync left it
// behind.

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/testutil"
)

// stateKey is where the consul backend keeps a task's state (CTS layout).
func stateKey(taskName string) string { return "consul-terraform-sync/terraform-env:" + taskName }

// holdStateLock takes the consul backend's lock of a task's state the way
// Terraform does (a Consul lock on <state>/.lock, with the lock info
// Terraform shows in <state>/.lockinfo). It returns the release function.
func holdStateLock(t *testing.T, c *testutil.Consul, taskName string) (release func()) {
	t.Helper()
	lock, err := c.Client.LockOpts(&api.LockOptions{Key: stateKey(taskName) + "/.lock", SessionName: "fault-test"})
	must(t, err)
	if _, err := lock.Lock(nil); err != nil {
		t.Fatalf("taking the state lock: %v", err)
	}
	info, _ := json.Marshal(map[string]string{
		"ID": "0b7a6c2e-fault-test", "Operation": "OperationTypeApply", "Who": "operator@bastion",
		"Info": "held by the fault test", "Version": "1.11.4", "Path": stateKey(taskName),
		"Created": time.Now().UTC().Format(time.RFC3339Nano),
	})
	_, err = c.Client.KV().Put(&api.KVPair{Key: stateKey(taskName) + "/.lockinfo", Value: info}, nil)
	must(t, err)
	released := false
	release = func() {
		if released {
			return
		}
		released = true
		_, _ = c.Client.KV().Delete(stateKey(taskName)+"/.lockinfo", nil)
		if err := lock.Unlock(); err != nil {
			t.Errorf("releasing the state lock: %v", err)
		}
	}
	t.Cleanup(release)
	return release
}

// Someone else holds the task's state lock: the run fails with an event
// that says the state is locked and by whom, ctsync retries with backoff
// (for as long as the lock is held: past the two retries of an ordinary
// failure, see TestFaultKilledDuringApply and the controller's
// TestStateLockedRetriesUntilFree), the other task is not held up, and the
// task converges once the lock is released, with no further change in
// Consul.
func TestFaultStateLockHeld(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	work := t.TempDir()
	out, other := t.TempDir(), t.TempDir()
	port := testutil.FreePort(t)
	cfg := writeFile(t, work, "config.hcl", faultConfig(t, c.Addr, filepath.Join(work, "sync-tasks"), port, "",
		servicesTask(t, "locked", "services_file", out, `"web"`),
		servicesTask(t, "free", "services_file", other, `"web"`)))
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	p := startCtsync(t, work, "start", "-config-file", cfg)
	waitConverged(t, c, out, "web")

	release := holdStateLock(t, c, "locked")
	c.RegisterService(t, reg("web-2", "web", 8002), "passing")
	msg := waitFailedEvent(t, port, "locked", 60*time.Second, "locked")
	t.Logf("lock held: %s", msg)
	for _, want := range []string{"the Terraform state is locked by another process", "held by operator@bastion", "lock ID 0b7a6c2e-fault-test"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the event does not say %q: %q", want, msg)
		}
	}
	// The other task is not held up.
	waitConverged(t, c, other, "web")
	p.waitOutput(t, 30*time.Second, "retrying task: its Terraform state is locked by another process", "task_name=locked")
	release()
	start := time.Now()
	waitConverged(t, c, out, "web")
	t.Logf("converged %s after the lock was released", time.Since(start).Round(time.Millisecond))
	p.running(t)
}

// ctsync is SIGKILLed during an apply (its Terraform dies with it, through
// the parent-death signal terraform-exec sets) and restarted. The dead
// Terraform's Consul session still holds the state lock until Consul
// invalidates it (the consul backend's session TTL); the restarted ctsync
// retries until then and converges to the catalog, including a change
// made while it was down.
func TestFaultKilledDuringApply(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	work := t.TempDir()
	out := t.TempDir()
	port := testutil.FreePort(t)
	cfg := writeFile(t, work, "config.hcl", faultConfig(t, c.Addr, filepath.Join(work, "sync-tasks"), port, "",
		servicesTask(t, "gated", "gated", out, `"web"`)))
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	p := startCtsync(t, work, "start", "-config-file", cfg)
	testutil.Eventually(t, 60*time.Second, "the apply to start", func() bool { return fileExistsAt(out, "started") })
	lockPair, _, err := c.Client.KV().Get(stateKey("gated")+"/.lock", nil)
	must(t, err)
	if lockPair == nil || lockPair.Session == "" {
		t.Fatalf("the apply holds no state lock in Consul: %+v", lockPair)
	}

	must(t, p.cmd.Process.Kill())
	p.wait(t, 10*time.Second)
	killed := time.Now()
	// Let the orphaned provisioner shell (not Terraform: that died with
	// ctsync) end; later applies pass the gate at once.
	writeFile(t, out, "gate", "")
	c.RegisterService(t, reg("web-2", "web", 8002), "passing")
	sess, _, err := c.Client.Session().Info(lockPair.Session, nil)
	must(t, err)
	if sess != nil {
		t.Logf("the dead Terraform's session: TTL %s, lock delay %s, behavior %s", sess.TTL, sess.LockDelay, sess.Behavior)
	}

	p2 := startCtsync(t, work, "start", "-config-file", cfg)
	waitConverged(t, c, out, "web")
	t.Logf("converged %s after the kill; %d failed runs on the way", time.Since(killed).Round(time.Second),
		len(failedEvents(t, port, "gated")))
	if ls := p2.lines("error applying task", "task_name=gated"); len(ls) > 0 && !strings.Contains(ls[0], "locked by another process") {
		t.Errorf("a failed run after the restart does not say why: %s", ls[0])
	}
	p2.running(t)
}
