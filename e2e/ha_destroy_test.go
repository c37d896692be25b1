package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// A task deleted with destroy whose leader dies during the destroy: the
// next leader finishes the destroy, without any new request, and the task
// is gone from the cluster.
func TestHADestroyResumedAfterFailover(t *testing.T) {
	skipShort(t)
	c := newHACluster(t)
	_, varFile := newTaskDir(t)
	for _, id := range []string{"cts-a", "cts-b"} {
		c.add(&haInstance{id: id}, func(in *haInstance) string { return haConfig(in, varFile) })
	}
	c.register("api-1", "api", 9001)
	for _, in := range c.insts {
		in.start(t)
	}
	leader := c.leading(60 * time.Second)
	dir := t.TempDir()
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(dir, "gate"), nil, 0o644) }) // frees a stray shell
	body := fmt.Sprintf(`{"task":{"name":"doomed","module":%q,"variables":{"dir":%q},"condition":{"services":{"names":["api"]}}}}`,
		module("destroy_gated"), fmt.Sprintf("%q", dir))
	if code, b := haDo(t, "POST", leader.port, "/v1/tasks", body); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	testutil.Eventually(t, 60*time.Second, "the task applied", func() bool { return fileExistsAt(dir, "created") })
	waitIdle(t, leader)

	if code, b := haDo(t, "DELETE", leader.port, "/v1/tasks/doomed?destroy=true", ""); code != http.StatusAccepted {
		t.Fatalf("delete: %d %s", code, b)
	}
	testutil.Eventually(t, 60*time.Second, "the destroy under way", func() bool { return fileExistsAt(dir, "destroy-started") })
	killed := time.Now()
	must(t, leader.proc().cmd.Process.Signal(syscall.SIGKILL))
	leader.proc().wait(t, 30*time.Second)

	next, _ := c.leaderSince(killed, 60*time.Second)
	if next == leader {
		t.Fatal("the killed instance leads again")
	}
	// The new leader starts the destroy again (after the dead Terraform's
	// state lock has expired) on its own.
	testutil.Eventually(t, 120*time.Second, "the destroy started again by the new leader", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "destroy-started"))
		return strings.Count(string(b), "started") >= 2
	})
	must(t, os.WriteFile(filepath.Join(dir, "gate"), nil, 0o644))
	testutil.Eventually(t, 60*time.Second, "the task gone from the cluster", func() bool {
		code, _, _ := haGet(next.port, "/v1/tasks/doomed")
		return code == http.StatusNotFound && fileExistsAt(dir, "destroyed")
	})
	if len(haLines(next.proc(), "finishing the destroy of a task deleted during the previous leader's term")) == 0 {
		t.Fatal("the new leader did not log the resumed destroy")
	}
	t.Logf("MEASURED kill -> destroy finished by the new leader: %s", time.Since(killed).Round(time.Millisecond))
}
