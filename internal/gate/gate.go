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
	Add, Change, Destroy int
	// InState is the number of resources in the task's state before the
	// plan (managed resources; data sources not counted).
	InState int
}

// Hold returns why the approval rules hold a plan with these counts, or
// "" when they let it apply. A plan without changes is never held.
func Hold(a *task.Approval, c Counts) string {
	if a == nil || c.Add+c.Change+c.Destroy == 0 {
		return ""
	}
	if a.MaxDestroy != nil && c.Destroy > *a.MaxDestroy {
		return fmt.Sprintf("plan destroys %d of %d resources (max_destroy %d)", c.Destroy, c.InState, *a.MaxDestroy)
	}
	if a.MaxDestroyPercent != nil && c.Destroy > 0 {
		total := max(c.InState, c.Destroy)
		if c.Destroy*100 > *a.MaxDestroyPercent*total {
			return fmt.Sprintf("plan destroys %d of %d resources (max_destroy_percent %d)", c.Destroy, total, *a.MaxDestroyPercent)
		}
	}
	if a.Required {
		return "approval required"
	}
	return ""
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
	Reason  string `json:"reason"`
	Add     int    `json:"add"`
	Change  int    `json:"change"`
	Destroy int    `json:"destroy"`
	InState int    `json:"in_state"`
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
