package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/testutil"
)

// Deleting a task while it runs, as CTS: 202 at once, the task stays
// visible with status "deleting" and its events, the apply finishes (its
// state saved), then the task is gone.
func TestDeleteWhileRunning(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	work, out := t.TempDir(), t.TempDir()
	port := testutil.FreePort(t)
	cfg := writeFile(t, work, "config.hcl", faultConfig(t, c.Addr, filepath.Join(work, "sync-tasks"), port, "",
		servicesTask(t, "gated", "gated", out, `"web"`)))
	must(t, c.Client.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "web-1", Name: "web", Port: 80}))
	p := startCtsync(t, work, "start", "-config-file", cfg)
	testutil.Eventually(t, 90*time.Second, "the apply to start", func() bool { return fileExistsAt(out, "started") })

	if code, b := haDo(t, "DELETE", port, "/v1/tasks/gated", ""); code != http.StatusAccepted {
		t.Fatalf("DELETE during the apply: %d %s", code, b)
	}
	code, _, b := haGet(port, "/v1/status/tasks/gated?include=events")
	var st map[string]struct {
		Status string `json:"status"`
	}
	if code != http.StatusOK || json.Unmarshal(b, &st) != nil || st["gated"].Status != "deleting" {
		t.Fatalf("status while deleting: %d %s", code, b)
	}
	if code, _, _ := haGet(port, "/v1/tasks/gated/events"); code != http.StatusOK {
		t.Fatalf("events while deleting: %d", code)
	}
	// A change to it is refused meanwhile.
	if code, _ := haDo(t, "PATCH", port, "/v1/tasks/gated", `{"enabled":false}`); code != http.StatusNotFound {
		t.Fatalf("PATCH of a task being deleted: %d", code)
	}

	must(t, os.WriteFile(filepath.Join(out, "gate"), nil, 0o644))
	testutil.Eventually(t, 60*time.Second, "the task gone after its apply", func() bool {
		code, _, _ := haGet(port, "/v1/status/tasks/gated")
		return code == http.StatusNotFound
	})
	if p.successes("gated") != 1 {
		t.Fatalf("the apply in progress did not finish successfully:\n%s", p.out.String())
	}
	if strings.Contains(p.out.String(), "Failed to save state") {
		t.Fatal("the apply could not save its state")
	}
}
