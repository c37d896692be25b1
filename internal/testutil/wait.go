package testutil

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// WaitTimeout is how long WaitFor waits (before Scale).
const WaitTimeout = 10 * time.Second

// ScaleEnv names the environment variable that multiplies every deadline
// of the tests (Eventually, WaitFor and the waits that call Scale): a
// number such as 2 or 0.5. It only moves the point at which a wait gives
// up; a test that passes waits exactly as long either way.
const ScaleEnv = "CTSYNC_TEST_TIMEOUT_SCALE"

// DefaultScale is the factor when ScaleEnv is unset. The deadlines written
// in the tests hold on a quiet 2-core machine with room to spare; this
// factor keeps them holding at a load average of 10-16 on 2 cores, as when
// CI, or several developers, share the machine.
const DefaultScale = 3.0

var scale = sync.OnceValues(func() (float64, error) { return parseScale(os.Getenv(ScaleEnv)) })

// parseScale reads a value of ScaleEnv ("" is DefaultScale).
func parseScale(v string) (float64, error) {
	if v == "" {
		return DefaultScale, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0 && f <= 1000) {
		return 0, fmt.Errorf("%s=%q: want a number above 0 and at most 1000, such as 2 or 0.5", ScaleEnv, v)
	}
	return f, nil
}

// TimeoutScale returns the factor Scale applies (ScaleEnv); it panics on
// an invalid value so that a typo does not go unnoticed.
func TimeoutScale() float64 {
	f, err := scale()
	if err != nil {
		panic(err)
	}
	return f
}

// Scale returns a test deadline d multiplied by the factor of ScaleEnv
// (DefaultScale when unset). Use it for every wait that gives up after a
// while (a select on time.After, a context's timeout, a polling loop's
// deadline); never for a pace, a delay a test injects, or a measured
// window.
func Scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) * TimeoutScale())
}

// WaitFor waits up to Scale(WaitTimeout) for cond: the one wait helper of
// the tests (Eventually with the usual timeout).
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Eventually(t, WaitTimeout, what, cond)
}

// Eventually polls cond until it returns true, and fails the test naming
// what it waited for when Scale(timeout) passes first. It polls every
// millisecond at first, then less often (up to every 20ms), so that a
// state that comes soon is seen at once and a slow one (an HTTP call, a
// file) is not hammered. cond runs in the test's goroutine: it may call
// t.Fatal.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	timeout = Scale(timeout)
	deadline := time.Now().Add(timeout)
	for every := time.Millisecond; !cond(); every = min(2*every, 20*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(every) // polling a condition, not waiting for time to pass
	}
}
