package watch

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	gojson "github.com/goccy/go-json"
	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/task"
)

func TestNormaliseHealth(t *testing.T) {
	entries := []*api.ServiceEntry{
		{ // sorts after n1
			Node: &api.Node{ID: "uuid-2", Node: "n2", Address: "10.0.0.2", Datacenter: "dc1",
				TaggedAddresses: map[string]string{"lan": "10.0.0.2"}, Meta: map[string]string{"rack": "b"}},
			Service: &api.AgentService{ID: "web-a", Service: "web", Address: "192.168.0.2", Port: 8080,
				Tags: []string{"z", "a", "m"}, Meta: map[string]string{"v": "2"}, Namespace: "default"},
			Checks: api.HealthChecks{
				{CheckID: "serfHealth", Status: api.HealthPassing},
				{CheckID: "svc", Status: api.HealthWarning, Output: "slow"},
			},
		},
		{ // nils everywhere, address falls back to the node's
			Node:    &api.Node{Node: "n1", Address: "10.0.0.1", Datacenter: "dc1"},
			Service: &api.AgentService{ID: "web-b", Service: "web", Kind: api.ServiceKindConnectProxy},
			Checks: api.HealthChecks{
				{CheckID: "svc", Status: api.HealthCritical},
				{CheckID: "serfHealth", Status: api.HealthPassing},
			},
		},
		{ // same node as the one above, smaller ID: first
			Node:    &api.Node{Node: "n1", Address: "10.0.0.1", Datacenter: "dc1"},
			Service: &api.AgentService{ID: "web-a", Service: "web"},
			Checks: api.HealthChecks{
				{CheckID: "svc", Status: api.HealthCritical},
				{CheckID: api.ServiceMaintPrefix + "web-a", Status: api.HealthCritical},
			},
		},
		{ // node maintenance beats everything; no checks at all otherwise
			Node:    &api.Node{Node: "n3", Address: "10.0.0.3", Datacenter: "dc1"},
			Service: &api.AgentService{ID: "web-c", Service: "web"},
			Checks:  api.HealthChecks{{CheckID: api.NodeMaint, Status: api.HealthCritical}},
		},
		{ // no checks: passing
			Node:    &api.Node{Node: "n4", Datacenter: "dc1"},
			Service: &api.AgentService{ID: "web-d", Service: "web", Tags: []string{}},
		},
		nil,
		{Node: &api.Node{Node: "broken"}}, // no service: skipped
	}
	got := normaliseHealth(slim(t, entries))
	empty := map[string]string{}
	want := []task.Service{
		{ID: "web-a", Name: "web", Address: "10.0.0.1", Meta: empty, Tags: []string{}, Status: "maintenance",
			Node: "n1", NodeAddress: "10.0.0.1", NodeDatacenter: "dc1", NodeTaggedAddresses: empty, NodeMeta: empty},
		{ID: "web-b", Name: "web", Kind: "connect-proxy", Address: "10.0.0.1", Meta: empty, Tags: []string{}, Status: "critical",
			Node: "n1", NodeAddress: "10.0.0.1", NodeDatacenter: "dc1", NodeTaggedAddresses: empty, NodeMeta: empty},
		{ID: "web-a", Name: "web", Address: "192.168.0.2", Port: 8080, Meta: map[string]string{"v": "2"},
			Tags: []string{"a", "m", "z"}, Namespace: "default", Status: "warning",
			Node: "n2", NodeID: "uuid-2", NodeAddress: "10.0.0.2", NodeDatacenter: "dc1",
			NodeTaggedAddresses: map[string]string{"lan": "10.0.0.2"}, NodeMeta: map[string]string{"rack": "b"}},
		{ID: "web-c", Name: "web", Address: "10.0.0.3", Meta: empty, Tags: []string{}, Status: "maintenance",
			Node: "n3", NodeAddress: "10.0.0.3", NodeDatacenter: "dc1", NodeTaggedAddresses: empty, NodeMeta: empty},
		{ID: "web-d", Name: "web", Meta: empty, Tags: []string{}, Status: "passing",
			Node: "n4", NodeDatacenter: "dc1", NodeTaggedAddresses: empty, NodeMeta: empty},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("normaliseHealth:\n got %+v\nwant %+v", got, want)
	}
	for _, s := range got {
		if s.Meta == nil || s.Tags == nil || s.NodeMeta == nil || s.NodeTaggedAddresses == nil || s.CTSUserDefinedMeta != nil {
			t.Fatalf("nil/non-nil rule broken: %+v", s)
		}
	}
	if k := got[2].Key(); k != "web-a.n2.default.dc1" {
		t.Fatalf("Key = %q", k)
	}
	if out := normaliseHealth(nil); out == nil || len(out) != 0 {
		t.Fatalf("normaliseHealth(nil) = %#v, want empty non-nil", out)
	}
}

func TestNormaliseCatalog(t *testing.T) {
	got := normaliseCatalog(map[string][]string{
		"web":    {"b", "a", "b", "c", "a"},
		"consul": nil,
		"api":    {},
	})
	want := map[string][]string{"web": {"a", "b", "c"}, "consul": {}, "api": {}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v want %#v", got, want)
	}
	if got["consul"] == nil {
		t.Fatal("nil tags")
	}
}

