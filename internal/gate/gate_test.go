package gate

import (
	"testing"

	"github.com/ctsync/ctsync/internal/task"
)

func TestHold(t *testing.T) {
	n := func(v int) *int { return &v }
	cases := []struct {
		name string
		a    *task.Approval
		c    Counts
		want string
	}{
		{"no block", nil, Counts{Destroy: 9, InState: 9}, ""},
		{"no changes", &task.Approval{Required: true}, Counts{InState: 3}, ""},
		{"required", &task.Approval{Required: true}, Counts{Add: 1}, "approval required"},
		{"under max", &task.Approval{MaxDestroy: n(5)}, Counts{Destroy: 5, InState: 14}, ""},
		{"over max", &task.Approval{MaxDestroy: n(5)}, Counts{Destroy: 12, InState: 14}, "plan destroys 12 of 14 resources (max_destroy 5)"},
		{"zero max", &task.Approval{MaxDestroy: n(0)}, Counts{Destroy: 1, InState: 1}, "plan destroys 1 of 1 resources (max_destroy 0)"},
		{"at percent", &task.Approval{MaxDestroyPercent: n(50)}, Counts{Destroy: 7, InState: 14}, ""},
		{"over percent", &task.Approval{MaxDestroyPercent: n(50)}, Counts{Destroy: 8, InState: 14}, "plan destroys 8 of 14 resources (max_destroy_percent 50)"},
		{"percent, adds only", &task.Approval{MaxDestroyPercent: n(0)}, Counts{Add: 3}, ""},
		{"max before required", &task.Approval{Required: true, MaxDestroy: n(1)}, Counts{Destroy: 2, InState: 2}, "plan destroys 2 of 2 resources (max_destroy 1)"},
	}
	for _, c := range cases {
		if got := Hold(c.a, c.c); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
