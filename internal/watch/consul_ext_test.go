package watch

import (
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/consul"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// Real-Consul tests of the ctsync extensions: catalog nodes, service
// intentions, the status choice, ?cached and services of a cluster peer.

func nodeNames(v any) string {
	var out []string
	for _, n := range v.([]task.Node) {
		out = append(out, n.Node)
	}
	return strings.Join(out, ",")
}

func TestRealCatalogNodes(t *testing.T) {
	c, r, rec := realConsul(t)
	all := CatalogNodes(NodesOptions{})
	rack := CatalogNodes(NodesOptions{Datacenter: "dc1", NodeMeta: map[string]string{"rack": "r1"}})
	filtered := CatalogNodes(NodesOptions{Filter: `Node matches "^ext-"`})
	r.Subscribe("all", all)
	r.Subscribe("rack", rack)
	r.Subscribe("f", filtered)
	is := func(want string) func(v any) bool { return func(v any) bool { return nodeNames(v) == want } }
	// The agent's own node may change while it syncs (anti-entropy), so
	// the unfiltered view is checked by value only.
	eventually := func(what string, q Query, ok func(v any) bool) {
		t.Helper()
		testutil.Eventually(t, waitLong, what, func() bool { v, _, ready := r.Get(q.Key()); return ready && ok(v) })
	}
	eventually("the agent's node", all, is("node-1"))
	step(t, r, rec, "rack", rack, 1, "no node in rack r1", is(""))
	step(t, r, rec, "f", filtered, 1, "no ext node", is(""))

	register := func(node, addr string, meta map[string]string) {
		t.Helper()
		if _, err := c.Client.Catalog().Register(&api.CatalogRegistration{Node: node, Address: addr, NodeMeta: meta,
			TaggedAddresses: map[string]string{"wan": addr}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	register("ext-b", "10.0.0.2", map[string]string{"rack": "r1"})
	eventually("ext-b added", all, is("ext-b,node-1"))
	step(t, r, rec, "rack", rack, 2, "ext-b in rack r1", is("ext-b"))
	step(t, r, rec, "f", filtered, 2, "ext-b filtered in", is("ext-b"))

	register("ext-a", "10.0.0.1", map[string]string{"rack": "r2"})
	step(t, r, rec, "f", filtered, 3, "ext-a filtered in", is("ext-a,ext-b"))
	eventually("ext-a added", all, is("ext-a,ext-b,node-1"))
	v, _, _ := r.Get(all.Key())
	got := v.([]task.Node)[0]
	want := task.Node{ID: got.ID, Node: "ext-a", Address: "10.0.0.1", Datacenter: "dc1",
		TaggedAddresses: map[string]string{"wan": "10.0.0.1"}, Meta: map[string]string{"rack": "r2"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("node %+v, want %+v", got, want)
	}

	// A node's meta moves it out of the rack view; the address change is
	// a change of the other two.
	register("ext-b", "10.0.0.3", map[string]string{"rack": "r3"})
	step(t, r, rec, "rack", rack, 3, "ext-b left rack r1", is(""))
	eventually("ext-b's address", all, func(v any) bool { return v.([]task.Node)[1].Address == "10.0.0.3" })
	// The filtered view hears of the address before ext-a leaves (one
	// answer with both would be one notification).
	step(t, r, rec, "f", filtered, 4, "ext-b's address, filtered", is("ext-a,ext-b"))
	if _, err := c.Client.Catalog().Deregister(&api.CatalogDeregistration{Node: "ext-a"}, nil); err != nil {
		t.Fatal(err)
	}
	step(t, r, rec, "f", filtered, 5, "ext-a removed", is("ext-b"))
	step(t, r, rec, "rack", rack, 3, "rack view untouched", is(""))
}

func intentionPairs(v any) string {
	var out []string
	for _, in := range v.([]task.Intention) {
		out = append(out, in.SourceName+">"+in.DestinationName+":"+in.Action)
	}
	return strings.Join(out, ",")
}

func TestRealServiceIntentions(t *testing.T) {
	c, r, rec := realConsul(t)
	q := ServiceIntentions(IntentionsOptions{})
	r.Subscribe("i", q)
	is := func(want string) func(v any) bool { return func(v any) bool { return intentionPairs(v) == want } }
	step(t, r, rec, "i", q, 1, "no intentions", is(""))

	set := func(dest string, sources ...*api.SourceIntention) {
		t.Helper()
		e := &api.ServiceIntentionsConfigEntry{Kind: api.ServiceIntentions, Name: dest, Sources: sources,
			Meta: map[string]string{"owner": "team-" + dest}}
		if _, _, err := c.Client.ConfigEntries().Set(e, nil); err != nil {
			t.Fatal(err)
		}
	}
	set("api", &api.SourceIntention{Name: "web", Action: api.IntentionActionAllow})
	step(t, r, rec, "i", q, 2, "web -> api", is("web>api:allow"))
	set("api", &api.SourceIntention{Name: "web", Action: api.IntentionActionAllow},
		&api.SourceIntention{Name: "*", Action: api.IntentionActionDeny, Description: "others"})
	step(t, r, rec, "i", q, 3, "* -> api added", is("web>api:allow,*>api:deny"))
	set("db", &api.SourceIntention{Name: "api", Action: api.IntentionActionAllow})
	step(t, r, rec, "i", q, 4, "api -> db", is("web>api:allow,api>db:allow,*>api:deny"))

	v, _, _ := r.Get(q.Key())
	in := v.([]task.Intention)[2]
	if in.Description != "others" || in.Meta["owner"] != "team-api" || in.SourceType != "consul" || in.Precedence == 0 || in.Permissions != "[]" {
		t.Errorf("intention %+v", in)
	}
	if _, err := c.Client.ConfigEntries().Delete(api.ServiceIntentions, "api", nil); err != nil {
		t.Fatal(err)
	}
	step(t, r, rec, "i", q, 5, "api's intentions deleted", is("api>db:allow"))
}

// status = ["passing", "warning"] keeps instances whose worst check is a
// warning and drops critical ones; with consul.use_cache the same answers
// come through the agent's cache.
func TestRealHealthStatusChoice(t *testing.T) {
	for _, cached := range []bool{false, true} {
		name := "direct"
		if cached {
			name = "cached"
		}
		t.Run(name, func(t *testing.T) {
			if testing.Short() {
				t.Skip("real Consul test; skipped with -short")
			}
			c := testutil.StartConsul(t)
			client, err := consul.NewClient(config.Consul{Address: c.Addr, UseCache: cached})
			if err != nil {
				t.Fatal(err)
			}
			if client.UseCache != cached {
				t.Fatal("use_cache does not reach the client")
			}
			rec := newRecorder()
			r := NewRegistry(client, nil, rec.notify)
			runRegistry(t, r)
			def := HealthService("web", ServiceOptions{})
			pw := HealthService("web", ServiceOptions{Status: []string{"passing", "warning"}})
			crit := HealthService("web", ServiceOptions{Status: []string{"critical", "maintenance"}})
			r.Subscribe("def", def)
			r.Subscribe("pw", pw)
			r.Subscribe("crit", crit)
			ids := func(want string) func(v any) bool {
				return func(v any) bool {
					var out []string
					for _, s := range services(v) {
						out = append(out, s.ID+":"+s.Status)
					}
					return strings.Join(out, ",") == want
				}
			}
			// Each view's first (empty) answer comes before the instances:
			// one that came after them would have their value as its first
			// and only notification.
			step(t, r, rec, "def", def, 1, "empty (passing)", ids(""))
			step(t, r, rec, "pw", pw, 1, "empty (passing+warning)", ids(""))
			step(t, r, rec, "crit", crit, 1, "empty (critical+maintenance)", ids(""))
			c.RegisterService(t, &api.AgentServiceRegistration{ID: "web-1", Name: "web"}, api.HealthPassing)
			c.RegisterService(t, &api.AgentServiceRegistration{ID: "web-2", Name: "web"}, api.HealthWarning)
			step(t, r, rec, "def", def, 2, "passing only by default", ids("web-1:passing"))
			testutil.Eventually(t, waitLong, "both in passing+warning", func() bool {
				v, _, ok := r.Get(pw.Key())
				return ok && ids("web-1:passing,web-2:warning")(v)
			})
			c.SetCheck(t, "web-2", api.HealthCritical, "down")
			testutil.Eventually(t, waitLong, "web-2 critical", func() bool {
				v, _, ok := r.Get(pw.Key())
				w, _, ok2 := r.Get(crit.Key())
				return ok && ok2 && ids("web-1:passing")(v) && ids("web-2:critical")(w)
			})
			if err := c.Client.Agent().EnableServiceMaintenance("web-1", "upgrade"); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, waitLong, "web-1 in maintenance", func() bool {
				v, _, ok := r.Get(crit.Key())
				d, _, ok2 := r.Get(def.Key())
				return ok && ok2 && ids("web-1:maintenance,web-2:critical")(v) && ids("")(d)
			})
		})
	}
}

// A services query with peer reads the instances a peered cluster
// exports: two dev agents peered through the peering API.
func TestRealPeerServices(t *testing.T) {
	if testing.Short() {
		t.Skip("real Consul test; skipped with -short")
	}
	east := testutil.StartConsulWith(t, testutil.ConsulOptions{Peering: true, Node: "east-1"})
	west := testutil.StartConsulWith(t, testutil.ConsulOptions{Peering: true, Node: "west-1"})
	testutil.Peer(t, east, west, "east", "west")
	east.RegisterService(t, &api.AgentServiceRegistration{ID: "web-e1", Name: "web", Port: 80}, api.HealthPassing)
	west.RegisterService(t, &api.AgentServiceRegistration{ID: "web-w1", Name: "web", Port: 81}, api.HealthPassing)
	east.Export(t, "west", "web")
	// The agent syncs its registrations to the catalog in the background:
	// the local view's first answer must already have web-w1.
	testutil.Eventually(t, waitLong, "web-w1 in west's catalog", func() bool {
		s, _, err := west.Client.Health().Service("web", "", true, nil)
		return err == nil && len(s) == 1
	})

	for _, cached := range []bool{false, true} {
		client, err := consul.NewClient(config.Consul{Address: west.Addr, UseCache: cached})
		if err != nil {
			t.Fatal(err)
		}
		rec := newRecorder()
		r := NewRegistry(client, nil, rec.notify)
		stop := runRegistry(t, r)
		local := HealthService("web", ServiceOptions{})
		peer := HealthService("web", ServiceOptions{Peer: "east"})
		r.Subscribe("local", local)
		r.Subscribe("peer", peer)
		one := func(id, node string) func(v any) bool {
			return func(v any) bool { s := services(v); return len(s) == 1 && s[0].ID == id && s[0].Node == node }
		}
		step(t, r, rec, "local", local, 1, "the local instance", one("web-w1", "west-1"))
		before := map[bool]int{false: 1, true: 2}[cached] // the first round adds web-e2
		testutil.Eventually(t, waitLong, "the peer's instances", func() bool {
			v, _, ok := r.Get(peer.Key())
			return ok && len(services(v)) == before && services(v)[0].ID == "web-e1" && services(v)[0].Node == "east-1"
		})
		if !cached {
			east.RegisterService(t, &api.AgentServiceRegistration{ID: "web-e2", Name: "web", Port: 82}, api.HealthPassing)
		} else {
			if err := east.Client.Agent().ServiceDeregister("web-e2"); err != nil {
				t.Fatal(err)
			}
		}
		want := map[bool]int{false: 2, true: 1}[cached]
		testutil.Eventually(t, waitLong, "the peer's change", func() bool {
			v, _, ok := r.Get(peer.Key())
			return ok && len(services(v)) == want
		})
		if v, _, _ := r.Get(local.Key()); !one("web-w1", "west-1")(v) {
			t.Errorf("cached=%v: the local view changed: %+v", cached, v)
		}
		stop()
	}
}
