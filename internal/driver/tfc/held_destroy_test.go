package tfc

import (
	"context"
	"testing"

	"github.com/ctsync/ctsync/internal/driver"
)

// A destroy through the safety gates is refused, never planned as
// something else: the workspace's runs cannot hold a destroy here.
func TestPlanHeldRefusesADestroy(t *testing.T) {
	_, err := (&Driver{}).PlanHeld(context.Background(), driver.Run{ID: "r1", Destroy: true}, nil)
	if err == nil || !driver.IsTerminal(err) {
		t.Fatalf("PlanHeld of a destroy: %v, want a terminal error", err)
	}
}
