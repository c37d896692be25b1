package ha

import (
	"maps"
	"sync"

	"github.com/ctsync/ctsync/internal/task"
)

// Configured is the set of the tasks of this instance's configuration
// files, with their enabled flags as the files say. A reload of the
// configuration (SIGHUP) replaces it whole (Set); it is safe for
// concurrent use. For those tasks only the enabled flag changed through
// the API is recorded; the others are recorded whole (Persisting).
type Configured struct {
	mu sync.RWMutex
	on map[string]bool
}

// NewConfigured returns the set of specs.
func NewConfigured(specs []task.Spec) *Configured {
	c := &Configured{}
	c.Set(specs)
	return c
}

// ConfiguredNames returns the set of the named tasks, each enabled (for
// tests, and callers that know only names).
func ConfiguredNames(names map[string]bool) *Configured {
	c := &Configured{on: map[string]bool{}}
	for n, ok := range names {
		if ok {
			c.on[n] = true
		}
	}
	return c
}

// Set replaces the set with specs.
func (c *Configured) Set(specs []task.Spec) {
	on := make(map[string]bool, len(specs))
	for _, s := range specs {
		on[s.Name] = s.Enabled
	}
	c.mu.Lock()
	c.on = on
	c.mu.Unlock()
}

// Has reports whether the task is a configured one. A nil set has none.
func (c *Configured) Has(name string) bool {
	if c == nil {
		return false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, ok := c.on[name]
	return ok
}

// Snapshot returns the names (each true) and the enabled flags.
func (c *Configured) Snapshot() (names, enabled map[string]bool) {
	names = map[string]bool{}
	if c == nil {
		return names, map[string]bool{}
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	for n := range c.on {
		names[n] = true
	}
	return names, maps.Clone(c.on)
}
