package watch

import (
	"context"
	"reflect"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/task"
)

func TestExtensionKeys(t *testing.T) {
	cases := map[string]Query{
		"health/service/web?partition=p&peer=east":                       HealthService("web", ServiceOptions{Partition: "p", Peer: "east"}),
		"health/service/web?status=passing,warning":                      HealthService("web", ServiceOptions{Status: []string{"warning", "passing", "warning"}}),
		"health/service/web":                                             HealthService("web", ServiceOptions{Status: []string{"passing"}}),
		`health/service/web?filter=Checks.Status !%3D ""&status=passing`: HealthService("web", ServiceOptions{Filter: `Checks.Status != ""`, Status: []string{"passing"}}),
		"health/service/web?status=critical,maintenance,passing,warning": HealthService("web", ServiceOptions{
			Status: []string{"maintenance", "critical", "warning", "passing"}}),
		"catalog/services?ns=x&partition=p&peer=east": CatalogServices(CatalogOptions{Namespace: "x", Partition: "p", Peer: "east"}),
		"catalog/nodes": CatalogNodes(NodesOptions{}),
		"catalog/nodes?dc=dc1&filter=Meta.a %3D%3D 1&node-meta=a:1": CatalogNodes(NodesOptions{Datacenter: "dc1", Filter: "Meta.a == 1", NodeMeta: map[string]string{"a": "1"}}),
		"config/service-intentions":                                 ServiceIntentions(IntentionsOptions{}),
		"config/service-intentions?dc=dc2&ns=n&partition=p":         ServiceIntentions(IntentionsOptions{Datacenter: "dc2", Namespace: "n", Partition: "p"}),
	}
	for want, q := range cases {
		if got := q.Key(); got != want {
			t.Errorf("Key = %q, want %q", got, want)
		}
	}
}

// The status choice: "passing" alone is Consul's ?passing; any other set
// is applied here to the aggregated status, so an instance with a warning
// check counts as warning (Consul's ?passing would drop it, a filter on
// Checks.Status would see its passing checks too).
func TestHealthServiceStatus(t *testing.T) {
	f := newFakeConsul(t)
	c := f.client()
	ctx := context.Background()
	entries := []*api.ServiceEntry{
		{Node: &api.Node{Node: "n1"}, Service: &api.AgentService{ID: "ok", Service: "web"},
			Checks: api.HealthChecks{{CheckID: "serfHealth", Status: api.HealthPassing}}},
		{Node: &api.Node{Node: "n1"}, Service: &api.AgentService{ID: "slow", Service: "web"},
			Checks: api.HealthChecks{{CheckID: "serfHealth", Status: api.HealthPassing}, {CheckID: "c", Status: api.HealthWarning}}},
		{Node: &api.Node{Node: "n1"}, Service: &api.AgentService{ID: "down", Service: "web"},
			Checks: api.HealthChecks{{CheckID: "c", Status: api.HealthCritical}}},
		{Node: &api.Node{Node: "n1"}, Service: &api.AgentService{ID: "maint", Service: "web"},
			Checks: api.HealthChecks{{CheckID: api.ServiceMaintPrefix + "maint", Status: api.HealthCritical}}},
	}
	ids := func(v any) []string {
		var out []string
		for _, s := range v.([]task.Service) {
			out = append(out, s.ID+":"+s.Status)
		}
		return out
	}
	cases := []struct {
		status  []string
		passing bool
		want    []string
	}{
		{[]string{"passing", "warning"}, false, []string{"ok:passing", "slow:warning"}},
		{[]string{"critical"}, false, []string{"down:critical"}},
		{[]string{"maintenance", "critical"}, false, []string{"down:critical", "maint:maintenance"}},
		{[]string{"passing", "warning", "critical", "maintenance"}, false, []string{"down:critical", "maint:maintenance", "ok:passing", "slow:warning"}},
	}
	for i, tc := range cases {
		f.reply("/v1/health/service/web", uint64(10+i), entries)
		v, _, err := HealthService("web", ServiceOptions{Status: tc.status, Partition: "p", Peer: "east"}).Fetch(ctx, c, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(v); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("status %v: %v, want %v", tc.status, got, tc.want)
		}
		q := f.requests("/v1/health/service/web")[i]
		if q.Has("passing") != tc.passing || q.Get("partition") != "p" || q.Get("peer") != "east" || q.Has("cached") {
			t.Errorf("status %v: params %v", tc.status, q)
		}
	}
	// passing alone, also with a filter on Checks.Status: Consul's ?passing.
	f.reply("/v1/health/service/web", 20, []*api.ServiceEntry{})
	if _, _, err := HealthService("web", ServiceOptions{Status: []string{"passing"}, Filter: `Checks.Status != "x"`}).Fetch(ctx, c, 0); err != nil {
		t.Fatal(err)
	}
	if q := f.requests("/v1/health/service/web")[len(cases)]; q.Get("passing") != "1" {
		t.Errorf("explicit passing with a Checks.Status filter: params %v", q)
	}
}

