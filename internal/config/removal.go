package config

import (
	"time"

	"github.com/ctsync/ctsync/internal/task"
)

// This file decodes removal_delay (a ctsync extension, docs/safety.md):
// a task's own, or the default of every task at the top level. An
// instance that leaves a task's condition is kept in the module's input
// until it has been gone that long. Its range and the conditions it
// applies to are task.Spec.Validate's rules (a task created through the
// API obeys them too).

// removalDelay reads a removal_delay attribute of the body at path ("" at
// the top level); an invalid value is reported where it is written and
// left unset.
func (d *decoder) removalDelay(c *content, path string) opt[time.Duration] {
	v := d.duration(c, "removal_delay", path)
	if !v.Set {
		return v
	}
	if err := task.CheckRemovalDelay(v.V); err != nil {
		d.errf(v.Rng, join(path, "removal_delay"), "%v", err)
		return opt[time.Duration]{}
	}
	return v
}
