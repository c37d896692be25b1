package reconcile

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/watch"
)

func keysOf(qs []watch.Query) []string {
	var out []string
	for _, q := range qs {
		out = append(out, q.Key())
	}
	return out
}

// Status, peer and partition of a services selector reach its health
// queries (and, for a regexp, its catalog query).
func TestSelectorOptionsReachQueries(t *testing.T) {
	sel := task.ServicesSelector{Names: []string{"web"}, Status: []string{"warning", "passing"}, Peer: "east", Partition: "p"}
	s := task.Spec{Name: "t", Condition: task.Condition{Services: &task.ServicesCondition{ServicesSelector: sel}}}
	want := watch.HealthService("web", watch.ServiceOptions{Status: []string{"passing", "warning"}, Peer: "east", Partition: "p"}).Key()
	if got := keysOf(StaticQueries(&s)); !reflect.DeepEqual(got, []string{want}) {
		t.Errorf("queries %v, want %v", got, want)
	}
	re := ""
	s.Condition.Services.Names, s.Condition.Services.Regexp, s.Condition.Services.Peer = nil, &re, ""
	wantCat := watch.CatalogServices(watch.CatalogOptions{Partition: "p"}).Key()
	if got := keysOf(StaticQueries(&s)); !reflect.DeepEqual(got, []string{wantCat}) {
		t.Errorf("regexp queries %v, want %v", got, wantCat)
	}
}

func TestNodesInputs(t *testing.T) {
	nodesKey := watch.CatalogNodes(watch.NodesOptions{Datacenter: "dc1", NodeMeta: map[string]string{"rack": "r1"}}).Key()
	nodes := []task.Node{{ID: "1", Node: "a", Address: "10.0.0.1", Datacenter: "dc1", TaggedAddresses: map[string]string{}, Meta: map[string]string{"rack": "r1"}}}
	cond := &task.NodesCondition{NodesSelector: task.NodesSelector{Datacenter: "dc1", NodeMeta: map[string]string{"rack": "r1"}}, UseAsModuleInput: true}
	s := task.Spec{Name: "n", Condition: task.Condition{Nodes: cond}}
	if got := keysOf(StaticQueries(&s)); !reflect.DeepEqual(got, []string{nodesKey}) {
		t.Fatalf("queries %v", got)
	}
	vals := map[string]any{}
	get := func(k string) (any, bool) { v, ok := vals[k]; return v, ok }
	if _, ready := BuildInputs(&s, get); ready {
		t.Fatal("ready without the nodes")
	}
	vals[nodesKey] = nodes
	in, ready := BuildInputs(&s, get)
	if !ready || !reflect.DeepEqual(in.Nodes, nodes) || in.Services == nil || in.Intentions != nil {
		t.Fatalf("inputs %+v ready=%v", in, ready)
	}
	fp1, _ := Fingerprint(&s, get, digestOf(get))
	vals[nodesKey] = []task.Node{}
	in, _ = BuildInputs(&s, get)
	if in.Nodes == nil || len(in.Nodes) != 0 {
		t.Errorf("no nodes: %#v, want an empty list", in.Nodes)
	}
	fp2, _ := Fingerprint(&s, get, digestOf(get))
	if fp1 == fp2 {
		t.Error("the fingerprint did not change with the nodes")
	}
	// use_as_module_input = false: nothing rendered, still watched.
	cond.UseAsModuleInput = false
	if in, _ := BuildInputs(&s, get); in.Nodes != nil {
		t.Errorf("rendered %+v", in.Nodes)
	}
	// As a module input of a services task.
	s2 := task.Spec{Name: "m", Condition: task.Condition{Services: &task.ServicesCondition{ServicesSelector: task.ServicesSelector{Names: []string{"web"}}}},
		ModuleInput: task.ModuleInputs{Nodes: &cond.NodesSelector}}
	vals[nodesKey] = nodes
	vals[watch.HealthService("web", watch.ServiceOptions{}).Key()] = []task.Service{}
	if in, ready := BuildInputs(&s2, get); !ready || !reflect.DeepEqual(in.Nodes, nodes) {
		t.Errorf("module input: %+v %v", in.Nodes, ready)
	}
}

