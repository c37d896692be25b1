// Package backoff is the one computation of retry delays: exponential
// growth (Exp) and its random spread (Jitter), together a Policy. Every
// retry loop (Consul calls, webhook deliveries, task retries, Vault lease
// renewals, drift checks) uses them.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Jitter is the random spread of a delay: d becomes uniform in
// [d·(1+Lo), d·(1+Hi)), so that the retry loops that failed together do
// not retry in lock-step.
type Jitter struct{ Lo, Hi float64 }

// The spreads in use.
var (
	// Full spreads a delay over [0, d) ("full jitter": Consul calls).
	Full = Jitter{Lo: -1}
	// Shorter takes up to a quarter off (failed runs: the delay still
	// grows with every failure).
	Shorter = Jitter{Lo: -0.25}
	// Longer adds up to a quarter (a locked Terraform state: never
	// earlier than the step).
	Longer = Jitter{Hi: 0.25}
	// Around10 and Around20 spread by ±10% and ±20%.
	Around10 = Jitter{Lo: -0.1, Hi: 0.1}
	Around20 = Jitter{Lo: -0.2, Hi: 0.2}
)

// At is d spread by j for the draw r in [0, 1) (tests pass fixed draws).
func (j Jitter) At(d time.Duration, r float64) time.Duration {
	return d + time.Duration((j.Lo+(j.Hi-j.Lo)*r)*float64(d))
}

// Spread is d spread by j at random.
func (j Jitter) Spread(d time.Duration) time.Duration {
	return j.At(d, rand.Float64())
}

// Policy is a retry policy: Base doubled at each attempt up to Max, spread
// by Jitter.
type Policy struct {
	Base, Max time.Duration
	Jitter    Jitter
}

// Step is the delay before retry number attempt (from 1) without jitter.
func (p Policy) Step(attempt int) time.Duration {
	return Exp(p.Base, p.Max, max(attempt, 1)-1)
}

// Delay is the delay before retry number attempt (from 1).
func (p Policy) Delay(attempt int) time.Duration {
	return p.Jitter.Spread(p.Step(attempt))
}

// Exp returns base·2^n, capped at ceiling; n counts from 0. A step that
// would overflow, and a negative n, give ceiling and base respectively.
func Exp(base, ceiling time.Duration, n int) time.Duration {
	if n < 0 {
		n = 0
	}
	if n < 62 {
		if d := base << uint(n); d > 0 && d < ceiling && d>>uint(n) == base {
			return d
		}
	}
	return ceiling
}

// Sleep waits d, or less when ctx ends first; it reports whether ctx is
// still live. A d <= 0 does not wait.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
