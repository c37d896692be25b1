package cli

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/ctsync/ctsync/internal/driver/terraform"
)

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) {
	terraform.RunWatchdogIfAsked() // a daemon under test starts this binary as its fence watchdog
	Name = "ctsync"                // not the test binary's name
	goleak.VerifyTestMain(m)
}
