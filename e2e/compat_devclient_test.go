package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/testutil"
)

// start -client-type=development (CTS's development client) runs no
// Terraform: each run is logged with its inputs and nothing is written.
func TestDevelopmentClient(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	work, out := t.TempDir(), t.TempDir()
	port := testutil.FreePort(t)
	syncDir := filepath.Join(work, "sync-tasks")
	cfg := writeFile(t, work, "config.hcl", faultConfig(t, c.Addr, syncDir, port, "", servicesTask(t, "web-task", "services_file", out, `"web"`)))
	must(t, c.Client.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "web-1", Name: "web", Port: 80}))
	p := startCtsync(t, work, "start", "-client-type=development", "-config-file", cfg)
	testutil.Eventually(t, 60*time.Second, "a logged apply", func() bool {
		return len(p.lines("development client: would run terraform apply", "web-1")) > 0
	})
	must(t, c.Client.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "web-2", Name: "web", Port: 80}))
	testutil.Eventually(t, 60*time.Second, "a logged apply with the new instance", func() bool {
		return len(p.lines("development client: would run terraform apply", "web-2")) > 0
	})
	if fileExistsAt(out, "services.json") {
		t.Fatal("the development client ran the module")
	}
	if ents, _ := os.ReadDir(filepath.Join(syncDir, "web-task")); len(ents) > 0 {
		t.Fatalf("the development client wrote into the task directory: %v", ents)
	}
	if strings.Contains(p.out.String(), "using terraform binary") {
		t.Fatal("the development client looked for Terraform")
	}
	// The run is recorded once the driver returns, after its log line.
	testutil.Eventually(t, 30*time.Second, "the second run's event", func() bool {
		return len(apiEvents(t, port, "web-task")) >= 2
	})
	if evs := apiEvents(t, port, "web-task"); !evs[0].Success {
		t.Fatalf("events: %+v", evs)
	}
}
