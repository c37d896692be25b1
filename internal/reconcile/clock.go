package reconcile

import (
	"math/rand/v2"
	"time"

	"github.com/ctsync/ctsync/internal/backoff"
)

// Clock is the controller's time source: buffer periods and retry delays
// run on it, so tests can drive them with a fake clock instead of sleeping.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call; Stop prevents the call and reports
// whether it was pending. (An alias, so that a fake clock in another
// package implements Clock without importing this one.)
type Timer = interface{ Stop() bool }

type realClock struct{}

func (realClock) Now() time.Time                            { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Retry timing of failed runs.
const (
	// DefaultRetryBase is the delay before the first retry of a failed run.
	DefaultRetryBase = 2 * time.Second
	// DefaultRetryMax caps the delay between two retries.
	DefaultRetryMax = 5 * time.Minute
)

// retryDelay is the delay before retry number attempt (from 1) of a failed
// run: base doubled at each attempt, capped at maxDelay, minus up to a
// quarter at random (jitter in [0,1)), so tasks that failed together do not
// retry in lock-step while the delay still grows with every failure.
func retryDelay(attempt int, base, maxDelay time.Duration, jitter float64) time.Duration {
	d := backoff.Exp(base, maxDelay, max(attempt, 1)-1)
	return d - time.Duration(jitter*float64(d)/4)
}

func jitterNow() float64 { return rand.Float64() }
