// Package driver defines how a task's module is executed. A Driver holds
// exactly one task and offers execution verbs only; what to run and when is
// decided by the reconciler. The Terraform/OpenTofu implementation lives in
// driver/terraform.
package driver

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/task"
)

// Driver runs one task's module. Calls on one Driver are never concurrent
// (the caller guarantees it); different Drivers may run in parallel.
type Driver interface {
	// Init prepares the working directory (generated root module) and runs
	// `terraform init` + workspace select only when needed.
	Init(ctx context.Context) error
	// Plan writes the inputs and runs a plan; nothing is applied.
	Plan(ctx context.Context, run Run, in *task.Inputs) (Result, error)
	// Apply writes the inputs and applies them.
	Apply(ctx context.Context, run Run, in *task.Inputs) (Result, error)
	// Destroy destroys everything the task's state holds.
	Destroy(ctx context.Context, run Run) (Result, error)
	// Forget removes what the task leaves behind once its infrastructure
	// is destroyed (task delete with destroy): its state and working
	// files. A driver with nothing to remove does nothing.
	Forget(ctx context.Context) error
}

// PlanHolder is implemented by the drivers that can hold a plan for the
// safety gates: make a plan and keep it, apply exactly that plan later, or
// discard it. The terraform, terraform-cloud and development drivers
// implement it; a caller finds it with a type assertion on the Driver (a
// wrapper that adds side effects, such as the HA fence, must implement it
// too, fencing ApplyPlan as it fences Apply). Its calls are never
// concurrent with the Driver's other verbs.
type PlanHolder interface {
	// PlanHeld writes the inputs and makes a plan that is kept until
	// ApplyPlan or DiscardPlan: a saved plan file in the task's working
	// directory (terraform), or a run that waits for its confirmation
	// (terraform-cloud). A plan without changes is held too.
	PlanHeld(ctx context.Context, run Run, in *task.Inputs) (HeldPlan, error)
	// ApplyPlan applies exactly the held plan p, never a new one, under
	// the run id run. When p can no longer be applied (the state changed
	// since it was made, or it was discarded) it fails with an error
	// that matches ErrPlanStale and applies nothing. A plan is applied
	// once: afterwards it is no longer held, whatever the outcome.
	ApplyPlan(ctx context.Context, run Run, p HeldPlan) (Result, error)
	// DiscardPlan drops the held plan p; discarding a plan that is no
	// longer held does nothing.
	DiscardPlan(ctx context.Context, p HeldPlan) error
}

// ErrPlanStale matches (errors.Is) the error of ApplyPlan when the held
// plan can no longer be applied: the task's state changed since the plan
// was made, or the plan was discarded. Nothing was applied; the caller
// supersedes it with a new plan.
var ErrPlanStale = errors.New("the held plan can no longer be applied (stale or discarded)")

// HeldPlan is a plan kept for a later ApplyPlan. It can be stored as JSON
// (to carry a held plan over a restart of the same instance); Ref is only
// meaningful to the driver that made it.
type HeldPlan struct {
	// ID is the run id of the plan that made it.
	ID string `json:"id"`
	// Ref is where the driver keeps the plan: the saved plan file's path
	// (terraform), the remote run's id (terraform-cloud).
	Ref string `json:"ref"`
	// Counts are the plan's resource changes and the number of managed
	// resources (instances) in the task's state before the plan.
	Counts gate.Counts `json:"counts"`
	// Changes reports that the plan has changes.
	Changes bool `json:"changes"`
	// Text is the readable plan (`terraform show <planfile>`, or the
	// remote plan's log).
	Text string `json:"text"`
	// JSON is the plan in Terraform's JSON format (`terraform show -json
	// <planfile>`), for policy checks; nil when the driver cannot read it
	// (see the driver's documentation).
	JSON json.RawMessage `json:"json,omitempty"`
	// Result is the plan run's result: its log, duration and remote URL.
	Result Result `json:"-"`
	// Durable says that Ref stays valid after the process that made the
	// plan ends (terraform-cloud: the remote run waits for its
	// confirmation), so that a restarted daemon or a new leader may apply
	// it; false for a plan file in the task's working directory
	// (terraform), which is swept at start and never stored.
	Durable bool `json:"durable,omitempty"`
}

