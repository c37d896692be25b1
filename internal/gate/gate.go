// Package gate holds what ctsync's safety gates share: the verdict of a
// task's approval rules on a plan, and the held plan an operator approves
// or rejects. It decides nothing about running; the controller does.
package gate

import (
	"fmt"
	"time"

	"github.com/ctsync/ctsync/internal/task"
)

// Counts are a plan's resource changes and the size of the state it
// starts from.
type Counts struct {
	// Add, Change and Destroy are counted as Terraform's summary counts
	// them: a replacement is one add and one destroy.
	Add, Change, Destroy int
	// Replace is how many of the plan's changes are replacements
	// (["delete","create"] or ["create","delete"] of one address); they
	// are in Add and Destroy too. 0 when the driver cannot tell them
	// apart: every destroy is then judged as one.
	Replace int
	// InState is the number of resources in the task's state before the
	// plan (managed resources; data sources not counted).
	InState int
}

// PureDestroy is how many resources the plan destroys without creating
// them again: what max_destroy and max_destroy_percent judge.
func (c Counts) PureDestroy() int { return max(0, c.Destroy-c.Replace) }

// Hold returns why the approval rules hold a plan with these counts, or
// "" when they let it apply. It judges the plan alone; Judge adds the
// destroys applied within approval.window. A plan without changes is
// never held.
func Hold(a *task.Approval, c Counts) string {
	return judgePlan(a, c).Reason
}

// judgePlan applies the rules to the plan alone, in their order:
// max_destroy, max_destroy_percent, max_replace, required.
func judgePlan(a *task.Approval, c Counts) Verdict {
	if a == nil || c.Add+c.Change+c.Destroy == 0 {
		return Verdict{}
	}
	d := c.PureDestroy()
	if a.MaxDestroy != nil && d > *a.MaxDestroy {
		return Verdict{Rule: RuleMaxDestroy,
			Reason: fmt.Sprintf("plan %s of %d resources (max_destroy %d)", what(d, c.Replace), c.InState, *a.MaxDestroy)}
	}
	if a.MaxDestroyPercent != nil && d > 0 {
		total := max(c.InState, d)
		if d*100 > *a.MaxDestroyPercent*total {
			return Verdict{Rule: RuleMaxDestroyPercent,
				Reason: fmt.Sprintf("plan %s of %d resources (max_destroy_percent %d)", what(d, c.Replace), total, *a.MaxDestroyPercent)}
		}
	}
	if a.MaxReplace != nil && c.Replace > *a.MaxReplace {
		return Verdict{Rule: RuleMaxReplace,
			Reason: fmt.Sprintf("plan %s of %d resources (max_replace %d)", what(d, c.Replace), c.InState, *a.MaxReplace)}
	}
	if a.Required {
		return Verdict{Rule: RuleRequired, Reason: "approval required"}
	}
	return Verdict{}
}

// what says what a plan destroys and replaces: "destroys 3", "replaces 2",
// "destroys 3 and replaces 1" (a plan without replacements reads as it
// always has).
func what(destroy, replace int) string {
	switch {
	case replace == 0:
		return fmt.Sprintf("destroys %d", destroy)
	case destroy == 0:
		return fmt.Sprintf("replaces %d", replace)
	}
	return fmt.Sprintf("destroys %d and replaces %d", destroy, replace)
}

// State is where a held plan stands.
type State string

const (
	Pending    State = "pending"    // waiting for approve or reject
	Approved   State = "approved"   // approved; being or been applied
	Rejected   State = "rejected"   // rejected; the task waits for the next change
	Expired    State = "expired"    // not approved within approval.expire
	Superseded State = "superseded" // the desired state moved on; a newer plan replaced it
)

// Plan is a held plan: what the API, the CLI and the dashboard show and
// what an approval applies, exactly.
type Plan struct {
	ID      string    `json:"id"`
	Task    string    `json:"task"`
	Created time.Time `json:"created"`
	// Expires is when a pending plan is dropped; zero: never.
	Expires time.Time `json:"expires,omitzero"`
	State   State     `json:"state"`
	// Reason is why it is held, e.g. "approval required".
	Reason string `json:"reason"`
	// Rule is the approval rule that held it (Rule*: "max_destroy",
	// "max_destroy_percent", "max_replace", "required"); Window is set
	// when the destroys applied within approval.window held it
	// (Verdict.Hold).
	Rule    string      `json:"rule,omitempty"`
	Window  *WindowNote `json:"window,omitempty"`
	Add     int         `json:"add"`
	Change  int         `json:"change"`
	Destroy int         `json:"destroy"`
	// Replace is how many of the plan's adds and destroys are
	// replacements (Counts.Replace).
	Replace int `json:"replace,omitempty"`
	InState int `json:"in_state"`
	// Text is the plan as terraform show prints it.
	Text string `json:"plan"`
	// DeletesTask marks the plan of a deletion with destroy (DELETE
	// /v1/tasks/{name}?destroy=true, task delete -destroy): approving it
	// destroys everything the task manages and deletes the task.
	DeletesTask bool `json:"deletes_task,omitempty"`
	// Changes says what changed in Consul since the last apply, one line
	// each (the same lines as a run event's).
	Changes []string `json:"consul_changes,omitempty"`
	// Fingerprint is the desired state the plan was made from; an approval
	// of a plan whose desired state moved on supersedes it.
	Fingerprint string `json:"-"`
	// DecidedBy is the token name (or "cli", "dashboard") that approved or
	// rejected it; DecidedAt when.
	DecidedBy string    `json:"decided_by,omitempty"`
	DecidedAt time.Time `json:"decided_at,omitzero"`
}

// SupersededError is an approval of a plan that a newer one replaced.
type SupersededError struct{ ID, Newer string }

func (e *SupersededError) Error() string {
	return fmt.Sprintf("plan %s is superseded by plan %s: the desired state changed since it was made", e.ID, e.Newer)
}
