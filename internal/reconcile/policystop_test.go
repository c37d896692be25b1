package reconcile

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

func writeRego(t *testing.T, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "p.rego")
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGatePolicyErrorFailsClosed: a policy that fails at run time (a
// division by zero on an empty state) fails the run, terminal, and
// nothing is applied (issue 35: OPA's lenient default let the plan
// through).
func TestGatePolicyErrorFailsClosed(t *testing.T) {
	spec := servicesTask("fw", "web")
	spec.Policy = &task.Policy{Files: []string{writeRego(t,
		"package ctsync\n\ndeny contains msg if {\n\t100 / count(input.plan.resource_changes) > 50\n\tmsg := \"most of the state\"\n}\n")}}
	g := startGatesWith(t, spec, nil)
	g.set(1)
	var evs []store.Event
	testutil.WaitFor(t, "the failed run recorded", func() bool { evs = g.st.Events("fw"); return len(evs) == 1 })
	ev := evs[0]
	if ev.Success || ev.Error == nil || !strings.Contains(ev.Error.Message, "divide by zero") || !ev.Terminal {
		t.Fatalf("run %+v (error %+v), want a terminal failure naming the division by zero", ev, ev.Error)
	}
	g.noApply(t)
}

// TestDeleteStopsPolicyEvaluation: deleting a task whose policy is being
// evaluated stops the evaluation instead of waiting for its time limit
// (issue 35: DELETE stayed `deleting` while a slow policy ran).
func TestDeleteStopsPolicyEvaluation(t *testing.T) {
	spec := servicesTask("fw", "web")
	spec.Policy = &task.Policy{Timeout: task.Duration(10 * time.Minute), Files: []string{writeRego(t,
		"package ctsync\n\ndeny contains msg if {\n\tsome i in numbers.range(1, 200000)\n\tsome j in numbers.range(1, 200000)\n\ti * j == -1\n\tmsg := \"never\"\n}\n")}}
	g := startGatesWith(t, spec, nil)
	g.set(1)
	testutil.WaitFor(t, "the policy evaluation started", func() bool {
		g.ctrl.mu.Lock()
		e := g.ctrl.tasks["fw"]
		g.ctrl.mu.Unlock()
		e.run.policyStop.mu.Lock()
		defer e.run.policyStop.mu.Unlock()
		return e.run.policyStop.cancel != nil
	})
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := g.ctrl.Delete(ctx, "fw", false); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Fatalf("Delete took %v", d)
	}
	g.noApply(t)
}

// A failure of the policy helper (it crashes, then it does not answer
// within the policy's time limit) fails the run without making it
// terminal, nothing applied: the run is retried, and applies once the
// helper works again.
func TestGatePolicyHelperFailureIsRetried(t *testing.T) {
	real, err := exec.LookPath("ctsync-policy")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	count := filepath.Join(dir, "calls")
	script := "#!/bin/sh\nn=$(cat " + count + " 2>/dev/null || echo 0)\nn=$((n+1))\necho $n > " + count + "\n" +
		"case $n in\n1) echo 'helper crashed' >&2; exit 2;;\n2) exec sleep 600;;\nesac\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "ctsync-policy"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))

	spec := servicesTask("fw", "web")
	spec.Policy = &task.Policy{Timeout: task.Duration(testutil.Scale(5 * time.Second)), Files: []string{writeRego(t,
		"package ctsync\n\ndeny contains msg if {\n\tinput.task.name == \"other\"\n\tmsg := \"not this task\"\n}\n")}}
	g := startGatesWith(t, spec, nil)
	g.set(1)
	var evs []store.Event
	testutil.Eventually(t, 2*time.Minute, "the runs recorded until one succeeds or is terminal", func() bool {
		evs = g.st.Events("fw")
		return len(evs) > 0 && (evs[0].Success || evs[0].Terminal)
	})
	if !evs[0].Success {
		t.Fatalf("the last run %+v (error %+v), want the retry's success", evs[0], evs[0].Error)
	}
	g.waitApplied(t, "fw")
	if len(evs) != 3 {
		t.Fatalf("%d events, want the two failures and the apply: %+v", len(evs), evs)
	}
	for i, want := range []string{"policy helper " + filepath.Join(dir, "ctsync-policy") + ": failed: exit status 2: helper crashed", "did not finish within"} {
		ev := evs[2-i]
		if ev.Success || ev.Terminal || ev.Error == nil || !strings.Contains(ev.Error.Message, want) {
			t.Errorf("failure %d: %+v (error %+v), want a failure that is not terminal, naming %q", i+1, ev, ev.Error, want)
		}
	}
}
