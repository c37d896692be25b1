// Package backoff is the one computation of exponential retry delays: each
// retry loop (Consul calls, webhook deliveries, task retries) applies its
// own jitter to it.
package backoff

import (
	"context"
	"time"
)

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
