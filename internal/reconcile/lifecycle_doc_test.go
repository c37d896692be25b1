package reconcile

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite the lifecycle table in docs/architecture.md")

const (
	tableBegin = "<!-- lifecycle table: generated from transition by TestLifecycleTableInDocs (go test ./internal/reconcile -run TestLifecycleTableInDocs -update-docs) -->"
	tableEnd   = "<!-- end of lifecycle table -->"
)

// lifecycleTable renders transition as a markdown table: one row per
// event, one column per phase; a cell is where the task goes (— refused),
// with what happens to its timer, and, where the facts decide, one line
// per case.
func lifecycleTable() string {
	var b strings.Builder
	b.WriteString("| event \\ phase |")
	for p := phaseIdle; p <= phaseHeld; p++ {
		fmt.Fprintf(&b, " %s |", p)
	}
	b.WriteString("\n|---|")
	for p := phaseIdle; p <= phaseHeld; p++ {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	cases := []struct {
		when string
		f    facts
	}{
		{"doomed", facts{doomed: true}},
		{"rerun", facts{rerun: true}},
		{"buffer timer", facts{timer: true, timerPhase: phaseBuffering}},
		{"retry timer", facts{timer: true, timerPhase: phaseRetryWait}},
		{"held", facts{held: true}},
		{"request", facts{intent: true}},
	}
	for ev := evQueue; ev <= lastEvent; ev++ {
		fmt.Fprintf(&b, "| %s |", ev)
		for p := phaseIdle; p <= phaseHeld; p++ {
			plain := stepText(p, transition(p, ev, facts{}))
			var lines []string
			seen := map[string]bool{plain: true}
			for _, c := range cases {
				if cell := stepText(p, transition(p, ev, c.f)); !seen[cell] {
					seen[cell] = true
					lines = append(lines, cell+" ("+c.when+")")
				}
			}
			if len(lines) > 0 {
				plain = "else " + plain
			}
			lines = append(lines, plain)
			fmt.Fprintf(&b, " %s |", strings.Join(lines, "<br>"))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func stepText(from phase, s step) string {
	if !s.ok {
		return "—"
	}
	text := s.to.String()
	if s.to == from {
		text = "stays"
	}
	for _, x := range []struct {
		on   bool
		word string
	}{{s.arm, "arms timer"}, {s.stop, "stops timer"}, {s.rerun, "reruns after"}, {s.doom, "deleted after"}, {s.spare, "not deleted"}, {s.hold, "holds the plan"}, {s.drop, "drops the plan"}} {
		if x.on {
			text += ", " + x.word
		}
	}
	return text
}

// TestLifecycleTableInDocs keeps the lifecycle table of
// docs/architecture.md equal to transition.
func TestLifecycleTableInDocs(t *testing.T) {
	const path = "../../docs/architecture.md"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, tableBegin), strings.Index(doc, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: the markers of the lifecycle table are missing", path)
	}
	want := tableBegin + "\n\n" + lifecycleTable() + "\n"
	if got := doc[i:j]; got != want {
		if *updateDocs {
			if err := os.WriteFile(path, []byte(doc[:i]+want+doc[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("%s: the lifecycle table differs from transition; run go test ./internal/reconcile -run TestLifecycleTableInDocs -update-docs", path)
	}
}
