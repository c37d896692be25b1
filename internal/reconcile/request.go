package reconcile

import (
	"github.com/ctsync/ctsync/internal/gate"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
)

// Request is one run of a task, as a worker hands it to the reconciler (in
// its job): which task, why, and what to do.
type Request struct {
	Name string
	// ID is the id of the run, given when it was asked for (an API call,
	// WithRunID); "": the run gets a new one.
	ID      string
	Trigger Trigger
	Mode    Mode
	// Force applies even when the desired state equals the one last
	// applied (a schedule tick, run-now, drift remediation, a failover).
	Force bool
	// Seen is when the change behind Trigger was seen (zero: not a change).
	Seen time.Time
}

// Mode is what a run does with a task's infrastructure.
type Mode uint8

const (
	// ModeApply plans and applies, and records the run.
	ModeApply Mode = iota
	// ModePlan plans only and records nothing (inspect, drift checks).
	ModePlan
	// ModeDestroy destroys the task's infrastructure (task deletion).
	ModeDestroy
)

var modeNames = [...]string{"apply", "plan", "destroy"}

func (m Mode) String() string { return enumName(m, modeNames[:]) }

// enumName is v's name in names, "unknown" past its end (the String of
// the controller's enumerations).
func enumName[T ~uint8](v T, names []string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return "unknown"
}

// TriggerKind is why a task runs.
type TriggerKind uint8

const (
	// TriggerNone: nothing marked the task due yet.
	TriggerNone TriggerKind = iota
	// TriggerChange: a watched value changed (Detail: its key, when known).
	TriggerChange
	// TriggerStart: the daemon started (Detail: why the run is forced,
	// StartInterrupted or StartNotPrepared; see startLocked).
	TriggerStart
	// TriggerLeader: this instance became the leader.
	TriggerLeader
	// TriggerOwner: this instance became the task's owner (spread mode).
	TriggerOwner
	// TriggerFailover: the previous leader or owner stopped in the middle
	// of a run of the task.
	TriggerFailover
	// TriggerEnable: the task was enabled again.
	TriggerEnable
	// TriggerAPI: an API call (create, run now, enable with run).
	TriggerAPI
	// TriggerSchedule: a cron tick.
	TriggerSchedule
	// TriggerDrift: drift remediation.
	TriggerDrift
	// TriggerRetry: the retry of a failed run.
	TriggerRetry
	// TriggerUpstream: a run of a task it depends on ended (Detail: that
	// task's name).
	TriggerUpstream
	// TriggerOutputs: a task that receives its outputs needs them recorded
	// (Detail: that task's name).
	TriggerOutputs
	// TriggerOnce: -once (or -inspect), which orders chained tasks itself.
	TriggerOnce
	// TriggerCheck: the full check a targeted run left due
	// (driver.Result.CheckDue): it runs the driver with driver.Run.Check
	// although the desired state is the one applied; a newer change of
	// the desired state runs first (it replaces the trigger while the
	// check waits), and the check stays due until a run checks
	// everything.
	TriggerCheck
)

// Trigger is why a task runs; its String is what the run's event records.
type Trigger struct {
	Kind   TriggerKind
	Detail string
}

// Due is the trigger of a kind without detail.
func Due(k TriggerKind) Trigger { return Trigger{Kind: k} }

// IsZero reports whether nothing marked the task due.
func (t Trigger) IsZero() bool { return t.Kind == TriggerNone }

var triggerWords = [...]string{"", "change", "start", "leader", "owner", "failover", "enable", "api", "schedule",
	"drift", "retry", "upstream task ", "outputs wanted by task ", "once", "check"}

func (t Trigger) String() string {
	if int(t.Kind) >= len(triggerWords) {
		return "unknown"
	}
	switch t.Kind {
	case TriggerChange, TriggerStart:
		if t.Detail != "" {
			return t.Detail // the watched key; why a task runs at start
		}
	case TriggerUpstream, TriggerOutputs:
		return triggerWords[t.Kind] + t.Detail
	}
	return triggerWords[t.Kind]
}

// EnableMode is what enabling or disabling a task does besides changing
// its flag (Controller.SetEnabled).
type EnableMode string

const (
	// EnableFlag only changes the flag: an enabled task runs when its
	// desired state moved while it was off.
	EnableFlag EnableMode = ""
	// EnableRun also applies the task at once, recording an event (the
	// API's run=now).
	EnableRun EnableMode = "now"
	// EnableInspect plans the task as if enabled and changes nothing (the
	// API's run=inspect).
	EnableInspect EnableMode = "inspect"
)

// intentKind is what a request recorded on a task asks a worker to do.
type intentKind uint8

const (
	// intentRun runs the task (its Request: apply for run now, create
	// with run and -once; plan for -inspect; destroy for a deletion).
	intentRun intentKind = iota
	// intentInspect plans the task as it is, changing nothing (the API's
	// inspect).
	intentInspect
	// intentDrift checks the task for drift.
	intentDrift
	// intentApprove applies an approved held plan (approved).
	intentApprove
	// intentDiscard discards the held plans dropped while nothing ran
	// (an expiry).
	intentDiscard
)

// intent is a request recorded on a task (lifecycle.intent) by a caller
// that wants something done now: run now, a drift check, an approval, a
// deletion's destroy ... The task's name is pushed on the queue; the
// worker that takes the task does it (job), and the caller waits until
// the task observes its generation.
type intent struct {
	kind  intentKind
	req   Request
	actor string // who asked (WithActor), recorded with the run's event
	gen   uint64 // set by submitLocked
	taken bool   // a worker has it
	// noReply: nobody waits for it (a drift check, a discard): what it did
	// is not kept for a caller.
	noReply bool
	// approved is the plan to apply (intentApprove), as it was held.
	approved *approval
	// wasEnabled is the task's enabled flag before its deletion (a
	// deletion's destroy): kept with a destroy plan the gates hold.
	wasEnabled bool
	// replaces is the id of the held plan this run supersedes (an approval
	// of a plan whose desired state moved on): when the run does not
	// replace it, it is superseded by no plan.
	replaces string
}

// owned reports whether the request is the task's owner's business (a
// drift check, as a run the task is due for), rather than its caller's:
// a member that does not own the task drops it (nextLocked).
func (in *intent) owned() bool { return in.kind == intentDrift }

// approval is a held plan approved for apply (intentApprove).
type approval struct {
	id, who string
	plan    gate.Plan // the plan as approved (its reason, when it was held and approved)
	token   string    // the API token that approved it ("": none, who names the client)
	drv     driver.HeldPlan
	run     *runRecord
	destroy bool // a deletion's destroy: the task is deleted once it is applied
	enabled bool // the task's enabled flag before its deletion (destroy)
	// replan: the plan was restored from the store without the driver's
	// plan: it is made again, and applied when its changes have digest
	// (heldstore.go).
	replan bool
	digest string
}
