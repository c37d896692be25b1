package cli

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/gate/gatetest"
)

// serveGates runs the API with the fake controller and the fake gates.
func serveGates(t *testing.T, f *fakeCtrl, fa *gatetest.Approvals) *httptest.Server {
	t.Helper()
	return serveWith(t, api.Options{Controller: f, Approvals: fa})
}

// planCreated is local: the CLI prints local times.
var planCreated = time.Date(2026, 11, 26, 1, 2, 3, 0, time.Local)

func holdPlan(fa *gatetest.Approvals, task string) gate.Plan {
	return fa.Hold(gate.Plan{Task: task, ID: "p-" + task, Created: planCreated, Reason: "plan destroys 3 of 4 resources (max_destroy 1)",
		Destroy: 3, InState: 4, Text: "  # null_resource.web[\"web-1\"] will be destroyed\nPlan: 0 to add, 0 to change, 3 to destroy.\n",
		Changes: []string{"web: 3 removed (web-1, web-2, web-3)"}})
}

// task approve and task reject: the held plan shown, confirmed with
// "yes" (or -auto-approve), decided with its id; "no" decides nothing; a
// task without a held plan, a plan no longer pending and a superseded
// plan fail with the reason.
func TestTaskApproveReject(t *testing.T) {
	cases := []struct {
		name, stdin string
		args        []string
		setup       func(*gatetest.Approvals)
		code        int
		calls       []string
		out         []string
	}{
		{"approve yes", "yes\n", []string{"approve", "a"}, func(fa *gatetest.Approvals) { holdPlan(fa, "a") }, ExitOK,
			[]string{"approve a p-a by cli"},
			[]string{"==> Plan 'p-a' of task 'a' (pending)", "Held because: plan destroys 3 of 4 resources (max_destroy 1)",
				"Plan: 0 to add, 0 to change, 3 to destroy (4 resources in the state).", "web: 3 removed (web-1, web-2, web-3)",
				"will be destroyed", "Do you want to approve plan 'p-a' of 'a'?", prompt, "==> Plan 'p-a' of 'a' approved by cli"}},
		{"approve no", "no\n", []string{"approve", "a"}, func(fa *gatetest.Approvals) { holdPlan(fa, "a") }, ExitOK,
			nil, []string{"cancels: the plan stays held, neither approved nor rejected.\n", "Cancelled approving the plan of task 'a'"}},
		{"reject no", "no\n", []string{"reject", "a"}, func(fa *gatetest.Approvals) { holdPlan(fa, "a") }, ExitOK,
			nil, []string{"cancels: the plan stays held, neither approved nor rejected.\n", "Cancelled rejecting the plan of task 'a'"}},
		{"approve auto", "", []string{"approve", "-auto-approve", "a"}, func(fa *gatetest.Approvals) { holdPlan(fa, "a") }, ExitOK,
			[]string{"approve a p-a by cli"}, []string{"approved by cli"}},
		{"reject yes", "yes\n", []string{"reject", "a"}, func(fa *gatetest.Approvals) { holdPlan(fa, "a") }, ExitOK,
			[]string{"reject a p-a by cli"}, []string{"Rejecting drops the plan", "==> Plan 'p-a' of 'a' rejected by cli: nothing is applied"}},
		{"plan flag matches", "", []string{"approve", "-auto-approve", "-plan=p-a", "a"}, func(fa *gatetest.Approvals) { holdPlan(fa, "a") }, ExitOK,
			[]string{"approve a p-a by cli"}, nil},
		{"plan flag stale", "", []string{"approve", "-auto-approve", "-plan=p-old", "a"}, func(fa *gatetest.Approvals) { holdPlan(fa, "a") }, ExitError,
			nil, []string{"Error: plan 'p-old' is not the pending plan of 'a'"}},
		{"no plan", "", []string{"approve", "a"}, nil, ExitError,
			nil, []string{"Error: unable to read the held plan of 'a'", "404 Not Found: task 'a' has no held plan"}},
		{"unknown task", "", []string{"reject", "nope"}, nil, ExitError,
			nil, []string{"does not exist"}},
		{"expired", "", []string{"approve", "a"}, func(fa *gatetest.Approvals) { holdPlan(fa, "a"); fa.Expire("a") }, ExitError,
			nil, []string{"Error: the plan of 'a' is expired: there is nothing to approve"}},
		{"superseded", "yes\n", []string{"approve", "a"}, func(fa *gatetest.Approvals) { holdPlan(fa, "a"); fa.Move("a") }, ExitError,
			[]string{"approve a p-a by cli"}, []string{"Error: unable to approve the plan of 'a'", "plan p-a is superseded by plan",
				"Run 'ctsync task approve a' again"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fa := gatetest.New()
			if c.setup != nil {
				c.setup(fa)
			}
			serveGates(t, newFakeCtrl(specNamed("a")), fa)
			code, out, errOut := run(t, c.stdin, append([]string{"task"}, c.args...)...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\n%s\n%s", code, c.code, out, errOut)
			}
			if got := fa.Calls(); strings.Join(got, "|") != strings.Join(c.calls, "|") {
				t.Errorf("calls %q, want %q", got, c.calls)
			}
			for _, w := range c.out {
				if !strings.Contains(out+errOut, w) {
					t.Errorf("output lacks %q:\n%s\n%s", w, out, errOut)
				}
			}
		})
	}
}

