package cli

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/api/client"
	"github.com/ctsync/ctsync/internal/gate"
)

// taskApprove is `task approve NAME` (ctsync): the plan a safety gate holds
// for the task is shown and, after confirmation, approved: the daemon
// applies exactly that plan.
func taskApprove(args []string, stdout, stderr io.Writer) int {
	return taskDecide(args, stdout, stderr, true)
}

// taskReject is `task reject NAME` (ctsync): the held plan is shown and,
// after confirmation, dropped; nothing is applied.
func taskReject(args []string, stdout, stderr io.Writer) int {
	return taskDecide(args, stdout, stderr, false)
}

func taskDecide(args []string, stdout, stderr io.Writer, accept bool) int {
	name, verb, action, about := "task reject", "reject", "rejecting the plan of", `  Task Reject drops the plan that a safety gate (the task's approval
  block) holds for the task: nothing is applied, and the task waits for
  what it watches to change. The plan is shown first and you are asked to
  confirm.
`
	if accept {
		name, verb, action, about = "task approve", "approve", "approving the plan of", `  Task Approve applies the plan that a safety gate (the task's approval
  block) holds for the task: exactly that plan, never a new one. The plan
  is shown first and you are asked to confirm. If what the task watches
  changed since the plan was made, the plan is superseded: a new plan is
  made and held, to be approved in turn. The approval is recorded with the
  name of the API token used.
`
	}
	c := newClientCmd(name, "[options] <task name>", about, stdout, stderr)
	autoApprove := c.fs.Bool("auto-approve", false, "Skip the interactive confirmation of the held plan")
	planID := c.fs.String("plan", "", "The id of the held plan to "+verb+" (default: the task's pending plan, as shown); "+
		"refused if it is no longer the pending one.")
	task, cl, code := c.nameAndClient(args)
	if code >= 0 {
		return code
	}
	u := c.ui
	ctx, cancel := commandContext()
	defer cancel()
	p, err := cl.HeldPlan(ctx, task)
	if err != nil {
		return u.fail(fmt.Sprintf("Error: unable to read the held plan of '%s'", task), clientError(cl, err))
	}
	printPlan(u, p)
	if p.State != gate.Pending {
		return u.fail(fmt.Sprintf("Error: the plan of '%s' is %s: there is nothing to %s", task, p.State, verb))
	}
	if *planID != "" && *planID != p.ID {
		return u.fail(fmt.Sprintf("Error: plan '%s' is not the pending plan of '%s'", *planID, task),
			fmt.Sprintf("The pending plan is '%s' (shown above).", p.ID))
	}
	if !*autoApprove {
		if accept {
			u.info("Approving applies exactly the plan shown above.")
		} else {
			u.info("Rejecting drops the plan shown above; nothing is applied.")
		}
		u.output("Do you want to %s plan '%s' of '%s'?\n", verb, p.ID, task)
		ok, err := approve(ctx, u, task, action)
		if err != nil {
			return u.fail(fmt.Sprintf("Error asking for approval: %s", err))
		}
		if !ok {
			return ExitOK
		}
	}
	got, err := cl.DecidePlan(ctx, task, p.ID, accept)
	if err != nil {
		var ce *client.Error
		if errors.As(err, &ce) && ce.StatusCode == http.StatusConflict {
			return u.fail(fmt.Sprintf("Error: unable to %s the plan of '%s'", verb, task), ce.Message,
				fmt.Sprintf("Run '%s task %s %s' again to see the task's pending plan.", Name, verb, task))
		}
		return u.fail(fmt.Sprintf("Error: unable to %s the plan of '%s'", verb, task), clientError(cl, err))
	}
	if accept && p.DeletesTask {
		u.info("Plan '%s' of '%s' approved by %s: the daemon destroys the task's infrastructure now and deletes the task.",
			got.ID, task, orDash(got.DecidedBy))
		u.output("The task is gone once destroyed: %s status %s", Name, task)
	} else if accept {
		u.info("Plan '%s' of '%s' approved by %s: the daemon applies it now.", got.ID, task, orDash(got.DecidedBy))
		u.output("Its result is the task's next run: %s status %s", Name, task)
	} else {
		u.info("Plan '%s' of '%s' rejected by %s: nothing is applied; the task waits for a change.", got.ID, task, orDash(got.DecidedBy))
	}
	return ExitOK
}

// approvalsOf returns the controller's held plans for the API when it
// keeps them (it implements api.Approvals), else nil: no run is held.
func approvalsOf(ctrl any) api.Approvals {
	if a, ok := ctrl.(api.Approvals); ok {
		return a
	}
	return nil
}

// printPlan shows a held plan: its id, why it is held, its counts, what
// changed in Consul and the plan text.
func printPlan(u term, p gate.Plan) {
	u.info("Plan '%s' of task '%s' (%s)", p.ID, p.Task, p.State)
	u.output("Held because: %s", p.Reason)
	u.output("Created: %s", p.Created.Local().Format(time.DateTime))
	if !p.Expires.IsZero() {
		u.output("Expires: %s", p.Expires.Local().Format(time.DateTime))
	}
	if p.DecidedBy != "" {
		u.output("Decided by: %s at %s", p.DecidedBy, p.DecidedAt.Local().Format(time.DateTime))
	}
	u.output("Plan: %d to add, %d to change, %d to destroy (%d resources in the state).", p.Add, p.Change, p.Destroy, p.InState)
	if len(p.Changes) > 0 {
		u.output("")
		u.output("Changed in Consul since the last apply:")
		for _, c := range p.Changes {
			u.output("  %s", c)
		}
	}
	if t := strings.TrimRight(p.Text, "\n"); t != "" {
		u.output("")
		for _, l := range strings.Split(t, "\n") {
			u.output("%s", l)
		}
	}
	u.output("")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
