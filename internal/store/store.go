// Package store keeps run events and per-task run state: the fingerprint of
// the desired state last applied successfully, whether the last run
// failed, whether a run is in flight, and the plan a safety gate holds
// (heldplan.go). One interface, Store, three
// implementations holding the same things: Memory (tests, -inspect), Bolt
// (a local database: the daemon without high availability) and ConsulKV
// (high availability). Bolt and ConsulKV keep it across a restart, so
// that a task whose desired state did not change does not run again.
package store

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"strings"
	"sync"
	"time"
)

// DefaultHistory is how many events are kept per task unless configured:
// the default of history { runs_per_task } (config.DefaultRunsPerTask,
// which cannot import this package; a test in internal/cli keeps the two
// equal).
const DefaultHistory = 200

// Event is one run of a task. The fields up to Config are the CTS event
// shape; the rest are ctsync additions.
type Event struct {
	ID        string       `json:"id"`
	TaskName  string       `json:"task_name"`
	Success   bool         `json:"success"`
	StartTime time.Time    `json:"start_time"`
	EndTime   time.Time    `json:"end_time"`
	Error     *EventError  `json:"error"`
	Config    *EventConfig `json:"config,omitempty"`

	// Kind is what the run did: "apply", "plan", "destroy", "drift" (a
	// drift check whose plan found changes made outside Terraform), or
	// "noop" (a scheduled tick with unchanged inputs, as earlier versions
	// recorded it; a tick now always runs).
	Kind string `json:"kind,omitempty"`
	// Trigger names what caused the run: a watched query key, "schedule",
	// "start", "api" or "retry".
	Trigger    string       `json:"trigger,omitempty"`
	InputsHash string       `json:"inputs_hash,omitempty"`
	Plan       *PlanSummary `json:"plan,omitempty"`
	// Terminal marks a failure that running the same desired state again
	// cannot fix: the task runs again only when its desired state changes.
	Terminal bool `json:"terminal,omitempty"`
	// LogTail is the end of the run's Terraform output (secrets redacted).
	LogTail string `json:"log_tail,omitempty"`
	// LogPath is the run's full log file on the instance that ran it.
	LogPath string `json:"-"`
	// TFCRunURL is the remote run's page (terraform-cloud driver).
	TFCRunURL string `json:"tfc_run_url,omitempty"`
	// Refresh says whether the run read every object the task manages
	// before planning: "full" or "skipped" (driver.Result.Refresh); empty
	// when no plan ran, or in events recorded before it was reported.
	Refresh string `json:"refresh,omitempty"`
	// Targeted, for a run without refresh that planned the changed
	// instances alone first (-target) and then checked everything, says
	// how many resource instances it targeted and what the check found
	// (driver.Result.Targeted); empty for every other run.
	Targeted string `json:"targeted,omitempty"`

	// ErrorSummary is the failure in one line: Terraform's diagnostics
	// with the first paragraph of their detail (driver.ErrorSummary).
	ErrorSummary string `json:"error_summary,omitempty"`
	// Actor is the name of the API token whose request ran the task
	// (trigger "api" with api_auth on).
	Actor string `json:"actor,omitempty"`
	// DetectedAt is when ctsync saw the change that caused the run; the
	// reaction latency is EndTime - DetectedAt.
	DetectedAt *time.Time `json:"detected_at,omitempty"`
	// Phases are the timed parts of the run (init, plan, apply).
	Phases []Phase `json:"phases,omitempty"`
	// Changes is what changed in the run's Consul data since the task's
	// previous run (nil: no previous run since the daemon started).
	Changes *Changes `json:"changes,omitempty"`
	// Gate is a safety gate's decision (ctsync): on an audit event (Kind
	// "gate": a plan held, approved, rejected, expired or superseded), on
	// the run that applied an approved plan (the approval) and on a run
	// the policy denied.
	Gate *GateDecision `json:"gate,omitempty"`
	// PlanText is the plan the run applied or was denied, as terraform
	// show prints it (secrets redacted), for a task with safety gates,
	// whose runs apply a saved plan; at most MaxPlanText bytes (its
	// beginning).
	PlanText string `json:"plan_text,omitempty"`
}

// MaxPlanText bounds an event's PlanText.
const MaxPlanText = 32 << 10

// ClipPlanText returns text cut to MaxPlanText bytes (at a line end),
// saying so.
func ClipPlanText(text string) string {
	if len(text) <= MaxPlanText {
		return text
	}
	cut := text[:MaxPlanText]
	if i := strings.LastIndexByte(cut, '\n'); i > 0 {
		cut = cut[:i+1]
	}
	return cut + "... (cut: the plan is longer than 32 KiB)\n"
}

