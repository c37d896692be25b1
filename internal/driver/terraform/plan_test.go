package terraform

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/testutil"
)

// perInstanceModule manages one resource per service instance, so that a
// deregistration destroys.
const perInstanceModule = `
variable "services" {
  type = any
}

resource "terraform_data" "svc" {
  for_each = var.services
  input    = each.key
}
`

// A held plan is kept in a private file with its text, JSON and counts
// (the state's size included); applying it applies exactly it, once; a
// plan whose state changed since is refused as stale and applies nothing;
// a discarded plan cannot be applied; a plan record naming another file is
// refused. With the local backend and with the default one, the state in
// a real Consul.
func TestHeldPlan(t *testing.T) {
	bin := needTerraform(t)
	t.Run("local", func(t *testing.T) {
		dir := t.TempDir()
		testHeldPlan(t, dir, localTask(t, dir, "held", bin))
	})
	t.Run("consul", func(t *testing.T) {
		consul := testutil.StartConsul(t)
		dir := t.TempDir()
		o := localTask(t, dir, "held", bin)
		o.Driver = config.TerraformDriver{}
		o.Consul = config.Consul{Address: "http://" + consul.Addr, KVPath: "consul-terraform-sync/"}
		testHeldPlan(t, dir, o)
	})
}

func testHeldPlan(t *testing.T, dir string, o Options) {
	ctx := testCtx(t)
	o.Spec.Module = writeModule(t, dir, "per-instance", map[string]string{"main.tf": perInstanceModule})
	d := mustNew(t, o)

	p, err := d.PlanHeld(ctx, run("p1"), services("web-1", "web-2"))
	if err != nil {
		t.Fatal(err)
	}
	if p.ID != "p1" || !p.Changes || p.Counts != (gate.Counts{Add: 2}) || !strings.Contains(p.Text, `terraform_data.svc["web-1"] will be created`) {
		t.Fatalf("held plan: %+v", p)
	}
	var js struct {
		ResourceChanges []struct{ Address string } `json:"resource_changes"`
	}
	if err := json.Unmarshal(p.JSON, &js); err != nil || len(js.ResourceChanges) != 2 {
		t.Fatalf("plan JSON (%v): %s", err, p.JSON)
	}
	if st, err := os.Stat(p.Ref); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("plan file %s: %v %v", p.Ref, st, err)
	}
	if st, err := os.Stat(strings.TrimSuffix(p.Ref, heldSuffix) + heldInputs); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("plan inputs: %v %v", st, err)
	}
	if st, err := os.Stat(filepath.Dir(p.Ref)); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("plan folder: %v %v", st, err)
	}
	if p.Result.LogPath == "" || p.Result.Duration <= 0 {
		t.Fatalf("plan result: %+v", p.Result)
	}

	// Changed inputs in between do not matter: the saved plan is applied,
	// by a driver built again too (as when its provider values are renewed).
	if err := d.writeInputs(services("other")); err != nil {
		t.Fatal(err)
	}
	d = mustNew(t, o)
	res, err := d.ApplyPlan(ctx, run("a1"), p)
	if err != nil || res.Add != 2 || !res.Changes {
		t.Fatalf("apply of the held plan: %+v %v", res, err)
	}
	if fileExists(p.Ref) || fileExists(strings.TrimSuffix(p.Ref, heldSuffix)+heldInputs) {
		t.Fatal("an applied plan is still held")
	}
	if b, _ := os.ReadFile(filepath.Join(d.WorkDir(), fileInputs)); !strings.Contains(string(b), "web-2") || strings.Contains(string(b), "other") {
		t.Fatalf("the inputs file is not the applied plan's:\n%s", b)
	}
	if res, err := d.ApplyPlan(ctx, run("a1-again"), p); !errors.Is(err, driver.ErrPlanStale) || res.Changes {
		t.Fatalf("a plan applied twice: %+v %v", res, err)
	}

	// Held: one of two instances goes away.
	p2, err := d.PlanHeld(ctx, run("p2"), services("web-1"))
	if err != nil || p2.Counts != (gate.Counts{Destroy: 1, InState: 2}) {
		t.Fatalf("second plan: %+v %v", p2.Counts, err)
	}
	// Meanwhile the state moves on.
	if _, err := d.Apply(ctx, run("a2"), services("web-1", "web-2", "web-3")); err != nil {
		t.Fatal(err)
	}
	res, err = d.ApplyPlan(ctx, run("a3"), p2)
	if !errors.Is(err, driver.ErrPlanStale) || res.Changes {
		t.Fatalf("stale plan applied: %+v %v", res, err)
	}
	if !strings.Contains(err.Error(), "Saved plan is stale") {
		t.Fatalf("stale error: %v", err)
	}
	if p3, err := d.PlanHeld(ctx, run("p3"), services("web-1", "web-2", "web-3")); err != nil || p3.Changes || p3.Counts.InState != 3 {
		t.Fatalf("the stale plan changed the state: %+v %v", p3, err)
	} else if err := d.DiscardPlan(ctx, p3); err != nil || fileExists(p3.Ref) || fileExists(strings.TrimSuffix(p3.Ref, heldSuffix)+heldInputs) {
		t.Fatalf("discard: %v", err)
	} else if _, err := d.ApplyPlan(ctx, run("a4"), p3); !errors.Is(err, driver.ErrPlanStale) {
		t.Fatalf("a discarded plan: %v", err)
	}

	forged := driver.HeldPlan{ID: "x", Ref: filepath.Join(dir, "secret")}
	if _, err := d.ApplyPlan(ctx, run("a5"), forged); err == nil || errors.Is(err, driver.ErrPlanStale) {
		t.Fatalf("a forged plan record: %v", err)
	}
	if err := d.DiscardPlan(ctx, forged); err == nil {
		t.Fatal("discarding a forged plan record")
	}
}
