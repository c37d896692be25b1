package reconcile

import (
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

// retryPolicy is the delay before each retry of a failed run: base doubled
// at each attempt, capped at maxDelay, minus up to a quarter at random, so
// tasks that failed together do not retry in lock-step while the delay
// still grows with every failure.
func retryPolicy(base, maxDelay time.Duration) backoff.Policy {
	return backoff.Policy{Base: base, Max: maxDelay, Jitter: backoff.Shorter}
}

// lockPolicy is the delay before each retry of a run that found its
// Terraform state locked: doubled up to LockRetryCap, plus up to a quarter
// at random (see LockRetryCap).
func lockPolicy(base time.Duration) backoff.Policy {
	return backoff.Policy{Base: base, Max: LockRetryCap, Jitter: backoff.Longer}
}
