package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/task"
)

const chainTask = `
task {
  name   = %q
  module = "./m"
  condition "services" {
    names = ["web"]
  }
  %s
}
`

func chainConfig(tasks ...[2]string) string {
	var b strings.Builder
	for _, t := range tasks {
		b.WriteString(strings.NewReplacer("%q", `"`+t[0]+`"`, "%s", t[1]).Replace(chainTask))
	}
	return b.String()
}

// depends_on and module_input "task-outputs" decode into the task, in HCL
// (read as CTS reads it) and JSON alike.
func TestChainDecodes(t *testing.T) {
	dir := t.TempDir()
	hcl := writeFile(t, dir, "c.hcl", chainConfig(
		[2]string{"a", ""},
		[2]string{"b", `depends_on = ["a"]`},
		[2]string{"c", "depends_on = [\"b\"]\n  module_input \"task-outputs\" {\n    tasks = [\"a\"]\n  }"},
	))
	cfg := mustLoad(t, hcl)
	byName := map[string]task.Spec{}
	for _, s := range cfg.Tasks {
		byName[s.Name] = s
	}
	if got := byName["b"].DependsOn; !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("b.depends_on = %v", got)
	}
	c := byName["c"]
	if got := c.Upstreams(); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("c's upstreams = %v, want [a b]", got)
	}
	// A task whose only trigger is its upstream needs no condition.
	after := writeFile(t, dir, "after.hcl", chainConfig([2]string{"a", ""})+
		"task {\n  name = \"after\"\n  module = \"./m\"\n  depends_on = [\"a\"]\n}\n")
	if cfg := mustLoad(t, after); cfg.Tasks[1].Condition.Type() != "" || !reflect.DeepEqual(cfg.Tasks[1].DependsOn, []string{"a"}) {
		t.Errorf("task without condition: %+v", cfg.Tasks[1])
	}
	js := writeFile(t, dir, "c.json", `{"task": [
 {"name": "a", "module": "./m", "condition": {"services": {"names": ["web"]}}},
 {"name": "c", "module": "./m", "condition": {"services": {"names": ["web"]}},
  "module_input": {"task-outputs": {"tasks": ["a"]}}}]}`)
	cfg = mustLoad(t, js)
	for i := range cfg.Tasks {
		if s := &cfg.Tasks[i]; s.Name == "c" && !reflect.DeepEqual(s.OutputTasks(), []string{"a"}) {
			t.Errorf("JSON: c's output tasks = %v", s.OutputTasks())
		}
	}
}

// A dependency on a task that is not configured, and a cycle, are errors at
// the entry that names the other task, with both tasks and file:line.
func TestChainErrors(t *testing.T) {
	cases := []struct {
		name  string
		tasks [][2]string
		want  []string
	}{
		{"unknown", [][2]string{{"a", `depends_on = ["nope"]`}},
			[]string{"c.hcl:8:", `task "a".depends_on[0]`, `task "nope" does not exist`}},
		{"self", [][2]string{{"a", `depends_on = ["a"]`}},
			[]string{"c.hcl:8:", `task "a".depends_on[0]`, "cannot depend on itself"}},
		{"duplicate", [][2]string{{"a", ""}, {"b", `depends_on = ["a", "a"]`}},
			[]string{`task "b".depends_on[1]`, "listed more than once"}},
		{"cycle", [][2]string{{"a", `depends_on = ["b"]`}, {"b", `depends_on = ["a"]`}},
			[]string{"c.hcl:17:", `task "b".depends_on[0]`, `task "a" (`, "c.hcl:2)", "a -> b -> a"}},
		{"cycle through outputs", [][2]string{{"a", "module_input \"task-outputs\" {\n    tasks = [\"b\"]\n  }"}, {"b", `depends_on = ["a"]`}},
			[]string{"c.hcl:19:", `task "b".depends_on[0]`, `task "a" (`, "c.hcl:2)", "a -> b -> a"}},
		{"empty outputs", [][2]string{{"a", "module_input \"task-outputs\" {\n    tasks = []\n  }"}},
			[]string{`module_input "task-outputs".tasks`, "at least one task"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "c.hcl", chainConfig(tc.tasks...))
			_, err := Load([]string{p})
			if err == nil {
				t.Fatal("loaded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
