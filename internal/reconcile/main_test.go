package reconcile

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/ctsync/ctsync/internal/policy/policytest"
)

// TestMain fails the package's tests if any goroutine outlives them. The
// policy gate's tests run the policy helper, built into PATH.
func TestMain(m *testing.M) {
	remove := policytest.InPath()
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { remove() }))
}
