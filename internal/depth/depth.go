// Package depth bounds how deeply a text nests before a recursive parser
// sees it. The HCL parsers (HCL 2 native and JSON syntax, HCL 1) descend
// one Go call per bracket: a value of tens of thousands of `[` exhausts
// the goroutine stack, which is a fatal error no recover catches, and
// costs gigabytes on the way. A scan of the bytes, without recursion,
// finds the deepest nesting first and refuses text that goes past Max.
//
// The scan counts what the parsers recurse on: brackets, braces and
// parentheses, string templates and their interpolations (`${ }`, `%{ }`)
// and heredocs, and, within one expression, the prefix operators and
// conditionals (`!`, `-`, `?`) that the HCL parser also descends on. Brackets inside comments and inside the literal text of a
// string or heredoc do not count. It is conservative where the syntax is
// ambiguous to a byte scan (the code of an interpolation in a JSON
// string): it may count more than the parser would, never less. It does
// not validate: unbalanced text is left to the parser.
package depth

import "fmt"

// Max is the deepest nesting accepted in configuration files, task files,
// task variables, API bodies and records read from Consul
// (docs/security.md). A real configuration nests a handful of levels; a
// task variable's value as deep as a Terraform object can usefully be.
const Max = 64

// Error is text that nests deeper than the limit: where the first level
// beyond it opens.
type Error struct {
	Max       int
	Line, Col int // 1-based
	Offset    int // byte offset
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s, at line %d, column %d", e.Reason(), e.Line, e.Col)
}

// Reason is the error without its position, for a caller that reports
// the position its own way (file:line:col).
func (e *Error) Reason() string {
	return fmt.Sprintf("nests deeper than %d levels (brackets, braces, parentheses, strings, interpolations, chained operators)", e.Max)
}

// frame kinds
const (
	fBracket = iota // [ { (
	fString         // "..."
	fInterp         // ${ ... } or %{ ... }
	fHeredoc        // <<EOF ... EOF
)

type frame struct {
	kind   int
	open   byte   // a bracket's opening character
	marker string // heredoc's closing marker
	chain  int    // the operators of the frame's expression so far (see chained)
}

type scanner struct {
	src       []byte
	i         int
	line, col int // of src[i]
	max       int
	stack     []frame
	top0      int // the top level's chain
	chains    int // the sum of the chains of the stack and the top level
}

func (s *scanner) err() error {
	return &Error{Max: s.max, Line: s.line, Col: s.col, Offset: s.i}
}

func (s *scanner) push(f frame) error {
	if len(s.stack)+s.chains >= s.max {
		return s.err()
	}
	s.stack = append(s.stack, f)
	return nil
}

func (s *scanner) pop() {
	if len(s.stack) > 0 {
		s.chains -= s.stack[len(s.stack)-1].chain
		s.stack = s.stack[:len(s.stack)-1]
	}
}

// chain returns the operator count of the expression being read.
func (s *scanner) chain() *int {
	if len(s.stack) == 0 {
		return &s.top0
	}
	return &s.stack[len(s.stack)-1].chain
}

// chained counts one more prefix operator or conditional (`!`, `-`, `?`)
// in the expression being read: the parser recurses on each (`!!!!x`,
// `a ? b : c ? d : e`) without a bracket to count.
func (s *scanner) chained() error {
	if len(s.stack)+s.chains >= s.max {
		return s.err()
	}
	*s.chain()++
	s.chains++
	return nil
}

// endExpr resets the operator count at the end of an expression.
func (s *scanner) endExpr() {
	c := s.chain()
	s.chains -= *c
	*c = 0
}

func (s *scanner) top() int {
	if len(s.stack) == 0 {
		return -1
	}
	return s.stack[len(s.stack)-1].kind
}

// advance moves over n bytes, keeping line and column.
func (s *scanner) advance(n int) {
	for ; n > 0 && s.i < len(s.src); n-- {
		if s.src[s.i] == '\n' {
			s.line++
			s.col = 1
		} else {
			s.col++
		}
		s.i++
	}
}

func (s *scanner) at(prefix string) bool {
	return len(s.src)-s.i >= len(prefix) && string(s.src[s.i:s.i+len(prefix)]) == prefix
}

