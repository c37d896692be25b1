package ha

import (
	"context"
	"log/slog"
	"time"
)

// loadRetry bounds the delay between two reads of the stored state by a new
// leader: it grows by loadRetryStep per attempt up to loadRetryMax.
var (
	loadRetryStep = 500 * time.Millisecond
	loadRetryMax  = 5 * time.Second
)

// LoadState reads the cluster's stored state for a new leader with load,
// retrying a failed or timed-out read (a large history, a slow or briefly
// unreachable Consul) for as long as ctx — the leader's term — lasts: the
// lock is kept (its heartbeats go on meanwhile) rather than given back after
// one slow read. It returns nil once a read succeeded, ctx's error when the
// term ended first.
func LoadState(ctx context.Context, load func(context.Context) error, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for attempt := 1; ; attempt++ {
		err := load(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		delay := min(time.Duration(attempt)*loadRetryStep, loadRetryMax)
		log.Warn("ha: reading the cluster's state failed; retrying while holding the lock", "attempt", attempt, "retry_in", delay, "error", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
