package watch

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"go.uber.org/goleak"

	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

const healthWeb = "/v1/health/service/web"

func entry(node, id string, checks ...*api.HealthCheck) *api.ServiceEntry {
	return &api.ServiceEntry{
		Node:    &api.Node{ID: "id-" + node, Node: node, Address: "10.0.0.1", Datacenter: "dc1"},
		Service: &api.AgentService{ID: id, Service: "web", Port: 80},
		Checks:  checks,
	}
}

func check(id, status, output string) *api.HealthCheck {
	return &api.HealthCheck{CheckID: id, Status: status, Output: output}
}

func verifyNoLeaks(t *testing.T) {
	// Registered first, so it runs after every other cleanup (server close,
	// registry stop). Goroutines of earlier tests are not this test's.
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

func TestViewIndexUnchangedAndEqualDataDoNotNotify(t *testing.T) {
	verifyNoLeaks(t)
	f := newFakeConsul(t)
	rec := newRecorder()
	r := fastRegistry(f.client(), nil, rec)
	q := HealthService("web", ServiceOptions{})
	r.Subscribe("t1", q)
	stop := runRegistry(t, r)

	a := []*api.ServiceEntry{entry("n1", "web-1", check("c", "passing", ""))}
	b := []*api.ServiceEntry{entry("n1", "web-2", check("c", "passing", ""))}

	f.reply(healthWeb, 10, a)
	rec.waitCount(t, 1)
	f.waitRequests(healthWeb, 2)

	// Same index, different body: not even looked at.
	f.reply(healthWeb, 10, b)
	f.waitRequests(healthWeb, 3)
	// New index, equal data: compared, equal, no notification.
	f.reply(healthWeb, 11, a)
	f.waitRequests(healthWeb, 4)
	if got := rec.count(); got != 1 {
		t.Fatalf("notifications after unchanged index / equal data = %d, want 1: %v", got, rec.all())
	}
	if _, idx, _ := r.Get(q.Key()); idx != 11 {
		t.Fatalf("stored index = %d, want 11", idx)
	}
	// A real change notifies.
	f.reply(healthWeb, 12, b)
	rec.waitCount(t, 2)
	reqs := f.waitRequests(healthWeb, 5)
	if got, want := indexes(reqs), []string{"", "10", "10", "11", "12"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("request indexes = %v, want %v", got, want)
	}
	if reqs[1].Get("wait") != "300000ms" {
		t.Fatalf("wait param = %q, want 5m", reqs[1].Get("wait"))
	}
	v, idx, ok := r.Get(q.Key())
	if !ok || idx != 12 || v.([]task.Service)[0].ID != "web-2" {
		t.Fatalf("Get = %v %d %v", v, idx, ok)
	}
	if got, want := rec.all(), []string{"t1 " + q.Key(), "t1 " + q.Key()}; !reflect.DeepEqual(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	stop()
}

func TestViewIndexBackwardsResetsAndZeroIsOne(t *testing.T) {
	verifyNoLeaks(t)
	f := newFakeConsul(t)
	rec := newRecorder()
	r := fastRegistry(f.client(), nil, rec)
	q := HealthService("web", ServiceOptions{})
	r.Subscribe("t1", q)
	runRegistry(t, r)

	a := []*api.ServiceEntry{entry("n1", "web-1")}
	b := []*api.ServiceEntry{entry("n1", "web-1"), entry("n2", "web-2")}

	f.reply(healthWeb, 100, a)
	rec.waitCount(t, 1)
	f.reply(healthWeb, 50, b) // backwards, and changed: compared as usual
	rec.waitCount(t, 2)
	f.reply(healthWeb, 50, b) // read from 0 again: equal, no notification
	f.reply(healthWeb, 0, b)  // index 0 is treated as 1 (backwards again)
	f.reply(healthWeb, 1, b)
	f.reply(healthWeb, 7, a)
	rec.waitCount(t, 3)
	reqs := f.waitRequests(healthWeb, 7)
	if got, want := indexes(reqs), []string{"", "100", "", "50", "", "1", "7"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("request indexes = %v, want %v", got, want)
	}
	if got := rec.count(); got != 3 {
		t.Fatalf("notifications = %d, want 3", got)
	}
}

func TestHealthCheckOutputChangeDoesNotNotify(t *testing.T) {
	verifyNoLeaks(t)
	f := newFakeConsul(t)
	rec := newRecorder()
	r := fastRegistry(f.client(), nil, rec)
	q := HealthService("web", ServiceOptions{})
	r.Subscribe("t1", q)
	runRegistry(t, r)

	f.reply(healthWeb, 5, []*api.ServiceEntry{entry("n1", "web-1", check("c", "passing", "HTTP 200 at 10:00:01"))})
	rec.waitCount(t, 1)
	f.reply(healthWeb, 6, []*api.ServiceEntry{entry("n1", "web-1", check("c", "passing", "HTTP 200 at 10:00:11"))})
	f.reply(healthWeb, 7, []*api.ServiceEntry{entry("n1", "web-1", check("c", "passing", "HTTP 200 at 10:00:21"))})
	f.waitRequests(healthWeb, 4)
	if got := rec.count(); got != 1 {
		t.Fatalf("check output change notified: %v", rec.all())
	}
	f.reply(healthWeb, 8, []*api.ServiceEntry{entry("n1", "web-1", check("c", "warning", "slow"))})
	rec.waitCount(t, 2)
}

func TestViewErrorsBackOffKeepValueAndRecover(t *testing.T) {
	verifyNoLeaks(t)
	f := newFakeConsul(t)
	rec := newRecorder()
	logs := &logSink{}
	r := fastRegistry(f.client(), slog.New(logs), rec)
	q := HealthService("web", ServiceOptions{})
	r.Subscribe("t1", q)
	runRegistry(t, r)

	a := []*api.ServiceEntry{entry("n1", "web-1")}
	b := []*api.ServiceEntry{entry("n1", "web-1"), entry("n2", "web-2")}
	f.reply(healthWeb, 5, a)
	rec.waitCount(t, 1)
	for range 3 {
		f.fail(healthWeb, 500)
	}
	f.waitRequests(healthWeb, 5) // 1 ok + 3 failures + the retry after them
	if v, idx, ok := r.Get(q.Key()); !ok || idx != 5 || len(v.([]task.Service)) != 1 {
		t.Fatalf("value not kept during errors: %v %d %v", v, idx, ok)
	}
	if st := r.Stats(); st.FetchErrors != 3 {
		t.Fatalf("stats = %+v, want 3 errors", st)
	}
	f.reply(healthWeb, 9, a) // back: equal data, no notification
	f.reply(healthWeb, 10, b)
	rec.waitCount(t, 2)
	reqs := f.waitRequests(healthWeb, 7)
	if got, want := indexes(reqs), []string{"", "5", "", "", "", "9", "10"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("request indexes = %v, want %v", got, want)
	}
	if got := rec.count(); got != 2 {
		t.Fatalf("notifications = %d, want 2", got)
	}
	var warns, recovered int
	for _, l := range logs.lines() {
		if strings.HasPrefix(l, "WARN consul query failed, retrying") && strings.Contains(l, "key="+q.Key()) {
			warns++
		}
		if strings.HasPrefix(l, "INFO consul query recovered") {
			recovered++
		}
	}
	if warns < 1 || warns > 3 || recovered != 1 {
		t.Fatalf("logs: warns=%d recovered=%d\n%s", warns, recovered, strings.Join(logs.lines(), "\n"))
	}
}

func TestViewErrorBeforeFirstValue(t *testing.T) {
	verifyNoLeaks(t)
	f := newFakeConsul(t)
	rec := newRecorder()
	r := fastRegistry(f.client(), nil, rec)
	q := HealthService("web", ServiceOptions{})
	r.Subscribe("t1", q)
	runRegistry(t, r)
	f.fail(healthWeb, 503)
	f.waitRequests(healthWeb, 2)
	if _, _, ok := r.Get(q.Key()); ok {
		t.Fatal("view ready after a failed first fetch")
	}
	f.reply(healthWeb, 3, []*api.ServiceEntry{})
	rec.waitCount(t, 1) // the first value notifies even when empty
	if v, _, ok := r.Get(q.Key()); !ok || v == nil || len(v.([]task.Service)) != 0 {
		t.Fatalf("Get = %#v %v", v, ok)
	}
}

func TestRunCancelStopsAllGoroutines(t *testing.T) {
	verifyNoLeaks(t)
	f := newFakeConsul(t)
	rec := newRecorder()
	r := fastRegistry(f.client(), nil, rec)
	for _, name := range []string{"a", "b", "c"} {
		r.Subscribe("t", HealthService(name, ServiceOptions{}))
	}
	r.Subscribe("t", KV("x", true, "", ""))
	stop := runRegistry(t, r)
	f.reply("/v1/health/service/a", 3, []*api.ServiceEntry{})
	f.waitRequests("/v1/health/service/a", 2) // now blocking with index 3
	f.waitRequests("/v1/health/service/b", 1)
	f.waitRequests("/v1/health/service/c", 1)
	f.waitRequests("/v1/kv/x", 1)
	if r.Views() != 4 {
		t.Fatalf("Views = %d", r.Views())
	}
	stop()
	f.waitCancelled("/v1/health/service/b", 1)
	f.waitCancelled("/v1/kv/x", 1)
	if err := r.Run(context.Background()); err == nil {
		t.Fatal("second Run succeeded")
	}
}

func TestSubscribeRefcountedAndIdempotent(t *testing.T) {
	verifyNoLeaks(t)
	f := newFakeConsul(t)
	rec := newRecorder()
	r := fastRegistry(f.client(), nil, rec)
	runRegistry(t, r)

	q1 := HealthService("web", ServiceOptions{})
	q1again := HealthService("web", ServiceOptions{})
	q2 := KV("cfg", false, "", "")
	r.Subscribe("a", q1)
	r.Subscribe("a", q1again) // idempotent
	r.Subscribe("b", q1)
	r.Subscribe("a", q2)
	if r.Views() != 2 {
		t.Fatalf("Views = %d, want 2", r.Views())
	}
	f.waitRequests(healthWeb, 1)
	f.reply(healthWeb, 4, []*api.ServiceEntry{})
	rec.waitCount(t, 2)
	f.waitRequests(healthWeb, 2)
	if got := len(f.requests(healthWeb)); got != 2 {
		t.Fatalf("one shared view expected, got %d requests", got)
	}
	r.Unsubscribe("a", q1.Key()) // b still there
	if r.Views() != 2 {
		t.Fatalf("Views after first unsubscribe = %d", r.Views())
	}
	f.reply(healthWeb, 5, []*api.ServiceEntry{entry("n", "web-1")})
	rec.waitCount(t, 3)
	f.waitRequests(healthWeb, 3)
	f.waitRequests("/v1/kv/cfg", 1)
	if got := rec.all()[2]; got != "b "+q1.Key() {
		t.Fatalf("unsubscribed subscriber notified: %v", rec.all())
	}
	r.Unsubscribe("b", q1.Key())
	if r.Views() != 1 {
		t.Fatalf("Views after last unsubscribe = %d", r.Views())
	}
	f.waitCancelled(healthWeb, 1) // the view's blocking read was cancelled
	if _, _, ok := r.Get(q1.Key()); ok {
		t.Fatal("Get ok for a stopped view")
	}
	r.UnsubscribeAll("a")
	if r.Views() != 0 {
		t.Fatalf("Views after UnsubscribeAll = %d", r.Views())
	}
	f.waitCancelled("/v1/kv/cfg", 1)
	r.Unsubscribe("nobody", "nothing") // harmless
	// A new subscription starts a fresh view from index 0.
	r.Subscribe("c", q1)
	reqs := f.waitRequests(healthWeb, 4)
	if reqs[3].Get("index") != "" {
		t.Fatalf("new view did not start at 0: %v", indexes(reqs))
	}
}

func TestLateSubscriberIsNotifiedOnce(t *testing.T) {
	verifyNoLeaks(t)
	f := newFakeConsul(t)
	rec := newRecorder()
	r := fastRegistry(f.client(), nil, rec)
	runRegistry(t, r)
	q := HealthService("web", ServiceOptions{})
	r.Subscribe("early", q)
	f.reply(healthWeb, 4, []*api.ServiceEntry{})
	rec.waitCount(t, 1)
	r.Subscribe("late", q)
	rec.waitCount(t, 2)
	r.Subscribe("late", q) // already subscribed: nothing
	f.reply(healthWeb, 5, []*api.ServiceEntry{entry("n", "web-1")})
	rec.waitCount(t, 4)
	f.waitRequests(healthWeb, 3)
	want := []string{"early " + q.Key(), "late " + q.Key(), "early " + q.Key(), "late " + q.Key()}
	if got := rec.all(); !reflect.DeepEqual(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	if st := r.Stats(); st.Notifications != 4 || st.Fetches < 3 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestViewsCreatedBeforeRunStartWithRun(t *testing.T) {
	verifyNoLeaks(t)
	f := newFakeConsul(t)
	rec := newRecorder()
	r := fastRegistry(f.client(), nil, rec)
	q := KV("a/b", false, "", "")
	r.Subscribe("t", q)
	if r.Views() != 1 {
		t.Fatal("view not registered before Run")
	}
	if got := len(f.requests("/v1/kv/a/b")); got != 0 {
		t.Fatalf("fetched before Run: %d", got)
	}
	runRegistry(t, r)
	f.reply("/v1/kv/a/b", 2, []*api.KVPair{{Key: "a/b", Value: []byte("v")}})
	rec.waitCount(t, 1)
}

func TestUnchangedIndexAnsweredAtOnceDoesNotSpin(t *testing.T) {
	verifyNoLeaks(t)
	f := newFakeConsul(t)
	rec := newRecorder()
	r := NewRegistry(f.client(), nil, rec.notify)
	r.backoffBase = 20 * time.Millisecond
	r.backoffCap = 40 * time.Millisecond
	q := HealthService("web", ServiceOptions{})
	r.Subscribe("t", q)
	runRegistry(t, r)
	f.reply(healthWeb, 4, []*api.ServiceEntry{})
	rec.waitCount(t, 1)
	f.waitRequests(healthWeb, 2)
	start := time.Now()
	for range 10 {
		f.reply(healthWeb, 4, []*api.ServiceEntry{}) // "no change", instantly
	}
	f.waitRequests(healthWeb, 12)
	// Ten paced retries, uniform in [0, 20ms] then [0, 40ms]: about 190ms
	// expected; without pacing it takes microseconds. 20ms leaves a wide
	// margin for jitter.
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("unchanged instant answers not paced: 10 in %s", d)
	}
	if rec.count() != 1 {
		t.Fatalf("notifications = %d", rec.count())
	}
}

// Live: before Run too; a view whose reads keep failing past the dead-watch
// bound makes the registry not live, naming it; a success heals it; a
// refused query is reported as such (RefusedError).
func TestLiveness(t *testing.T) {
	f := newFakeConsul(t)
	rec := newRecorder()
	r := fastRegistry(f.client(), nil, rec)
	r.deadAfter = 30 * time.Millisecond
	if err := r.Live(); err != nil {
		t.Fatalf("not live before Run: %v", err)
	}
	r.Subscribe("t", HealthService("web", ServiceOptions{}))
	runRegistry(t, r)
	f.reply(healthWeb, 2, []*api.ServiceEntry{})
	rec.waitCount(t, 1)
	if err := r.Live(); err != nil {
		t.Fatalf("live after a good read: %v", err)
	}
	start := time.Now()
	for time.Since(start) < 40*time.Millisecond || r.Live() == nil {
		f.fail(healthWeb, 503) // keeps failing
		if time.Since(start) > testutil.Scale(10*time.Second) {
			t.Fatal("never reported dead")
		}
	}
	if err := r.Live(); err == nil || !strings.Contains(err.Error(), "health/service/web") {
		t.Fatalf("Live = %v", err)
	}
	if r.RefusedError(HealthService("web", ServiceOptions{}).Key()) != nil {
		t.Fatal("a 503 is not a refusal")
	}
	f.fail(healthWeb, 400)
	testutil.WaitFor(t, "the refusal", func() bool { return r.RefusedError(HealthService("web", ServiceOptions{}).Key()) != nil })
	f.reply(healthWeb, 3, []*api.ServiceEntry{{Service: &api.AgentService{ID: "w1", Service: "web"}, Node: &api.Node{Node: "n"}}})
	testutil.WaitFor(t, "the condition", func() bool {
		return r.Live() == nil && r.RefusedError(HealthService("web", ServiceOptions{}).Key()) == nil
	})
}

// Answered holds once the registry runs and every view has had a first
// answer, a value or a failed read (the daemon's readiness for systemd).
func TestAnswered(t *testing.T) {
	f := newFakeConsul(t)
	rec := newRecorder()
	r := fastRegistry(f.client(), nil, rec)
	r.Subscribe("t", HealthService("web", ServiceOptions{}))
	r.Subscribe("t", HealthService("db", ServiceOptions{}))
	if r.Answered() {
		t.Fatal("answered before Run")
	}
	runRegistry(t, r)
	f.waitRequests(healthWeb, 1)
	if r.Answered() {
		t.Fatal("answered before Consul replied")
	}
	f.reply(healthWeb, 2, []*api.ServiceEntry{})
	rec.waitCount(t, 1)
	if r.Answered() {
		t.Fatal("answered with the db view still waiting")
	}
	f.fail("/v1/health/service/db", 503)
	testutil.WaitFor(t, "every view answered", r.Answered)
}

// A view created by a Subscribe call and answered before that call ends
// notifies its subscriber once: the late notification for joining a ready
// view is only for views that had their answer before.
func TestSubscribeToNewViewNotifiesOnce(t *testing.T) {
	verifyNoLeaks(t)
	f := newFakeConsul(t)
	rec := newRecorder()
	r := fastRegistry(f.client(), nil, rec)
	stop := runRegistry(t, r)
	// The view's first answer is stored before Subscribe looks whether
	// the view is ready (a preempted Subscribe, as under load).
	testHookStarted = func(v *view) {
		testutil.Eventually(t, time.Second, "the first answer", func() bool {
			v.mu.RLock()
			defer v.mu.RUnlock()
			return v.ready
		})
	}
	t.Cleanup(func() { testHookStarted = nil })
	const n = 20
	for i := range n {
		name := fmt.Sprintf("svc%d", i)
		path := "/v1/health/service/" + name
		f.reply(path, 10, []*api.ServiceEntry{}) // answered at once
		r.Subscribe("t", HealthService(name, ServiceOptions{}))
		f.waitRequests(path, 2) // the first answer handled
	}
	stop() // late notifications run on the registry's wait group
	seen := map[string]int{}
	for _, e := range rec.all() {
		seen[e]++
	}
	for e, k := range seen {
		if k != 1 {
			t.Errorf("%d notifications for %s, want 1", k, e)
		}
	}
	if len(seen) != n {
		t.Errorf("%d subscriptions notified, want %d", len(seen), n)
	}
}

// TestRefreshReadsStaleViewsAtOnce: Refresh reads a view whose latest
// answer is older than the index asked for at once (a non-blocking query),
// stores and announces a changed value, leaves views that are new enough
// alone, and an older answer of the view's own blocking query, arriving
// afterwards, does not replace the newer value.
func TestRefreshReadsStaleViewsAtOnce(t *testing.T) {
	verifyNoLeaks(t)
	f := newFakeConsul(t)
	rec := newRecorder()
	r := fastRegistry(f.client(), nil, rec)
	q := HealthService("web", ServiceOptions{})
	r.Subscribe("t1", q)
	stop := runRegistry(t, r)
	defer stop()

	a := []*api.ServiceEntry{entry("n1", "web-1", check("c", "passing", ""))}
	b := []*api.ServiceEntry{entry("n1", "web-1", check("c", "passing", "")), entry("n1", "web-2", check("c", "passing", ""))}
	f.reply(healthWeb, 10, a)
	rec.waitCount(t, 1)
	f.waitRequests(healthWeb, 2) // the blocking query from index 10 waits
	f.routeNow(healthWeb)

	// Index 12 is newer than the view's 10: read again at once.
	done := make(chan int, 1)
	go func() { done <- r.Refresh(context.Background(), []string{q.Key(), "no/such/view"}, 12) }()
	reqs := f.waitRequests(healthWeb, 3)
	if reqs[2].Has("index") {
		t.Fatalf("the refresh read blocks: %v", reqs[2])
	}
	f.replyNow(healthWeb, 12, b)
	if n := <-done; n != 1 {
		t.Fatalf("Refresh read %d views again, want 1", n)
	}
	rec.waitCount(t, 2)
	if v, idx, ok := r.Get(q.Key()); !ok || idx != 12 || len(v.([]task.Service)) != 2 {
		t.Fatalf("after Refresh: Get = %v %d %v", v, idx, ok)
	}
	// New enough: nothing is read.
	if n := r.Refresh(context.Background(), []string{q.Key()}, 12); n != 0 {
		t.Fatalf("Refresh of a view at the index read %d views", n)
	}
	if got := len(f.requests(healthWeb)); got != 3 {
		t.Fatalf("requests = %d, want 3", got)
	}

	// The view's own query (from 10) now answers with index 11, older
	// than what Refresh stored: kept, nobody told.
	f.reply(healthWeb, 11, a)
	reqs = f.waitRequests(healthWeb, 4)
	if reqs[3].Get("index") != "11" {
		t.Fatalf("next blocking query from index %q, want 11", reqs[3].Get("index"))
	}
	f.reply(healthWeb, 12, b) // it answers at once: Consul is past 11
	reqs = f.waitRequests(healthWeb, 5)
	if reqs[4].Get("index") != "12" {
		t.Fatalf("then from index %q, want 12", reqs[4].Get("index"))
	}
	if v, idx, _ := r.Get(q.Key()); idx != 12 || len(v.([]task.Service)) != 2 {
		t.Fatalf("an older answer replaced the refreshed value: %v %d", v, idx)
	}
	if got := rec.count(); got != 2 {
		t.Fatalf("notifications = %d, want 2: %v", got, rec.all())
	}
}
