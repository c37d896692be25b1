package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/reconcile/reconciletest"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
	"github.com/ctsync/ctsync/internal/watch"
)

// fakeWatcher is the shared in-memory watcher.
type fakeWatcher = reconciletest.Watcher

func newFakeWatcher() *fakeWatcher { return reconciletest.NewWatcher() }

// fakeDriver records applies; gate, when set, holds each apply until a
// value is sent.
type fakeDriver struct {
	name    string
	rec     *recorder
	gate    chan struct{}
	failing atomic.Bool
	exports bool // the spec's ExportOutputs: Apply reports {"instances": n}
}

type recorder struct {
	mu        sync.Mutex
	applies   map[string][]task.Inputs
	running   map[string]int
	global    int
	maxGlobal int
	overlap   bool
	applied   chan string
}

func newRecorder() *recorder {
	return &recorder{applies: map[string][]task.Inputs{}, running: map[string]int{}, applied: make(chan string, 100)}
}

func (d *fakeDriver) Init(context.Context) error { return nil }
func (d *fakeDriver) Plan(_ context.Context, _ driver.Run, in *task.Inputs) (driver.Result, error) {
	return driver.Result{Output: "plan", Changes: true}, nil
}
func (d *fakeDriver) Forget(context.Context) error { return nil }
func (d *fakeDriver) Destroy(context.Context, driver.Run) (driver.Result, error) {
	return driver.Result{}, nil
}
func (d *fakeDriver) Apply(ctx context.Context, _ driver.Run, in *task.Inputs) (driver.Result, error) {
	r := d.rec
	r.mu.Lock()
	r.running[d.name]++
	if r.running[d.name] > 1 {
		r.overlap = true
	}
	r.global++
	r.maxGlobal = max(r.maxGlobal, r.global)
	r.mu.Unlock()
	if d.gate != nil {
		select {
		case <-d.gate:
		case <-ctx.Done():
		}
	}
	r.mu.Lock()
	r.running[d.name]--
	r.global--
	r.applies[d.name] = append(r.applies[d.name], *in)
	r.mu.Unlock()
	r.applied <- d.name
	if d.failing.Load() {
		return driver.Result{}, errors.New("boom")
	}
	res := driver.Result{Add: 1, Changes: true}
	if d.exports {
		res.Outputs = json.RawMessage(fmt.Sprintf(`{"instances":%d}`, len(in.Services)))
	}
	return res, nil
}

func (r *recorder) count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.applies[name])
}

func (r *recorder) last(name string) task.Inputs {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.applies[name]
	return a[len(a)-1]
}

func servicesTask(name string, services ...string) task.Spec {
	return task.Spec{Name: name, Module: "./m", Enabled: true,
		BufferPeriod: &task.BufferPeriod{},
		Condition: task.Condition{Services: &task.ServicesCondition{
			ServicesSelector: task.ServicesSelector{Names: services}, UseAsModuleInput: true}}}
}

func healthKey(name string) string {
	return watch.HealthService(name, watch.ServiceOptions{}).Key()
}

func inst(id, name string) task.Service {
	return task.Service{ID: id, Name: name, Node: "n1", NodeDatacenter: "dc1", Status: "passing"}
}

type harness struct {
	w      *fakeWatcher
	rec    *recorder
	ctrl   *Controller
	st     *store.Memory
	gates  map[string]chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	drv    map[string]*fakeDriver
}

// start runs a controller over the specs. Option funcs (any func(*Options)
// among the variadic arguments' first element) adjust Options.
func start(t *testing.T, maxParallel int, gated []string, args ...any) *harness {
	t.Helper()
	h := &harness{w: newFakeWatcher(), rec: newRecorder(), st: store.NewMemory(0),
		gates: map[string]chan struct{}{}, drv: map[string]*fakeDriver{}}
	for _, g := range gated {
		h.gates[g] = make(chan struct{})
	}
	opts := Options{
		Watcher: h.w, Store: h.st, MaxParallel: maxParallel, RetryBase: time.Millisecond,
		NewDriver: func(s task.Spec) (driver.Driver, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			d := &fakeDriver{name: s.Name, rec: h.rec, gate: h.gates[s.Name], exports: s.ExportOutputs}
			h.drv[s.Name] = d
			return d, nil
		},
	}
	var specs []task.Spec
	for _, a := range args {
		switch v := a.(type) {
		case task.Spec:
			specs = append(specs, v)
		case func(*Options):
			v(&opts)
		}
	}
	h.ctrl = New(opts, specs)
	h.w.Notify = h.ctrl.Notify
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan struct{})
	go func() { _ = h.ctrl.Run(ctx); close(h.done) }()
	t.Cleanup(func() {
		for _, g := range h.gates {
			close(g)
		}
		h.cancel()
		<-h.done
	})
	return h
}

