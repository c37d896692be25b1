// Package tftext reads Terraform's human-readable output: the text a binary
// older than 0.15.3 prints (it has no -json) and the log of a remote run
// (terraform-cloud driver), the only forms in which those give their
// diagnostics. Where Terraform has -json the terraform driver reads its
// diagnostics from there (driver/terraform, machine.go) instead.
package tftext

import (
	"strings"

	"github.com/ctsync/ctsync/internal/driver"
)

// TerminalDiagnostic reports whether the error diagnostics in a failed
// command's text output (stderr) include one that comes from the
// configuration itself (see driver.ErrTerminal).
func TerminalDiagnostic(stderr string) bool { return ParseDiagnostics(stderr).Terminal() }

// Headline returns the summaries of Terraform's error diagnostics in
// stderr ("Error: <summary>", boxed or plain layout, each once, joined by
// "; "), or "" when there is none.
func Headline(stderr string) string { return ParseDiagnostics(stderr).Headline() }

// Summarize is driver.Diagnostics.Summary of the error diagnostics in the text
// output of a failed command. When there is no "Error:" line, the first
// non-empty line is returned instead, so the caller always has something to
// show.
func Summarize(stderr string) string {
	if s := ParseDiagnostics(stderr).Summary(); s != "" {
		return s
	}
	for _, raw := range strings.Split(stderr, "\n") {
		if t := strings.TrimSpace(unbox(raw)); t != "" && t != "╷" && t != "╵" {
			return t
		}
	}
	return ""
}

// ParseDiagnostics reads the error diagnostics from Terraform's text
// output, the only form a binary older than 0.15.3 (no -json) or a remote
// run's log gives: each "Error: <summary>" line, plain or boxed, and the
// first paragraph of its detail (the source snippet between them is left
// out).
func ParseDiagnostics(text string) driver.Diagnostics {
	var (
		out driver.Diagnostics
		cur *diagnostic
	)
	flush := func() {
		if cur != nil {
			out = append(out, driver.Diagnostic{Severity: "error", Summary: cur.summary, Detail: strings.Join(cur.detail, " ")})
			cur = nil
		}
	}
	for _, raw := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		line := unbox(raw)
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "Error: "):
			flush()
			cur = &diagnostic{summary: strings.TrimSpace(strings.TrimPrefix(line, "Error: "))}
		case strings.HasPrefix(line, "Warning: "), trimmed == "╷", trimmed == "╵":
			flush()
		case cur != nil:
			cur.add(line)
		}
	}
	flush()
	return out
}

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

// unbox removes the "│ " prefix of Terraform's boxed diagnostics, keeping the
// indentation that follows it.
func unbox(line string) string {
	line = strings.TrimRight(line, " \t\r")
	if rest, ok := strings.CutPrefix(line, "│"); ok {
		return strings.TrimPrefix(rest, " ")
	}
	return line
}
