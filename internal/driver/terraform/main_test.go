package terraform

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) {
	RunWatchdogIfAsked() // a daemon under test starts this binary as its fence watchdog
	goleak.VerifyTestMain(m)
}
