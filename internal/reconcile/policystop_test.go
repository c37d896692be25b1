package reconcile

import (
	"context"
	"os"
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
