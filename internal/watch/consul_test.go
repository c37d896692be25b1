package watch

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/consul"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// Tests against a real `consul agent -dev`. They wait on conditions, never
// on time.

const waitLong = 15 * time.Second

func realConsul(t *testing.T) (*testutil.Consul, *Registry, *recorder) {
	t.Helper()
	if testing.Short() {
		t.Skip("real Consul test; skipped with -short")
	}
	c := testutil.StartConsul(t)
	client, err := consul.NewClient(config.Consul{Address: c.Addr})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	r := NewRegistry(client, nil, rec.notify)
	runRegistry(t, r)
	return c, r, rec
}

// notifiedFor counts the notifications of one subscriber.
func (r *recorder) notifiedFor(sub string, q Query) int {
	n := 0
	for _, e := range r.all() {
		if e == sub+" "+q.Key() {
			n++
		}
	}
	return n
}

// step waits until sub has had exactly n notifications for q and the view's
// value satisfies ok; more notifications than n fail the test.
func step(t *testing.T, r *Registry, rec *recorder, sub string, q Query, n int, what string, ok func(v any) bool) {
	t.Helper()
	testutil.Eventually(t, waitLong, what, func() bool {
		if got := rec.notifiedFor(sub, q); got > n {
			t.Fatalf("%s: %d notifications for %s, want %d: %v", what, got, sub, n, rec.all())
		}
		v, _, ready := r.Get(q.Key())
		return ready && rec.notifiedFor(sub, q) == n && ok(v)
	})
}

func services(v any) []task.Service { return v.([]task.Service) }

func TestRealHealthServiceRegisterFlipDeregister(t *testing.T) {
	c, r, rec := realConsul(t)
	passing := HealthService("web", ServiceOptions{})
	all := HealthService("web", ServiceOptions{Filter: `"critical" in Checks.Status or "passing" in Checks.Status`})
	dc1 := HealthService("web", ServiceOptions{Datacenter: "dc1"})
	r.Subscribe("pass", passing)
	r.Subscribe("all", all)
	r.Subscribe("dc1", dc1)

	step(t, r, rec, "pass", passing, 1, "first (empty) value", func(v any) bool { return len(services(v)) == 0 })
	step(t, r, rec, "all", all, 1, "first (empty) value, all", func(v any) bool { return len(services(v)) == 0 })
	step(t, r, rec, "dc1", dc1, 1, "first (empty) value, dc=dc1", func(v any) bool { return len(services(v)) == 0 })

	c.RegisterService(t, &api.AgentServiceRegistration{ID: "web-1", Name: "web", Port: 8080,
		Tags: []string{"b", "a"}, Meta: map[string]string{"v": "1"}}, api.HealthPassing)
	want := task.Service{ID: "web-1", Name: "web", Address: "127.0.0.1", Port: 8080,
		Meta: map[string]string{"v": "1"}, Tags: []string{"a", "b"}, Status: "passing",
		Node: "node-1", NodeAddress: "127.0.0.1", NodeDatacenter: "dc1"}
	match := func(status string) func(v any) bool {
		return func(v any) bool {
			s := services(v)
			if len(s) != 1 {
				return false
			}
			got := s[0]
			if got.NodeID == "" || got.NodeTaggedAddresses == nil || got.NodeMeta == nil || got.Namespace != "" {
				t.Fatalf("node fields: %+v", got)
			}
			got.NodeID, got.NodeTaggedAddresses, got.NodeMeta = "", nil, nil
			w := want
			w.Status = status
			return reflect.DeepEqual(got, w)
		}
	}
	step(t, r, rec, "pass", passing, 2, "registered", match("passing"))
	step(t, r, rec, "all", all, 2, "registered, all", match("passing"))
	step(t, r, rec, "dc1", dc1, 2, "registered, dc=dc1", match("passing"))
	if k := services(mustGet(t, r, passing))[0].Key(); k != "web-1.node-1.dc1" {
		t.Fatalf("service key %q", k)
	}

	c.SetCheck(t, "web-1", api.HealthCritical, "down")
	step(t, r, rec, "pass", passing, 3, "critical: gone from passing-only", func(v any) bool { return len(services(v)) == 0 })
	step(t, r, rec, "all", all, 3, "critical: status in filtered view", match("critical"))
	step(t, r, rec, "dc1", dc1, 3, "critical: gone, dc=dc1", func(v any) bool { return len(services(v)) == 0 })

	c.SetCheck(t, "web-1", api.HealthPassing, "up")
	step(t, r, rec, "pass", passing, 4, "passing again", match("passing"))
	step(t, r, rec, "all", all, 4, "passing again, all", match("passing"))
	step(t, r, rec, "dc1", dc1, 4, "passing again, dc=dc1", match("passing"))

	if err := c.Client.Agent().ServiceDeregister("web-1"); err != nil {
		t.Fatal(err)
	}
	step(t, r, rec, "pass", passing, 5, "deregistered", func(v any) bool { return len(services(v)) == 0 })
	step(t, r, rec, "all", all, 5, "deregistered, all", func(v any) bool { return len(services(v)) == 0 })
	step(t, r, rec, "dc1", dc1, 5, "deregistered, dc=dc1", func(v any) bool { return len(services(v)) == 0 })
	if r.Views() != 3 {
		t.Fatalf("Views = %d", r.Views())
	}
}

