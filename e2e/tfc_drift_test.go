package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	tfe "github.com/hashicorp/go-tfe"

	"github.com/ctsync/ctsync/internal/testutil"
)

// Drift detection on the terraform-cloud driver: a speculative plan-only
// run of the task's last applied configuration (OTF v0.1.0 ignores
// refresh-only). The module's file is removed behind Terraform's back: the
// drift check finds it (a drift event with the plan's run URL), and with
// remediate an apply run recreates it.
func TestTFCDriftDetection(t *testing.T) {
	skipShort(t)
	o := testutil.StartOTF(t)
	c := testutil.StartConsul(t)
	tc := o.Client(t)
	dir := t.TempDir()
	out := t.TempDir()
	port := testutil.FreePort(t)
	cfg := fmt.Sprintf(`log_level = "DEBUG"
working_dir = %q
port = %d
consul {
  address = %q
}
buffer_period {
  enabled = false
}
driver "terraform-cloud" {
  hostname     = %q
  organization = %q
  token        = %q
}
task {
  name      = "files"
  module    = %q
  variables = {
    dir = %q
  }
  condition "services" {
    names = ["web"]
  }
  drift_detection {
    interval  = "2s"
    remediate = true
  }
}
`, filepath.Join(dir, "sync"), port, c.Addr, o.URL, o.Organization, o.Token, module("services_file"), out)
	f := writeFile(t, dir, "c.hcl", cfg)
	c.RegisterService(t, &api.AgentServiceRegistration{ID: "web-1", Name: "web", Address: "10.0.0.1", Port: 80}, "passing")
	p := startCtsync(t, dir, "start", "-config-file", f)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("==== ctsync ====\n%s\n==== otfd ====\n%s", p.out.String(), o.Logs())
		}
	})
	file := filepath.Join(out, "services.json")
	testutil.Eventually(t, 90*time.Second, "the first remote apply writing the file", func() bool {
		_, err := os.Stat(file)
		return err == nil
	})
	// Drift checks of an unchanged infrastructure find nothing.
	testutil.Eventually(t, 60*time.Second, "a drift check without changes", func() bool {
		return len(p.lines(` drift check: no changes: `, "task_name=files")) > 0
	})
	for _, e := range tfcEvents(port, "files") {
		if e.Kind == "drift" {
			t.Fatalf("drift event without drift: %+v", e)
		}
	}

	removed := time.Now()
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	var drift tfcEvent
	testutil.Eventually(t, 90*time.Second, "a drift event", func() bool {
		for _, e := range tfcEvents(port, "files") {
			if e.Kind == "drift" {
				drift = e
				return true
			}
		}
		return false
	})
	detected := time.Since(removed)
	if drift.Plan == nil || drift.Plan.Add != 1 || !strings.Contains(drift.TFCRunURL, "/workspaces/files/runs/run-") {
		t.Errorf("drift event: %+v", drift)
	}
	// The drift check's run is a plan-only run: it ended after its plan
	// (OTF v0.1.0 does not report plan-only back, so the status tells).
	id := drift.TFCRunURL[strings.LastIndex(drift.TFCRunURL, "/")+1:]
	r, err := tc.Runs.Read(context.Background(), id)
	if err != nil || r.Status != tfe.RunPlannedAndFinished || !r.HasChanges {
		t.Errorf("drift check run %s: %v %v", id, r, err)
	}
	testutil.Eventually(t, 90*time.Second, "remediation recreating the file", func() bool {
		_, err := os.Stat(file)
		return err == nil
	})
	testutil.Eventually(t, 30*time.Second, "the remediation run recorded", func() bool {
		for _, e := range tfcEvents(port, "files") {
			if e.Kind == "apply" && e.Success && e.Trigger == "drift" {
				return true
			}
		}
		return false
	})
	t.Logf("MEASURED file removed -> drift event: %s; -> remediated: %s", detected.Round(100*time.Millisecond), time.Since(removed).Round(100*time.Millisecond))
}