func (h *harness) waitApplied(t *testing.T, name string) {
	t.Helper()
	select {
	case got := <-h.rec.applied:
		if got != name {
			t.Fatalf("applied %s, want %s", got, name)
		}
	case <-time.After(testutil.Scale(10 * time.Second)):
		t.Fatalf("no apply of %s", name)
	}
}

// noApply waits until the controller has settled (every notification
// handled, nothing queued, running or waiting on a timer) and checks that
// no apply happened: a positive signal that the change was considered,
// rather than a wait to see nothing happen. (The duration is ignored; kept
// so the call sites read as before.)
func (h *harness) noApply(t *testing.T) {
	t.Helper()
	testutil.WaitFor(t, "the controller to settle", h.ctrl.Settled)
	select {
	case got := <-h.rec.applied:
		t.Fatalf("unexpected apply of %s", got)
	default:
	}
}

func TestRunsWhenDataArrivesAndSkipsUnchangedInputs(t *testing.T) {
	h := start(t, 4, nil, servicesTask("a", "web"))
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h.waitApplied(t, "a")
	if got := h.rec.last("a").Services; len(got) != 1 || got["web-1.n1.dc1"].ID != "web-1" {
		t.Fatalf("inputs: %+v", got)
	}
	// Same value again (e.g. only a check's output changed upstream): no run.
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h.noApply(t)
	// A real change runs.
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web"), inst("web-2", "web")})
	h.waitApplied(t, "a")
	if n := len(h.rec.last("a").Services); n != 2 {
		t.Fatalf("want 2 services, got %d", n)
	}
	var evs []store.Event
	testutil.WaitFor(t, "two events", func() bool { evs = h.st.Events("a"); return len(evs) == 2 })
	if len(evs) != 2 || !evs[0].Success || evs[0].InputsHash == "" || evs[0].Plan == nil {
		t.Fatalf("events: %+v", evs)
	}
}

func TestChangeDuringRunIsAppliedAfterwards(t *testing.T) {
	h := start(t, 4, []string{"a"}, servicesTask("a", "web"))
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	// First apply is held by the gate; change the catalog twice meanwhile.
	waitRunning(t, h.rec, "a")
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web"), inst("web-2", "web")})
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web"), inst("web-2", "web"), inst("web-3", "web")})
	h.gates["a"] <- struct{}{} // finish run 1
	h.waitApplied(t, "a")
	h.gates["a"] <- struct{}{} // finish run 2 (the coalesced rerun)
	h.waitApplied(t, "a")
	if n := len(h.rec.last("a").Services); n != 3 {
		t.Fatalf("rerun saw %d services, want the latest 3", n)
	}
	h.noApply(t) // two changes coalesced into one rerun
	if h.rec.overlap {
		t.Fatal("a task ran twice at once")
	}
}

func waitRunning(t *testing.T, r *recorder, name string) {
	t.Helper()
	testutil.WaitFor(t, name+" to start", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.running[name] > 0
	})
}

func TestGlobalParallelismBound(t *testing.T) {
	names := []string{"t1", "t2", "t3", "t4", "t5"}
	var specs []any
	for _, n := range names {
		specs = append(specs, servicesTask(n, "web"))
	}
	h := start(t, 2, names, specs...)
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	testutil.WaitFor(t, "two tasks running at once", func() bool {
		h.rec.mu.Lock()
		defer h.rec.mu.Unlock()
		return h.rec.global == 2
	})
	for range names {
		// Release whichever tasks are running, one at a time.
		released := false
		for !released {
			for _, n := range names {
				select {
				case h.gates[n] <- struct{}{}:
					released = true
				default:
				}
				if released {
					break
				}
			}
		}
		<-h.rec.applied
	}
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	if h.rec.maxGlobal != 2 {
		t.Fatalf("max parallel runs = %d, want 2", h.rec.maxGlobal)
	}
}