func mustGet(t *testing.T, r *Registry, q Query) any {
	t.Helper()
	v, _, ok := r.Get(q.Key())
	if !ok {
		t.Fatalf("%s not ready", q.Key())
	}
	return v
}

// The agent delays syncing output-only check changes (check_update_interval),
// so this writes the catalog directly: the index moves at once and only the
// output differs.
func TestRealCheckOutputOnlyChangeDoesNotNotify(t *testing.T) {
	c, r, rec := realConsul(t)
	q := HealthService("ext", ServiceOptions{})
	r.Subscribe("t", q)
	step(t, r, rec, "t", q, 1, "first value", func(v any) bool { return len(services(v)) == 0 })

	port := 9000
	register := func(status, output string) uint64 {
		t.Helper()
		_, err := c.Client.Catalog().Register(&api.CatalogRegistration{
			Node: "ext-node", Address: "10.1.1.1", Datacenter: "dc1",
			Service: &api.AgentService{ID: "ext-1", Service: "ext", Port: port},
			Check: &api.AgentCheck{Node: "ext-node", CheckID: "ext-check", Name: "ext", Status: status,
				Output: output, ServiceID: "ext-1"},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, meta, err := c.Client.Health().Service("ext", "", false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return meta.LastIndex
	}
	register(api.HealthPassing, "HTTP 200 at 10:00:01")
	step(t, r, rec, "t", q, 2, "registered", func(v any) bool {
		s := services(v)
		return len(s) == 1 && s[0].Address == "10.1.1.1" && s[0].Status == "passing"
	})
	for i := range 3 {
		idx := register(api.HealthPassing, fmt.Sprintf("HTTP 200 at 10:00:%02d", 11+10*i))
		testutil.Eventually(t, waitLong, "view sees the output-only write", func() bool {
			_, got, _ := r.Get(q.Key())
			return got >= idx
		})
	}
	// A real change still notifies, and nothing else arrived before it.
	port = 9001
	register(api.HealthPassing, "HTTP 200 at 10:01:00")
	step(t, r, rec, "t", q, 3, "port change", func(v any) bool {
		s := services(v)
		return len(s) == 1 && s[0].Port == 9001
	})
	// Critical leaves the passing-only view.
	register(api.HealthCritical, "HTTP 500")
	step(t, r, rec, "t", q, 4, "critical", func(v any) bool { return len(services(v)) == 0 })
}

func TestRealKV(t *testing.T) {
	c, r, rec := realConsul(t)
	kv := c.Client.KV()
	put := func(k, v string) {
		t.Helper()
		if _, err := kv.Put(&api.KVPair{Key: k, Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	del := func(k string) {
		t.Helper()
		if _, err := kv.Delete(k, nil); err != nil {
			t.Fatal(err)
		}
	}
	single := KV("app/color", false, "", "")
	prefix := KV("app/", true, "", "")
	r.Subscribe("s", single)
	r.Subscribe("p", prefix)
	is := func(want map[string]string) func(v any) bool {
		return func(v any) bool { return reflect.DeepEqual(v, want) }
	}
	step(t, r, rec, "s", single, 1, "missing key", is(map[string]string{}))
	step(t, r, rec, "p", prefix, 1, "empty prefix", is(map[string]string{}))

	put("app/color", "red")
	step(t, r, rec, "s", single, 2, "created", is(map[string]string{"app/color": "red"}))
	step(t, r, rec, "p", prefix, 2, "created under prefix", is(map[string]string{"app/color": "red"}))

	put("app/size", "L\xff") // raw bytes pass through
	step(t, r, rec, "p", prefix, 3, "second key", is(map[string]string{"app/color": "red", "app/size": "L\xff"}))

	put("app/color", "red") // same value, new ModifyIndex
	put("other/key", "x")   // outside both
	put("app/color", "blue")
	step(t, r, rec, "s", single, 3, "changed", is(map[string]string{"app/color": "blue"}))
	step(t, r, rec, "p", prefix, 4, "changed under prefix", is(map[string]string{"app/color": "blue", "app/size": "L\xff"}))

	del("app/color")
	step(t, r, rec, "s", single, 4, "deleted", is(map[string]string{}))
	step(t, r, rec, "p", prefix, 5, "deleted under prefix", is(map[string]string{"app/size": "L\xff"}))
	del("app/size")
	step(t, r, rec, "p", prefix, 6, "prefix empty again", is(map[string]string{}))
	step(t, r, rec, "s", single, 4, "single untouched", is(map[string]string{}))
}

func TestRealCatalogServices(t *testing.T) {
	c, r, rec := realConsul(t)
	q := CatalogServices(CatalogOptions{})
	qMeta := CatalogServices(CatalogOptions{NodeMeta: map[string]string{"env": "x"}, Datacenter: "dc1"})
	r.Subscribe("t", q)
	r.Subscribe("m", qMeta)
	is := func(want map[string][]string) func(v any) bool {
		return func(v any) bool { return reflect.DeepEqual(v, want) }
	}
	step(t, r, rec, "t", q, 1, "first value", is(map[string][]string{"consul": {}}))
	step(t, r, rec, "m", qMeta, 1, "first value, node-meta", is(map[string][]string{}))

	c.RegisterService(t, &api.AgentServiceRegistration{ID: "web-1", Name: "web", Tags: []string{"b", "a"}}, "")
	step(t, r, rec, "t", q, 2, "web added", is(map[string][]string{"consul": {}, "web": {"a", "b"}}))
	c.RegisterService(t, &api.AgentServiceRegistration{ID: "web-2", Name: "web", Tags: []string{"c", "a"}}, "")
	step(t, r, rec, "t", q, 3, "tags merged", is(map[string][]string{"consul": {}, "web": {"a", "b", "c"}}))

	if _, err := c.Client.Catalog().Register(&api.CatalogRegistration{
		Node: "meta-node", Address: "10.2.2.2", NodeMeta: map[string]string{"env": "x"},
		Service: &api.AgentService{ID: "db-1", Service: "db"},
	}, nil); err != nil {
		t.Fatal(err)
	}
	step(t, r, rec, "m", qMeta, 2, "node-meta view", is(map[string][]string{"db": {}}))
	step(t, r, rec, "t", q, 4, "db added", is(map[string][]string{"consul": {}, "web": {"a", "b", "c"}, "db": {}}))

	// One at a time: the agent syncs its registrations to the catalog in
	// the background, and may sync two deregistrations at once, so that
	// the view never sees web with web-2's tags alone.
	if err := c.Client.Agent().ServiceDeregister("web-1"); err != nil {
		t.Fatal(err)
	}
	step(t, r, rec, "t", q, 5, "web-1 removed", is(map[string][]string{"consul": {}, "web": {"a", "c"}, "db": {}}))
	if err := c.Client.Agent().ServiceDeregister("web-2"); err != nil {
		t.Fatal(err)
	}
	step(t, r, rec, "t", q, 6, "web removed", is(map[string][]string{"consul": {}, "db": {}}))
	step(t, r, rec, "m", qMeta, 2, "node-meta view untouched", is(map[string][]string{"db": {}}))
}

func TestRealUnknownDatacenterRetriesWithoutExiting(t *testing.T) {
	_, r, rec := realConsul(t)
	q := HealthService("web", ServiceOptions{Datacenter: "nowhere"})
	ok := HealthService("web", ServiceOptions{})
	r.Subscribe("t", q)
	r.Subscribe("t", ok)
	testutil.Eventually(t, waitLong, "errors for the unknown datacenter", func() bool { return r.Stats().FetchErrors >= 2 })
	if _, _, ready := r.Get(q.Key()); ready {
		t.Fatal("view for an unknown datacenter is ready")
	}
	step(t, r, rec, "t", ok, 1, "other views unaffected", func(v any) bool { return len(services(v)) == 0 })
	if r.Views() != 2 {
		t.Fatalf("Views = %d", r.Views())
	}
}

func TestRealConsulRestartMidWatch(t *testing.T) {
	c, r, rec := realConsul(t)
	q := HealthService("web", ServiceOptions{})
	kq := KV("app/color", false, "", "")
	r.Subscribe("t", q)
	r.Subscribe("t", kq)
	// Push the raft index up so the fresh agent's indexes are smaller.
	for i := range 40 {
		if _, err := c.Client.KV().Put(&api.KVPair{Key: fmt.Sprintf("filler/%d", i), Value: []byte("x")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	c.RegisterService(t, &api.AgentServiceRegistration{ID: "web-1", Name: "web", Port: 80}, api.HealthPassing)
	if _, err := c.Client.KV().Put(&api.KVPair{Key: "app/color", Value: []byte("red")}, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLong, "values before restart", func() bool {
		v, _, ok := r.Get(q.Key())
		kv, _, kok := r.Get(kq.Key())
		return ok && kok && len(services(v)) == 1 && reflect.DeepEqual(kv, map[string]string{"app/color": "red"})
	})
	_, before, _ := r.Get(q.Key())

	c.Restart() // a dev agent comes back empty, with small indexes

	// The views notice the outage and catch up with the empty catalog.
	testutil.Eventually(t, 30*time.Second, "views reflect the empty catalog", func() bool {
		v, _, _ := r.Get(q.Key())
		kv, _, _ := r.Get(kq.Key())
		return len(services(v)) == 0 && reflect.DeepEqual(kv, map[string]string{})
	})
	if r.Stats().FetchErrors == 0 {
		t.Log("note: no fetch error seen across the restart")
	}
	c.RegisterService(t, &api.AgentServiceRegistration{ID: "web-1", Name: "web", Port: 81}, api.HealthPassing)
	if _, err := c.Client.KV().Put(&api.KVPair{Key: "app/color", Value: []byte("green")}, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "views reflect the new catalog", func() bool {
		v, _, _ := r.Get(q.Key())
		kv, _, _ := r.Get(kq.Key())
		s := services(v)
		return len(s) == 1 && s[0].Port == 81 && reflect.DeepEqual(kv, map[string]string{"app/color": "green"})
	})
	if _, after, _ := r.Get(q.Key()); after >= before {
		t.Fatalf("index after restart %d not below %d: the scenario did not reset indexes", after, before)
	}
	// Register, restart-empty, re-register: at least three value changes.
	if n := rec.notifiedFor("t", q); n < 3 {
		t.Fatalf("notifications for the service view = %d, want >= 3", n)
	}
	if r.Views() != 2 {
		t.Fatalf("Views = %d", r.Views())
	}
}

// Latency from a KV write (acknowledged by Consul) to the notification.
func TestRealNotifyLatency(t *testing.T) {
	c, r, _ := realConsul(t)
	got := make(chan time.Time, 100)
	r.notify = func(string, string) { got <- time.Now() }
	q := KV("lat", false, "", "")
	r.Subscribe("t", q)
	<-got // first value
	var lat []time.Duration
	for i := range 30 {
		if _, err := c.Client.KV().Put(&api.KVPair{Key: "lat", Value: []byte(fmt.Sprint(i))}, nil); err != nil {
			t.Fatal(err)
		}
		done := time.Now()
		select {
		case at := <-got:
			lat = append(lat, at.Sub(done))
		case <-time.After(testutil.Scale(waitLong)):
			t.Fatalf("no notification for write %d", i)
		}
	}
	slices.Sort(lat)
	t.Logf("write-acknowledged -> notify: p50 %s, p90 %s, max %s", lat[len(lat)/2], lat[len(lat)*9/10], lat[len(lat)-1])
	// A polling watch would be seconds late (Consul's wait time); the
	// bound leaves a loaded machine's scheduling delays room.
	if lat[len(lat)/2] > testutil.Scale(500*time.Millisecond) {
		t.Fatalf("median notify latency %s", lat[len(lat)/2])
	}
}
