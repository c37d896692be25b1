package config

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/task"
)

// The ctsync extensions of conditions and module inputs: condition and
// module_input "nodes" and "intentions", status, peer and partition on
// services selectors, consul.use_cache. The same configuration in native
// HCL, HCL 1 spellings and JSON decodes to the same tasks.

const extHCL = `
consul {
  address   = "127.0.0.1:8500"
  use_cache = true
}

task {
  name   = "svc"
  module = "m"
  condition "services" {
    names     = ["web"]
    status    = ["passing", "warning"]
    peer      = "east"
    partition = "part-a"
  }
  module_input "nodes" {
    datacenter = "dc2"
    filter     = "Meta.rack == \"r1\""
    node_meta  = { zone = "z1" }
  }
}

task {
  name   = "nodes"
  module = "m"
  condition "nodes" {
    datacenter          = "dc1"
    filter              = "Node matches \"^web\""
    node_meta           = { rack = "r1" }
    use_as_module_input = false
  }
  module_input "services" {
    regexp = "^api"
    status = ["critical"]
  }
  module_input "intentions" {
    destination_services {
      names = ["api"]
    }
  }
}

task {
  name   = "intentions"
  module = "m"
  condition "intentions" {
    datacenter = "dc1"
    namespace  = "ns"
    partition  = "p"
    source_services {
      regexp = "^web"
    }
    destination_services {
      names = ["api", "db"]
    }
  }
}
`

// The same in HCL 1's spellings: blocks as objects, labels unquoted,
// commas in one-line blocks.
const extHCL1 = `
consul = { address = "127.0.0.1:8500", use_cache = true }

task {
  name = "svc", module = "m"
  condition services { names = ["web"], status = ["passing", "warning"], peer = "east", partition = "part-a" }
  module_input = { nodes = { datacenter = "dc2", filter = "Meta.rack == \"r1\"", node_meta = { zone = "z1" } } }
}

task {
  name = "nodes"
  module = "m"
  condition nodes {
    datacenter = "dc1"
    filter = "Node matches \"^web\""
    node_meta { rack = "r1" }
    use_as_module_input = false
  }
  module_input services { regexp = "^api", status = ["critical"] }
  module_input intentions { destination_services = { names = ["api"] } }
}

task {
  name = "intentions"
  module = "m"
  condition "intentions" {
    datacenter = "dc1", namespace = "ns", partition = "p"
    source_services { regexp = "^web" }
    destination_services { names = ["api", "db"] }
  }
}
`

const extJSON = `{
  "consul": {"address": "127.0.0.1:8500", "use_cache": true},
  "task": [
    {"name": "svc", "module": "m",
     "condition": {"services": {"names": ["web"], "status": ["passing", "warning"], "peer": "east", "partition": "part-a"}},
     "module_input": {"nodes": {"datacenter": "dc2", "filter": "Meta.rack == \"r1\"", "node_meta": {"zone": "z1"}}}},
    {"name": "nodes", "module": "m",
     "condition": {"nodes": {"datacenter": "dc1", "filter": "Node matches \"^web\"", "node_meta": {"rack": "r1"}, "use_as_module_input": false}},
     "module_input": {"services": {"regexp": "^api", "status": ["critical"]},
                      "intentions": {"destination_services": {"names": ["api"]}}}},
    {"name": "intentions", "module": "m",
     "condition": {"intentions": {"datacenter": "dc1", "namespace": "ns", "partition": "p",
       "source_services": {"regexp": "^web"}, "destination_services": {"names": ["api", "db"]}}}}
  ]
}`

