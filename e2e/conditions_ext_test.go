package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// The ctsync conditions beyond CTS, each through a real module apply:
// condition "nodes", condition "intentions", and a services condition with
// status = ["passing", "warning"] feeding a module written for CTS (its
// services variable type is CTS's, unchanged).
func TestExtensionConditionsApply(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	work := t.TempDir()
	nodesOut, nodesVars := newTaskDir(t)
	intOut, intVars := newTaskDir(t)
	svcOut, svcVars := newTaskDir(t)
	cfg := writeFile(t, work, "config.hcl", fmt.Sprintf(`
log_level   = "DEBUG"
working_dir = %q
port        = %d
consul {
  address   = %q
  use_cache = true
}
buffer_period {
  enabled = false
}

task {
  name           = "nodes-task"
  module         = %q
  variable_files = [%q]
  condition "nodes" {
    node_meta = { role = "edge" }
  }
}

task {
  name           = "intentions-task"
  module         = %q
  variable_files = [%q]
  condition "intentions" {
    destination_services {
      names = ["api"]
    }
  }
}

task {
  name           = "status-task"
  module         = %q
  variable_files = [%q]
  condition "services" {
    names  = ["web"]
    status = ["passing", "warning"]
  }
}
`, filepath.Join(work, "sync-tasks"), testutil.FreePort(t), c.Addr,
		module("nodes_file"), nodesVars, module("intentions_file"), intVars, module("services_file"), svcVars))

	edge := func(node, addr string) {
		t.Helper()
		if _, err := c.Client.Catalog().Register(&api.CatalogRegistration{Node: node, Address: addr,
			NodeMeta: map[string]string{"role": "edge"}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	intention := func(dest string, sources ...*api.SourceIntention) {
		t.Helper()
		if _, _, err := c.Client.ConfigEntries().Set(&api.ServiceIntentionsConfigEntry{Kind: api.ServiceIntentions,
			Name: dest, Sources: sources}, nil); err != nil {
			t.Fatal(err)
		}
	}
	edge("edge-1", "10.1.0.1")
	intention("api", &api.SourceIntention{Name: "web", Action: api.IntentionActionAllow})
	c.RegisterService(t, reg("web-1", "web", 8001), api.HealthPassing)
	c.RegisterService(t, reg("web-2", "web", 8002), api.HealthWarning)
	c.RegisterService(t, reg("web-3", "web", 8003), api.HealthCritical)
	p := startCtsync(t, work, "start", "-config-file", cfg)

	waitNodes := func(want string) []task.Node {
		t.Helper()
		var got []task.Node
		testutil.Eventually(t, 90*time.Second, "nodes "+want, func() bool {
			got = nil
			if !readJSON(nodesOut, "nodes.json", &got) {
				return false
			}
			var names []string
			for _, n := range got {
				names = append(names, n.Node+"@"+n.Address)
			}
			return strings.Join(names, ",") == want
		})
		return got
	}
	waitIntentions := func(want string) []task.Intention {
		t.Helper()
		var got []task.Intention
		testutil.Eventually(t, 90*time.Second, "intentions "+want, func() bool {
			got = nil
			if !readJSON(intOut, "intentions.json", &got) {
				return false
			}
			var pairs []string
			for _, in := range got {
				pairs = append(pairs, in.SourceName+">"+in.DestinationName+":"+in.Action)
			}
			return strings.Join(pairs, ",") == want
		})
		return got
	}

	nodes := waitNodes("edge-1@10.1.0.1")
	if n := nodes[0]; n.Datacenter != "dc1" || n.Meta["role"] != "edge" || n.TaggedAddresses == nil {
		t.Errorf("node entry %+v", n)
	}
	ints := waitIntentions("web>api:allow")
	if in := ints[0]; in.SourceType != "consul" || in.Permissions != "[]" || in.Precedence == 0 || in.Meta == nil {
		t.Errorf("intention entry %+v", in)
	}
	svcs := waitServices(t, svcOut, "web-1,web-2")
	if svcs["web-2.node-1.dc1"].Status != "warning" {
		t.Errorf("web-2: %+v", svcs["web-2.node-1.dc1"])
	}

	edge("edge-2", "10.1.0.2")
	edge("edge-1", "10.1.0.9") // moved
	if _, err := c.Client.Catalog().Register(&api.CatalogRegistration{Node: "core-1", Address: "10.2.0.1"}, nil); err != nil {
		t.Fatal(err)
	}
	waitNodes("edge-1@10.1.0.9,edge-2@10.1.0.2")

	// An intention to another destination changes nothing for the task:
	// no run. One to api does.
	runs := p.runs("intentions-task")
	intention("db", &api.SourceIntention{Name: "api", Action: api.IntentionActionAllow})
	intention("api", &api.SourceIntention{Name: "web", Action: api.IntentionActionAllow},
		&api.SourceIntention{Name: "*", Action: api.IntentionActionDeny})
	waitIntentions("web>api:allow,*>api:deny")
	if got := p.runs("intentions-task"); got-runs != 1 {
		t.Errorf("%d intentions-task runs for one change of its intentions and one of another service's", got-runs)
	}

	c.SetCheck(t, "web-3", api.HealthWarning, "better")
	c.SetCheck(t, "web-1", api.HealthCritical, "down")
	waitServices(t, svcOut, "web-2,web-3")
}

// A services condition with peer applies the instances a peered cluster
// exports, with a module written for CTS; the local instances of the same
// name stay out.
func TestPeerServicesApply(t *testing.T) {
	skipShort(t)
	east := testutil.StartConsulWith(t, testutil.ConsulOptions{Peering: true, Node: "east-1"})
	west := testutil.StartConsulWith(t, testutil.ConsulOptions{Peering: true, Node: "west-1"})
	testutil.Peer(t, east, west, "east", "west")
	east.RegisterService(t, reg("web-e1", "web", 8001), api.HealthPassing)
	west.RegisterService(t, reg("web-w1", "web", 8002), api.HealthPassing)
	east.Export(t, "west", "web")

	out, varFile := newTaskDir(t)
	work := t.TempDir()
	cfg := writeFile(t, work, "config.hcl", fmt.Sprintf(`
working_dir = %q
port        = %d
consul {
  address = %q
}
buffer_period {
  enabled = false
}
task {
  name           = "peer-task"
  module         = %q
  variable_files = [%q]
  condition "services" {
    names = ["web"]
    peer  = "east"
  }
}
`, filepath.Join(work, "sync-tasks"), testutil.FreePort(t), west.Addr, module("services_file"), varFile))
	startCtsync(t, work, "start", "-config-file", cfg)

	got := waitServices(t, out, "web-e1")
	if s := got["web-e1.east-1.dc1"]; s.Node != "east-1" || s.Port != 8001 || s.Status != "passing" {
		t.Fatalf("peer instance %+v", got)
	}
	east.RegisterService(t, reg("web-e2", "web", 8003), api.HealthPassing)
	waitServices(t, out, "web-e1,web-e2")
}
