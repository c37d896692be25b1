package tfc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/testutil"
)

// A held plan against OTF is a run that waits for its confirmation: it
// changes nothing until ApplyPlan confirms exactly it; a discarded one,
// or one a later apply superseded, is refused as stale; a plan without
// changes applies as nothing.
func TestOTFHeldPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("runs OTF")
	}
	o := testutil.StartOTF(t)
	c := o.Client(t)
	ctx := context.Background()
	d := otfDriver(t, o, "held", nil)
	if _, err := d.Apply(ctx, driver.Run{ID: "r1"}, inputs("web-1", "web-2")); err != nil {
		t.Fatalf("apply: %v", err)
	}
	ws, err := c.Workspaces.Read(ctx, o.Organization, "cts-held")
	if err != nil {
		t.Fatal(err)
	}

	p, err := d.PlanHeld(ctx, driver.Run{ID: "p1"}, inputs("web-1"))
	if err != nil {
		t.Fatalf("held plan: %v", err)
	}
	if p.ID != "p1" || !strings.HasPrefix(p.Ref, "run-") || !p.Changes || p.Counts != (gate.Counts{Change: 1, InState: 1}) ||
		!strings.Contains(p.Text, "terraform_data.ids") || !strings.Contains(p.Result.RunURL, p.Ref) {
		t.Fatalf("held plan = %+v", p)
	}
	if !strings.Contains(string(p.JSON), `"resource_changes"`) { // OTF serves the plan's JSON output
		t.Fatalf("held plan JSON: %.300s", p.JSON)
	}
	r, err := c.Runs.Read(ctx, p.Ref)
	if err != nil || r.Actions == nil || !r.Actions.IsConfirmable {
		t.Fatalf("the held run does not wait for a confirmation: %+v %v", r, err)
	}
	if got := appliedIDs(t, c, ws.ID); got != "v1:web-1,web-2" {
		t.Fatalf("a held plan changed the state: %q", got)
	}

	res, err := d.ApplyPlan(ctx, driver.Run{ID: "a1"}, p)
	if err != nil || !res.Changes || res.Change != 1 || !strings.Contains(res.RunURL, p.Ref) {
		t.Fatalf("apply of the held plan: %+v %v", res, err)
	}
	if got := appliedIDs(t, c, ws.ID); got != "v1:web-1" {
		t.Fatalf("state after the approved plan = %q", got)
	}

	// Rejected: discarded, then refused.
	p2, err := d.PlanHeld(ctx, driver.Run{ID: "p2"}, inputs("web-3"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.DiscardPlan(ctx, p2); err != nil {
		t.Fatalf("discard: %v", err)
	}
	if r, err := c.Runs.Read(ctx, p2.Ref); err != nil || r.Status != "discarded" {
		t.Fatalf("rejected run: %+v %v", r, err)
	}
	if _, err := d.ApplyPlan(ctx, driver.Run{ID: "a2"}, p2); !errors.Is(err, driver.ErrPlanStale) {
		t.Fatalf("apply of a discarded plan: %v", err)
	}
	if err := d.DiscardPlan(ctx, p2); err != nil {
		t.Fatalf("discarding twice: %v", err)
	}

	// Superseded: an apply of a newer desired state discards the held run.
	p3, err := d.PlanHeld(ctx, driver.Run{ID: "p3"}, inputs("web-4"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Apply(ctx, driver.Run{ID: "r2"}, inputs("web-5")); err != nil {
		t.Fatalf("apply behind a held plan: %v", err)
	}
	if _, err := d.ApplyPlan(ctx, driver.Run{ID: "a3"}, p3); !errors.Is(err, driver.ErrPlanStale) {
		t.Fatalf("apply of a superseded plan: %v", err)
	}
	if got := appliedIDs(t, c, ws.ID); got != "v1:web-5" {
		t.Fatalf("state = %q", got)
	}

	// Nothing to change: held, and applied as nothing.
	p4, err := d.PlanHeld(ctx, driver.Run{ID: "p4"}, inputs("web-5"))
	if err != nil || p4.Changes || p4.Counts.InState != 1 {
		t.Fatalf("held plan without changes: %+v %v", p4, err)
	}
	if res, err := d.ApplyPlan(ctx, driver.Run{ID: "a4"}, p4); err != nil || res.Changes {
		t.Fatalf("apply of a plan without changes: %+v %v", res, err)
	}
}

// The replacements of a run's JSON plan are counted apart (the plans the
// real terraform made of the load-balancer example, internal/gate's
// testdata), never more than the run's own adds and destroys.
func TestHeldReplacements(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "..", "gate", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if n := replacements(read("load-balancer-replace.json"), gate.Counts{Add: 2, Destroy: 2}); n != 2 {
		t.Errorf("replace plan: %d replacements, want 2", n)
	}
	if n := replacements(read("load-balancer-replace.json"), gate.Counts{Add: 1, Destroy: 2}); n != 1 {
		t.Errorf("capped by the run's adds: %d, want 1", n)
	}
	if n := replacements(read("load-balancer-destroy.json"), gate.Counts{Destroy: 2}); n != 0 {
		t.Errorf("destroy plan: %d replacements, want 0", n)
	}
	if n := replacements([]byte(`{"not":"a plan"}`), gate.Counts{Add: 2, Destroy: 2}); n != 0 {
		t.Errorf("not a plan: %d", n)
	}
}