func TestExtensionConditions(t *testing.T) {
	clearConsulEnv(t)
	want := map[string]task.Spec{
		"svc": {Condition: task.Condition{Services: &task.ServicesCondition{UseAsModuleInput: true,
			ServicesSelector: task.ServicesSelector{Names: []string{"web"}, Status: []string{"passing", "warning"}, Peer: "east", Partition: "part-a"}}},
			ModuleInput: task.ModuleInputs{Nodes: &task.NodesSelector{Datacenter: "dc2", Filter: `Meta.rack == "r1"`, NodeMeta: map[string]string{"zone": "z1"}}}},
		"nodes": {Condition: task.Condition{Nodes: &task.NodesCondition{
			NodesSelector: task.NodesSelector{Datacenter: "dc1", Filter: `Node matches "^web"`, NodeMeta: map[string]string{"rack": "r1"}}}},
			ModuleInput: task.ModuleInputs{Services: &task.ServicesSelector{Regexp: strp("^api"), Status: []string{"critical"}},
				Intentions: &task.IntentionsSelector{Destination: &task.NameMatch{Names: []string{"api"}}}}},
		"intentions": {Condition: task.Condition{Intentions: &task.IntentionsCondition{UseAsModuleInput: true,
			IntentionsSelector: task.IntentionsSelector{Datacenter: "dc1", Namespace: "ns", Partition: "p",
				Source: &task.NameMatch{Regexp: strp("^web")}, Destination: &task.NameMatch{Names: []string{"api", "db"}}}}}},
	}
	for _, f := range []struct{ name, src string }{{"c.hcl", extHCL}, {"hcl1.hcl", extHCL1}, {"c.json", extJSON}} {
		t.Run(f.name, func(t *testing.T) {
			cfg := mustLoad(t, writeFile(t, t.TempDir(), f.name, f.src))
			if !cfg.Consul.UseCache {
				t.Error("consul.use_cache not read")
			}
			if len(cfg.Tasks) != len(want) {
				t.Fatalf("%d tasks", len(cfg.Tasks))
			}
			for _, s := range cfg.Tasks {
				w := want[s.Name]
				if !reflect.DeepEqual(s.Condition, w.Condition) {
					t.Errorf("%s: condition\n got %s\nwant %s", s.Name, show(s.Condition), show(w.Condition))
				}
				if !reflect.DeepEqual(s.ModuleInput, w.ModuleInput) {
					t.Errorf("%s: module_input\n got %s\nwant %s", s.Name, show(s.ModuleInput), show(w.ModuleInput))
				}
			}
		})
	}
}

func show(v any) string {
	return strings.ReplaceAll(fmt.Sprintf("%+v", deref(v)), "\n", " ")
}

func deref(v any) any {
	switch c := v.(type) {
	case task.Condition:
		return fmt.Sprintf("services=%+v catalog=%+v kv=%+v nodes=%+v intentions=%+v", ptr(c.Services), ptr(c.CatalogServices), ptr(c.ConsulKV), ptr(c.Nodes), intent(c.Intentions))
	case task.ModuleInputs:
		var in *task.IntentionsCondition
		if c.Intentions != nil {
			in = &task.IntentionsCondition{IntentionsSelector: *c.Intentions}
		}
		return fmt.Sprintf("services=%+v kv=%+v nodes=%+v intentions=%+v", ptr(c.Services), ptr(c.ConsulKV), ptr(c.Nodes), intent(in))
	}
	return v
}