func TestKeys(t *testing.T) {
	cases := map[string]Query{
		"health/service/web":                                      HealthService("web", ServiceOptions{}),
		"health/service/web?dc=dc2&ns=team":                       HealthService("web", ServiceOptions{Datacenter: "dc2", Namespace: "team"}),
		`health/service/web?filter=Service.Tags contains "a%26b"`: HealthService("web", ServiceOptions{Filter: `Service.Tags contains "a&b"`}),
		"health/service/a%2Fb%3F":                                 HealthService("a/b?", ServiceOptions{}),
		"catalog/services":                                        CatalogServices(CatalogOptions{}),
		"catalog/services?dc=dc1&node-meta=a:1&node-meta=b:2%3D&ns=x": CatalogServices(CatalogOptions{Datacenter: "dc1", Namespace: "x",
			NodeMeta: map[string]string{"b": "2=", "a": "1"}}),
		"kv/app/config":                KV("app/config", false, "", ""),
		"kv/app/config?recurse":        KV("/app/config", true, "", ""),
		"kv/a%3Fb?dc=dc1&ns=n&recurse": KV("a?b", true, "dc1", "n"),
		"kv/100%25":                    KV("100%", false, "", ""),
		"kv/?recurse":                  KV("", true, "", ""),
	}
	for want, q := range cases {
		if got := q.Key(); got != want {
			t.Errorf("Key = %q, want %q", got, want)
		}
	}
	// Ambiguity probes: these must all differ.
	distinct := []Query{
		HealthService("web", ServiceOptions{Datacenter: "a&ns=b"}),
		HealthService("web", ServiceOptions{Datacenter: "a", Namespace: "b"}),
		HealthService("web?dc=a", ServiceOptions{}),
		HealthService("web", ServiceOptions{Datacenter: "a"}),
		KV("x?recurse", false, "", ""),
		KV("x", true, "", ""),
		KV("x", false, "", ""),
		CatalogServices(CatalogOptions{NodeMeta: map[string]string{"a:b": "c"}}),
		CatalogServices(CatalogOptions{NodeMeta: map[string]string{"a": "b:c"}}),
	}
	seen := map[string]int{}
	for i, q := range distinct {
		if j, dup := seen[q.Key()]; dup {
			t.Errorf("queries %d and %d share key %q", i, j, q.Key())
		}
		seen[q.Key()] = i
	}
	// The caller's map is copied.
	m := map[string]string{"a": "1"}
	q := CatalogServices(CatalogOptions{NodeMeta: m})
	m["a"] = "2"
	if q.Key() != "catalog/services?node-meta=a:1" || q.(*catalogServices).o.NodeMeta["a"] != "1" {
		t.Fatal("node meta not copied")
	}
}

func TestHealthServiceRequestParams(t *testing.T) {
	f := newFakeConsul(t)
	c := f.client()
	ctx := context.Background()

	f.reply("/v1/health/service/web", 3, []*api.ServiceEntry{})
	if _, idx, err := HealthService("web", ServiceOptions{Datacenter: "dc2", Namespace: "ns1", Filter: `Service.Meta.v == "1"`}).Fetch(ctx, c, 0); err != nil || idx != 3 {
		t.Fatalf("fetch: %v %d", err, idx)
	}
	f.reply("/v1/health/service/web", 4, []*api.ServiceEntry{})
	if _, _, err := HealthService("web", ServiceOptions{Filter: `Checks.Status == "critical"`}).Fetch(ctx, c, 3); err != nil {
		t.Fatal(err)
	}
	reqs := f.requests("/v1/health/service/web")
	if reqs[0].Get("passing") != "1" || reqs[0].Get("dc") != "dc2" || reqs[0].Get("ns") != "ns1" ||
		reqs[0].Get("filter") != `Service.Meta.v == "1"` || reqs[0].Has("index") {
		t.Fatalf("first request params = %v", reqs[0])
	}
	if reqs[1].Has("passing") || reqs[1].Get("filter") != `Checks.Status == "critical"` || reqs[1].Get("index") != "3" {
		t.Fatalf("Checks.Status filter must drop passing: %v", reqs[1])
	}
}

// slim converts API entries into the slim form the query decodes, the way
// Consul's JSON would reach it.
func slim(t testing.TB, entries []*api.ServiceEntry) []*healthEntry {
	t.Helper()
	b, err := json.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}
	var out []*healthEntry
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCatalogServicesFetch(t *testing.T) {
	f := newFakeConsul(t)
	f.reply("/v1/catalog/services", 9, map[string][]string{"web": {"b", "a", "a"}, "consul": {}})
	v, idx, err := CatalogServices(CatalogOptions{Datacenter: "dc1", NodeMeta: map[string]string{"env": "prod", "a": "b"}}).
		Fetch(context.Background(), f.client(), 0)
	if err != nil || idx != 9 {
		t.Fatal(err, idx)
	}
	if want := map[string][]string{"web": {"a", "b"}, "consul": {}}; !reflect.DeepEqual(v, want) {
		t.Fatalf("value %#v", v)
	}
	q := f.requests("/v1/catalog/services")[0]
	if q.Get("dc") != "dc1" || !reflect.DeepEqual(q["node-meta"], []string{"a:b", "env:prod"}) &&
		!reflect.DeepEqual(q["node-meta"], []string{"env:prod", "a:b"}) {
		t.Fatalf("params %v", q)
	}
}

