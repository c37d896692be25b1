package terraform

import (
	"strings"
	"time"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/gate"
)

// --- output parsing ---------------------------------------------------------

// applyPhases splits the time of a `terraform apply` into its plan and its
// apply at the moment the plan's summary was printed (planned; zero when
// it was not seen: the whole command is the apply).
func applyPhases(start, planned, end time.Time) []driver.Phase {
	if planned.IsZero() || planned.Before(start) || planned.After(end) {
		return []driver.Phase{{Name: "apply", Start: start, End: end}}
	}
	return []driver.Phase{{Name: "plan", Start: start, End: planned}, {Name: "apply", Start: planned, End: end}}
}

// countPlan counts resource changes the way Terraform's plan summary does
// (a replacement is one add and one destroy), with the replacements apart
// (gate.CountPlan, the one count the approval rules read).
func countPlan(p *tfjson.Plan) gate.Counts { return gate.CountPlan(p) }

// stateLockHolder reports whether a command failed because the state is
// locked ("Error acquiring the state lock", or the consul backend's "failed
// to lock state" while loading it) and describes the holder from the "Lock
// Info:" block of the diagnostics' text: " (held by WHO, operation OP, since
// CREATED, lock ID ID)", or "" when there is none.
func stateLockHolder(text string) (string, bool) {
	if !strings.Contains(text, "Error acquiring the state lock") && !strings.Contains(text, "failed to lock state") {
		return "", false
	}
	info := lockInfo(text)
	var parts []string
	for _, f := range []struct{ key, label string }{
		{"Who", "held by "}, {"Operation", "operation "}, {"Created", "since "}, {"ID", "lock ID "},
	} {
		if v := info[f.key]; v != "" {
			parts = append(parts, f.label+v)
		}
	}
	if len(parts) == 0 {
		return "", true
	}
	return " (" + strings.Join(parts, ", ") + ")", true
}

// lockInfo reads the "Lock Info:" block Terraform prints about a held lock
// (ID, Who, Operation, Created, ...); empty without one.
func lockInfo(text string) map[string]string {
	info := map[string]string{}
	_, block, ok := strings.Cut(text, "Lock Info:")
	if !ok {
		return info
	}
	for _, line := range strings.Split(block, "\n") {
		k, v, found := strings.Cut(unboxed(line), ":")
		if !found {
			continue
		}
		if k = strings.TrimSpace(k); info[k] == "" {
			info[k] = strings.TrimSpace(v)
		}
	}
	return info
}

// unboxed strips the "│ " of Terraform's boxed diagnostics from a line.
func unboxed(line string) string {
	line = strings.TrimSpace(line)
	if rest, ok := strings.CutPrefix(line, "│"); ok {
		return strings.TrimSpace(rest)
	}
	return line
}
