package terraform

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/driver"
)

// The consul backend's failure to lock while loading the state (what a
// held lock looks like with Terraform 1.x and the CTS state layout), and
// the generic "Error acquiring the state lock", are both recognised, with
// the holder taken from the Lock Info block, plain or boxed.
func TestStateLockHolder(t *testing.T) {
	consulPlain := "\nError: error loading state: failed to lock state in Consul: Lock Info:\n" +
		"  ID:        abc\n  Path:      x\n  Operation: OperationTypeApply\n  Who:       operator@bastion\n" +
		"  Version:   1.11.4\n  Created:   2026-01-01 00:00:00 +0000 UTC\n  Info:      held\n\n"
	generic := "╷\n│ Error: Error acquiring the state lock\n│ \n│ Error message: resource temporarily unavailable\n" +
		"│ Lock Info:\n│   ID:        f00\n│   Path:      terraform.tfstate\n│   Operation: OperationTypePlan\n" +
		"│   Who:       root@host\n│   Version:   1.11.4\n│   Created:   2026-01-02 03:04:05 +0000 UTC\n│   Info:      \n│ \n" +
		"│ Terraform acquires a state lock to protect the state from being written\n│ by multiple users at the same time.\n╵\n"
	for _, tc := range []struct {
		name, stderr, want string
		locked             bool
	}{
		{"consul", consulPlain, " (held by operator@bastion, operation OperationTypeApply, since 2026-01-01 00:00:00 +0000 UTC, lock ID abc)", true},
		{"generic_boxed", generic, " (held by root@host, operation OperationTypePlan, since 2026-01-02 03:04:05 +0000 UTC, lock ID f00)", true},
		{"no_info", "Error: Error acquiring the state lock\n", "", true},
		{"other", "Error: Invalid provider configuration\n", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, locked := stateLockHolder(tc.stderr)
			if got != tc.want || locked != tc.locked {
				t.Fatalf("got %q, %v; want %q, %v", got, locked, tc.want, tc.locked)
			}
		})
	}
}

// fail turns a lock failure into an error that says so, names the holder,
// and wraps driver.ErrStateLocked (the controller retries those).
func TestFailStateLocked(t *testing.T) {
	d := &Driver{sink: &sink{}}
	d.sink.attach(nil)
	d.sink.begin("apply", false)
	_, _ = d.sink.writer("stderr").Write([]byte("\nError: error loading state: failed to lock state in Consul: Lock Info:\n  ID:        abc\n  Who:       operator@bastion\n\n"))
	err := d.fail("apply", &exec.ExitError{})
	if !errors.Is(err, driver.ErrStateLocked) {
		t.Fatalf("%v does not wrap ErrStateLocked", err)
	}
	want := "apply: the Terraform state is locked by another process (held by operator@bastion, lock ID abc); " +
		"Error: error loading state: failed to lock state in Consul"
	if err.Error() != want {
		t.Fatalf("got  %q\nwant %q", err.Error(), want)
	}
	var de *driver.Error
	if !errors.As(err, &de) || !strings.Contains(de.Summary, "operator@bastion") {
		t.Fatalf("not a *driver.Error with the holder: %#v", err)
	}
}

// A Terraform killed by a signal (crash, OOM killer) is reported as such,
// not as a bare "signal: killed".
func TestFailKilledBySignal(t *testing.T) {
	runErr := exec.Command("sh", "-c", "kill -9 $$").Run()
	var ee *exec.ExitError
	if !errors.As(runErr, &ee) {
		t.Fatalf("no exit error: %v", runErr)
	}
	d := &Driver{sink: &sink{}}
	d.sink.attach(nil)
	d.sink.begin("apply", false)
	err := d.fail("apply", fmt.Errorf("%w\n%s", runErr, "")) // as terraform-exec wraps it
	want := `apply: terraform was terminated by signal "killed" before it finished (it crashed or was killed)`
	if err.Error() != want {
		t.Fatalf("got  %q\nwant %q", err.Error(), want)
	}
	// With Terraform's own diagnostics, they are kept.
	d.sink.begin("apply", false)
	_, _ = d.sink.writer("stderr").Write([]byte("Error: Provider produced inconsistent result\n"))
	err = d.fail("apply", fmt.Errorf("%w\n%s", runErr, ""))
	if !strings.HasSuffix(err.Error(), "(it crashed or was killed); Error: Provider produced inconsistent result") {
		t.Fatalf("got %q", err.Error())
	}
}
