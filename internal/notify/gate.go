package notify

import (
	"fmt"
	"strings"
	"time"

	"github.com/ctsync/ctsync/internal/gate"
)

// ApprovalNote is the approval part of a webhook's payload.
type ApprovalNote struct {
	Action string   `json:"action"`
	Plan   PlanNote `json:"plan"`
	// NewerPlan is the id of the plan that superseded this one.
	NewerPlan string `json:"newer_plan,omitempty"`
}

// PlanNote is a held plan as a notification shows it: everything but the
// plan's text (GET /v1/tasks/{name}/plan has it).
type PlanNote struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires,omitzero"`
	State   string    `json:"state"`
	Reason  string    `json:"reason"`
	Add     int       `json:"add"`
	Change  int       `json:"change"`
	Destroy int       `json:"destroy"`
	// Replace is how many of Add and Destroy are replacements.
	Replace int `json:"replace,omitempty"`
	InState int `json:"in_state"`
	// Rule is the approval rule that held it; Window is set when the
	// destroys applied within approval.window held it.
	Rule   string           `json:"rule,omitempty"`
	Window *gate.WindowNote `json:"window,omitempty"`
	// Changes say what changed in Consul since the task's last apply.
	Changes   []string  `json:"consul_changes,omitempty"`
	DecidedBy string    `json:"decided_by,omitempty"`
	DecidedAt time.Time `json:"decided_at,omitzero"`
}

// PolicyNote is the policy part of a webhook's payload.
type PolicyNote struct {
	Action string `json:"action"`
	// Messages are every string of data.ctsync.deny.
	Messages []string `json:"messages"`
	PlanID   string   `json:"plan_id,omitempty"`
	Trigger  string   `json:"trigger,omitempty"`
}

// OnGate takes what a safety gate did (the controller's gate hook). It
// never blocks: the notification is queued for every notifier whose
// events list its kind (gate.EventApproval and gate.EventPolicy are
// config.NotifyApproval and config.NotifyPolicy).
func (d *Dispatcher) OnGate(g gate.Event) {
	if g.Time.IsZero() {
		g.Time = time.Now().UTC()
	}
	for _, s := range d.list() {
		if s.n.Wants(g.Kind) {
			s.push(item{gate: &g})
		}
	}
}

// gatePayload is the notification of a gate's decision, secrets redacted.
func (s *sender) gatePayload(g gate.Event) Payload {
	red := s.d.opts.Redact
	p := Payload{Type: g.Kind, Task: g.Task, Time: g.Time}
	switch g.Kind {
	case gate.EventPolicy:
		msgs := make([]string, len(g.Messages))
		for i, m := range g.Messages {
			msgs[i] = red(m)
		}
		p.Policy = &PolicyNote{Action: g.Action, Messages: msgs, PlanID: g.Plan.ID, Trigger: g.Trigger}
		p.Text = fmt.Sprintf("ctsync: task %q denied by policy: nothing applied", g.Task)
		if len(msgs) > 0 {
			p.Text += ": " + strings.Join(msgs, "; ")
		}
	default:
		pl := g.Plan
		n := PlanNote{ID: pl.ID, Created: pl.Created, Expires: pl.Expires, State: string(pl.State), Reason: red(pl.Reason),
			Add: pl.Add, Change: pl.Change, Destroy: pl.Destroy, Replace: pl.Replace, InState: pl.InState,
			Rule: pl.Rule, Window: pl.Window, DecidedBy: pl.DecidedBy, DecidedAt: pl.DecidedAt}
		for _, c := range pl.Changes {
			n.Changes = append(n.Changes, red(c))
		}
		p.Approval = &ApprovalNote{Action: g.Action, Plan: n, NewerPlan: g.Newer}
		p.Text = approvalText(g.Task, g.Action, n, g.Newer)
	}
	return p
}

// approvalText is an approval notification's one-line summary.
func approvalText(task, action string, p PlanNote, newer string) string {
	counts := fmt.Sprintf("%d to add, %d to change, %d to destroy", p.Add, p.Change, p.Destroy)
	by := ""
	if p.DecidedBy != "" {
		by = " by " + p.DecidedBy
	}
	switch action {
	case gate.ActionHeld:
		return fmt.Sprintf("ctsync: task %q waits for approval: %s (plan %s: %s)", task, p.Reason, p.ID, counts)
	case gate.ActionApproved:
		return fmt.Sprintf("ctsync: plan %s of task %q approved%s: applying it (%s)", p.ID, task, by, counts)
	case gate.ActionRejected:
		return fmt.Sprintf("ctsync: plan %s of task %q rejected%s: nothing applied", p.ID, task, by)
	case gate.ActionExpired:
		return fmt.Sprintf("ctsync: plan %s of task %q expired without approval: nothing applied", p.ID, task)
	case gate.ActionSuperseded:
		return fmt.Sprintf("ctsync: plan %s of task %q superseded by plan %s: the desired state changed since it was made", p.ID, task, newer)
	}
	return fmt.Sprintf("ctsync: plan %s of task %q: %s", p.ID, task, action)
}
