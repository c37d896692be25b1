package task

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/cronexpr"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/ctsync/ctsync/internal/depth"
)

// This file holds the task rules that configuration decoding and the API
// both apply: buffer_period inheritance, the cron expression of a schedule
// condition, and the names and values that end up in the generated root
// module (task variables, providers and their arguments), which Validate
// checks too, so that a task is refused where it is written (config file
// and line, or the API's 400) rather than when it runs.

// BufferSetting is a buffer_period block as written: each field is nil
// when it was not set.
type BufferSetting struct {
	Enabled  *bool
	Min, Max *Duration
}

// IsSet reports whether the block sets anything (an empty block inherits,
// like no block).
func (b BufferSetting) IsSet() bool { return b.Enabled != nil || b.Min != nil || b.Max != nil }

// InheritBufferPeriod applies the CTS inheritance rules of buffer_period:
// nothing set is parent; enabled = false is off; otherwise on, min from own,
// else parent's min when parent is on, else DefaultBufferPeriod's; max from
// own, else 4 x min. An explicit max below min is left for Validate to
// report, not fixed. The global block inherits from DefaultBufferPeriod, a
// task's from the global one.
func InheritBufferPeriod(own BufferSetting, parent BufferPeriod) BufferPeriod {
	if !own.IsSet() {
		return parent
	}
	if own.Enabled != nil && !*own.Enabled {
		return BufferPeriod{}
	}
	out := BufferPeriod{Enabled: true}
	switch {
	case own.Min != nil:
		out.Min = *own.Min
	case parent.Enabled:
		out.Min = parent.Min
	default:
		out.Min = DefaultBufferPeriod.Min
	}
	if own.Max != nil {
		out.Max = *own.Max
	} else {
		out.Max = max(4*out.Min, out.Min) // max(...): 4 x min may overflow
	}
	return out
}

// SetBufferPeriod sets s.BufferPeriod from the task's own buffer_period
// and the global one: none for a schedule task (its runs are not
// debounced), else InheritBufferPeriod. It reports whether a buffer_period
// that was set is ignored (a schedule task's).
func (s *Spec) SetBufferPeriod(own BufferSetting, global BufferPeriod) (ignored bool) {
	if s.Condition.Schedule != nil {
		s.BufferPeriod = &BufferPeriod{}
		return own.IsSet()
	}
	bp := InheritBufferPeriod(own, global)
	s.BufferPeriod = &bp
	return false
}

// CheckCron parses a cron expression (hashicorp/cronexpr syntax) and
// refuses one that never fires. cronexpr panics on some malformed input;
// that is an error too. The error does not quote the expression.
func CheckCron(expr string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.New("is not a valid cron expression: malformed expression")
		}
	}()
	e, perr := cronexpr.Parse(expr)
	if perr != nil {
		return fmt.Errorf("is not a valid cron expression: %v", perr)
	}
	if e.Next(time.Now()).IsZero() {
		return errors.New("never fires")
	}
	return nil
}

// MaxNameLength is the longest task name: the name is a directory of
// working_dir (and the part of several Consul KV keys), which must stay
// well inside the 255 bytes a file name may have.
const MaxNameLength = 128

// reservedVariables cannot be task variables: they are module
// meta-arguments or the module inputs ctsync sets itself.
var reservedVariables = map[string]bool{
	"source": true, "version": true, "count": true, "for_each": true,
	"providers": true, "depends_on": true,
	"services": true, "catalog_services": true, "consul_kv": true,
}

// ReservedVariable reports whether name is a module argument ctsync sets
// itself, which a task variable cannot be.
func ReservedVariable(name string) bool { return reservedVariables[name] }

// CheckIdentifier reports a name that is not an HCL identifier (a letter
// or underscore, then letters, digits, underscores and dashes): task
// variable names, provider names and provider argument names are written
// as such into the generated root module.
func CheckIdentifier(name string) error {
	if !hclsyntax.ValidIdentifier(name) {
		return fmt.Errorf("%q is not a valid name: it must start with a letter or underscore and contain only letters, digits, underscores and dashes", name)
	}
	return nil
}

// CheckVariable checks a task variable: its name is an identifier that
// ctsync does not set itself, and its value (HCL expression text) is a
// literal: no variable references and no function calls, which the
// generated root module could not evaluate. The value nests at most
// depth.Max levels, checked before it is parsed (the parser recurses).
func CheckVariable(name, value string) error {
	if err := CheckIdentifier(name); err != nil {
		return err
	}
	if ReservedVariable(name) {
		return fmt.Errorf("%q is reserved: ctsync sets this module argument itself", name)
	}
	if err := depth.HCL([]byte(value), 0); err != nil {
		return fmt.Errorf("the value %v", err)
	}
	expr, diags := hclsyntax.ParseExpression([]byte(value), name, hcl.InitialPos)
	if !diags.HasErrors() {
		_, diags = expr.Value(nil)
	}
	if diags.HasErrors() {
		return fmt.Errorf("must be a literal value (no variables or function calls): %s", diagSummary(diags))
	}
	return nil
}

// VariableStrings returns the string values in the task's variables (each
// variable's HCL text evaluated; the strings of lists and objects too),
// and the text of any variable that is not a literal.
func (s *Spec) VariableStrings() []string {
	var out []string
	var walk func(v cty.Value)
	walk = func(v cty.Value) {
		switch {
		case v.IsNull() || !v.IsKnown():
		case v.Type() == cty.String:
			out = append(out, v.AsString())
		case v.CanIterateElements():
			for it := v.ElementIterator(); it.Next(); {
				_, e := it.Element()
				walk(e)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.Variables)) {
		text := s.Variables[name]
		if depth.HCL([]byte(text), 0) != nil {
			out = append(out, text)
			continue
		}
		expr, diags := hclsyntax.ParseExpression([]byte(text), name, hcl.InitialPos)
		if diags.HasErrors() {
			out = append(out, text)
			continue
		}
		v, diags := expr.Value(nil)
		if diags.HasErrors() {
			out = append(out, text)
			continue
		}
		walk(v)
	}
	return out
}

// diagSummary is the first error of diags, without its position (the
// caller names the field).
func diagSummary(diags hcl.Diagnostics) string {
	for _, d := range diags {
		if d.Severity == hcl.DiagError {
			if d.Detail != "" {
				return d.Summary + ": " + d.Detail
			}
			return d.Summary
		}
	}
	return diags.Error()
}

// CheckProviderRef checks a task's provider reference: "name" or
// "name.alias", each an identifier.
func CheckProviderRef(ref string) error {
	name, alias, hasAlias := strings.Cut(ref, ".")
	if err := CheckIdentifier(name); err != nil {
		return fmt.Errorf("provider %v", err)
	}
	if hasAlias {
		if err := CheckIdentifier(alias); err != nil {
			return fmt.Errorf("provider alias %v", err)
		}
	}
	return nil
}

// IsLocalModule reports whether a module source is a local path: one that
// starts with ./ or ../, or an absolute path.
func IsLocalModule(src string) bool {
	return strings.HasPrefix(src, "./") || strings.HasPrefix(src, "../") || filepath.IsAbs(src)
}

// CheckLocalModule reports a local module source (IsLocalModule) that is
// not a directory. A relative source is resolved against the process's
// working directory, as CTS does; a remote source is not checked.
func CheckLocalModule(src string) error {
	if !IsLocalModule(src) {
		return nil
	}
	fi, err := os.Stat(src)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("local module %q does not exist", src)
	case err != nil:
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("local module %q cannot be read: %v", src, err)
	case !fi.IsDir():
		return fmt.Errorf("local module %q is not a directory", src)
	}
	return nil
}