// GateDecision is what a safety gate decided about a plan, for the task's
// history (docs/safety.md "The audit trail").
type GateDecision struct {
	// Action is "held", "approved", "rejected", "expired", "superseded"
	// or "denied" (the policy).
	Action string `json:"action"`
	// PlanID is the plan's id (GET /v1/tasks/{name}/plan).
	PlanID string `json:"plan_id"`
	// Reason is why it was held; Rule the approval rule that held it.
	Reason string `json:"reason,omitempty"`
	Rule   string `json:"rule,omitempty"`
	// By is who approved or rejected it: the token's name with api_auth
	// on, "cli" or "dashboard" otherwise.
	By string `json:"by,omitempty"`
	// HeldSeconds is how long the plan waited, from when it was held to
	// the decision (approved, rejected, expired, superseded).
	HeldSeconds float64 `json:"held_seconds,omitempty"`
	// SupersededBy is the newer plan (superseded; "" when the task's next
	// run did not plan).
	SupersededBy string `json:"superseded_by,omitempty"`
	// Messages are the policy's deny messages (denied).
	Messages []string `json:"messages,omitempty"`
	// Note says more about the decision: "re-planned after restart: same
	// changes" on the run that applied an approved plan made again after
	// a restart (its plan file was not kept).
	Note string `json:"note,omitempty"`
}

// IsRun reports whether the event is a run of the task: not a drift check
// and not an audit event of the safety gates. Only runs count in a task's
// status (Status) and its last run.
func (ev Event) IsRun() bool { return ev.Kind != KindDrift && ev.Kind != KindGate }

// Phase is one timed part of a run.
type Phase struct {
	Name      string    `json:"name"`
	StartTime time.Time `json:"start_time"`
	EndTime   time.Time `json:"end_time"`
}

// Changes is what changed in a run's Consul data since the previous run
// of the task: service instances (by their key in the `services`
// variable), Consul KV keys, catalog service names and nodes. Lists hold at
// most MaxChangeNames names each; the counts are exact.
type Changes struct {
	Services        *SetDiff `json:"services,omitempty"`
	ConsulKV        *SetDiff `json:"consul_kv,omitempty"`
	CatalogServices *SetDiff `json:"catalog_services,omitempty"`
	Nodes           *SetDiff `json:"nodes,omitempty"`
}

// MaxChangeNames bounds each list of a SetDiff.
const MaxChangeNames = 50

// SetDiff lists what was added, removed and changed, with counts. A
// changed entry may say what changed: "web-1 (status passing → critical)".
type SetDiff struct {
	Added        []string `json:"added,omitempty"`
	Removed      []string `json:"removed,omitempty"`
	Changed      []string `json:"changed,omitempty"`
	AddedCount   int      `json:"added_count"`
	RemovedCount int      `json:"removed_count"`
	ChangedCount int      `json:"changed_count"`
}

// EventError is the CTS error object of an event.
type EventError struct {
	Message string `json:"message"`
}

// Redacted returns a copy of the event with redact applied to its log tail
// and error message, the parts that hold Terraform output (and so may hold
// secrets). The event itself is not changed.
func (ev Event) Redacted(redact func(string) string) Event {
	ev.LogTail = redact(ev.LogTail)
	ev.PlanText = redact(ev.PlanText)
	ev.ErrorSummary = redact(ev.ErrorSummary)
	if ev.Error != nil {
		ev.Error = &EventError{Message: redact(ev.Error.Message)}
	}
	return ev
}

// EventConfig is the deprecated CTS "config" object of an event.
type EventConfig struct {
	Providers []string `json:"providers"`
	Services  []string `json:"services"`
	Source    string   `json:"source"`
}

// PlanSummary counts what a run planned or changed.
type PlanSummary struct {
	Add     int `json:"add"`
	Change  int `json:"change"`
	Destroy int `json:"destroy"`
}

// RunState is what is recorded about a task's runs: the desired state it
// last applied successfully, and whether it has been dirty since.
type RunState struct {
	// Applied is the fingerprint of the desired state of the task's last
	// successful run ("" when none is known).
	Applied string `json:"applied,omitempty"`
	// Parts holds the digest of each element of that desired state (see
	// reconcile.Desired), to tell what changed since.
	Parts map[string]string `json:"parts,omitempty"`
	// Failed is the fingerprint of the desired state of the last run when
	// that run failed; it is cleared by a successful run. A task with a
	// failed last run is dirty: it runs again whatever its fingerprint.
	Failed string `json:"failed,omitempty"`
	// Terminal marks the last failure as one that running the same desired
	// state again cannot fix (invalid configuration, missing module): the
	// task runs again only when its desired state changes.
	Terminal bool `json:"terminal,omitempty"`
	// InFlight is the id of a run that started and was not recorded yet.
	InFlight string `json:"in_flight,omitempty"`
	// Outputs are the module's outputs after the last successful apply of
	// a task whose outputs another task receives: a JSON object (name to
	// value); nil when never recorded.
	Outputs json.RawMessage `json:"outputs,omitempty"`
}

// Dirty reports whether the last run failed.
func (r RunState) Dirty() bool { return r.Failed != "" }

func (r RunState) clone() RunState {
	r.Parts = maps.Clone(r.Parts)
	r.Outputs = bytes.Clone(r.Outputs)
	return r
}

func (r RunState) equal(o RunState) bool {
	return r.Applied == o.Applied && r.Failed == o.Failed && r.Terminal == o.Terminal &&
		r.InFlight == o.InFlight && maps.Equal(r.Parts, o.Parts) && bytes.Equal(r.Outputs, o.Outputs)
}