func TestBufferPeriodCoalesces(t *testing.T) {
	s := servicesTask("a", "web")
	s.BufferPeriod = &task.BufferPeriod{Enabled: true, Min: task.Duration(150 * time.Millisecond), Max: task.Duration(time.Second)}
	h := start(t, 4, nil, s)
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h.waitApplied(t, "a") // the first run is not buffered
	begin := time.Now()
	for i := 2; i <= 5; i++ {
		var svcs []task.Service
		for j := 1; j <= i; j++ {
			svcs = append(svcs, inst("web-"+string(rune('0'+j)), "web"))
		}
		h.w.Set(healthKey("web"), svcs)
	}
	h.waitApplied(t, "a")
	if waited := time.Since(begin); waited < 150*time.Millisecond {
		t.Fatalf("buffered run started after %s, before min", waited)
	}
	if n := len(h.rec.last("a").Services); n != 5 {
		t.Fatalf("buffered run saw %d services, want 5", n)
	}
	h.noApply(t)
}

func TestRegexpFollowsCatalog(t *testing.T) {
	re := "^web"
	s := task.Spec{Name: "a", Module: "./m", Enabled: true, BufferPeriod: &task.BufferPeriod{},
		Condition: task.Condition{Services: &task.ServicesCondition{
			ServicesSelector: task.ServicesSelector{Regexp: &re}, UseAsModuleInput: true}}}
	h := start(t, 4, nil, s)
	catKey := watch.CatalogServices(watch.CatalogOptions{}).Key()
	h.w.Set(healthKey("web-a"), []task.Service{inst("a1", "web-a")})
	h.w.Set(catKey, map[string][]string{"web-a": {}, "db": {}})
	h.waitApplied(t, "a")
	testutil.WaitFor(t, "the regexp selection to subscribe to web-a", func() bool { return h.w.Subscribed(healthKey("web-a")) })
	if h.w.Subscribed(healthKey("db")) {
		t.Fatal("regexp ^web subscribed to db")
	}
	h.w.Set(healthKey("web-b"), []task.Service{inst("b1", "web-b")})
	h.w.Set(catKey, map[string][]string{"web-a": {}, "web-b": {}, "db": {}})
	h.waitApplied(t, "a")
	if n := len(h.rec.last("a").Services); n != 2 {
		t.Fatalf("want 2 services after web-b appeared, got %d", n)
	}
	h.w.Set(catKey, map[string][]string{"web-b": {}})
	h.waitApplied(t, "a")
	testutil.WaitFor(t, "web-a to be dropped after it left the catalog", func() bool { return !h.w.Subscribed(healthKey("web-a")) })
}

// With MaxRetries set, a failing run is retried that many times, then the
// task waits (dirty) for its desired state to change.
func TestFailedApplyRetriesThenWaits(t *testing.T) {
	h := start(t, 4, nil, servicesTask("a", "web"), func(o *Options) { o.MaxRetries = 2 })
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h.waitApplied(t, "a")
	h.mu.Lock()
	d := h.drv["a"]
	h.mu.Unlock()
	d.failing.Store(true)
	h.w.Set(healthKey("web"), []task.Service{inst("web-2", "web")})
	h.waitApplied(t, "a") // fails
	h.waitApplied(t, "a") // retry 1
	h.waitApplied(t, "a") // retry 2
	testutil.WaitFor(t, "four events", func() bool { return len(h.st.Events("a")) == 4 })
	idle(t, h, "a")
	if got := store.Status(h.st.Events("a")); got != "critical" || !h.st.Run("a").Dirty() {
		t.Fatalf("status = %s, dirty %v; want critical and dirty", got, h.st.Run("a").Dirty())
	}
}

