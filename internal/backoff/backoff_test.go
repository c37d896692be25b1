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

func TestJitterAndPolicy(t *testing.T) {
	d := 8 * time.Second
	for _, tt := range []struct {
		j        Jitter
		lo, high time.Duration // At(d, 0) and the bound of At(d, r<1)
	}{
		{Full, 0, d},
		{Shorter, 6 * time.Second, d},
		{Longer, d, 10 * time.Second},
		{Around20, 6400 * time.Millisecond, 9600 * time.Millisecond},
	} {
		if got := tt.j.At(d, 0); got != tt.lo {
			t.Errorf("%+v.At(%s, 0) = %s, want %s", tt.j, d, got, tt.lo)
		}
		if got := tt.j.At(d, 0.999); got < tt.lo || got > tt.high {
			t.Errorf("%+v.At(%s, 0.999) = %s, want in [%s, %s]", tt.j, d, got, tt.lo, tt.high)
		}
		for range 100 {
			if got := tt.j.Spread(d); got < tt.lo || got > tt.high {
				t.Fatalf("%+v.Spread(%s) = %s, want in [%s, %s]", tt.j, d, got, tt.lo, tt.high)
			}
		}
	}
	p := Policy{Base: time.Second, Max: 5 * time.Second, Jitter: Shorter}
	for attempt, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 9: 5 * time.Second} {
		if got := p.Step(attempt); got != want {
			t.Errorf("Step(%d) = %s, want %s", attempt, got, want)
		}
		if got := p.Delay(attempt); got > want || got < want*3/4 {
			t.Errorf("Delay(%d) = %s, want in [%s, %s]", attempt, got, want*3/4, want)
		}
	}
}
