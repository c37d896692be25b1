package reconcile

import "time"

// Request is one run of a task, as the queue hands it to the reconciler
// (Controller.reconcile): which task, why, and what to do.
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
	"drift", "retry", "upstream task ", "outputs wanted by task ", "once"}

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