func (r RunState) zero() bool { return r.equal(RunState{}) }

// Store records events and task state. Implementations are safe for
// concurrent use. Writes take a context: a store that writes elsewhere
// (ConsulKV) gives up when it ends; reads are served from memory.
type Store interface {
	// AddEvent records a finished run; the oldest events beyond the history
	// length are dropped.
	AddEvent(ctx context.Context, ev Event) error
	// Events returns a task's events, newest first.
	Events(taskName string) []Event
	// AllEvents returns every task's events, newest first per task.
	AllEvents() map[string][]Event
	// Run returns what is recorded about a task's runs.
	Run(taskName string) RunState
	// StartRun marks a task as being applied by run runID. A new leader
	// re-runs a task whose marker is still set: the run that set it was
	// interrupted (crash, partition) before it was recorded.
	StartRun(ctx context.Context, taskName, runID string) error
	// FinishRun records the outcome of a run in one write: the in-flight
	// marker is cleared, the run state becomes st (InFlight is ignored),
	// and ev, when not nil, is added to the history. Nothing is changed
	// when the write fails: the caller retries.
	FinishRun(ctx context.Context, taskName string, st RunState, ev *Event) error
	// DeleteTask forgets a task's events and state.
	DeleteTask(ctx context.Context, taskName string) error
}

// Memory is the in-memory Store.
type Memory struct {
	history int
	mu      sync.RWMutex
	events  map[string][]Event
	run     map[string]RunState
	remote  map[string]RemoteRun      // remote.go
	tasks   map[string]TaskRecord     // tasks.go
	window  map[string]DestroyWindow  // window.go
	held    map[string]HeldPlanRecord // heldplan.go
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store keeping history events per
// task (DefaultHistory when history <= 0).
func NewMemory(history int) *Memory {
	if history <= 0 {
		history = DefaultHistory
	}
	return &Memory{history: history, events: map[string][]Event{}, run: map[string]RunState{}}
}

// AddEvent implements Store.
func (m *Memory) AddEvent(_ context.Context, ev Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	evs := append([]Event{ev}, m.events[ev.TaskName]...)
	if len(evs) > m.history {
		evs = evs[:m.history]
	}
	m.events[ev.TaskName] = evs
	return nil
}

// Events implements Store.
func (m *Memory) Events(taskName string) []Event {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return append([]Event(nil), m.events[taskName]...)
}

// AllEvents implements Store.
func (m *Memory) AllEvents() map[string][]Event {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make(map[string][]Event, len(m.events))
	for k, v := range m.events {
		out[k] = append([]Event(nil), v...)
	}
	return out
}

// Run implements Store.
func (m *Memory) Run(taskName string) RunState {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.run[taskName].clone()
}

// StartRun implements Store.
func (m *Memory) StartRun(_ context.Context, taskName, runID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.run[taskName]
	st.InFlight = runID
	m.run[taskName] = st
	return nil
}

// FinishRun implements Store.
func (m *Memory) FinishRun(ctx context.Context, taskName string, st RunState, ev *Event) error {
	st = st.clone()
	st.InFlight = ""
	m.mu.Lock()
	m.run[taskName] = st
	m.mu.Unlock()
	if ev != nil {
		return m.AddEvent(ctx, *ev)
	}
	return nil
}

// DeleteTask implements Store.
func (m *Memory) DeleteTask(_ context.Context, taskName string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.events, taskName)
	delete(m.run, taskName)
	delete(m.remote, taskName)
	delete(m.window, taskName)
	delete(m.held, taskName)
	return nil
}

// Status derives a task's CTS status from its events (newest first):
// "successful" when the latest succeeded, "errored" when the latest failed
// and all older ones succeeded, "critical" when the latest and at least one
// older one failed, "unknown" without events. Drift checks and the safety
// gates' audit events are not runs of the task and do not count (IsRun); of
// the runs, the newest StatusRuns count, as CTS counts its last five events.
func Status(events []Event) string {
	events = runs(events)
	if len(events) > StatusRuns {
		events = events[:StatusRuns]
	}
	if len(events) == 0 {
		return "unknown"
	}
	if events[0].Success {
		return "successful"
	}
	for _, ev := range events[1:] {
		if !ev.Success {
			return "critical"
		}
	}
	return "errored"
}

// StatusRuns is how many of a task's newest runs Status looks at.
const StatusRuns = 5

// runs returns the events that are runs of the task (IsRun).
func runs(events []Event) []Event {
	out := events[:0:0]
	for _, ev := range events {
		if ev.IsRun() {
			out = append(out, ev)
		}
	}
	return out
}

// Event kinds.
const (
	KindApply   = "apply"
	KindPlan    = "plan"
	KindDestroy = "destroy"
	KindNoop    = "noop"
	KindDrift   = "drift"
	// KindPolicy: a run whose plan the task's policy denied (ctsync);
	// nothing was applied.
	KindPolicy = "policy"
	// KindGate: an audit event of the safety gates (Event.Gate): a plan
	// held, approved, rejected, expired or superseded. Not a run.
	KindGate = "gate"
)
