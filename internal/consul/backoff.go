package consul

import (
	"time"

	"github.com/ctsync/ctsync/internal/backoff"
)

// Retry timing for talking to Consul. The cap is short on purpose: after an
// outage every View must notice within seconds that Consul is back, so no
// retry may sleep longer than DefaultBackoffCap.
const (
	DefaultBackoffBase = 250 * time.Millisecond
	DefaultBackoffCap  = 10 * time.Second
)

// Backoff yields exponentially growing retry delays with "full jitter": the
// n-th delay (n from 0) is uniform in [0, min(Cap, Base*2^n)]. Spreading the
// whole interval keeps many Views that failed together from retrying in
// lock-step against a recovering agent. Reset after a success. A Backoff is
// not safe for concurrent use; each retry loop owns one.
type Backoff struct {
	Base, Cap time.Duration

	attempt int
	ceiling time.Duration
}

// NewBackoff returns a Backoff; zero or negative durations select the
// defaults.
func NewBackoff(base, maxDelay time.Duration) *Backoff {
	if base <= 0 {
		base = DefaultBackoffBase
	}
	if maxDelay <= 0 {
		maxDelay = DefaultBackoffCap
	}
	if maxDelay < base {
		maxDelay = base
	}
	return &Backoff{Base: base, Cap: maxDelay}
}

// Next returns the delay before the next retry and advances one step.
func (b *Backoff) Next() time.Duration {
	c := backoff.Exp(b.Base, b.Cap, b.attempt)
	b.attempt++
	b.ceiling = c
	return backoff.Full.Spread(c)
}

// Ceiling is the upper bound of the delay last returned by Next (0 before
// the first call). Callers use it to rate-limit their logging to one line
// per backoff step.
func (b *Backoff) Ceiling() time.Duration { return b.ceiling }

// Attempts is how many delays Next has returned since the last Reset.
func (b *Backoff) Attempts() int { return b.attempt }

// Reset starts again from Base; call it after a success.
func (b *Backoff) Reset() {
	b.attempt = 0
	b.ceiling = 0
}
