package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/store"
)

// A task waiting for a retry says so (not "on change"), and the error is
// Terraform's one-line summary with the terminal flag.
func TestStatusShowsRetryAndErrorSummary(t *testing.T) {
	base := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	next := base.Add(90 * time.Second)
	tasks := map[string]api.TaskStatus{
		"fw": {TaskName: "fw", Status: "critical", Enabled: true,
			Retry: &api.RetryStatus{Attempt: 4, NextAt: next, LastError: "Error: local-exec provisioner error"},
			Events: []store.Event{{ID: "1", EndTime: base.Add(-time.Minute), Trigger: "retry",
				Error:        &store.EventError{Message: "apply: Error: local-exec provisioner error: Error running command '/usr/bin/firewall APPLY ...'"},
				ErrorSummary: "Error: local-exec provisioner error"}}},
		"bad": {TaskName: "bad", Status: "errored", Enabled: true,
			Events: []store.Event{{ID: "2", EndTime: base.Add(-time.Minute), Terminal: true,
				Error: &store.EventError{Message: "apply: Error: Unsupported argument: x"}, ErrorSummary: "Error: Unsupported argument"}}},
	}
	var b strings.Builder
	printStatus(&b, tasks, base)
	out := b.String()
	for _, want := range []string{
		"retry 4 in 1m (" + next.Local().Format("15:04:05") + ")",
		"fw: Error: local-exec provisioner error\n",
		"bad: Error: Unsupported argument [terminal",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "firewall") {
		t.Errorf("the provisioner's command line is shown:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "fw ") && strings.Contains(line, "on change") {
			t.Errorf("a task waiting for a retry shows 'on change': %s", line)
		}
	}
}

// A retry whose time has come (it waits for a run slot) is due now, not
// "in 0s".
func TestStatusRetryDueNow(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, at := range []time.Time{now.Add(-3 * time.Second), now.Add(300 * time.Millisecond)} {
		ts := api.TaskStatus{TaskName: "fw", Status: "critical", Enabled: true, Retry: &api.RetryStatus{Attempt: 2, NextAt: at}}
		if got := nextRun(ts, now); got != "retry 2 due now" {
			t.Errorf("retry at %s, now %s: %q, want retry 2 due now", at, now, got)
		}
	}
}
