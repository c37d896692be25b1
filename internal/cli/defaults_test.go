package cli

import (
	"testing"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/store"
)

// The store's own default history bound (a store built without one) is
// the configuration's default, so a task keeps as many runs whichever of
// them applies.
func TestHistoryDefaultsAgree(t *testing.T) {
	if config.DefaultRunsPerTask != store.DefaultHistory {
		t.Fatalf("history { runs_per_task } defaults to %d, the store to %d", config.DefaultRunsPerTask, store.DefaultHistory)
	}
}
