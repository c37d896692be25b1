package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/holddown"
)

// A task's pending removals are listed, each with when it applies.
func TestStatusShowsPendingRemovals(t *testing.T) {
	base := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	at := base.Add(25 * time.Second)
	tasks := map[string]api.TaskStatus{
		"fw": {TaskName: "fw", Status: "successful", Enabled: true, PendingRemovals: []holddown.Removal{
			{Query: "health/service/web", Kind: holddown.KindService, ID: "web-2.n1.dc1", Since: base.Add(-5 * time.Second), At: at}}},
		"quiet": {TaskName: "quiet", Status: "successful", Enabled: true},
	}
	var b strings.Builder
	printStatus(&b, tasks, base)
	out := b.String()
	want := "fw: service web-2.n1.dc1 gone since " + base.Add(-5*time.Second).Local().Format("15:04:05") +
		"; removed in 25s (" + at.Local().Format("15:04:05") + ") unless it returns"
	if !strings.Contains(out, "Pending removals (removal_delay):\n  "+want) {
		t.Errorf("output lacks the pending removal %q:\n%s", want, out)
	}
	b.Reset()
	printStatus(&b, map[string]api.TaskStatus{"quiet": tasks["quiet"]}, base)
	if strings.Contains(b.String(), "Pending removals") {
		t.Errorf("a section without pending removals:\n%s", b.String())
	}
}
