package api

import (
	"encoding/json"
	"github.com/ctsync/ctsync/internal/holddown"
	"time"

	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

// The wire types of the /v1 API. Field names follow CTS; fields marked
// "ctsync" are additions that CTS clients ignore. docs/api/openapi.yaml
// describes the same shapes and a test checks live responses against it.

// ErrorObject is the CTS error object.
type ErrorObject struct {
	Message string `json:"message"`
}

// ErrorResponse is the body of every error response.
type ErrorResponse struct {
	Error     ErrorObject `json:"error"`
	RequestID string      `json:"request_id,omitempty"`
}

// StatusResponse is the body of GET /v1/status.
type StatusResponse struct {
	TaskSummary TaskSummary `json:"task_summary"`
	// Warnings are about the daemon's own set-up (ctsync extension; the
	// dashboard shows them): an API open to the network without tokens.
	Warnings []string `json:"warnings,omitempty"`
}

// TaskSummary counts tasks by status and by enabled flag.
type TaskSummary struct {
	Status  StatusCounts  `json:"status"`
	Enabled EnabledCounts `json:"enabled"`
}

// StatusCounts counts tasks per derived status. The first four are CTS's;
// Waiting (ctsync) counts the tasks whose plan a safety gate holds for
// approval, which are not counted under the others.
type StatusCounts struct {
	Successful int `json:"successful"`
	Errored    int `json:"errored"`
	Critical   int `json:"critical"`
	Unknown    int `json:"unknown"`
	Waiting    int `json:"waiting"`
}

// EnabledCounts counts enabled and disabled tasks.
type EnabledCounts struct {
	True  int `json:"true"`
	False int `json:"false"`
}

// TaskStatus is one entry of GET /v1/status/tasks.
type TaskStatus struct {
	TaskName string `json:"task_name"`
	// Status is successful, errored, critical or unknown, or deleting for
	// a task marked for deletion whose run in progress has not finished,
	// or waiting while a safety gate holds its plan for approval.
	Status  string `json:"status"`
	Enabled bool   `json:"enabled"`
	// Providers and Services are the deprecated CTS configuration echo.
	Providers []string `json:"providers"`
	Services  []string `json:"services"`
	// EventsURL is "/v1/status/tasks/<name>?include=events", or "" when the
	// task has no events.
	EventsURL string `json:"events_url"`
	// Events are the newest events (at most StatusEvents), only with
	// include=events.
	Events []store.Event `json:"events,omitempty"`

	// Active is true while the task runs or waits to run (ctsync).
	Active bool `json:"active"`
	// NextRun is the next schedule tick of an enabled schedule task (ctsync).
	NextRun *time.Time `json:"next_run,omitempty"`
	// Drifted is true when the task's last drift check found changes made
	// outside Terraform and no apply happened since (ctsync).
	Drifted bool `json:"drifted"`
	// LastDriftCheck is when drift was last checked (ctsync; drift
	// detection on only).
	LastDriftCheck *time.Time `json:"last_drift_check,omitempty"`
	// Dirty is true while the task's last run failed: it has not converged
	// to its desired state and is retried (ctsync).
	Dirty bool `json:"dirty"`
	// Terminal is true while that failure is terminal (an invalid
	// configuration): the task waits for its desired state to change
	// (ctsync).
	Terminal bool `json:"terminal"`
	// QueryError is Consul's answer when it refuses one of the task's
	// queries for good (an unknown datacenter); the query is retried
	// (ctsync).
	QueryError string `json:"query_error,omitempty"`
	// Waiting says why the task cannot run yet, e.g. a provider block
	// waiting for Vault to answer (ctsync).
	Waiting string `json:"waiting,omitempty"`
	// Owner is the id of the member that owns the task in spread mode
	// ("" when none does right now; absent outside spread mode) (ctsync).
	Owner *string `json:"owner,omitempty"`
	// LastRun is the task's newest run, drift checks aside (ctsync).
	LastRun *LastRun `json:"last_run,omitempty"`
	// Retry is the pending retry of a failed run (ctsync).
	Retry *RetryStatus `json:"retry,omitempty"`
	// Held is the plan a safety gate holds for approval; the status is
	// then "waiting" and Waiting the reason (ctsync).
	Held *HeldStatus `json:"held,omitempty"`
	// PendingRemovals are what the task's removal hold-down keeps in its
	// data until each has been gone removal_delay, by when each applies
	// (ctsync; docs/safety.md).
	PendingRemovals []holddown.Removal `json:"pending_removals,omitempty"`
}

// LastRun is the outcome of a task's newest run at a glance.
type LastRun struct {
	ID        string    `json:"id"`
	Success   bool      `json:"success"`
	Trigger   string    `json:"trigger,omitempty"`
	StartTime time.Time `json:"start_time"`
	EndTime   time.Time `json:"end_time"`
	// ErrorSummary is the failure in one line (driver.ErrorSummary:
	// Terraform's "Error: <summary>: <detail's first paragraph>").
	ErrorSummary string             `json:"error_summary,omitempty"`
	Terminal     bool               `json:"terminal"`
	Plan         *store.PlanSummary `json:"plan,omitempty"`
}

// RetryStatus is a failed task's pending retry.
type RetryStatus struct {
	// Attempt is the number of the retry that waits (1: the first).
	Attempt int `json:"attempt"`
	// NextAt is when it runs.
	NextAt time.Time `json:"next_at"`
	// LastError is the one-line error of the run it retries.
	LastError string `json:"last_error"`
}

// TaskRequest is the body of POST /v1/tasks.
type TaskRequest struct {
	Task json.RawMessage `json:"task"`
}

// TaskResponse is the body of POST /v1/tasks and GET /v1/tasks/{name}.
type TaskResponse struct {
	Task task.Spec `json:"task"`
	// Run is set for POST /v1/tasks?run=inspect.
	Run       *RunResult `json:"run,omitempty"`
	RequestID string     `json:"request_id"`
}

// RunResult is the outcome of a plan requested through the API.
type RunResult struct {
	Plan           string `json:"plan"`
	ChangesPresent bool   `json:"changes_present"`
	// TFCRunURL is the remote plan's page (terraform-cloud driver).
	TFCRunURL string `json:"tfc_run_url,omitempty"`
}

// TasksResponse is the body of GET /v1/tasks.
type TasksResponse struct {
	Tasks     []task.Spec `json:"tasks"`
	RequestID string      `json:"request_id"`
}

// UpdateTaskRequest is the body of PATCH /v1/tasks/{name}.
type UpdateTaskRequest struct {
	Enabled *bool `json:"enabled"`
}

// UpdateTaskResponse is the body of PATCH /v1/tasks/{name}: empty, or with
// run=inspect the plan; a change of other fields than enabled (ctsync)
// answers the task as it is now.
type UpdateTaskResponse struct {
	Inspect *RunResult `json:"inspect,omitempty"`
	Task    *task.Spec `json:"task,omitempty"`
}

// DeleteTaskResponse is the body of DELETE /v1/tasks/{name}. Status and
// Plan (ctsync) are set for a deletion with destroy of a task with safety
// gates, which answers once decided.
type DeleteTaskResponse struct {
	RequestID string `json:"request_id"`
	// Status is DeleteHeld (the destroy plan waits for approval: Plan) or
	// DeleteDone (destroyed and deleted); "" for a deletion answered once
	// the task is marked.
	Status  string     `json:"status,omitempty"`
	Plan    *gate.Plan `json:"plan,omitempty"`
	Message string     `json:"message,omitempty"`
}

// What became of a deletion with destroy of a gated task
// (DeleteTaskResponse.Status).
const (
	DeleteHeld = "held"
	DeleteDone = "deleted"
)

// RequestIDResponse is a body with the request's id alone.
type RequestIDResponse struct {
	RequestID string `json:"request_id"`
}

// RunTaskResponse is the body of POST /v1/tasks/{name}/run (ctsync): the
// run the call started, and the event it recorded or its held plan.
type RunTaskResponse struct {
	// Event is the event of the run (its id is RunID); nil when the run's
	// plan is held, or no run was made.
	Event *store.Event `json:"event"`
	// RunID is the id of the run the call started (and of its held plan).
	RunID string `json:"run_id"`
	// Status is what became of the run: RunSucceeded, RunHeld, RunNotRun.
	Status string `json:"status"`
	// Plan is the held plan when Status is RunHeld.
	Plan *gate.Plan `json:"plan,omitempty"`
	// Message says what happened when the run did not apply.
	Message   string `json:"message,omitempty"`
	RequestID string `json:"request_id"`
}

// What became of a run POST /v1/tasks/{name}/run started
// (RunTaskResponse.Status). A failed run answers 500.
const (
	RunSucceeded = "succeeded"
	RunHeld      = "held"
	RunNotRun    = "not_run"
)

// EventsResponse is the body of GET /v1/tasks/{name}/events (ctsync).
type EventsResponse struct {
	Events []store.Event `json:"events"`
	// Total is how many events match the filters, before paging.
	Total     int    `json:"total"`
	RequestID string `json:"request_id"`
}

// EventResponse is the body of GET /v1/tasks/{name}/events/{id} (ctsync).
type EventResponse struct {
	Event store.Event `json:"event"`
	// NewerID and OlderID are the ids of the task's runs just after and
	// before it ("" at either end of the history).
	NewerID   string `json:"newer_id,omitempty"`
	OlderID   string `json:"older_id,omitempty"`
	RequestID string `json:"request_id"`
}
