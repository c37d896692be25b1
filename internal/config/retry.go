package config

import (
	"time"

	"github.com/hashicorp/hcl/v2"
)

// Retry is the retry policy of failed runs (the top-level retry block, a
// ctsync extension). A task whose last run failed is dirty: it is retried
// with exponential backoff (doubling from 2s, with jitter) up to MaxDelay
// between attempts, until a run succeeds, the task is disabled, or its
// desired state changes. Terminal failures (invalid configuration) are not
// retried.
type Retry struct {
	// MaxDelay caps the delay between two attempts (default 5m).
	MaxDelay time.Duration
	// MaxRetries bounds the retries of one desired state; 0 (the default)
	// retries until a run succeeds.
	MaxRetries int
}

// DefaultRetryMaxDelay is the default of retry { max_delay }.
const DefaultRetryMaxDelay = 5 * time.Minute

type rawRetry struct {
	maxDelay   opt[time.Duration]
	maxRetries opt[int]
}

// retryBlock decodes retry { max_delay, max_retries }.
func (d *decoder) retryBlock(b *hcl.Block, r *rawRetry) {
	const path = "retry"
	c := d.content(b.Body, path, attrs("max_delay", "max_retries"), nil)
	if v := d.duration(c, "max_delay", path); v.Set {
		if v.V < time.Second {
			d.errf(v.Rng, "retry.max_delay", "must be at least 1s")
		} else {
			r.maxDelay.merge(v)
		}
	}
	if v := d.integer(c, "max_retries", path); v.Set {
		if v.V < 0 {
			d.errf(v.Rng, "retry.max_retries", "cannot be negative (0 retries until a run succeeds)")
		} else {
			r.maxRetries.merge(v)
		}
	}
}

func (r *rawRetry) config() Retry {
	return Retry{MaxDelay: r.maxDelay.or(DefaultRetryMaxDelay), MaxRetries: r.maxRetries.V}
}
