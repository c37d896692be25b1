package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/ctsync/ctsync/internal/errlist"
)

// Error is one configuration problem: where it is (Range, which may be the
// zero value when no position is known), which field it concerns (Field,
// possibly empty) and what is wrong (Msg). Messages never quote the values
// of secret fields.
//
// Field is written the way the user wrote the configuration: names joined
// with dots, a block's labels quoted after its type, a task shown by its
// name, list items as [i]. For example:
//
//	task "web".condition "catalog-services".regexp
//	task "web".providers[1]
//	driver "terraform".backend "s3".bucket
//	consul.tls.ca_cert
type Error struct {
	Range hcl.Range
	Field string
	Msg   string
}

// Error formats the problem as "file:line: field: message", leaving out the
// parts that are empty.
func (e *Error) Error() string {
	var b strings.Builder
	if pos := posString(e.Range); pos != "" {
		b.WriteString(pos)
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is returned when configuration has more than one problem. Its
// message holds one problem per line, and errors.As finds each *Error in it.
type Errors = errlist.List[*Error]

// AsList returns the individual problems held by an error returned from
// Load or LoadTaskFile: the Errors, a single *Error, or nil when err is nil
// or of another type.
func AsList(err error) []*Error {
	var es Errors
	if errors.As(err, &es) {
		return es
	}
	var e *Error
	if errors.As(err, &e) {
		return []*Error{e}
	}
	return nil
}

// posString renders "file:line" (or just "file") for a range.
func posString(r hcl.Range) string {
	switch {
	case r.Filename == "":
		return ""
	case r.Start.Line > 0:
		return fmt.Sprintf("%s:%d", r.Filename, r.Start.Line)
	default:
		return r.Filename
	}
}

// toError returns nil, the only problem, or all problems.
func toError(es []*Error) error {
	switch len(es) {
	case 0:
		return nil
	case 1:
		return es[0]
	}
	out := make(Errors, len(es))
	copy(out, es)
	return out
}

// sortErrors orders problems by file (in the order files were read) and
// position; problems without a position come first.
func sortErrors(es []*Error, files []string) {
	idx := make(map[string]int, len(files))
	for i, f := range files {
		idx[f] = i + 1
	}
	fileIdx := func(e *Error) int {
		if e.Range.Filename == "" {
			return 0
		}
		if i, ok := idx[e.Range.Filename]; ok {
			return i
		}
		return len(files) + 1
	}
	sort.SliceStable(es, func(i, j int) bool {
		fi, fj := fileIdx(es[i]), fileIdx(es[j])
		if fi != fj {
			return fi < fj
		}
		return es[i].Range.Start.Byte < es[j].Range.Start.Byte
	})
}

// sortRanges orders ranges by file position (used to make the iteration of
// attribute maps deterministic).
func sortRanges[T any](items []T, rng func(T) hcl.Range) {
	sort.SliceStable(items, func(i, j int) bool {
		a, b := rng(items[i]), rng(items[j])
		if a.Filename != b.Filename {
			return a.Filename < b.Filename
		}
		return a.Start.Byte < b.Start.Byte
	})
}

// ErrorOf returns nil, the only problem, or all problems (as Errors): the
// error of a check made outside Load (package resolve).
func ErrorOf(es []*Error) error { return toError(es) }

// SortErrors orders problems as Load does: by file, in the order files
// were read (see Config.Files), and position.
func SortErrors(es []*Error, files []string) { sortErrors(es, files) }