// The parts of a task's desired state. A run's result is determined by all
// of them together; the fingerprint that decides whether a task runs is one
// hash over the digests of all but PartModuleInputs (module inputs are read
// by a run, they do not trigger one), and the digests are kept apart so that
// a run can say what changed since the last successful one.
const (
	// PartTask: the task's spec fields that reach Terraform (module source
	// and version, variables with the contents of its variable files,
	// provider names, condition and module inputs).
	PartTask = "task"
	// PartData: the Consul data of the task's condition, the data that
	// triggers it.
	PartData = "consul data"
	// PartModuleInputs: the Consul data the task's runs read but that does
	// not trigger it (module inputs). It is recorded with what a run used,
	// and left out of the fingerprint that decides whether the task runs.
	PartModuleInputs = "module input data"
	// PartModule: the module's code (a content hash of a local module's
	// directory tree; source and version constraint otherwise).
	PartModule = "module"
	// PartModuleResolved: the version `terraform init` resolved for a
	// module that is not local. Like PartModuleInputs it is recorded with
	// what a run used and does not trigger one: it is only known after the
	// first run's init, and is resolved anew in a new working directory.
	PartModuleResolved = "resolved module version"
	// PartProviders: the resolved provider configuration (after {{ env }}
	// and {{ key }}), hashed; never stored in clear.
	PartProviders = "provider config"
	// PartBackend: the state backend's configuration.
	PartBackend = "backend"
	// PartRequiredProviders: the driver's required_providers.
	PartRequiredProviders = "required_providers"
	// PartBinary: the Terraform/OpenTofu binary's path and version.
	PartBinary = "binary"
	// PartUpstream: the outputs of the tasks whose outputs the task
	// receives (module_input "task-outputs"), as last recorded.
	PartUpstream = "upstream outputs"
	// PartPolicy: the content of the task's policy files (policy.Hash).
	PartPolicy = "policy"
)

// Run identifies one execution of a task.
type Run struct {
	// ID is the run id; it names the per-run log file, so it must be usable
	// as a file name (no path separators).
	ID string
	// Destroy makes PlanHeld plan the destruction of everything the task
	// manages (`terraform plan -destroy`): a deletion with destroy that
	// goes through the safety gates. A driver that cannot plan a destroy
	// refuses it (never plans anything else in its place).
	Destroy bool
	// DataChange says that the run applies a change of the task's Consul
	// data (its condition's or module inputs' catalog or KV data) and
	// nothing else: no change of the task, its module or its
	// configuration, no retry, start, drift or API run. Under the refresh
	// policy "auto" such an Apply may skip Terraform's refresh (see the
	// terraform driver's MaxRefreshAge); every other run refreshes.
	DataChange bool
	// DeferCheck lets a data change applied with -target (the terraform
	// driver, refresh policy "auto") stop after its targeted apply: the
	// full check without refresh of everything is left to a later run
	// (Check), and the result says it is due (Result.CheckDue).
	DeferCheck bool
	// Check makes an Apply the full check a targeted run left due: a plan
	// without refresh of everything the task manages, applied if it finds
	// changes (a module whose objects depend on every instance), never
	// targeted. A driver that does not target applies as for any run.
	Check bool
}

// Result is what a Plan, Apply or Destroy produced.
type Result struct {
	// Changes reports that the plan had changes, or that the apply/destroy
	// changed something.
	Changes bool
	// Add, Change and Destroy are the resource counts of the plan or apply.
	Add, Change, Destroy int
	// Output is the captured standard output (the readable plan for Plan).
	Output string
	// LogPath is the file holding this run's full output.
	LogPath string
	// Duration is the wall time of the run.
	Duration time.Duration
	// RunURL is the page of the remote run in HCP Terraform / Terraform
	// Enterprise (terraform-cloud driver); empty for a local run.
	RunURL string
	// Outputs is, after an apply of a task whose spec has ExportOutputs,
	// the JSON object of the module's outputs (name to value); nil when
	// not asked for or not available.
	Outputs json.RawMessage
	// Phases are the parts of the run with their timings ("plan" and
	// "apply" of an apply), when the driver can tell them apart.
	Phases []Phase
	// Refresh says whether the run read every object the task manages
	// (Terraform's refresh) before planning: RefreshFull, RefreshSkipped
	// (an apply with -refresh=false under the refresh policy "auto"), or
	// "" when the driver ran no plan (a failure before Terraform started,
	// the development driver).
	Refresh string
	// Targeted, for an apply without refresh that planned the changed
	// instances alone first (`-target`, refresh policy "auto"), says so:
	// how many of the state's resource instances it targeted, and what
	// the full check that followed in the same run found ("targeted 3 of
	// 2,000 resource instances ...; full check: no further changes"), or
	// that it is pending (Run.DeferCheck: "...; full check: pending"). For
	// the full check run afterwards (Run.Check), what it found ("full
	// check: applied 8 further changes"). Empty for every other run.
	Targeted string
	// CheckDue says that the run applied a targeted change and left its
	// full check to a later run (Run.DeferCheck): the caller runs one
	// with Run.Check.
	CheckDue bool
}

