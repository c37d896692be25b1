// Package engine evaluates a task's Open Policy Agent policies (Rego v1)
// on the plan of a run: every string in data.ctsync.deny blocks it. It is
// linked only into the policy helper, cmd/ctsync-policy: the daemon runs
// that helper (internal/policy) and never links OPA, whose code alone
// would add 6–9 MiB to the RSS of every daemon, with a policy or not
// (docs/performance.md).
//
// A Set is compiled by Load: a file that does not parse or compile is a
// *policy.Error with its file, line and column. Eval then evaluates the
// compiled policies on one plan. The input document the policies see is
// policy.Input (docs/safety.md):
//
//	input.plan     the plan as `terraform show -json` prints it
//	input.task     {name, description, module, version, providers, variables, condition}
//	input.trigger  what started the run (the run event's trigger)
//
// The builtins that reach the network or the process's environment
// (http.send, net.lookup_ip_addr, opa.runtime) are not available: a policy
// decides from its input alone.
package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/types"
	"github.com/open-policy-agent/opa/v1/version"

	"github.com/ctsync/ctsync/internal/depth"
	"github.com/ctsync/ctsync/internal/policy"
	"github.com/ctsync/ctsync/internal/task"
)

// OPAVersion is the version of OPA the engine is built with.
var OPAVersion = version.Version

// The types the engine shares with the daemon's side (internal/policy).
type (
	Error  = policy.Error
	Errors = policy.Errors
	Input  = policy.Input
)

// Query is what a plan is checked against: the messages of the deny rules
// of package ctsync.
const Query = policy.Query

// withheld are the builtins a policy may not call: they reach the network
// or the process's environment, which would make a verdict depend on more
// than the plan and leak what ctsync's process holds (opa.runtime returns
// its environment variables).
var withheld = map[string]bool{"http.send": true, "net.lookup_ip_addr": true, "opa.runtime": true}

// Set is a task's compiled policy files, ready to evaluate plans. It is
// safe for concurrent use.
type Set struct {
	files []string
	query rego.PreparedEvalQuery
	// denyAt names where data.ctsync.deny is defined ("fw.rego:7"), for
	// the error about a value that is not a message.
	denyAt []string
}

// Files returns the files the set was compiled from.
func (s *Set) Files() []string { return slices.Clone(s.files) }

// Check reads and compiles the files without keeping the result: the check
// made when the configuration is loaded (`ctsync-policy check`). The error
// is Errors.
func Check(files []string) error {
	_, err := Load(context.Background(), files)
	return err
}

// Load reads the Rego v1 files and compiles them together. They must
// define data.ctsync.deny (package ctsync, deny rules): a set without it
// would let every plan through, which is never what a policy block means.
// The error is Errors, one per problem, each with its file and, for
// syntax and compile errors, its line and column.
func Load(ctx context.Context, files []string) (*Set, error) {
	if len(files) == 0 {
		return nil, Errors{{Msg: "no policy files"}}
	}
	var errs Errors
	modules := make(map[string]*ast.Module, len(files))
	caps := capabilities()
	for _, f := range files {
		if _, dup := modules[f]; dup {
			errs = append(errs, &Error{File: f, Msg: "listed twice"})
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, &Error{File: f, Msg: "cannot read policy file: " + pathErr(err)})
			continue
		}
		m, err := ast.ParseModuleWithOpts(f, string(src), ast.ParserOptions{RegoVersion: ast.RegoV1, Capabilities: caps})
		if err != nil {
			errs = append(errs, astErrors(f, err)...)
			continue
		}
		if m == nil {
			errs = append(errs, &Error{File: f, Msg: "holds no Rego module (it needs a package declaration: package ctsync)"})
			continue
		}
		modules[f] = m
	}
	if len(errs) > 0 {
		return nil, errs
	}
	c := ast.NewCompiler().WithCapabilities(caps)
	c.Compile(modules)
	if c.Failed() {
		return nil, astErrors("", c.Errors)
	}
	denyAt := denyRules(c, files)
	if len(denyAt) == 0 {
		return nil, Errors{{File: strings.Join(files, ", "),
			Msg: "no rule defines data.ctsync.deny: a policy file must declare `package ctsync` and `deny contains msg if { ... }` rules"}}
	}
	if msg := denyTypeProblem(c.TypeEnv.Get(ast.MustParseRef(Query))); msg != "" {
		file, line := splitAt(denyAt[0])
		return nil, Errors{{File: file, Line: line, Msg: msg}}
	}
	// Strict: a builtin that fails (a division by zero, a conversion of
	// something that is not a number) is an error of the evaluation, so
	// the plan is not applied; OPA's default makes the expression
	// undefined, which silently drops the deny rule it was in.
	pq, err := rego.New(rego.Query(Query), rego.Compiler(c), rego.Capabilities(caps),
		rego.StrictBuiltinErrors(true)).PrepareForEval(ctx)
	if err != nil {
		return nil, astErrors(files[0], err)
	}
	return &Set{files: slices.Clone(files), query: pq, denyAt: denyAt}, nil
}

