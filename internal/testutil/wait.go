package testutil

import (
	"testing"
	"time"
)

// WaitTimeout is how long WaitFor waits.
const WaitTimeout = 10 * time.Second

// WaitFor waits up to WaitTimeout for cond: the one wait helper of the
// tests (Eventually with the usual timeout).
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Eventually(t, WaitTimeout, what, cond)
}

// Eventually polls cond until it returns true, and fails the test naming
// what it waited for when timeout passes first. It polls every millisecond
// at first, then less often (up to every 20ms), so that a state that comes
// soon is seen at once and a slow one (an HTTP call, a file) is not
// hammered. cond runs in the test's goroutine: it may call t.Fatal.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for every := time.Millisecond; !cond(); every = min(2*every, 20*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(every) // polling a condition, not waiting for time to pass
	}
}
