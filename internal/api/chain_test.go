package api

import (
	"reflect"
	"testing"
)

// depends_on and module_input task_outputs through the API: accepted when
// the tasks exist, a 400 naming the field for an unknown task or a cycle.
func TestCreateTaskChain(t *testing.T) {
	h := newHarness(t, nil)
	h.do("POST", "/v1/tasks", `{"task":{"name":"up","enabled":false,"module":"m","condition":{"services":{"names":["web"]}}}}`).expect(t, 201)
	var resp TaskResponse
	h.do("POST", "/v1/tasks", `{"task":{"name":"down","enabled":false,"module":"m","condition":{"services":{"names":["web"]}},
	  "depends_on":["up"],"module_input":{"task_outputs":{"tasks":["up"]}}}}`).expect(t, 201).json(t, &resp)
	if !reflect.DeepEqual(resp.Task.DependsOn, []string{"up"}) || !reflect.DeepEqual(resp.Task.OutputTasks(), []string{"up"}) {
		t.Fatalf("chain fields not as sent: %+v", resp.Task)
	}
	// No condition: its upstream is its trigger. The response (and so the
	// schema) has an empty condition.
	var only TaskResponse
	h.do("POST", "/v1/tasks", `{"task":{"name":"after","enabled":false,"module":"m","depends_on":["up"]}}`).expect(t, 201).json(t, &only)
	if only.Task.Condition.Type() != "" || !reflect.DeepEqual(only.Task.DependsOn, []string{"up"}) {
		t.Fatalf("task without condition not as sent: %+v", only.Task)
	}
	h.do("GET", "/v1/tasks/after", "").expect(t, 200)
	for _, c := range []struct{ body, want string }{
		{`{"task":{"name":"w","module":"m"}}`,
			`invalid task: condition: task should be configured with a condition block`},
		{`{"task":{"name":"x","module":"m","condition":{"services":{"names":["web"]}},"depends_on":["nope"]}}`,
			`invalid task: depends_on[0]: task "x" depends on task "nope", which does not exist`},
		{`{"task":{"name":"y","module":"m","condition":{"services":{"names":["web"]}},"depends_on":["y"]}}`,
			`invalid task: depends_on[0]: task "y" cannot depend on itself`},
		{`{"task":{"name":"z","module":"m","condition":{"services":{"names":["web"]}},"module_input":{"task_outputs":{"tasks":[]}}}}`,
			`invalid task: module_input.task_outputs.tasks: must name at least one task`},
	} {
		if msg := h.do("POST", "/v1/tasks", c.body).expect(t, 400).errMsg(t); msg != c.want {
			t.Errorf("error %q, want %q", msg, c.want)
		}
	}
}
