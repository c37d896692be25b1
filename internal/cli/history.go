package cli

import (
	"fmt"
	"path/filepath"

	"github.com/ctsync/ctsync/internal/store"
)

// openHistory opens the local history database under working_dir, the
// store of a daemon without high availability, so that the run history
// survives a restart (with high availability it lives in Consul KV: ha.go).
func (a *app) openHistory(workDir string) (*store.Bolt, error) {
	path := filepath.Join(workDir, store.HistoryFile)
	b, err := store.OpenBolt(path, a.cfg.History, a.log.With("component", "store"))
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	a.history = b
	n := 0
	for _, evs := range b.AllEvents() {
		n += len(evs)
	}
	a.log.Info("run history loaded", "path", path, "events", n, "runs_per_task", a.cfg.History)
	return b, nil
}

// closeHistory closes the history database, if one is open.
func (a *app) closeHistory() {
	if a.history == nil {
		return
	}
	if err := a.history.Close(); err != nil {
		a.log.Warn("closing the history database", "error", err)
	}
}
