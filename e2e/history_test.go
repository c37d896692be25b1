package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/testutil"
)

// taskEvents reads GET /v1/tasks/{name}/events.
func taskEvents(t *testing.T, base, name string) []store.Event {
	t.Helper()
	resp, err := http.Get(base + "/v1/tasks/" + name + "/events")
	if err != nil {
		t.Fatalf("events of %s: %v", name, err)
	}
	defer resp.Body.Close()
	var body struct {
		Events []store.Event `json:"events"`
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("events of %s: status %d", name, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("events of %s: %v", name, err)
	}
	return body.Events
}

// waitEvents polls the events of a task until ok accepts them.
func waitEvents(t *testing.T, base, name string, timeout time.Duration, ok func([]store.Event) bool) []store.Event {
	t.Helper()
	timeout = testutil.Scale(timeout)
	deadline := time.Now().Add(timeout)
	for {
		if resp, err := http.Get(base + "/v1/health"); err == nil {
			resp.Body.Close()
			if evs := taskEvents(t, base, name); ok(evs) {
				return evs
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the events of %s did not reach the expected state within %s", name, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestHistorySurvivesRestart: without high availability, the run history
// is kept in <working_dir>/ctsync-history.db; a restarted daemon (real
// Consul, real Terraform) serves the runs of the previous process, and
// history { runs_per_task } bounds what is kept.
func TestHistorySurvivesRestart(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	dir, vars := newTaskDir(t)
	work := t.TempDir()
	port := testutil.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := daemonConfig(t, work, port, c.Addr, fmt.Sprintf(`
history {
  runs_per_task = 3
}
task {
  name           = "web"
  module         = %q
  variable_files = [%q]
  condition "services" {
    names = ["web"]
  }
}
`, module("services_file"), vars))

	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	p := startCtsync(t, work, "start", "-config-file", cfg)
	waitServices(t, dir, "web-1")
	c.RegisterService(t, reg("web-2", "web", 8002), "passing")
	waitServices(t, dir, "web-1,web-2")
	before := waitEvents(t, base, "web", 30*time.Second, func(evs []store.Event) bool { return len(evs) == 2 })

	db := filepath.Join(work, "sync", store.HistoryFile)
	st, err := os.Stat(db)
	if err != nil {
		t.Fatalf("no history database: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("history database mode %v, want 0600", st.Mode().Perm())
	}

	// A second daemon on the same working_dir is refused with a clear error.
	second := startCtsync(t, work, "start", "-config-file", cfg)
	if code := second.wait(t, 60*time.Second); code == 0 {
		t.Error("a second daemon on the same working_dir started")
	}
	if second.count("the history database is in use by another process") == 0 {
		t.Errorf("second daemon's output does not say why it stopped:\n%s", second.out.String())
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("ctsync exited with %d", code)
	}

	p = startCtsync(t, work, "start", "-config-file", cfg)
	// The restarted daemon serves the runs of the previous process; with
	// nothing changed it runs nothing (it knows what was applied). A
	// change then runs the task, recorded next to the older runs.
	after := waitEvents(t, base, "web", 60*time.Second, func(evs []store.Event) bool { return len(evs) == 2 })
	for _, old := range before {
		i := slices.IndexFunc(after, func(ev store.Event) bool { return ev.ID == old.ID })
		if i < 0 {
			t.Fatalf("run %s of the previous process is gone after the restart: %+v", old.ID, after)
		}
		if got := after[i]; !got.StartTime.Equal(old.StartTime) || got.Success != old.Success || got.Trigger != old.Trigger {
			t.Errorf("run %s changed across the restart: %+v, was %+v", old.ID, got, old)
		}
	}
	// The log of a run of the previous process is still served.
	resp, err := http.Get(base + "/v1/tasks/web/events/" + before[0].ID + "/log")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("log of a run of the previous process: status %d", resp.StatusCode)
	}
	c.RegisterService(t, reg("web-3", "web", 8003), "passing")
	waitServices(t, dir, "web-1,web-2,web-3")
	after = waitEvents(t, base, "web", 60*time.Second, func(evs []store.Event) bool { return len(evs) == 3 })
	if slices.ContainsFunc(before, func(ev store.Event) bool { return ev.ID == after[0].ID }) {
		t.Errorf("the restarted daemon recorded no run of its own: %+v", after)
	}
	// runs_per_task = 3: the fourth run drops the oldest.
	c.RegisterService(t, reg("web-4", "web", 8004), "passing")
	waitServices(t, dir, "web-1,web-2,web-3,web-4")
	evs := waitEvents(t, base, "web", 30*time.Second, func(evs []store.Event) bool { return len(evs) == 3 && evs[0].ID != after[0].ID })
	if slices.ContainsFunc(evs, func(ev store.Event) bool { return ev.ID == before[1].ID }) {
		t.Errorf("the oldest run was kept beyond runs_per_task = 3: %+v", evs)
	}
}
