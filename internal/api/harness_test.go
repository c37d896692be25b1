package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/reconcile/reconciletest"
	"github.com/ctsync/ctsync/internal/testutil"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/watch"
)

// fakeWatcher is the shared in-memory watcher.
type fakeWatcher = reconciletest.Watcher

func newFakeWatcher() *fakeWatcher { return reconciletest.NewWatcher() }

// fakeDriver plans and applies instantly unless its task is gated or set to
// fail.
type fakeDriver struct {
	h    *harness
	name string
}

func (d *fakeDriver) Init(context.Context) error { return nil }

func (d *fakeDriver) Plan(_ context.Context, _ driver.Run, _ *task.Inputs) (driver.Result, error) {
	d.h.mu.Lock()
	noChanges := d.h.noChanges[d.name]
	d.h.mu.Unlock()
	if noChanges {
		return driver.Result{Output: "No changes. Your infrastructure matches the configuration."}, nil
	}
	return driver.Result{Output: "Plan: 1 to add, 0 to change, 0 to destroy.", Changes: true, Add: 1}, nil
}

func (d *fakeDriver) Apply(ctx context.Context, _ driver.Run, _ *task.Inputs) (driver.Result, error) {
	h := d.h
	h.mu.Lock()
	gate := h.gates[d.name]
	failing := h.failing[d.name]
	h.mu.Unlock()
	if gate != nil {
		h.started <- d.name
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
	h.applied <- d.name
	if failing {
		return driver.Result{}, errors.New("apply: Error: boom")
	}
	return driver.Result{Add: 1, Changes: true}, nil
}

func (d *fakeDriver) Forget(context.Context) error { return nil }
func (d *fakeDriver) Destroy(context.Context, driver.Run) (driver.Result, error) {
	d.h.destroyed <- d.name
	return driver.Result{Destroy: 1, Changes: true}, nil
}

// harness is a real reconcile.Controller with a fake watcher and driver,
// served by the API through httptest.
type harness struct {
	t    *testing.T
	w    *fakeWatcher
	st   *store.Memory
	ctrl *reconcile.Controller
	srv  *Server
	ts   *httptest.Server
	logs *syncBuffer

	mu        sync.Mutex
	gates     map[string]chan struct{}
	failing   map[string]bool
	noChanges map[string]bool
	applied   chan string
	started   chan string
	destroyed chan string
}

var globalBuffer = task.BufferPeriod{Enabled: true, Min: task.Duration(3 * time.Second), Max: task.Duration(12 * time.Second)}

type harnessOpt func(*Options)

func newHarness(t *testing.T, specs []task.Spec, opts ...harnessOpt) *harness {
	t.Helper()
	h := &harness{t: t, w: newFakeWatcher(), st: store.NewMemory(0), logs: &syncBuffer{},
		gates: map[string]chan struct{}{}, failing: map[string]bool{}, noChanges: map[string]bool{},
		applied: make(chan string, 1000), started: make(chan string, 100), destroyed: make(chan string, 100)}
	h.ctrl = reconcile.New(reconcile.Options{
		Watcher: h.w, Store: h.st, MaxParallel: 4, MaxRetries: -1,
		NewDriver: func(s task.Spec) (driver.Driver, error) { return &fakeDriver{h: h, name: s.Name}, nil },
	}, specs)
	h.w.Notify = h.ctrl.Notify
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = h.ctrl.Run(ctx); close(done) }()
	o := Options{Controller: h.ctrl, BufferPeriod: globalBuffer,
		Logger: slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	for _, f := range opts {
		f(&o)
	}
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	h.ts = httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		h.mu.Lock()
		for _, g := range h.gates {
			close(g)
		}
		h.gates = map[string]chan struct{}{}
		h.mu.Unlock()
		h.ts.Close()
		srv.stopBackground()
		cancel()
		<-done
	})
	return h
}

// gate makes the task's applies wait until release is called.
func (h *harness) gate(name string) (release func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := make(chan struct{})
	h.gates[name] = g
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			if h.gates[name] == g {
				delete(h.gates, name)
			}
			h.mu.Unlock()
			close(g)
		})
	}
}

func (h *harness) setFailing(name string, v bool) {
	h.mu.Lock()
	h.failing[name] = v
	h.mu.Unlock()
}

func (h *harness) setNoChanges(name string, v bool) {
	h.mu.Lock()
	h.noChanges[name] = v
	h.mu.Unlock()
}

func (h *harness) waitChan(ch chan string, want string) {
	h.t.Helper()
	select {
	case got := <-ch:
		if got != want {
			h.t.Fatalf("got %s, want %s", got, want)
		}
	case <-time.After(testutil.Scale(10 * time.Second)):
		h.t.Fatalf("timed out waiting for %s", want)
	}
}

// waitIdle waits until the task neither runs nor waits to run.
func (h *harness) waitIdle(name string) {
	h.t.Helper()
	// Settled as well: a watch notification still being handled can queue
	// the task again (to find nothing changed) right after its run.
	testutil.WaitFor(h.t, name+" idle", func() bool {
		st, err := h.ctrl.Task(name)
		return err == nil && !st.Active && h.ctrl.Settled()
	})
}

// response is a decoded API response.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decoding %s: %v", r.body, err)
	}
}

func (r response) errMsg(t *testing.T) string {
	t.Helper()
	var e ErrorResponse
	r.json(t, &e)
	if e.RequestID == "" || e.RequestID != r.header.Get("X-Request-Id") {
		t.Errorf("error request_id %q, header %q", e.RequestID, r.header.Get("X-Request-Id"))
	}
	return e.Error.Message
}

// do sends a request and checks the response against docs/api/openapi.yaml.
func (h *harness) do(method, path, body string) response {
	h.t.Helper()
	return doRequest(h.t, h.ts.Client(), h.ts.URL, method, path, body)
}

func doRequest(t *testing.T, c *http.Client, base, method, path, body string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := response{status: resp.StatusCode, header: resp.Header, body: b}
	checkSpec(t, req, r)
	return r
}

// expect fails unless the response has the status.
func (r response) expect(t *testing.T, status int) response {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	return r
}

// syncBuffer is a bytes.Buffer safe for concurrent writes (the logger).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// servicesTask is an enabled task on the health of the named services,
// without a buffer period.
func servicesTask(name string, services ...string) task.Spec {
	return task.Spec{Name: name, Module: "./m", Enabled: true, Providers: []string{},
		BufferPeriod: &task.BufferPeriod{},
		Condition: task.Condition{Services: &task.ServicesCondition{
			ServicesSelector: task.ServicesSelector{Names: services}, UseAsModuleInput: true}}}
}

func healthKey(name string) string {
	return watch.HealthService(name, watch.ServiceOptions{}).Key()
}

func instances(ids ...string) []task.Service {
	var out []task.Service
	for _, id := range ids {
		out = append(out, task.Service{ID: id, Name: "web", Node: "n1", NodeDatacenter: "dc1", Status: "passing"})
	}
	return out
}