// The values of Result.Refresh.
const (
	RefreshFull    = "full"
	RefreshSkipped = "skipped"
)

// Phase is one timed part of a run: "init", "plan", "apply", "destroy".
type Phase struct {
	Name       string
	Start, End time.Time
}

// ErrStateLocked is wrapped by the error of a run that failed because the
// task's Terraform state is locked by another process. Such a run is worth
// retrying until it succeeds: a lock always ends, when its holder finishes
// or, for a holder that died, when the backend expires it (the consul
// backend's session TTL).
var ErrStateLocked = errors.New("terraform state is locked")

// Error is a failed driver operation. Summary holds Terraform's error
// diagnostics in one line ("Error: <summary>: <detail>", several joined by
// "; "; see Diagnostics.Summary), so the cause is readable in a log line
// or an API reply; Err is the underlying error (it keeps the full stderr).
type Error struct {
	Op      string // init, workspace, plan, apply, destroy, ...
	Summary string
	// Headline is the one-line form of the failure: Terraform's
	// diagnostics with the first paragraph of their detail, short
	// (Diagnostics.Headline); "" when Summary has no diagnostic.
	Headline string
	Err      error
	// Terminal marks an error that running the same desired state again
	// cannot fix (see ErrTerminal).
	Terminal bool
}

// ErrTerminal matches (errors.Is) the error of a run that failed in a way
// that running the same desired state again cannot fix: the configuration
// is invalid (an unsupported or missing argument, an undeclared variable,
// a module that is not there). The reconciler does not retry such a run;
// the task runs again when its desired state changes (the module or the
// configuration is fixed, or its data changes).
var ErrTerminal = errors.New("terminal error: the same desired state would fail the same way")

// IsTerminal reports whether err is terminal (see ErrTerminal).
func IsTerminal(err error) bool { return err != nil && errors.Is(err, ErrTerminal) }

// Is makes errors.Is(err, ErrTerminal) true for a terminal Error.
func (e *Error) Is(target error) bool { return e.Terminal && target == ErrTerminal }

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	b.WriteString(": ")
	switch {
	case e.Summary != "":
		b.WriteString(e.Summary)
	case e.Err != nil:
		b.WriteString(firstLine(e.Err.Error()))
	default:
		b.WriteString("failed")
	}
	return b.String()
}

// Unwrap returns the underlying error, so errors.Is(err, context.Canceled)
// works on a cancelled run.
func (e *Error) Unwrap() error { return e.Err }

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return strings.TrimSpace(s[:i])
	}
	return s
}

// terminalSummaries are the summaries of Terraform diagnostics that come
// from the configuration itself (the generated root module, the module's
// code, the values given to it) rather than from the world: a run of the
// same desired state would report them again.
var terminalSummaries = []string{
	"Unsupported argument", "Missing required argument", "Unsupported block type",
	"Missing required block", "Unsupported attribute", "Invalid reference",
	"Reference to undeclared input variable", "Reference to undeclared resource",
	"Reference to undeclared module", "Reference to undeclared local value",
	"Undeclared input variable", "Value for undeclared variable", "Invalid value for input variable",
	"Invalid value for variable", "No value for required variable", "Missing required provider",
	"Module not installed", "Unreadable module directory", "Invalid module source address",
	"Module source has changed", "Invalid expression", "Argument or block definition required",
	"Duplicate resource", "Duplicate module call", "Duplicate variable declaration",
	"Duplicate output definition", "Invalid provider configuration", "Unsuitable value type",
	"Incorrect attribute value type", "Invalid function argument", "Call to unknown function",
	"Variables not allowed", "Function calls not allowed", "Invalid block definition",
	"Unsupported Terraform Core version",
}

// maxHeadline bounds the length of ErrorSummary's line.
const maxHeadline = 240

