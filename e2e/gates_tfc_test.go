package e2e

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/testutil"
)

// The safety gates with driver "terraform-cloud" (OTF running the remote
// runs with the real terraform binary): approval { required = true } holds
// the workspace's run unconfirmed, nothing is applied; approving it
// confirms exactly that run, which applies.
func TestGateTFCApprove(t *testing.T) {
	skipShort(t)
	o := testutil.StartOTF(t)
	c := testutil.StartConsul(t)
	tc := o.Client(t)
	dir := t.TempDir()
	port := testutil.FreePort(t)
	cfg := strings.Replace(tfcConfig(o, c.Addr, filepath.Join(dir, "sync"), port, o.Organization, o.Token),
		"  condition \"services\" {", "  approval {\n    required = true\n  }\n  condition \"services\" {", 1)
	cfgFile := writeFile(t, dir, "c.hcl", cfg)
	c.RegisterService(t, &api.AgentServiceRegistration{ID: "web-1", Name: "web", Address: "10.0.0.1", Port: 80}, "passing")
	startCtsync(t, dir, "start", "-config-file", cfgFile)
	g := gateAPI{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	g.waitUp()
	state := func() string { return tfcState(t, tc, o.Organization, "cts-web") }

	p := g.waitPendingUnless("web", "approval required", func() string {
		if s := state(); s != "<none>" && s != "<no workspace>" {
			return "applied instead of held: state " + s
		}
		return ""
	})
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