func TestBuildInputsCatalogAndKV(t *testing.T) {
	s := task.Spec{Name: "a", Condition: task.Condition{CatalogServices: &task.CatalogServicesCondition{Regexp: "^w", UseAsModuleInput: true}},
		ModuleInput: task.ModuleInputs{ConsulKV: &task.ConsulKVSelector{Path: "k", Recurse: true}}}
	vals := map[string]any{
		watch.CatalogServices(watch.CatalogOptions{}).Key(): map[string][]string{"web": {"a"}, "db": {}},
		watch.KV("k", true, "", "").Key():                   map[string]string{"k/x": "1"},
	}
	get := func(k string) (any, bool) { v, ok := vals[k]; return v, ok }
	in, ready := BuildInputs(&s, get)
	if !ready || len(in.CatalogServices) != 1 || in.CatalogServices["web"][0] != "a" || in.ConsulKV["k/x"] != "1" || in.Services == nil {
		t.Fatalf("inputs %+v ready %v", in, ready)
	}
	a, _ := Fingerprint(&s, get, digestOf(get))
	b, _ := Fingerprint(&s, get, digestOf(get))
	if a == "" || a != b {
		t.Fatal("fingerprint not stable")
	}
}

func TestDriftDetectedAndRemediated(t *testing.T) {
	s := servicesTask("a", "web")
	s.DriftDetection = &task.DriftDetection{Interval: task.Duration(time.Second), Remediate: true}
	var mu sync.Mutex
	var hooked []store.Event
	h := start(t, 4, nil, func(o *Options) {
		o.OnEvent = func(ev store.Event) { mu.Lock(); hooked = append(hooked, ev); mu.Unlock() }
	}, s)
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h.waitApplied(t, "a")
	// The fake driver's plan always has changes: the drift check finds
	// drift and, with remediate, applies again.
	h.waitApplied(t, "a")
	has := func(match func(store.Event) bool) func() bool {
		return func() bool { return slices.ContainsFunc(h.st.Events("a"), match) }
	}
	testutil.WaitFor(t, "a drift event", has(func(ev store.Event) bool { return ev.Kind == store.KindDrift }))
	testutil.WaitFor(t, "the remediation run", has(func(ev store.Event) bool { return ev.Kind == store.KindApply && ev.Trigger == "drift" }))
	if got := store.Status(h.st.Events("a")); got != "successful" {
		t.Fatalf("status %s: a drift check must not count as a failed run", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hooked) < 3 {
		t.Fatalf("OnEvent saw %d events, want apply, drift, remediation", len(hooked))
	}
}

func TestStandbyRunsNothingUntilActive(t *testing.T) {
	h := start(t, 4, nil, func(o *Options) { o.Standby = true }, servicesTask("a", "web"), servicesTask("b", "web"))
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h.noApply(t)
	// What a previous leader left in the shared store: "a" applied these
	// inputs completely; "b" applied them too but died during a later run.
	for _, name := range []string{"a", "b"} {
		s := servicesTask(name, "web")
		want, ready, err := h.ctrl.obs.desired(context.Background(), &s)
		if !ready || err != nil {
			t.Fatalf("desired state of %s: ready=%v err=%v", name, ready, err)
		}
		_ = h.st.FinishRun(context.Background(), name, store.RunState{Applied: want.Fingerprint, Parts: want.Parts}, nil)
	}
	_ = h.st.StartRun(context.Background(), "b", "run-that-died")
	h.ctrl.SetActive(true)
	h.waitApplied(t, "b")
	h.noApply(t) // "a" is up to date: not run
	if got := h.rec.count("a"); got != 0 {
		t.Fatalf("a ran %d times although its inputs were applied", got)
	}
	if h.st.Run("b").InFlight != "" {
		t.Fatal("in-flight marker not cleared after the run")
	}
	h.ctrl.SetActive(false)
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web"), inst("web-2", "web")})
	h.noApply(t)
}

func TestScheduleTaskRunsAtStartOnceDataArrives(t *testing.T) {
	s := task.Spec{Name: "cron", Module: "./m", Enabled: true, BufferPeriod: &task.BufferPeriod{},
		Condition:   task.Condition{Schedule: &task.ScheduleCondition{Cron: "0 0 1 1 * 2099"}},
		ModuleInput: task.ModuleInputs{Services: &task.ServicesSelector{Names: []string{"web"}}}}
	h := start(t, 4, nil, s)
	h.noApply(t) // no data yet
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h.waitApplied(t, "cron")
	testutil.WaitFor(t, "the start-up run to be over", h.ctrl.Settled)
	// Later changes wait for the schedule.
	h.w.Set(healthKey("web"), []task.Service{inst("web-2", "web")})
	h.noApply(t)
}
