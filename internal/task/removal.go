package task

import (
	"fmt"
	"time"
)

// MaxRemovalDelay is the longest removal_delay accepted: an instance that
// left is kept in the module's input at most this long.
const MaxRemovalDelay = 24 * time.Hour

// CheckRemovalDelay is removal_delay's rule for a value that is set (a
// task's or the global default), the same for a configuration file and a
// request to the API. 0 turns the hold-down off.
func CheckRemovalDelay(v time.Duration) error {
	switch {
	case v < 0:
		return fmt.Errorf("(%s) cannot be negative (0 turns the hold-down off)", v)
	case v > MaxRemovalDelay:
		return fmt.Errorf("(%s) must be at most %s", v, MaxRemovalDelay)
	}
	return nil
}

// HoldsRemovals reports whether the task's condition is one whose removals
// removal_delay holds down: services, catalog-services and nodes. The
// others (consul-kv, schedule, intentions, upstream tasks only) have none.
func (s *Spec) HoldsRemovals() bool {
	c := s.Condition
	return c.Services != nil || c.CatalogServices != nil || c.Nodes != nil
}

// SetRemovalDelay resolves a task's removal_delay when it is decoded: its
// own value when set (own not nil; "0s" included), else the global default
// when it is not 0 for a task whose condition removal_delay applies to
// (a task's own value on another condition is kept, for Validate to
// refuse).
func (s *Spec) SetRemovalDelay(own *time.Duration, global time.Duration) {
	switch {
	case own != nil:
		d := Duration(*own)
		s.RemovalDelay = &d
	case global > 0 && s.HoldsRemovals():
		d := Duration(global)
		s.RemovalDelay = &d
	default:
		s.RemovalDelay = nil
	}
}

// Removal is the task's removal_delay; 0: off.
func (s *Spec) Removal() time.Duration {
	if s.RemovalDelay == nil {
		return 0
	}
	return s.RemovalDelay.D()
}

// validateRemovalDelay checks removal_delay's rules.
func (s *Spec) validateRemovalDelay() error {
	if s.Removal() == 0 {
		if s.RemovalDelay != nil && *s.RemovalDelay < 0 {
			return fieldErr("removal_delay", "(%s) cannot be negative (0 turns the hold-down off)", s.RemovalDelay)
		}
		return nil
	}
	if err := CheckRemovalDelay(s.Removal()); err != nil {
		return fieldErr("removal_delay", "%v", err)
	}
	if !s.HoldsRemovals() {
		return fieldErr("removal_delay", "applies only to tasks with a services, catalog-services or nodes condition (this task's condition is %q)", s.conditionName())
	}
	return nil
}

// conditionName is the condition's type in the configuration's spelling,
// or "none" for a task triggered by upstream tasks only.
func (s *Spec) conditionName() string {
	if t := s.Condition.Type(); t != "" {
		return t
	}
	return "none"
}
