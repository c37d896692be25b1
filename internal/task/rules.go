package task

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/cronexpr"
)

// This file holds the task rules that configuration decoding and the API
// both apply before Validate: buffer_period inheritance and the cron
// expression of a schedule condition (which Validate checks too).

// BufferSetting is a buffer_period block as written: each field is nil
// when it was not set.
type BufferSetting struct {
	Enabled  *bool
	Min, Max *Duration
}

// IsSet reports whether the block sets anything (an empty block inherits,
// like no block).
func (b BufferSetting) IsSet() bool { return b.Enabled != nil || b.Min != nil || b.Max != nil }

// InheritBufferPeriod applies the CTS inheritance rules of buffer_period:
// nothing set is parent; enabled = false is off; otherwise on, min from own,
// else parent's min when parent is on, else DefaultBufferPeriod's; max from
// own, else 4 x min. An explicit max below min is left for Validate to
// report, not fixed. The global block inherits from DefaultBufferPeriod, a
// task's from the global one.
func InheritBufferPeriod(own BufferSetting, parent BufferPeriod) BufferPeriod {
	if !own.IsSet() {
		return parent
	}
	if own.Enabled != nil && !*own.Enabled {
		return BufferPeriod{}
	}
	out := BufferPeriod{Enabled: true}
	switch {
	case own.Min != nil:
		out.Min = *own.Min
	case parent.Enabled:
		out.Min = parent.Min
	default:
		out.Min = DefaultBufferPeriod.Min
	}
	if own.Max != nil {
		out.Max = *own.Max
	} else {
		out.Max = max(4*out.Min, out.Min) // max(...): 4 x min may overflow
	}
	return out
}

// SetBufferPeriod sets s.BufferPeriod from the task's own buffer_period
// and the global one: none for a schedule task (its runs are not
// debounced), else InheritBufferPeriod. It reports whether a buffer_period
// that was set is ignored (a schedule task's).
func (s *Spec) SetBufferPeriod(own BufferSetting, global BufferPeriod) (ignored bool) {
	if s.Condition.Schedule != nil {
		s.BufferPeriod = &BufferPeriod{}
		return own.IsSet()
	}
	bp := InheritBufferPeriod(own, global)
	s.BufferPeriod = &bp
	return false
}

// CheckCron parses a cron expression (hashicorp/cronexpr syntax) and
// refuses one that never fires. cronexpr panics on some malformed input;
// that is an error too. The error does not quote the expression.
func CheckCron(expr string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.New("is not a valid cron expression: malformed expression")
		}
	}()
	e, perr := cronexpr.Parse(expr)
	if perr != nil {
		return fmt.Errorf("is not a valid cron expression: %v", perr)
	}
	if e.Next(time.Now()).IsZero() {
		return errors.New("never fires")
	}
	return nil
}
