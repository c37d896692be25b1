// Package clock is the time source of the parts whose timing rules are
// tested with a fake clock (the controller's buffer periods, retries and
// loops; the HA elector's heartbeats, step-down and takeover):
// reconciletest.Clock is the fake one.
package clock

import "time"

// Clock tells the time and schedules calls.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call; Stop prevents the call and reports
// whether it was pending. (An alias, so that a fake clock implements Clock
// without importing this package.)
type Timer = interface{ Stop() bool }

// Real is the system clock.
type Real struct{}

// Now is time.Now.
func (Real) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
