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
	// directory tree; source, constraint and resolved version otherwise).
	PartModule = "module"
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
)

// Run identifies one execution of a task.
type Run struct {
	// ID is the run id; it names the per-run log file, so it must be usable
	// as a file name (no path separators).
	ID string
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
}

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
// "; "; see Summarize), so the cause is readable in a log line or an API
// reply; Err is the underlying error (it keeps the full stderr).
type Error struct {
	Op      string // init, workspace, plan, apply, destroy, ...
	Summary string
	// Headline is the one-line form of the failure: Terraform's
	// diagnostic summaries only ("Error: <summary>", several joined by
	// "; "), without their detail; "" when Summary has no diagnostic.
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

// TerminalDiagnostic reports whether the error diagnostics of a failed
// command (stderr) include one that comes from the configuration itself
// (see ErrTerminal).
func TerminalDiagnostic(stderr string) bool {
	for _, raw := range strings.Split(stderr, "\n") {
		line := strings.TrimSpace(unbox(raw))
		sum, ok := strings.CutPrefix(line, "Error: ")
		if !ok {
			continue
		}
		for _, t := range terminalSummaries {
			if sum == t || strings.HasPrefix(sum, t+":") || strings.HasPrefix(sum, t+" ") {
				return true
			}
		}
	}
	return false
}

// maxHeadline bounds the length of ErrorSummary's line.
const maxHeadline = 200

// ErrorSummary returns the one-line summary of a run's error: the
// Headline of a driver *Error (Terraform's "Error: <summary>" lines),
// else the first line of the error, cut at 200 bytes. "" for nil.
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
	if len(s) > maxHeadline {
		cut := maxHeadline
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}

// Headline returns the summaries of Terraform's error diagnostics in
// stderr ("Error: <summary>", boxed or plain layout, each once, joined by
// "; "), or "" when there is none.
func Headline(stderr string) string {
	var out []string
	for _, raw := range strings.Split(strings.ReplaceAll(stderr, "\r\n", "\n"), "\n") {
		line := unbox(raw)
		if !strings.HasPrefix(line, "Error: ") {
			continue
		}
		if line = strings.TrimSpace(line); !slices.Contains(out, line) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "; ")
}

// Summarize extracts Terraform's error diagnostics from the standard error
// of a failed command: each becomes "Error: <summary>: <first paragraph of
// the detail>" (the source snippet between them is left out), and they are
// joined with "; ". Both the plain and the boxed diagnostic layouts are read,
// and a diagnostic that repeats is kept once. When there is no "Error:" line,
// the first non-empty line is returned instead, so the caller always has
// something to show.
func Summarize(stderr string) string {
	var (
		out   []string
		seen  = map[string]bool{}
		first string
		cur   *diagnostic
	)
	flush := func() {
		if cur == nil {
			return
		}
		t := cur.text()
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
		cur = nil
	}
	for _, raw := range strings.Split(strings.ReplaceAll(stderr, "\r\n", "\n"), "\n") {
		line := unbox(raw)
		trimmed := strings.TrimSpace(line)
		if first == "" && trimmed != "" && trimmed != "╷" && trimmed != "╵" {
			first = trimmed
		}
		switch {
		case strings.HasPrefix(line, "Error: "):
			flush()
			cur = &diagnostic{summary: strings.TrimSpace(line)}
		case strings.HasPrefix(line, "Warning: "), trimmed == "╷", trimmed == "╵":
			flush()
		case cur != nil:
			cur.add(line)
		}
	}
	flush()
	if len(out) == 0 {
		return first
	}
	return strings.Join(out, "; ")
}

// maxDetail bounds the detail kept per diagnostic.
const maxDetail = 300

// diagnostic collects the lines of one Terraform error diagnostic.
type diagnostic struct {
	summary string
	detail  []string
	state   int // 0: before detail, 1: in detail, 2: detail paragraph done
}

func (d *diagnostic) add(line string) {
	blank := strings.TrimSpace(line) == ""
	indented := strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t")
	switch d.state {
	case 0:
		// Skip blank lines and the indented source snippet ("  on main.tf
		// line 3 ..."); the detail is the first line starting at column 0.
		if !blank && !indented {
			d.detail = append(d.detail, strings.TrimSpace(line))
			d.state = 1
		}
	case 1:
		if blank {
			d.state = 2
			return
		}
		d.detail = append(d.detail, strings.TrimSpace(line))
	}
}

func (d *diagnostic) text() string {
	if len(d.detail) == 0 {
		return d.summary
	}
	detail := strings.Join(d.detail, " ")
	if len(detail) > maxDetail {
		cut := maxDetail
		for cut > 0 && !utf8.RuneStart(detail[cut]) {
			cut--
		}
		detail = detail[:cut] + "..."
	}
	return d.summary + ": " + detail
}

// unbox removes the "│ " prefix of Terraform's boxed diagnostics, keeping the
// indentation that follows it.
func unbox(line string) string {
	line = strings.TrimRight(line, " \t\r")
	if rest, ok := strings.CutPrefix(line, "│"); ok {
		return strings.TrimPrefix(rest, " ")
	}
	return line
}
