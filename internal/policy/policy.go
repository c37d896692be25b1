// Package policy is the daemon's side of a task's Open Policy Agent
// policies (Rego v1), evaluated on the plan of a run: every string in
// data.ctsync.deny blocks it.
//
// OPA is not linked into the daemon: its code alone would add 6–9 MiB to
// the RSS of every daemon, with a policy or not (docs/performance.md).
// Check and Evaluate run the policy helper, the ctsync-policy executable
// (cmd/ctsync-policy, the engine in internal/policy/engine), and speak a
// small versioned JSON protocol with it (protocol.go). The helper is
// looked for next to the daemon's executable, then in PATH (FindHelper).
// Every failure of the helper (missing, not executable, crashing, output
// that is not an answer, a protocol version it does not speak, not
// finishing within the policy's timeout) is an error: the verdict is
// unknown and the plan is not applied.
//
// The input document the policies see is Input (docs/safety.md):
//
//	input.plan     the plan as `terraform show -json` prints it
//	input.task     {name, description, module, version, providers, variables, condition}
//	input.trigger  what started the run (the run event's trigger)
package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ctsync/ctsync/internal/errlist"
	"github.com/ctsync/ctsync/internal/task"
)

// Query is what a plan is checked against: the messages of the deny rules
// of package ctsync.
const Query = "data.ctsync.deny"

// Error is a policy file that cannot be read, parsed or compiled.
type Error struct {
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"` // 0 when unknown
	Col  int    `json:"col,omitempty"`  // 0 when unknown
	Msg  string `json:"msg"`
}

func (e *Error) Error() string {
	switch {
	case e.Line > 0 && e.Col > 0:
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
	case e.Line > 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// Errors are all the problems found in a set of policy files, one per
// line; errors.As finds each *Error.
type Errors = errlist.List[*Error]

func pathErr(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// Input is the document the policies see besides the plan: input.task and
// input.trigger.
type Input struct {
	Task Task `json:"task"`
	// Trigger is what started the run, as its event records it: a watched
	// query key ("health/service/web"), "schedule", "module changed"...
	Trigger string `json:"trigger"`
}

// Task is input.task: the parts of the task's spec a policy may need.
type Task struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Module      string   `json:"module"`
	Version     string   `json:"version"`
	Providers   []string `json:"providers"`
	// Variables are the task's variables as HCL expression text
	// (`"a"`, `5`, `["x"]`), as in task.Spec.
	Variables map[string]string `json:"variables"`
	// Condition is the condition's type: "services", "consul-kv",
	// "schedule"...
	Condition string `json:"condition"`
}

// TaskInput is input.task for a task's spec.
func TaskInput(s task.Spec) Task {
	t := Task{Name: s.Name, Description: s.Description, Module: s.Module, Version: s.Version,
		Providers: s.Providers, Variables: s.Variables, Condition: strings.ReplaceAll(s.Condition.Type(), "_", "-")}
	if t.Providers == nil {
		t.Providers = []string{}
	}
	if t.Variables == nil {
		t.Variables = map[string]string{}
	}
	return t
}

// MaxPlanDepth bounds the nesting of a plan's JSON before it is decoded:
// the values in a plan are bounded by depth.Max (task variables) but sit
// several levels down in it, and module outputs may nest further.
const MaxPlanDepth = 512

// ErrCancelled is the error of an evaluation stopped because its context
// was cancelled (the task is being deleted, ctsync is stopping).
var ErrCancelled = errors.New("policy evaluation cancelled")

// TimeoutError is the error of an evaluation that did not finish within
// its time limit (policy.timeout): the verdict is unknown, the plan is
// not applied.
type TimeoutError struct {
	Files   []string
	Timeout time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("policy %s did not finish within %s (policy.timeout): the plan is not applied; a policy that loops over large ranges or expands wide CIDRs takes too long",
		strings.Join(e.Files, ", "), e.Timeout)
}

// Hash is a content hash of the policy files, in order, with their names:
// the part of a task's desired state that its policies are. An error names
// the file that cannot be read.
func Hash(files []string) (string, error) {
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("policy file %s: %s", f, pathErr(err))
		}
		fmt.Fprintf(h, "%d:%s%d:", len(f), f, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// DeniedError is the error of a run whose plan the task's policy denied:
// nothing was applied.
type DeniedError struct {
	Messages []string
}

func (e *DeniedError) Error() string {
	return "policy denied the plan: " + strings.Join(e.Messages, "; ")
}