// The held plan and the full approve exchange, byte for byte.
func TestTaskApproveGolden(t *testing.T) {
	for _, c := range []struct {
		name  string
		stdin string
		args  []string
	}{
		{"task_approve_help", "", []string{"task", "approve", "-help"}},
		{"task_reject_help", "", []string{"task", "reject", "-help"}},
		{"task_approve_yes", "yes\n", []string{"task", "approve", "a"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fa := gatetest.New()
			fa.Now = func() time.Time { return planCreated.Add(time.Minute) }
			holdPlan(fa, "a")
			ts := serveGates(t, newFakeCtrl(specNamed("a")), fa)
			code, out, errOut := run(t, c.stdin, c.args...)
			got := fmt.Sprintf("$ ctsync %s\nexit %d\n--- stdout\n%s--- stderr\n%s", strings.Join(c.args, " "), code, out, errOut)
			got = strings.ReplaceAll(got, ts.URL, "<address>")
			golden(t, c.name, got)
		})
	}
}

// ctsync status: a held task is waiting, its plan's id, counts, reason and
// expiry under the table with the commands that decide on it.
func TestStatusShowsHeldPlan(t *testing.T) {
	fa := gatetest.New()
	p := holdPlan(fa, "a")
	p.Expires = planCreated.Add(24 * time.Hour)
	fa.Hold(p)
	serveGates(t, newFakeCtrl(specNamed("a"), specNamed("b")), fa)
	old := now
	now = func() time.Time { return planCreated.Add(time.Hour) }
	t.Cleanup(func() { now = old })
	code, out, errOut := run(t, "", "status")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, w := range []string{"waiting", "after approval", "Waiting for approval:",
		"a: plan p-a (+0 ~0 -3): plan destroys 3 of 4 resources (max_destroy 1); expires in 23h0m",
		"ctsync task approve a | ctsync task reject a"} {
		if !strings.Contains(out, w) {
			t.Errorf("status lacks %q:\n%s", w, out)
		}
	}
	code, out, _ = run(t, "", "status", "-status=waiting")
	if code != ExitOK || !strings.Contains(out, "a ") || strings.Contains(out, "\nb ") {
		t.Errorf("-status=waiting: %d\n%s", code, out)
	}
}

// The daemon serves the controller's held plans once the controller keeps
// them, and none before.
func TestApprovalsOf(t *testing.T) {
	if approvalsOf(newFakeCtrl()) != nil {
		t.Error("a controller without held plans gives the API an Approvals")
	}
	if fa := gatetest.New(); approvalsOf(fa) != fa {
		t.Error("an Approvals is not passed on")
	}
}
