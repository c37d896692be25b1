package reconcile

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestOnceSummary(t *testing.T) {
	var b strings.Builder
	printOnceSummary(&b, []onceResult{
		{name: "a", dur: 1234 * time.Millisecond},
		{name: "broken", dur: 800 * time.Millisecond, err: errors.New("apply: Error: this module always fails\n\n  on main.tf line 3")},
		{name: "held", err: errors.New("an upstream task failed")},
	}, false, 4150*time.Millisecond)
	want := `
==> Run summary: 3 tasks, 1 succeeded, 2 failed, in 4.2s
    TASK    RESULT     DURATION  ERROR
    a       succeeded  1.2s
    broken  failed     800ms     apply: Error: this module always fails
    held    failed     -         an upstream task failed
`
	if b.String() != want {
		t.Errorf("got:\n%q\nwant:\n%q", b.String(), want)
	}
	b.Reset()
	printOnceSummary(&b, []onceResult{{name: "a", dur: time.Second}}, true, time.Second)
	if !strings.Contains(b.String(), "==> Plan summary: 1 tasks, 1 planned, 0 failed, in 1s\n") || !strings.Contains(b.String(), "    a     planned  1s") {
		t.Errorf("inspect summary:\n%s", b.String())
	}
}
