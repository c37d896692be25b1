package terraform

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-version"
	tfjson "github.com/hashicorp/terraform-json"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/driver/terraform/tftext"
)

// machineUIVersion is the first Terraform whose plan, apply and destroy
// have the machine-readable UI (-json). Older binaries are read from
// their text output.
var machineUIVersion = version.Must(version.NewVersion("0.15.3"))

// uiMessage is one line of Terraform's machine-readable UI. Only what the
// driver reads is decoded: the message text, diagnostics and the change
// summaries (https://developer.hashicorp.com/terraform/internals/machine-readable-ui).
type uiMessage struct {
	Message    string             `json:"@message"`
	Type       string             `json:"type"`
	Diagnostic *tfjson.Diagnostic `json:"diagnostic"`
	Changes    *changeSummary     `json:"changes"`
}

// changeSummary is the "changes" of a change_summary message: the counts
// of a plan ("plan") or of what an apply or a destroy did.
type changeSummary struct {
	Add       int    `json:"add"`
	Change    int    `json:"change"`
	Remove    int    `json:"remove"`
	Operation string `json:"operation"`
}

// uiLine reads one line of the machine-readable UI, keeps what it says
// and returns its text for the run log: the message, or a diagnostic laid
// out as Terraform prints it without -json. A line that is not a UI
// message is returned as it came.
func (s *sink) uiLine(line []byte) []byte {
	var m uiMessage
	if err := json.Unmarshal(line, &m); err != nil || m.Type == "" {
		return append(line, '\n')
	}
	switch {
	case m.Type == "diagnostic" && m.Diagnostic != nil:
		d := m.Diagnostic
		// A summary of several lines (the consul backend's lock error
		// carries its Lock Info block there) is reported by its first; the
		// run log has all of it.
		sum, _, _ := strings.Cut(d.Summary, "\n")
		s.diags = append(s.diags, driver.Diagnostic{Severity: string(d.Severity), Summary: strings.TrimSpace(sum), Detail: d.Detail})
		return []byte(diagnosticText(d))
	case m.Type == "change_summary" && m.Changes != nil:
		if s.changes == nil {
			s.changes = map[string]changeSummary{}
		}
		s.changes[m.Changes.Operation] = *m.Changes
		if m.Changes.Operation == "plan" && s.planned.IsZero() {
			s.planned = time.Now()
		}
	}
	return []byte(m.Message + "\n")
}

// diagnosticText lays a diagnostic out as Terraform's -no-color text does:
// "Error: <summary>", where it is, and its detail.
func diagnosticText(d *tfjson.Diagnostic) string {
	var b strings.Builder
	sev := "Warning"
	if d.Severity == tfjson.DiagnosticSeverityError {
		sev = "Error"
	}
	fmt.Fprintf(&b, "\n%s: %s\n\n", sev, d.Summary)
	if r := d.Range; r != nil && r.Filename != "" {
		fmt.Fprintf(&b, "  on %s line %d", r.Filename, r.Start.Line)
		if d.Snippet != nil && d.Snippet.Context != nil {
			fmt.Fprintf(&b, ", in %s", *d.Snippet.Context)
		}
		b.WriteString(":\n")
		if d.Snippet != nil && d.Snippet.Code != "" {
			fmt.Fprintf(&b, "  %d: %s\n", d.Snippet.StartLine, d.Snippet.Code)
		}
		b.WriteString("\n")
	}
	if d.Detail != "" {
		b.WriteString(strings.TrimRight(d.Detail, "\n"))
		b.WriteString("\n\n")
	}
	return b.String()
}

// counts returns the resource counts of an apply or a destroy: what it
// did (the change summary of op, "apply" or "destroy", in its
// machine-readable UI), or, when it failed having done nothing, what its
// plan had. Without that UI they are read from its text output.
func (d *Driver) counts(op string, failed bool) (add, change, destroy int) {
	_, changes, ui := d.sink.report()
	if !ui {
		out, _ := d.sink.output()
		add, change, destroy = tftext.ApplyCounts(out)
		if failed && add+change+destroy == 0 {
			add, change, destroy = tftext.PlanCounts(out)
		}
		return add, change, destroy
	}
	c := changes[op]
	if failed && c.Add+c.Change+c.Remove == 0 {
		c = changes["plan"]
	}
	return c.Add, c.Change, c.Remove
}

// finished reports whether Terraform printed op's closing summary
// ("Apply complete! Resources: ...", or its machine-readable change
// summary): it does so only once the operation succeeded and its state was
// saved.
func (d *Driver) finished(op string) bool {
	_, changes, ui := d.sink.report()
	if ui {
		_, ok := changes[op]
		return ok
	}
	out, _ := d.sink.output()
	return tftext.Completed(out)
}

// diagnostics returns the failed command's error diagnostics and the text
// they came in: from its machine-readable UI, else (an older binary, or a
// failure before Terraform could write any: a crash) read from its
// standard error.
func (d *Driver) diagnostics() (diags driver.Diagnostics, text, stderr string) {
	ui, _, _ := d.sink.report()
	stdout, stderr := d.sink.output()
	if diags = ui.Errors(); len(diags) == 0 {
		return tftext.ParseDiagnostics(stderr), stderr, stderr
	}
	return diags, stdout, stderr
}
