package api

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/task"
)

// Task JSON carries the ctsync extensions of conditions and module inputs
// in the shape of the configuration file (snake_case types), with the same
// defaults and rules: use_as_module_input true unless set, status values
// checked, node_meta shown as {} when not set.
func TestCreateTaskExtensions(t *testing.T) {
	h := newHarness(t, nil)
	cases := []struct {
		body  string
		check func(task.Spec) string
	}{
		{`{"task":{"name":"n1","enabled":false,"module":"m","condition":{"nodes":{"datacenter":"dc1","filter":"Node != \"x\""}},
		   "module_input":{"intentions":{"source_services":{"regexp":"^web"}}}}}`,
			func(s task.Spec) string {
				c := s.Condition.Nodes
				if c == nil || !c.UseAsModuleInput || c.Datacenter != "dc1" || c.Filter != `Node != "x"` || c.NodeMeta == nil {
					return "nodes condition not as sent, with defaults"
				}
				m := s.ModuleInput.Intentions
				if m == nil || m.Source == nil || m.Source.Regexp == nil || *m.Source.Regexp != "^web" || m.Destination != nil {
					return "intentions module input not as sent"
				}
				return ""
			}},
		{`{"task":{"name":"n2","enabled":false,"module":"m","condition":{"intentions":{"destination_services":{"names":["api"]},"use_as_module_input":false}},
		   "module_input":{"nodes":{"node_meta":{"rack":"r1"}},"services":{"names":["db"],"status":["passing","warning"],"peer":"east","partition":"p"}}}}`,
			func(s task.Spec) string {
				c := s.Condition.Intentions
				if c == nil || c.UseAsModuleInput || !reflect.DeepEqual(c.Destination, &task.NameMatch{Names: []string{"api"}}) {
					return "intentions condition not as sent"
				}
				sel := s.ModuleInput.Services
				if sel == nil || !reflect.DeepEqual(sel.Status, []string{"passing", "warning"}) || sel.Peer != "east" || sel.Partition != "p" {
					return "services module input options not as sent"
				}
				if m := s.ModuleInput.Nodes; m == nil || m.NodeMeta["rack"] != "r1" {
					return "nodes module input not as sent"
				}
				return ""
			}},
	}
	for _, c := range cases {
		var resp TaskResponse
		h.do("POST", "/v1/tasks", c.body).expect(t, 201).json(t, &resp)
		if msg := c.check(resp.Task); msg != "" {
			t.Errorf("%s: %s", resp.Task.Name, msg)
		}
		st, err := h.ctrl.Task(resp.Task.Name)
		if err != nil {
			t.Fatal(err)
		}
		if msg := c.check(TaskView(st.Spec)); msg != "" {
			t.Errorf("%s in controller: %s", resp.Task.Name, msg)
		}
	}

	// A task without the extensions is written as CTS writes it: none of
	// the new keys appear.
	var resp TaskResponse
	h.do("POST", "/v1/tasks", `{"task":{"name":"plain","enabled":false,"module":"m","condition":{"services":{"names":["web"]}}}}`).expect(t, 201).json(t, &resp)
	b, _ := json.Marshal(resp.Task)
	for _, k := range []string{`"status"`, `"peer"`, `"partition"`, `"nodes"`, `"intentions"`} {
		if strings.Contains(string(b), k) {
			t.Errorf("plain task JSON has %s: %s", k, b)
		}
	}
}

func TestCreateTaskExtensionsBadInput(t *testing.T) {
	h := newHarness(t, nil)
	cases := []struct{ name, body, want string }{
		{"unknown status", `{"task":{"name":"x","module":"m","condition":{"services":{"names":["w"],"status":["passing","up"]}}}}`,
			`invalid task: condition.services.status[1]: "up" is not a health status`},
		{"empty status", `{"task":{"name":"x","module":"m","condition":{"services":{"names":["w"],"status":[]}}}}`,
			"condition.services.status: must list at least one of"},
		{"status not a list", `{"task":{"name":"x","module":"m","condition":{"services":{"names":["w"],"status":"passing"}}}}`,
			"task.condition.services.status: expected an array"},
		{"intentions no side", `{"task":{"name":"x","module":"m","condition":{"intentions":{"datacenter":"dc1"}}}}`,
			"condition.intentions: at least one of source_services and destination_services"},
		{"intentions both", `{"task":{"name":"x","module":"m","condition":{"intentions":{"source_services":{"names":["a"],"regexp":"b"}}}}}`,
			"condition.intentions.source_services: exactly one of regexp or names"},
		{"unknown nodes field", `{"task":{"name":"x","module":"m","condition":{"nodes":{"dc":"dc1"}}}}`,
			`unknown field "dc"`},
		{"nodes twice", `{"task":{"name":"x","module":"m","condition":{"nodes":{}},"module_input":{"nodes":{}}}}`,
			"module_input.nodes: the nodes condition already provides the nodes variable"},
		{"two conditions", `{"task":{"name":"x","module":"m","condition":{"nodes":{},"intentions":{"source_services":{"regexp":""}}}}}`,
			"only one condition"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg := h.do("POST", "/v1/tasks", c.body).expect(t, 400).errMsg(t)
			if !strings.Contains(msg, c.want) {
				t.Errorf("message %q, want it to contain %q", msg, c.want)
			}
		})
	}
}
