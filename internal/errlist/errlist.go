// Package errlist is a list of errors reported together: one problem per
// line, and errors.Is/As see each of them. Configuration and policy
// loading report every problem they find at once with it.
package errlist

import "strings"

// List is several errors of one type, reported together.
type List[E error] []E

// Error is one problem per line.
func (l List[E]) Error() string {
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.Is and errors.As look at every problem.
func (l List[E]) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}
