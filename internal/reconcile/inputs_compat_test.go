package reconcile

import (
	"reflect"
	"testing"

	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/watch"
)

// The deprecated services list with service blocks: each name is queried
// with its own options and carries its own cts_user_defined_meta.
func TestBuildInputsPerServiceOptions(t *testing.T) {
	sel := task.ServicesSelector{Names: []string{"web", "db"}, PerService: map[string]task.ServiceOptions{
		"web": {Datacenter: "east", Namespace: "ns", Filter: `"prod" in Service.Tags`, CTSUserDefinedMeta: map[string]string{"o": "a"}},
		"db":  {},
	}}
	s := task.Spec{Name: "t", Condition: task.Condition{Services: &task.ServicesCondition{ServicesSelector: sel, UseAsModuleInput: true}}}
	webKey := watch.HealthService("web", watch.ServiceOptions{Datacenter: "east", Namespace: "ns", Filter: `"prod" in Service.Tags`}).Key()
	dbKey := watch.HealthService("db", watch.ServiceOptions{}).Key()
	var keys []string
	for _, q := range StaticQueries(&s) {
		keys = append(keys, q.Key())
	}
	if !reflect.DeepEqual(keys, []string{webKey, dbKey}) {
		t.Fatalf("queries %v, want %v", keys, []string{webKey, dbKey})
	}
	vals := map[string]any{
		webKey: []task.Service{{ID: "web-1", Name: "web", Node: "n", NodeDatacenter: "east"}},
		dbKey:  []task.Service{{ID: "db-1", Name: "db", Node: "n", NodeDatacenter: "dc1"}},
	}
	in, ready := BuildInputs(&s, func(k string) (any, bool) { v, ok := vals[k]; return v, ok })
	if !ready {
		t.Fatal("not ready")
	}
	if m := in.Services["web-1.n.east"].CTSUserDefinedMeta; !reflect.DeepEqual(m, map[string]string{"o": "a"}) {
		t.Errorf("web meta %v", m)
	}
	if m := in.Services["db-1.n.dc1"].CTSUserDefinedMeta; m == nil || len(m) != 0 {
		t.Errorf("db meta %v, want {}", m)
	}
}

// A source with use_as_module_input = false renders nothing, but its data
// is in the fingerprint, so a change to it runs the task (as in CTS). For
// catalog-services only the name set counts (tags never trigger it).
func TestUnrenderedSourcesChangeTheFingerprint(t *testing.T) {
	svcKey := watch.HealthService("web", watch.ServiceOptions{}).Key()
	catKey := watch.CatalogServices(watch.CatalogOptions{}).Key()
	kvKey := watch.KV("k", false, "", "").Key()
	tests := []struct {
		name   string
		spec   task.Spec
		before map[string]any
		same   map[string]any // a change that must not change the hash
		after  map[string]any // a change that must
	}{
		{"services",
			task.Spec{Name: "s", Condition: task.Condition{Services: &task.ServicesCondition{
				ServicesSelector: task.ServicesSelector{Names: []string{"web"}}}}},
			map[string]any{svcKey: []task.Service{{ID: "a", Node: "n"}}},
			map[string]any{svcKey: []task.Service{{ID: "a", Node: "n"}}},
			map[string]any{svcKey: []task.Service{{ID: "a", Node: "n"}, {ID: "b", Node: "n"}}}},
		{"catalog-services",
			task.Spec{Name: "c", Condition: task.Condition{CatalogServices: &task.CatalogServicesCondition{Regexp: "^w"}}},
			map[string]any{catKey: map[string][]string{"web": {"a"}, "db": {}}},
			map[string]any{catKey: map[string][]string{"web": {"a", "b"}, "db": {"x"}, "dx": {}}},
			map[string]any{catKey: map[string][]string{"web": {"a"}, "www": {}}}},
		{"consul-kv",
			task.Spec{Name: "k", Condition: task.Condition{ConsulKV: &task.ConsulKVCondition{ConsulKVSelector: task.ConsulKVSelector{Path: "k"}}}},
			map[string]any{kvKey: map[string]string{}},
			map[string]any{kvKey: map[string]string{}},
			map[string]any{kvKey: map[string]string{"k": "v"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			build := func(vals map[string]any) (task.Inputs, string) {
				get := func(k string) (any, bool) { v, ok := vals[k]; return v, ok }
				in, ready := BuildInputs(&tt.spec, get)
				fp, fready := Fingerprint(&tt.spec, get, digestOf(get))
				if !ready || !fready {
					t.Fatal("not ready")
				}
				return in, fp
			}
			in, h0 := build(tt.before)
			if len(in.Services) != 0 || in.CatalogServices != nil || in.ConsulKV != nil {
				t.Fatalf("inputs %+v: nothing may be rendered", in)
			}
			if _, h := build(tt.same); h != h0 {
				t.Error("the fingerprint changed for a change that does not trigger")
			}
			if _, h := build(tt.after); h == h0 {
				t.Error("the fingerprint did not change for a change of the watched data")
			}
		})
	}
}
