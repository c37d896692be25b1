package e2e

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/testutil"
)

// The TFE API goes away (otfd stopped) while the catalog changes: the run
// fails, is retried with backoff, and converges once the API is back,
// without a new change.
func TestTFCOutageRetriedUntilBack(t *testing.T) {
	skipShort(t)
	o := testutil.StartOTF(t)
	c := testutil.StartConsul(t)
	tc := o.Client(t)
	dir := t.TempDir()
	port := testutil.FreePort(t)
	cfg := writeFile(t, dir, "c.hcl", tfcConfig(o, c.Addr, filepath.Join(dir, "sync"), port, o.Organization, o.Token))
	c.RegisterService(t, &api.AgentServiceRegistration{ID: "web-1", Name: "web", Address: "10.0.0.1", Port: 80}, "passing")
	p := startCtsync(t, dir, "start", "-config-file", cfg)
	state := func() string { return tfcState(t, tc, o.Organization, "cts-web") }
	testutil.Eventually(t, 90*time.Second, "the first remote run applied", func() bool { return state() == "none:web-1" })
	testutil.Eventually(t, 30*time.Second, "the first run recorded", func() bool { return p.successes("web") == 1 })

	o.Stop()
	c.RegisterService(t, &api.AgentServiceRegistration{ID: "web-2", Name: "web", Address: "10.0.0.2", Port: 80}, "passing")
	waitFailedEvent(t, port, "web", 90*time.Second)
	if p.countLog("retrying task after failure", "web") == 0 {
		testutil.Eventually(t, 30*time.Second, "a retry scheduled", func() bool { return p.countLog("retrying task after failure", "web") > 0 })
	}
	back := time.Now()
	o.Start()
	testutil.Eventually(t, 5*time.Minute, "the change applied once the API is back", func() bool { return state() == "none:web-1,web-2" })
	t.Logf("MEASURED TFE API back -> change applied: %s", time.Since(back).Round(100*time.Millisecond))
}