func TestKVFetch(t *testing.T) {
	f := newFakeConsul(t)
	c := f.client()
	ctx := context.Background()
	single := KV("app/color", false, "dc1", "")

	f.queue("/v1/kv/app/color") <- fakeReply{status: 404, index: 4}
	v, idx, err := single.Fetch(ctx, c, 0)
	if err != nil || idx != 4 || !reflect.DeepEqual(v, map[string]string{}) {
		t.Fatalf("missing key: %#v %d %v", v, idx, err)
	}
	f.reply("/v1/kv/app/color", 5, []*api.KVPair{{Key: "app/color", Value: []byte("red\xff\"")}})
	v, _, err = single.Fetch(ctx, c, 4)
	if err != nil || !reflect.DeepEqual(v, map[string]string{"app/color": "red\xff\""}) {
		t.Fatalf("single: %#v %v", v, err)
	}
	if q := f.requests("/v1/kv/app/color")[1]; q.Get("dc") != "dc1" || q.Has("recurse") || q.Get("index") != "4" {
		t.Fatalf("params %v", q)
	}

	prefix := KV("app", true, "", "")
	f.queue("/v1/kv/app") <- fakeReply{status: 404, index: 6}
	v, _, err = prefix.Fetch(ctx, c, 0)
	if err != nil || !reflect.DeepEqual(v, map[string]string{}) {
		t.Fatalf("empty prefix: %#v %v", v, err)
	}
	f.reply("/v1/kv/app", 7, []*api.KVPair{
		{Key: "app/", Value: nil},
		{Key: "app/color", Value: []byte("red")},
		{Key: "app/size", Value: []byte("")},
	})
	v, _, err = prefix.Fetch(ctx, c, 6)
	if err != nil || !reflect.DeepEqual(v, map[string]string{"app/": "", "app/color": "red", "app/size": ""}) {
		t.Fatalf("prefix: %#v %v", v, err)
	}
	if q := f.requests("/v1/kv/app")[1]; !q.Has("recurse") {
		t.Fatalf("params %v", q)
	}
	f.fail("/v1/kv/app", 500)
	if _, _, err := prefix.Fetch(ctx, c, 0); err == nil {
		t.Fatal("500 not an error")
	}
}

func BenchmarkHealthNormalise(b *testing.B) {
	entries := make([]*api.ServiceEntry, 1000)
	for i := range entries {
		n := i % 50
		entries[len(entries)-1-i] = &api.ServiceEntry{
			Node: &api.Node{ID: "uuid", Node: "node-" + string(rune('a'+n%26)) + string(rune('a'+n/26)),
				Address: "10.0.0.1", Datacenter: "dc1",
				TaggedAddresses: map[string]string{"lan": "10.0.0.1", "wan": "10.0.0.1"},
				Meta:            map[string]string{"consul-network-segment": ""}},
			Service: &api.AgentService{ID: "web-" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)), Service: "web",
				Port: 80, Tags: []string{"v2", "blue", "prod"}, Meta: map[string]string{"version": "2"}},
			Checks: api.HealthChecks{
				{CheckID: "serfHealth", Status: api.HealthPassing, Output: "Agent alive and reachable"},
				{CheckID: "service:web", Status: api.HealthPassing, Output: "HTTP GET: 200 OK"},
			},
		}
	}
	// A whole response: decode (the expensive part) and normalise, the way
	// a fetch does. BenchmarkHealthDecodeFullEntry decodes the same bytes
	// into the API client's full ServiceEntry, for comparison.
	body, err := json.Marshal(entries)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var got []*healthEntry
		if err := gojson.Unmarshal(body, &got); err != nil { // as consul.Client.BlockingGet does
			b.Fatal(err)
		}
		if out := normaliseHealth(got); len(out) != 1000 {
			b.Fatal(len(out))
		}
	}
}

func BenchmarkHealthDecodeFullEntry(b *testing.B) {
	entries := make([]*api.ServiceEntry, 1000)
	for i := range entries {
		entries[i] = &api.ServiceEntry{Node: &api.Node{Node: "n", Address: "10.0.0.1"},
			Service: &api.AgentService{ID: "web", Service: "web", Port: 80, Tags: []string{"v2", "blue", "prod"}},
			Checks: api.HealthChecks{
				{CheckID: "serfHealth", Status: api.HealthPassing, Output: "Agent alive and reachable"},
				{CheckID: "service:web", Status: api.HealthPassing, Output: "HTTP GET: 200 OK"},
			}}
	}
	body, err := json.Marshal(entries)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var got []*api.ServiceEntry
		if err := json.Unmarshal(body, &got); err != nil {
			b.Fatal(err)
		}
	}
}
