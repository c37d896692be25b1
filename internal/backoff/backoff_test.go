package backoff

import (
	"context"
	"testing"
	"time"
)

func TestExp(t *testing.T) {
	for _, tt := range []struct {
		base, ceiling time.Duration
		n             int
		want          time.Duration
	}{
		{time.Second, time.Minute, 0, time.Second},
		{time.Second, time.Minute, 3, 8 * time.Second},
		{time.Second, time.Minute, 6, time.Minute},
		{time.Second, time.Minute, 40, time.Minute},  // overflows int64
		{time.Second, time.Minute, 100, time.Minute}, // beyond the shift width
		{time.Second, time.Minute, -1, time.Second},
		{time.Minute, time.Second, 0, time.Second}, // base above the cap
	} {
		if got := Exp(tt.base, tt.ceiling, tt.n); got != tt.want {
			t.Errorf("Exp(%s, %s, %d) = %s, want %s", tt.base, tt.ceiling, tt.n, got, tt.want)
		}
	}
}

func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) || !Sleep(context.Background(), 0) {
		t.Fatal("a live context ended the sleep")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) || Sleep(ctx, 0) {
		t.Fatal("an ended context did not end the sleep")
	}
}
