package reconciletest

import (
	"slices"
	"sync"
	"time"
)

// Clock is a fake clock for the controller (reconcile.Clock): time moves
// only when a test calls Advance, which runs the callbacks that fall due.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever a timer is added
}

type fakeTimer struct {
	c       *Clock
	at      time.Time
	d       time.Duration
	f       func()
	stopped bool
}

// NewClock returns a fake clock set to an arbitrary fixed time.
func NewClock() *Clock {
	return &Clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), changed: make(chan struct{})}
}

// Now returns the fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f at Now()+d; with d <= 0 it runs f at once (in its
// own goroutine), as time.AfterFunc does.
func (c *Clock) AfterFunc(d time.Duration, f func()) interface{ Stop() bool } {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), d: d, f: f}
	if d <= 0 {
		t.stopped = true // not pending: it has fired
		go f()
		return t
	}
	c.timers = append(c.timers, t)
	close(c.changed)
	c.changed = make(chan struct{})
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped && slices.Contains(t.c.timers, t)
	t.stopped = true
	t.c.timers = slices.DeleteFunc(t.c.timers, func(x *fakeTimer) bool { return x == t })
	return was
}

// Pending returns the delays (as requested) of the timers not yet fired or
// stopped, in the order they were set.
func (c *Clock) Pending() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]time.Duration, len(c.timers))
	for i, t := range c.timers {
		out[i] = t.d
	}
	return out
}

// PendingAt reports whether a timer not yet fired or stopped falls due at
// exactly at: what a test waits for before it moves the clock to a
// deadline the code under test has computed, rather than for any timer
// (one set earlier may still be pending while the code re-arms).
func (c *Clock) PendingAt(at time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.ContainsFunc(c.timers, func(t *fakeTimer) bool { return t.at.Equal(at) })
}

// WaitPending blocks until at least n timers are pending, or the deadline
// (real time) passes; it reports whether they are.
func (c *Clock) WaitPending(n int, within time.Duration) bool {
	deadline := time.After(within)
	for {
		c.mu.Lock()
		ok, ch := len(c.timers) >= n, c.changed
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-deadline:
			return false
		}
	}
}

// Advance moves the time forward by d and runs, in time order, every
// callback that falls due (each in its own goroutine, as time.AfterFunc).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	keep := c.timers[:0]
	for _, t := range c.timers {
		if !t.at.After(c.now) {
			due = append(due, t)
		} else {
			keep = append(keep, t)
		}
	}
	c.timers = keep
	c.mu.Unlock()
	slices.SortFunc(due, func(a, b *fakeTimer) int { return a.at.Compare(b.at) })
	for _, t := range due {
		go t.f()
	}
}
