package task

import (
	"fmt"
	"slices"
	"strings"
)

// Task chaining (a ctsync extension): a task with depends_on runs after the
// tasks it names have applied the same change, and a task with
// module_input "task-outputs" receives their Terraform outputs in the
// task_outputs variable (a map of task name to that task's outputs).
// Listing a task in module_input "task-outputs" makes the task depend on it
// too. A task with upstream tasks needs no condition: then its upstreams'
// applies are its only trigger.

// TaskOutputsSelector is module_input "task-outputs": the tasks whose
// outputs the module receives.
type TaskOutputsSelector struct {
	Tasks []string `json:"tasks"`
}

// Upstreams returns the tasks this one runs after: depends_on and the
// tasks of module_input "task-outputs", sorted, each once.
func (s *Spec) Upstreams() []string {
	var out []string
	out = append(out, s.DependsOn...)
	if to := s.ModuleInput.TaskOutputs; to != nil {
		out = append(out, to.Tasks...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// OutputTasks returns the tasks whose outputs the module receives (nil
// without module_input "task-outputs").
func (s *Spec) OutputTasks() []string {
	if to := s.ModuleInput.TaskOutputs; to != nil {
		return to.Tasks
	}
	return nil
}

// validateChain checks a task's own chaining fields; CheckChains checks them
// against the other tasks.
func (s *Spec) validateChain() error {
	check := func(field string, names []string) error {
		seen := map[string]bool{}
		for i, n := range names {
			f := fmt.Sprintf("%s[%d]", field, i)
			switch {
			case n == "":
				return fieldErr(f, "must name a task")
			case n == s.Name:
				return fieldErr(f, "task %q cannot depend on itself", n)
			case seen[n]:
				return fieldErr(f, "task %q is listed more than once", n)
			}
			seen[n] = true
		}
		return nil
	}
	if err := check("depends_on", s.DependsOn); err != nil {
		return err
	}
	if to := s.ModuleInput.TaskOutputs; to != nil {
		if len(to.Tasks) == 0 {
			return fieldErr("module_input.task_outputs.tasks", "must name at least one task")
		}
		return check("module_input.task_outputs.tasks", to.Tasks)
	}
	return nil
}

// ChainError is a dependency between tasks that cannot hold: a task that
// does not exist, or a cycle.
type ChainError struct {
	// Task is the task whose field names Dep.
	Task string
	// Field is that field, e.g. "depends_on[1]".
	Field string
	Dep   string
	// Cycle is the cycle through Task and Dep, first task repeated at the
	// end (nil when Dep does not exist).
	Cycle []string
}

func (e *ChainError) Error() string {
	if e.Cycle == nil {
		return fmt.Sprintf("task %q depends on task %q, which does not exist", e.Task, e.Dep)
	}
	return fmt.Sprintf("task %q depends on task %q, which depends on it: cycle %s", e.Task, e.Dep, strings.Join(e.Cycle, " -> "))
}

// CheckChains checks the dependencies of every task against the others:
// each names a task of specs, and there is no cycle. The first problem is
// returned, in a stable order (by task name, then field).
func CheckChains(specs []Spec) error {
	byName := make(map[string]*Spec, len(specs))
	for i := range specs {
		byName[specs[i].Name] = &specs[i]
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		s := byName[n]
		for _, ref := range s.chainRefs() {
			if byName[ref.dep] == nil {
				return &ChainError{Task: n, Field: ref.field, Dep: ref.dep}
			}
		}
	}
	// A cycle: depth-first search, reporting the first back edge.
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var stack []string
	var found *ChainError
	var visit func(n string)
	visit = func(n string) {
		color[n] = grey
		stack = append(stack, n)
		for _, ref := range byName[n].chainRefs() {
			if found != nil {
				return
			}
			switch color[ref.dep] {
			case grey:
				i := slices.Index(stack, ref.dep)
				cycle := append(slices.Clone(stack[i:]), ref.dep)
				found = &ChainError{Task: n, Field: ref.field, Dep: ref.dep, Cycle: cycle}
				return
			case white:
				visit(ref.dep)
			}
		}
		stack = stack[:len(stack)-1]
		color[n] = black
	}
	for _, n := range names {
		if color[n] == white && found == nil {
			visit(n)
		}
	}
	if found != nil {
		return found
	}
	return nil
}

type chainRef struct{ field, dep string }

// chainRefs lists every task a spec names, with the field naming it.
func (s *Spec) chainRefs() []chainRef {
	var out []chainRef
	for i, d := range s.DependsOn {
		out = append(out, chainRef{fmt.Sprintf("depends_on[%d]", i), d})
	}
	for i, d := range s.OutputTasks() {
		out = append(out, chainRef{fmt.Sprintf("module_input.task_outputs.tasks[%d]", i), d})
	}
	return out
}

// CheckAdded checks the dependencies of s, a task added to others (created
// through the API): every task it names exists, and none of them depends,
// directly or not, on s.
func CheckAdded(s Spec, others []Spec) error {
	by := make(map[string]*Spec, len(others)+1)
	for i := range others {
		by[others[i].Name] = &others[i]
	}
	refs := s.chainRefs()
	for _, ref := range refs {
		if by[ref.dep] == nil {
			return &ChainError{Task: s.Name, Field: ref.field, Dep: ref.dep}
		}
	}
	by[s.Name] = &s
	for _, ref := range refs {
		if path := pathTo(by, ref.dep, s.Name, map[string]bool{}); path != nil {
			return &ChainError{Task: s.Name, Field: ref.field, Dep: ref.dep, Cycle: append([]string{s.Name}, path...)}
		}
	}
	return nil
}

// pathTo returns a dependency path from one task to another (both ends
// included), or nil.
func pathTo(by map[string]*Spec, from, to string, seen map[string]bool) []string {
	if from == to {
		return []string{to}
	}
	if seen[from] || by[from] == nil {
		return nil
	}
	seen[from] = true
	for _, d := range by[from].Upstreams() {
		if p := pathTo(by, d, to, seen); p != nil {
			return append([]string{from}, p...)
		}
	}
	return nil
}
