package terraform

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them.
//
// One goroutine is not ours to end: terraform-exec (v0.26, cmd_linux.go)
// returns without waiting for the command when the context ends between
// starting Terraform and its check of the context just after, so the
// os/exec goroutine that killed the process waits for a Wait that never
// comes. A test that interrupts a run at the moment Terraform starts hits
// that window now and then (make test, once).
func TestMain(m *testing.M) {
	RunWatchdogIfAsked() // a daemon under test starts this binary as its fence watchdog
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("os/exec.(*Cmd).watchCtx"))
}
