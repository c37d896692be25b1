package ha

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A new leader whose reads of the stored state fail or time out keeps
// trying (it keeps the lock) until one succeeds, and stops when its term
// ends.
func TestLoadStateRetriesWhileLeading(t *testing.T) {
	loadRetryStep, loadRetryMax = time.Millisecond, 2*time.Millisecond
	t.Cleanup(func() { loadRetryStep, loadRetryMax = 500*time.Millisecond, 5*time.Second })
	calls := 0
	slow := func(context.Context) error {
		calls++
		if calls < 4 {
			return context.DeadlineExceeded // a read that took longer than the store's 5 s bound
		}
		return nil
	}
	if err := LoadState(context.Background(), slow, nil); err != nil || calls != 4 {
		t.Fatalf("err=%v after %d reads, want success on the 4th", err, calls)
	}

	ctx, endTerm := context.WithCancel(context.Background())
	n := 0
	err := LoadState(ctx, func(context.Context) error {
		n++
		if n == 3 {
			endTerm()
		}
		return errors.New("connection refused")
	}, nil)
	if err == nil || n != 3 {
		t.Fatalf("after the term ended: err=%v, reads=%d", err, n)
	}
}