// capabilities are OPA's builtins less the withheld ones.
func capabilities() *ast.Capabilities {
	c := ast.CapabilitiesForThisVersion()
	c.Builtins = slices.DeleteFunc(c.Builtins, func(b *ast.Builtin) bool { return withheld[b.Name] })
	return c
}

// denyRules returns where the rules of data.ctsync.deny are, in file order.
func denyRules(c *ast.Compiler, files []string) []string {
	want := ast.MustParseRef(Query)
	var at []string
	for _, f := range files {
		m := c.Modules[f]
		if m == nil {
			continue
		}
		for _, r := range m.Rules {
			if m.Package.Path.Extend(r.Head.Ref()).HasPrefix(want) {
				at = append(at, fmt.Sprintf("%s:%d", f, r.Location.Row))
			}
		}
	}
	return at
}

// denyTypeProblem says what is wrong with data.ctsync.deny's type as the
// compiler inferred it, when it can never be a set or an array of strings
// ("" when it is, or may be: a message built from the input is of a type
// known only at evaluation, which Eval checks).
func denyTypeProblem(t types.Type) string {
	switch t.(type) {
	case nil, types.Any, *types.Set, *types.Array:
	default:
		return fmt.Sprintf("data.ctsync.deny is %s: it must be a set or an array of strings (deny contains msg if { ... })", types.Sprint(t))
	}
	if _, isAny := t.(types.Any); isAny {
		return ""
	}
	if e := types.Values(t); e != nil && !types.Contains(e, types.S) {
		return fmt.Sprintf("data.ctsync.deny holds %s values: every entry must be a string message", types.Sprint(e))
	}
	return ""
}

// splitAt splits a "file:line" of denyRules.
func splitAt(at string) (string, int) {
	i := strings.LastIndexByte(at, ':')
	n, _ := strconv.Atoi(at[i+1:])
	return at[:i], n
}

// astErrors converts OPA's errors into Errors, with file (when the error
// has none), line and column.
func astErrors(file string, err error) Errors {
	var aes ast.Errors
	if !errors.As(err, &aes) {
		var ae *ast.Error
		if !errors.As(err, &ae) {
			return Errors{{File: file, Msg: err.Error()}}
		}
		aes = ast.Errors{ae}
	}
	out := make(Errors, 0, len(aes))
	for _, e := range aes {
		pe := &Error{File: file, Msg: e.Message}
		if l := e.Location; l != nil {
			if l.File != "" {
				pe.File = l.File
			}
			pe.Line, pe.Col = l.Row, l.Col
		}
		out = append(out, pe)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].File != out[j].File {
			return out[i].File < out[j].File
		}
		return out[i].Line < out[j].Line
	})
	return out
}