// ErrorSummary returns the one-line summary of a run's error: the
// Headline of a driver *Error (Terraform's "Error: <summary>: <detail>"
// lines), else the first line of the error, cut at 240 bytes. "" for nil.
// It is what every one-line error shows: a run's error_summary, a retry's
// last_error, the status and -once tables, webhook texts, the dashboard.
func ErrorSummary(err error) string {
	if err == nil {
		return ""
	}
	var s string
	if de := (*Error)(nil); errors.As(err, &de) && de.Headline != "" {
		s = de.Headline
	} else {
		s = firstLine(err.Error())
	}
	return cutUTF8(s, maxHeadline)
}

// Diagnostic is one of Terraform's diagnostics. The Terraform driver reads
// them from Terraform's machine-readable output (-json) where the binary has
// it, from its text output otherwise (driver/terraform/tftext).
type Diagnostic struct {
	Severity string // "error" or "warning"
	Summary  string
	Detail   string
}

// Diagnostics are the diagnostics of one command.
type Diagnostics []Diagnostic

// Errors returns the error diagnostics only.
func (ds Diagnostics) Errors() Diagnostics {
	var out Diagnostics
	for _, d := range ds {
		if d.Severity == "error" {
			out = append(out, d)
		}
	}
	return out
}

// Summary is the one-line report of the error diagnostics: each becomes
// "Error: <summary>: <first paragraph of the detail>" (cut at 300 bytes),
// a repeated one is kept once, and they are joined with "; ".
func (ds Diagnostics) Summary() string {
	var out []string
	for _, d := range ds.Errors() {
		t := "Error: " + d.Summary
		if detail := firstParagraph(d.Detail); detail != "" {
			t += ": " + cutUTF8(detail, maxDetail)
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return strings.Join(out, "; ")
}

// Headline is the one-line form of the error diagnostics: each becomes
// "Error: <summary>: <first paragraph of its detail>" (the detail cut at
// 160 bytes), kept once, joined by "; "; "" when there is none. The
// summary alone rarely says why ("Error: local-exec provisioner error"),
// the detail's first paragraph does (the module author's error_message of
// a failed condition, what an argument should be). A local-exec
// provisioner's detail drops the command line Terraform puts first
// ("Error running command '<command>': "), which is long and says
// nothing of the cause: "Error: local-exec provisioner error: exit status
// 22. Output: 503 Service Unavailable".
func (ds Diagnostics) Headline() string {
	var out []string
	for _, d := range ds.Errors() {
		t := "Error: " + d.Summary
		if m := firstParagraph(provisionerDetail(d.Detail)); m != "" {
			t += ": " + cutUTF8(m, maxHeadlineDetail)
		}
		if slices.ContainsFunc(out, func(o string) bool { return o == t || strings.HasPrefix(o, t+": ") }) {
			continue
		}
		out = append(out, t)
	}
	return strings.Join(out, "; ")
}

// provisionerDetail is the detail of a failed local-exec provisioner
// without its command line: Terraform writes "Error running command
// '<command>': <error>. Output: <output>", and the command may be long
// enough to push the output (the cause) out of a one-line summary. Any
// other detail is returned unchanged.
func provisionerDetail(detail string) string {
	const prefix = "Error running command '"
	if !strings.HasPrefix(detail, prefix) {
		return detail
	}
	head := detail
	if i := strings.Index(detail, ". Output:"); i >= 0 {
		head = detail[:i]
	}
	j := strings.LastIndex(head, "': ")
	if j < len(prefix)-1 {
		return detail
	}
	return detail[j+len("': "):]
}

// maxHeadlineDetail bounds the detail kept per diagnostic in a headline.
const maxHeadlineDetail = 160

// Terminal reports whether an error diagnostic comes from the
// configuration itself (see ErrTerminal).
func (ds Diagnostics) Terminal() bool {
	for _, d := range ds.Errors() {
		for _, t := range terminalSummaries {
			if d.Summary == t || strings.HasPrefix(d.Summary, t+":") || strings.HasPrefix(d.Summary, t+" ") {
				return true
			}
		}
	}
	return false
}

// firstParagraph joins the lines of text's first paragraph with spaces.
func firstParagraph(text string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(strings.ReplaceAll(text, "\r\n", "\n")), "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			break
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, " ")
}

// cutUTF8 cuts s at n bytes (on a rune boundary), marking the cut with "...".
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// maxDetail bounds the detail kept per diagnostic.
const maxDetail = 300
