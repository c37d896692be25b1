package ha

import (
	"fmt"
	"math"
	"testing"
)

func taskNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("task-%04d", i)
	}
	return out
}

func counts(a map[string]string) map[string]int {
	out := map[string]int{}
	for _, o := range a {
		out[o]++
	}
	return out
}

func moved(a, b map[string]string) int {
	n := 0
	for t, o := range a {
		if b[t] != o {
			n++
		}
	}
	return n
}

// Every member gets its share within a few percent of 10,000 tasks, and the
// answer does not depend on the order of the member list.
func TestAssignBalanced(t *testing.T) {
	tasks := taskNames(10000)
	for _, n := range []int{1, 2, 3, 5, 8} {
		var cs []Candidate
		for i := range n {
			cs = append(cs, Candidate{ID: fmt.Sprintf("cts-%02d", i), Weight: 1})
		}
		a := Assign(tasks, cs)
		want := float64(len(tasks)) / float64(n)
		for id, got := range counts(a) {
			if math.Abs(float64(got)-want) > 0.06*want {
				t.Errorf("n=%d: %s owns %d tasks, want %.0f ± 6%%", n, id, got, want)
			}
		}
		rev := make([]Candidate, len(cs))
		for i, c := range cs {
			rev[len(cs)-1-i] = c
		}
		if m := moved(a, Assign(tasks, rev)); m != 0 {
			t.Errorf("n=%d: %d tasks change owner when the member list is reversed", n, m)
		}
	}
}

// Adding a member moves about 1/N of the tasks, all of them to the new
// member; removing one moves only its own tasks.
func TestAssignStable(t *testing.T) {
	tasks := taskNames(9000)
	cs := []Candidate{{"a", 1}, {"b", 1}, {"c", 1}}
	before := Assign(tasks, cs)
	after := Assign(tasks, append(cs, Candidate{"d", 1}))
	m := moved(before, after)
	if want := len(tasks) / 4; math.Abs(float64(m-want)) > 0.06*float64(want) {
		t.Errorf("joining moved %d tasks, want about %d (1/4)", m, want)
	}
	for task, o := range after {
		if before[task] != o && o != "d" {
			t.Fatalf("joining moved %s from %s to %s, not to the new member", task, before[task], o)
		}
	}
	left := Assign(tasks, cs[1:]) // a leaves
	for task, o := range before {
		if o != "a" && left[task] != o {
			t.Fatalf("a leaving moved %s, owned by %s", task, o)
		}
		if o == "a" && left[task] == "a" {
			t.Fatalf("%s still owned by the member that left", task)
		}
	}
	if got := counts(left); math.Abs(float64(got["b"]-got["c"])) > 0.1*float64(len(tasks))/2 {
		t.Errorf("a's tasks spread unevenly: %v", got)
	}
}

// A member of weight 2 gets about twice the tasks of one of weight 1; a
// member of weight 0 gets none; no member, no owner.
func TestAssignWeights(t *testing.T) {
	tasks := taskNames(9000)
	c := counts(Assign(tasks, []Candidate{{"big", 2}, {"small", 1}, {"off", 0}}))
	if r := float64(c["big"]) / float64(c["small"]); r < 1.85 || r > 2.15 {
		t.Errorf("weight 2 vs 1: %v (ratio %.2f)", c, r)
	}
	if c["off"] != 0 {
		t.Errorf("a member of weight 0 owns %d tasks", c["off"])
	}
	if o := Owner("x", nil); o != "" {
		t.Errorf("owner without members: %q", o)
	}
}

func TestUnitHashRange(t *testing.T) {
	for i := range 100000 {
		u := unitHash(fmt.Sprint(i), "m")
		if !(u > 0 && u < 1) {
			t.Fatalf("unitHash = %v", u)
		}
	}
}

// Chained tasks (one group) have one owner, wherever each task alone would
// go; the others are placed as before.
func TestAssignGroupsKeepsAGroupTogether(t *testing.T) {
	cs := []Candidate{{"a", 1}, {"b", 1}, {"c", 1}}
	var tasks []string
	for i := range 60 {
		tasks = append(tasks, fmt.Sprintf("task-%02d", i))
	}
	group := map[string]string{}
	for _, name := range tasks[:12] {
		group[name] = "task-00"
	}
	got := AssignGroups(tasks, cs, group)
	alone := Assign(tasks, cs)
	spread := map[string]bool{}
	for _, name := range tasks[:12] {
		if got[name] != got["task-00"] {
			t.Errorf("task %s of the group is on %s, the group on %s", name, got[name], got["task-00"])
		}
		spread[alone[name]] = true
	}
	if len(spread) < 2 {
		t.Fatal("the fixture's group would sit on one member anyway: it proves nothing")
	}
	for _, name := range tasks[12:] {
		if got[name] != alone[name] {
			t.Errorf("task %s outside the group moved from %s to %s", name, alone[name], got[name])
		}
	}
}