func ptr[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func intent(c *task.IntentionsCondition) string {
	if c == nil {
		return "<nil>"
	}
	return fmt.Sprintf("{dc=%s ns=%s part=%s src=%+v dst=%+v use=%v}", c.Datacenter, c.Namespace, c.Partition, ptr(c.Source), ptr(c.Destination), c.UseAsModuleInput)
}

// Each wrong value is reported at its file, line and field.
func TestExtensionConditionErrors(t *testing.T) {
	clearConsulEnv(t)
	task1 := func(body ...string) string {
		return lines(append(append([]string{"task {", `  name = "t"`, `  module = "m"`}, body...), "}")...)
	}
	tests := []struct {
		name, file, src string
		line            int
		field, msg      string
	}{
		{"unknown status", "c.hcl", task1(`  condition "services" {`, `    names = ["web"]`, `    status = ["passing",`, `      "healthy"]`, "  }"),
			7, `task "t".condition "services".status[1]`, `"healthy" is not a health status; use "passing", "warning", "critical", "maintenance"`},
		{"status case", "c.hcl", task1(`  condition "services" {`, `    names = ["web"]`, `    status = ["Passing"]`, "  }"),
			6, `task "t".condition "services".status[0]`, `"Passing" is not a health status`},
		{"empty status", "c.hcl", task1(`  condition "services" {`, `    names = ["web"]`, `    status = []`, "  }"),
			6, `task "t".condition "services".status`, "must list at least one of"},
		{"status twice", "c.hcl", task1(`  module_input "services" {`, `    names = ["web"]`, `    status = ["warning", "warning"]`, "  }", `  condition "schedule" {`, `    cron = "* * * * *"`, "  }"),
			6, `task "t".module_input "services".status[1]`, `"warning" is listed twice`},
		{"status not a list", "c.hcl", task1(`  condition "services" {`, `    names = ["web"]`, `    status = { a = 1 }`, "  }"),
			6, `task "t".condition "services".status`, "must be a list of strings"},
		{"peer not a string", "c.hcl", task1(`  condition "services" {`, `    names = ["web"]`, `    peer = ["a", "b"]`, "  }"),
			6, `task "t".condition "services".peer`, "must be a string"},
		{"peer with regexp", "c.hcl", task1(`  condition "services" {`, `    regexp = "^web"`, `    peer = "east"`, "  }"),
			6, `task "t".condition "services".peer`, "cannot be combined with regexp"},
		{"unknown nodes field", "c.hcl", task1(`  condition "nodes" {`, `    datacentre = "dc1"`, "  }"),
			5, `task "t".condition "nodes".datacentre`, `did you mean "datacenter"`},
		{"node_meta not a map", "c.hcl", task1(`  condition "nodes" {`, `    node_meta = "r1"`, "  }"),
			5, `task "t".condition "nodes".node_meta`, ""},
		{"intentions without a side", "c.hcl", task1(`  condition "intentions" {`, `    datacenter = "dc1"`, "  }"),
			4, `task "t".condition "intentions"`, "at least one of source_services and destination_services must be set"},
		{"intentions names and regexp", "c.hcl", task1(`  condition "intentions" {`, `    source_services {`, `      names = ["a"]`, `      regexp = "b"`, "    }", "  }"),
			5, `task "t".condition "intentions".source_services`, "exactly one of regexp or names must be set"},
		{"intentions bad regexp", "c.hcl", task1(`  condition "intentions" {`, `    destination_services {`, `      regexp = "(("`, "    }", "  }"),
			6, `task "t".condition "intentions".destination_services.regexp`, "does not compile"},
		{"intentions empty name", "c.hcl", task1(`  module_input "intentions" {`, `    destination_services {`, `      names = ["a", ""]`, "    }", "  }", `  condition "schedule" {`, `    cron = "* * * * *"`, "  }"),
			6, `task "t".module_input "intentions".destination_services.names[1]`, "cannot be empty"},
		{"intentions unknown field in side", "c.hcl", task1(`  condition "intentions" {`, `    source_services {`, `      name = ["a"]`, "    }", "  }"),
			6, `task "t".condition "intentions".source_services.name`, `did you mean "names"`},
		{"two source_services", "c.hcl", task1(`  condition "intentions" {`, `    source_services {`, `      names = ["a"]`, "    }", `    source_services {`, `      names = ["b"]`, "    }", "  }"),
			8, `task "t".condition "intentions".source_services`, "only one 'source_services' block"},
		{"nodes condition and module input", "c.hcl", task1(`  condition "nodes" {`, "  }", `  module_input "nodes" {`, "  }"),
			6, `task "t".module_input "nodes"`, "the nodes condition already provides the nodes variable"},
		{"intentions condition and module input", "c.hcl", task1(`  condition "intentions" {`, `    source_services {`, `      regexp = ""`, "    }", "  }", `  module_input "intentions" {`, `    source_services {`, `      regexp = ""`, "    }", "  }"),
			9, `task "t".module_input "intentions"`, "the intentions condition already provides the intentions variable"},
		{"unknown module_input type", "c.hcl", task1(`  condition "nodes" {`, "  }", `  module_input "node" {`, "  }"),
			6, `task "t".module_input`, `unknown module_input type "node"; valid types are "services", "consul-kv", "nodes", "intentions"`},
		{"unknown condition type lists new ones", "c.hcl", task1(`  condition "intention" {`, "  }"),
			4, `task "t".condition`, `"nodes", "intentions"`},
		{"use_cache not a bool", "c.hcl", lines("consul {", `  use_cache = "sometimes"`, "}"),
			2, "consul.use_cache", "must be a bool"},
		{"hcl1 unknown status", "c.hcl", lines(`task { name = "t", module = "m"`, `  condition services { names = ["a"], status = ["up"] }`, "}"),
			2, `task "t".condition "services".status[0]`, `"up" is not a health status`},
		{"json unknown status", "c.json", lines(`{"task": {"name": "t", "module": "m",`, `  "condition": {"services": {"names": ["a"],`, `    "status": ["passing", "down"]}}}}`),
			3, `task "t".condition "services".status[1]`, `"down" is not a health status`},
		{"json intentions without a side", "c.json", lines(`{"task": {"name": "t", "module": "m",`, `  "condition": {"intentions": {"datacenter": "dc1"}}}}`),
			2, `task "t".condition "intentions"`, "at least one of source_services"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), tt.file, tt.src)
			_, err := Load([]string{path})
			if err == nil {
				t.Fatal("loaded; want an error")
			}
			var found bool
			for _, e := range AsList(err) {
				if filepath.Base(e.Range.Filename) == tt.file && e.Range.Start.Line == tt.line &&
					e.Field == tt.field && strings.Contains(e.Msg, tt.msg) {
					found = true
				}
			}
			if !found {
				t.Fatalf("want an error at %s:%d on %s containing %q; got:\n%v", tt.file, tt.line, tt.field, tt.msg, err)
			}
		})
	}
}