func TestHealthServiceCached(t *testing.T) {
	f := newFakeConsul(t)
	c := f.client()
	c.UseCache = true
	f.reply("/v1/health/service/web", 3, []*api.ServiceEntry{})
	if _, _, err := HealthService("web", ServiceOptions{}).Fetch(context.Background(), c, 2); err != nil {
		t.Fatal(err)
	}
	if q := f.requests("/v1/health/service/web")[0]; !q.Has("cached") || q.Get("passing") != "1" || q.Get("index") != "2" {
		t.Errorf("params %v", q)
	}
	// Only health queries ask for the cache.
	f.reply("/v1/catalog/nodes", 4, []*api.Node{})
	if _, _, err := CatalogNodes(NodesOptions{}).Fetch(context.Background(), c, 0); err != nil {
		t.Fatal(err)
	}
	if q := f.requests("/v1/catalog/nodes")[0]; q.Has("cached") {
		t.Errorf("catalog nodes params %v", q)
	}
}

func TestCatalogNodesFetch(t *testing.T) {
	f := newFakeConsul(t)
	f.reply("/v1/catalog/nodes", 9, []*api.Node{
		{ID: "id-b", Node: "b", Address: "10.0.0.2", Datacenter: "dc1", TaggedAddresses: map[string]string{"lan": "10.0.0.2"}, Meta: map[string]string{"rack": "r1"}},
		{ID: "id-a", Node: "a", Address: "10.0.0.1", Datacenter: "dc1"},
	})
	v, idx, err := CatalogNodes(NodesOptions{Datacenter: "dc1", Filter: `Meta.rack == "r1"`, NodeMeta: map[string]string{"zone": "z", "env": "prod"}}).
		Fetch(context.Background(), f.client(), 7)
	if err != nil || idx != 9 {
		t.Fatal(err, idx)
	}
	empty := map[string]string{}
	want := []task.Node{
		{ID: "id-a", Node: "a", Address: "10.0.0.1", Datacenter: "dc1", TaggedAddresses: empty, Meta: empty},
		{ID: "id-b", Node: "b", Address: "10.0.0.2", Datacenter: "dc1", TaggedAddresses: map[string]string{"lan": "10.0.0.2"}, Meta: map[string]string{"rack": "r1"}},
	}
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("value %#v", v)
	}
	q := f.requests("/v1/catalog/nodes")[0]
	if q.Get("dc") != "dc1" || q.Get("filter") != `Meta.rack == "r1"` || q.Get("index") != "7" ||
		!reflect.DeepEqual(q["node-meta"], []string{"env:prod", "zone:z"}) {
		t.Fatalf("params %v", q)
	}
	d1, _ := DigestOf(v)
	v2 := []task.Node{want[0], want[1]}
	v2[1].Meta = map[string]string{"rack": "r2"}
	if d2, _ := DigestOf(v2); d1 == d2 {
		t.Error("a meta change does not change the digest")
	}
}

func TestServiceIntentionsFetch(t *testing.T) {
	f := newFakeConsul(t)
	f.reply("/v1/config/service-intentions", 5, []*api.ServiceIntentionsConfigEntry{
		{Kind: api.ServiceIntentions, Name: "api", Meta: map[string]string{"owner": "x"}, Sources: []*api.SourceIntention{
			{Name: "web", Action: api.IntentionActionAllow, Precedence: 9, Type: api.IntentionSourceConsul},
			{Name: "*", Action: api.IntentionActionDeny, Precedence: 8, Type: api.IntentionSourceConsul, Description: "default deny"},
			{Name: "admin", Peer: "east", Precedence: 9, Type: api.IntentionSourceConsul, Permissions: []*api.IntentionPermission{
				{Action: api.IntentionActionAllow, HTTP: &api.IntentionHTTPPermission{PathPrefix: "/v1", Methods: []string{"GET"}}}}},
		}},
		{Kind: api.ServiceIntentions, Name: "*", Sources: []*api.SourceIntention{
			{Name: "*", Action: api.IntentionActionDeny, Precedence: 1, Type: api.IntentionSourceConsul}}},
	})
	v, idx, err := ServiceIntentions(IntentionsOptions{Datacenter: "dc1", Namespace: "n", Partition: "p"}).Fetch(context.Background(), f.client(), 4)
	if err != nil || idx != 5 {
		t.Fatal(err, idx)
	}
	got := v.([]task.Intention)
	var order []string
	for _, in := range got {
		order = append(order, in.SourcePeer+"/"+in.SourceName+">"+in.DestinationName+":"+in.Action)
	}
	if want := []string{"/web>api:allow", "east/admin>api:", "/*>api:deny", "/*>*:deny"}; !reflect.DeepEqual(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	if got[0].Permissions != "[]" || got[0].Meta["owner"] != "x" || got[0].SourceType != "consul" || got[3].Meta == nil {
		t.Errorf("first %+v, last %+v", got[0], got[3])
	}
	if p := got[1].Permissions; p != `[{"Action":"allow","HTTP":{"Methods":["GET"],"PathPrefix":"/v1"}}]` {
		t.Errorf("permissions %s", p)
	}
	q := f.requests("/v1/config/service-intentions")[0]
	if q.Get("dc") != "dc1" || q.Get("ns") != "n" || q.Get("partition") != "p" || q.Get("index") != "4" {
		t.Fatalf("params %v", q)
	}
}