// HCL checks HCL text (HCL 2 native syntax, or HCL 1, whose strings,
// comments and heredocs look the same) against max levels (Max when max
// is 0).
func HCL(src []byte, max int) error {
	s := &scanner{src: src, line: 1, col: 1, max: limit(max)}
	atLineStart := true
	for s.i < len(s.src) {
		c := s.src[s.i]
		switch s.top() {
		case fString:
			switch {
			case c == '\\':
				s.advance(2)
			case c == '"':
				s.pop()
				s.advance(1)
			case c == '\n': // a quoted string ends with its line
				s.pop()
				s.advance(1)
			case s.at("$${") || s.at("%%{"):
				s.advance(3)
			case s.at("${") || s.at("%{"):
				if err := s.push(frame{kind: fInterp}); err != nil {
					return err
				}
				s.advance(2)
			default:
				s.advance(1)
			}
			continue
		case fHeredoc:
			if atLineStart {
				if end := s.heredocEnd(); end > 0 {
					s.pop()
					s.advance(end)
					atLineStart = false
					continue
				}
			}
			switch {
			case s.at("$${") || s.at("%%{"):
				s.advance(3)
			case s.at("${") || s.at("%{"):
				if err := s.push(frame{kind: fInterp}); err != nil {
					return err
				}
				s.advance(2)
			default:
				atLineStart = c == '\n'
				s.advance(1)
			}
			continue
		}
		// Code: the top level, brackets and interpolations.
		switch {
		case c == '#' || s.at("//"):
			for s.i < len(s.src) && s.src[s.i] != '\n' {
				s.advance(1)
			}
		case s.at("/*"):
			s.advance(2)
			for s.i < len(s.src) && !s.at("*/") {
				s.advance(1)
			}
			s.advance(2)
		case c == '"':
			if err := s.push(frame{kind: fString}); err != nil {
				return err
			}
			s.advance(1)
		case s.at("<<"):
			marker, n := heredocStart(s.src[s.i:])
			if n == 0 {
				s.advance(2)
				continue
			}
			if err := s.push(frame{kind: fHeredoc, marker: marker}); err != nil {
				return err
			}
			s.advance(n) // through the newline
			atLineStart = true
		case c == '{' || c == '[' || c == '(':
			if err := s.push(frame{kind: fBracket, open: c}); err != nil {
				return err
			}
			s.advance(1)
		case c == '}' || c == ']' || c == ')':
			s.pop()
			s.advance(1)
		case c == '!' && !s.at("!="), c == '-' && !s.at("->"), c == '?':
			if err := s.chained(); err != nil {
				return err
			}
			s.advance(1)
		case c == ',':
			s.endExpr()
			s.advance(1)
		case c == '\n':
			// A newline ends an attribute, at the top level and in a
			// block or object; inside ( ), [ ] and ${ } it does not.
			if t := s.top(); t == -1 || (t == fBracket && s.stack[len(s.stack)-1].open == '{') {
				s.endExpr()
			}
			s.advance(1)
		default:
			s.advance(1)
		}
	}
	return nil
}

// heredocStart reads `<<ID` or `<<-ID` up to and including the newline
// that follows: the marker and the bytes read (0 when it is not one).
func heredocStart(b []byte) (string, int) {
	i := 2
	if i < len(b) && b[i] == '-' {
		i++
	}
	start := i
	for i < len(b) && (b[i] == '_' || b[i] == '-' || b[i] >= 'a' && b[i] <= 'z' || b[i] >= 'A' && b[i] <= 'Z' || b[i] >= '0' && b[i] <= '9') {
		i++
	}
	if i == start {
		return "", 0
	}
	marker := string(b[start:i])
	if i < len(b) && b[i] == '\r' {
		i++
	}
	if i >= len(b) || b[i] != '\n' {
		return "", 0
	}
	return marker, i + 1
}

// heredocEnd reports, at the start of a line in a heredoc, the length of
// the line when it is the heredoc's closing marker (spaces around it
// allowed), else 0.
func (s *scanner) heredocEnd() int {
	marker := s.stack[len(s.stack)-1].marker
	j := s.i
	for j < len(s.src) && (s.src[j] == ' ' || s.src[j] == '\t') {
		j++
	}
	if len(s.src)-j < len(marker) || string(s.src[j:j+len(marker)]) != marker {
		return 0
	}
	j += len(marker)
	for j < len(s.src) && (s.src[j] == ' ' || s.src[j] == '\t' || s.src[j] == '\r') {
		j++
	}
	if j < len(s.src) && s.src[j] != '\n' {
		return 0
	}
	return j - s.i
}

// JSON checks JSON text against max levels (Max when max is 0). With
// templates, the strings are HCL templates (HCL's JSON syntax: a
// configuration file in JSON), whose interpolations are parsed too: from
// a `${` or `%{` on, a string's brackets count until the interpolation
// closes.
func JSON(src []byte, max int, templates bool) error {
	s := &scanner{src: src, line: 1, col: 1, max: limit(max)}
	inString := false
	base := 0 // the depth of the string being read
	for s.i < len(s.src) {
		c := s.src[s.i]
		if inString {
			interp := len(s.stack) > base
			switch {
			case c == '\\':
				s.advance(2)
			case c == '"' && !interp:
				inString = false
				s.pop()
				s.advance(1)
			case c == '"':
				// A string ends even in an unclosed interpolation
				// (the parser refuses it).
				inString = false
				for len(s.stack) >= base {
					s.pop()
				}
				s.advance(1)
			case templates && !interp && (s.at("$${") || s.at("%%{")):
				s.advance(3)
			case templates && (s.at("${") || s.at("%{")):
				if err := s.push(frame{kind: fInterp}); err != nil {
					return err
				}
				s.advance(2)
			case interp && (c == '{' || c == '[' || c == '('):
				if err := s.push(frame{kind: fBracket}); err != nil {
					return err
				}
				s.advance(1)
			case interp && (c == '}' || c == ']' || c == ')'):
				s.pop()
				s.advance(1)
			case interp && (c == '!' || c == '-' || c == '?'):
				if err := s.chained(); err != nil {
					return err
				}
				s.advance(1)
			case interp && c == ',':
				s.endExpr()
				s.advance(1)
			default:
				s.advance(1)
			}
			continue
		}
		switch c {
		case '"':
			if err := s.push(frame{kind: fString}); err != nil {
				return err
			}
			inString = true
			base = len(s.stack)
			s.advance(1)
		case '{', '[':
			if err := s.push(frame{kind: fBracket}); err != nil {
				return err
			}
			s.advance(1)
		case '}', ']':
			s.pop()
			s.advance(1)
		default:
			s.advance(1)
		}
	}
	return nil
}

func limit(max int) int {
	if max <= 0 {
		return Max
	}
	return max
}
