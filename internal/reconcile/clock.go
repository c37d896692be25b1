package reconcile

import (
	"math/rand/v2"
	"time"

	"github.com/ctsync/ctsync/internal/backoff"
	"github.com/ctsync/ctsync/internal/clock"
)

// Clock is the controller's time source: buffer periods, retry delays and
// the schedule and drift loops run on it, so tests can drive them with a
// fake clock instead of sleeping.
type Clock = clock.Clock

// Timer is a pending Clock.AfterFunc call.
type Timer = clock.Timer

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