func pathErr(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// EvalWithin is Eval with a time limit (timeout <= 0: task.DefaultPolicyTimeout).
// Past it the evaluation is stopped (OPA checks for cancellation between
// steps and inside its expensive builtins) and the error is *policy.TimeoutError.
func (s *Set) EvalWithin(ctx context.Context, timeout time.Duration, plan []byte, in Input) ([]string, error) {
	if timeout <= 0 {
		timeout = task.DefaultPolicyTimeout
	}
	te := &policy.TimeoutError{Files: slices.Clone(s.files), Timeout: timeout}
	ectx, cancel := context.WithTimeoutCause(ctx, timeout, te)
	defer cancel()
	msgs, err := s.Eval(ectx, plan, in)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(ectx), te) {
		return nil, te
	}
	return msgs, err
}

// Eval evaluates the policies on a plan (the JSON of `terraform show
// -json`) and returns the deny messages, sorted; none: the plan may be
// applied. Any error (a plan that is not JSON, a deny value that is not a
// string, a policy that fails at run time: a builtin's error, a conflict
// between rules, data.ctsync.deny undefined; the context ending) means
// the verdict is unknown: the caller must not apply.
func (s *Set) Eval(ctx context.Context, plan []byte, in Input) ([]string, error) {
	if err := depth.JSON(plan, policy.MaxPlanDepth, false); err != nil {
		return nil, fmt.Errorf("policy: the plan's JSON %v", err)
	}
	pv, err := ast.ValueFromReader(bytes.NewReader(plan))
	if err != nil {
		return nil, fmt.Errorf("policy: the plan is not valid JSON: %w", err)
	}
	tv, err := ast.InterfaceToValue(in.Task)
	if err != nil {
		return nil, fmt.Errorf("policy: task input: %w", err)
	}
	input := ast.NewObject(
		ast.Item(ast.InternedTerm("plan"), ast.NewTerm(pv)),
		ast.Item(ast.InternedTerm("task"), ast.NewTerm(tv)),
		ast.Item(ast.InternedTerm("trigger"), ast.StringTerm(in.Trigger)),
	)
	rs, err := s.query.Eval(ctx, rego.EvalParsedInput(input))
	if err == nil && ctx.Err() != nil {
		err = ctx.Err() // stopped: what it found is not the verdict
	}
	if err != nil {
		if ctx.Err() != nil {
			if c := context.Cause(ctx); c != nil && !errors.Is(c, ctx.Err()) {
				return nil, fmt.Errorf("%w: %w", policy.ErrCancelled, c)
			}
			return nil, fmt.Errorf("%w: %w", policy.ErrCancelled, ctx.Err())
		}
		return nil, fmt.Errorf("policy %s: %w", strings.Join(s.files, ", "), err)
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		// A complete rule (deny := ...) whose conditions all failed: no
		// verdict. deny contains msg if { ... } is always defined.
		return nil, fmt.Errorf("policy: data.ctsync.deny (%s) is undefined for this plan: the verdict is unknown, so the plan is denied (write deny rules as `deny contains msg if { ... }`, which are always defined)", strings.Join(s.denyAt, ", "))
	}
	return s.messages(rs[0].Expressions[0].Value)
}

// messages reads data.ctsync.deny's value: a set (a JSON array once
// evaluated) or an array of strings.
func (s *Set) messages(v any) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("policy: data.ctsync.deny (%s) is %s: it must be a set or an array of strings", strings.Join(s.denyAt, ", "), typeName(v))
	}
	out := make([]string, 0, len(list))
	for _, e := range list {
		m, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("policy: data.ctsync.deny (%s) holds %s: every entry must be a string message", strings.Join(s.denyAt, ", "), typeName(e))
		}
		out = append(out, m)
	}
	sort.Strings(out)
	return slices.Compact(out), nil
}

// typeName names a JSON value's type with its article.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return "a number"
}

// Evaluate loads the files and evaluates them on a plan within timeout
// (<= 0: task.DefaultPolicyTimeout): Load then EvalWithin, on the files as
// they are now.
func Evaluate(ctx context.Context, files []string, timeout time.Duration, plan []byte, in Input) ([]string, error) {
	s, err := Load(ctx, files)
	if err != nil {
		return nil, err
	}
	return s.EvalWithin(ctx, timeout, plan, in)
}
