// Package store keeps run events and per-task state: the hash of the inputs
// last applied successfully. The in-memory store is the default; a Consul KV
// store (for high availability) implements the same interface.
package store

import (
	"sync"
	"time"
)

// DefaultHistory is how many events are kept per task unless configured.
const DefaultHistory = 50

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

	// Kind is what the run did: "apply", "plan", "destroy", "noop" (a
	// scheduled run whose inputs had not changed) or "drift" (a drift check
	// whose plan found changes made outside Terraform).
	Kind string `json:"kind,omitempty"`
	// Trigger names what caused the run: a watched query key, "schedule",
	// "start", "api" or "retry".
	Trigger    string       `json:"trigger,omitempty"`
	InputsHash string       `json:"inputs_hash,omitempty"`
	Plan       *PlanSummary `json:"plan,omitempty"`
	// LogTail is the end of the run's Terraform output (secrets redacted).
	LogTail string `json:"log_tail,omitempty"`
	// LogPath is the run's full log file on the instance that ran it.
	LogPath string `json:"-"`
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

// Store records events and task state. Implementations are safe for
// concurrent use.
type Store interface {
	// AddEvent records a finished run; the oldest events beyond the history
	// length are dropped.
	AddEvent(ev Event) error
	// Events returns a task's events, newest first.
	Events(taskName string) []Event
	// AllEvents returns every task's events, newest first per task.
	AllEvents() map[string][]Event
	// SetApplied records the inputs hash a task last applied successfully.
	SetApplied(taskName, hash string) error
	// Applied returns the hash last applied, or "".
	Applied(taskName string) string
	// SetInFlight marks a task as being applied by run runID ("" clears
	// it). A new leader re-runs a task whose marker is still set: the old
	// leader died during its apply.
	SetInFlight(taskName, runID string) error
	// InFlight returns the run in flight, or "".
	InFlight(taskName string) string
	// DeleteTask forgets a task's events and state.
	DeleteTask(taskName string) error
}

// Memory is the in-memory Store.
type Memory struct {
	history  int
	mu       sync.RWMutex
	events   map[string][]Event
	applied  map[string]string
	inFlight map[string]string
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store keeping history events per
// task (DefaultHistory when history <= 0).
func NewMemory(history int) *Memory {
	if history <= 0 {
		history = DefaultHistory
	}
	return &Memory{history: history, events: map[string][]Event{}, applied: map[string]string{}, inFlight: map[string]string{}}
}

// AddEvent implements Store.
func (m *Memory) AddEvent(ev Event) error {
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

// SetApplied implements Store.
func (m *Memory) SetApplied(taskName, hash string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applied[taskName] = hash
	return nil
}

// Applied implements Store.
func (m *Memory) Applied(taskName string) string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.applied[taskName]
}

// SetInFlight implements Store.
func (m *Memory) SetInFlight(taskName, runID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if runID == "" {
		delete(m.inFlight, taskName)
	} else {
		m.inFlight[taskName] = runID
	}
	return nil
}

// InFlight implements Store.
func (m *Memory) InFlight(taskName string) string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.inFlight[taskName]
}

// DeleteTask implements Store.
func (m *Memory) DeleteTask(taskName string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.events, taskName)
	delete(m.applied, taskName)
	delete(m.inFlight, taskName)
	return nil
}

// Status derives a task's CTS status from its events (newest first):
// "successful" when the latest succeeded, "errored" when the latest failed
// and all older ones succeeded, "critical" when the latest and at least one
// older one failed, "unknown" without events. Drift checks are not runs of
// the task and do not count.
func Status(events []Event) string {
	events = runs(events)
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

// runs returns the events that are runs of the task (not drift checks).
func runs(events []Event) []Event {
	out := events[:0:0]
	for _, ev := range events {
		if ev.Kind != KindDrift {
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
)
