package gate

import "time"

// Kinds of Event: the notification kinds of the safety gates.
const (
	EventApproval = "approval"
	EventPolicy   = "policy"
)

// Actions of an Event: what happened to a held plan (approval), or to a
// run the policy denied (policy).
const (
	ActionHeld       = "held"
	ActionApproved   = "approved"
	ActionRejected   = "rejected"
	ActionExpired    = "expired"
	ActionSuperseded = "superseded"
	ActionDenied     = "denied"
)

// Event is what a safety gate did with a task's run. The controller hands
// it to its gate hook; the notifiers send it to webhooks.
type Event struct {
	// Kind is EventApproval or EventPolicy.
	Kind string
	// Action is ActionHeld, ActionApproved, ActionRejected, ActionExpired
	// or ActionSuperseded (approval); ActionDenied (policy).
	Action string
	Task   string
	// Plan is the held plan (approval), or the plan the policy was
	// evaluated on (policy; its ID and counts, when known).
	Plan Plan
	// Newer is the plan that superseded Plan (ActionSuperseded).
	Newer string
	// Messages are the policy's deny messages (policy).
	Messages []string
	// Trigger is what caused the run, as in events.
	Trigger string
	// Time is when it happened (zero: when the hook is called).
	Time time.Time
}