// Intentions are one query per datacenter/namespace/partition; each task
// renders, and is fingerprinted by, only the intentions it selects, so a
// change to another service's intention does not run it.
func TestIntentionsInputs(t *testing.T) {
	key := watch.ServiceIntentions(watch.IntentionsOptions{}).Key()
	re := "^web"
	s := task.Spec{Name: "i", Condition: task.Condition{Intentions: &task.IntentionsCondition{UseAsModuleInput: true,
		IntentionsSelector: task.IntentionsSelector{Source: &task.NameMatch{Regexp: &re}, Destination: &task.NameMatch{Names: []string{"api", "*"}}}}}}
	if got := keysOf(StaticQueries(&s)); !reflect.DeepEqual(got, []string{key}) {
		t.Fatalf("queries %v", got)
	}
	mk := func(src, dst, action string) task.Intention {
		return task.Intention{SourceName: src, DestinationName: dst, Action: action, Permissions: "[]", Meta: map[string]string{}}
	}
	vals := map[string]any{key: []task.Intention{
		mk("web", "api", "allow"), mk("web-2", "*", "deny"), mk("web", "db", "allow"), mk("admin", "api", "allow"), mk("*", "api", "deny"),
	}}
	get := func(k string) (any, bool) { v, ok := vals[k]; return v, ok }
	in, ready := BuildInputs(&s, get)
	want := []task.Intention{mk("web", "api", "allow"), mk("web-2", "*", "deny")}
	if !ready || !reflect.DeepEqual(in.Intentions, want) {
		t.Fatalf("intentions %+v, want %+v", in.Intentions, want)
	}
	fp, _ := Fingerprint(&s, get, digestOf(get))
	vals[key] = []task.Intention{mk("web", "api", "allow"), mk("web-2", "*", "deny"), mk("admin", "db", "deny")}
	if fp2, _ := Fingerprint(&s, get, digestOf(get)); fp2 != fp {
		t.Error("an intention the task does not select changed its fingerprint")
	}
	vals[key] = []task.Intention{mk("web", "api", "deny"), mk("web-2", "*", "deny")}
	if fp3, _ := Fingerprint(&s, get, digestOf(get)); fp3 == fp {
		t.Error("a selected intention's change did not change the fingerprint")
	}
	vals[key] = []task.Intention{}
	if in, _ := BuildInputs(&s, get); in.Intentions == nil || len(in.Intentions) != 0 {
		t.Errorf("none selected: %#v, want an empty list", in.Intentions)
	}
	// Only a destination: every source.
	s.Condition.Intentions.Source = nil
	vals[key] = []task.Intention{mk("x", "api", "allow"), mk("y", "db", "allow")}
	if in, _ := BuildInputs(&s, get); len(in.Intentions) != 1 || in.Intentions[0].SourceName != "x" {
		t.Errorf("destination only: %+v", in.Intentions)
	}
}

// Specs without the extensions keep the spec digest they had: adding the
// fields must not re-run every existing task after an upgrade. The digest
// hashes the JSON of the condition and module inputs, so that JSON must be
// the one of before.
func TestSpecDigestUnchangedWithoutExtensions(t *testing.T) {
	s := task.Spec{Name: "t", Module: "m", Condition: task.Condition{Services: &task.ServicesCondition{
		ServicesSelector: task.ServicesSelector{Names: []string{"web"}}, UseAsModuleInput: true}},
		ModuleInput: task.ModuleInputs{ConsulKV: &task.ConsulKVSelector{Path: "k"}}}
	b, err := json.Marshal(fingerprint{s.Module, s.Version, s.Providers, s.Variables, s.Condition, s.ModuleInput})
	if err != nil {
		t.Fatal(err)
	}
	const before = `{"module":"m","version":"","providers":null,"variables":null,` +
		`"condition":{"services":{"names":["web"],"datacenter":"","namespace":"","filter":"","cts_user_defined_meta":null,"use_as_module_input":true}},` +
		`"module_input":{"consul_kv":{"path":"k","recurse":false,"datacenter":"","namespace":""}}}`
	if string(b) != before {
		t.Errorf("spec digest input changed:\n got %s\nwant %s", b, before)
	}
	b1 := SpecDigest(&s)
	s.Condition.Services.Status = []string{"passing"}
	if SpecDigest(&s) == b1 {
		t.Error("status does not change the spec digest")
	}
}
