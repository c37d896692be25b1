package e2e

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// A query Consul refuses for good (an unknown datacenter; a namespace on
// Consul CE) ends -once at once with Consul's answer, and makes task
// creation fail with it, while the daemon keeps retrying the query and
// shows Consul's answer in the task's status.
func TestConsulRefusedQueries(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	work, out := t.TempDir(), t.TempDir()
	for _, tc := range []struct{ name, opt, want string }{
		{"unknown datacenter", `datacenter = "nowhere"`, "No path to datacenter"},
		{"namespace on CE", `namespace = "team-a"`, "Invalid query parameter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := fmt.Sprintf("task {\n  name = \"refused\"\n  module = %q\n  variables = { dir = %q }\n  condition \"services\" {\n    names = [\"web\"]\n    %s\n  }\n}",
				module("services_file"), out, tc.opt)
			cfg := writeFile(t, work, "once.hcl", faultConfig(t, c.Addr, filepath.Join(work, "sync-tasks"), testutil.FreePort(t), "", tk))
			start := time.Now()
			p := startCtsync(t, work, "start", "-once", "-config-file", cfg)
			if code := p.wait(t, 60*time.Second); code == 0 {
				t.Fatal("-once exited 0")
			}
			took := time.Since(start)
			if o := p.out.String(); !strings.Contains(o, tc.want) || !strings.Contains(o, "refused") || !strings.Contains(o, "health/service/web") {
				t.Fatalf("-once output lacks the task, the query or Consul's answer %q:\n%s", tc.want, o)
			}
			if took > 20*time.Second {
				t.Fatalf("-once took %s to give up on a refused query", took)
			}
			t.Logf("-once gave up after %s", took.Round(100*time.Millisecond))
		})
	}

	// The daemon: creation through the API is refused with Consul's
	// answer; a configured task keeps being retried and shows it.
	port := testutil.FreePort(t)
	tk := fmt.Sprintf("task {\n  name = \"remote\"\n  module = %q\n  variables = { dir = %q }\n  condition \"services\" {\n    names = [\"web\"]\n    datacenter = \"nowhere\"\n  }\n}",
		module("services_file"), out)
	cfg := writeFile(t, work, "daemon.hcl", faultConfig(t, c.Addr, filepath.Join(work, "sync-tasks-d"), port, "", tk))
	startCtsync(t, work, "start", "-config-file", cfg)
	testutil.Eventually(t, 60*time.Second, "the query error in the task's status", func() bool {
		code, _, b := haGet(port, "/v1/status/tasks/remote")
		return code == http.StatusOK && strings.Contains(string(b), "No path to datacenter")
	})
	body := fmt.Sprintf(`{"task":{"name":"made","module":%q,"variables":{"dir":%q},"condition":{"services":{"names":["web"],"datacenter":"nowhere"}}}}`,
		module("services_file"), fmt.Sprintf("%q", out))
	code, b := haDo(t, "POST", port, "/v1/tasks", body)
	if code != http.StatusBadRequest || !strings.Contains(string(b), "No path to datacenter") {
		t.Fatalf("create with an unknown datacenter: %d %s", code, b)
	}
	if code, _, _ := haGet(port, "/v1/tasks/made"); code != http.StatusNotFound {
		t.Fatalf("the refused task was kept: %d", code)
	}
}
