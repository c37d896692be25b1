package watch

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/consul"
	"github.com/ctsync/ctsync/internal/testutil"
)

// fakeConsul is a scripted stand-in for the Consul HTTP API. Every request
// is recorded on arrival and then blocks until the test queues a reply for
// its path (or the request is cancelled), which makes "the view has
// finished handling reply n" observable as "request n+1 has arrived".
type fakeConsul struct {
	t   testing.TB
	srv *httptest.Server
	hc  *http.Client

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every recorded event
	queues    map[string]chan fakeReply
	now       map[string]bool // paths whose requests without an index use their own queue (replyNow)
	reqs      map[string][]url.Values
	cancelled map[string]int
}

type fakeReply struct {
	status int
	index  uint64
	body   any
	raw    string
}

func newFakeConsul(t testing.TB) *fakeConsul {
	f := &fakeConsul{
		t:         t,
		changed:   make(chan struct{}),
		queues:    map[string]chan fakeReply{},
		reqs:      map[string][]url.Values{},
		cancelled: map[string]int{},
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.handle))
	f.hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
	t.Cleanup(f.close)
	return f
}

func (f *fakeConsul) close() {
	f.srv.CloseClientConnections()
	f.srv.Close()
	f.hc.CloseIdleConnections()
}

func (f *fakeConsul) client() *consul.Client {
	c, err := consul.FromAPIConfig(&api.Config{Address: f.srv.URL, HttpClient: f.hc})
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

func (f *fakeConsul) signalLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeConsul) queue(path string) chan fakeReply {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queues[path]
	if q == nil {
		q = make(chan fakeReply, 100)
		f.queues[path] = q
	}
	return q
}

func (f *fakeConsul) handle(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.reqs[r.URL.Path] = append(f.reqs[r.URL.Path], r.URL.Query())
	f.signalLocked()
	f.mu.Unlock()
	qname := r.URL.Path
	f.mu.Lock()
	if f.now[qname] && !r.URL.Query().Has("index") {
		qname += "?now"
	}
	f.mu.Unlock()
	q := f.queue(qname)
	select {
	case <-r.Context().Done():
		f.mu.Lock()
		f.cancelled[r.URL.Path]++
		f.signalLocked()
		f.mu.Unlock()
		return
	case rep := <-q:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Consul-Index", strconv.FormatUint(rep.index, 10))
		w.Header().Set("X-Consul-KnownLeader", "true")
		status := rep.status
		if status == 0 {
			status = 200
		}
		w.WriteHeader(status)
		switch {
		case rep.raw != "":
			_, _ = w.Write([]byte(rep.raw))
		case rep.body != nil:
			_ = json.NewEncoder(w).Encode(rep.body)
		}
	}
}

// reply queues one successful answer for path.
func (f *fakeConsul) reply(path string, index uint64, body any) {
	f.queue(path) <- fakeReply{index: index, body: body}
}

// routeNow makes the requests for path that carry no index (non-blocking
// reads) wait for replyNow's answers instead of reply's.
func (f *fakeConsul) routeNow(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.now == nil {
		f.now = map[string]bool{}
	}
	f.now[path] = true
}

// replyNow queues one answer for a non-blocking read of path (routeNow).
func (f *fakeConsul) replyNow(path string, index uint64, body any) {
	f.queue(path + "?now") <- fakeReply{index: index, body: body}
}

// fail queues one error answer for path.
func (f *fakeConsul) fail(path string, status int) {
	f.queue(path) <- fakeReply{status: status, raw: "injected failure"}
}

// waitFor blocks until cond (evaluated under the lock) holds.
func (f *fakeConsul) waitFor(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.NewTimer(testutil.Scale(10 * time.Second))
	defer deadline.Stop()
	for {
		f.mu.Lock()
		ok := cond()
		ch := f.changed
		f.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			f.t.Fatalf("fake consul: timed out waiting for %s", what)
		}
	}
}

// waitRequests waits until path has received n requests and returns their
// query parameters.
func (f *fakeConsul) waitRequests(path string, n int) []url.Values {
	f.t.Helper()
	f.waitFor(fmt.Sprintf("%d requests to %s", n, path), func() bool { return len(f.reqs[path]) >= n })
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs[path])
}

func (f *fakeConsul) requests(path string) []url.Values {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs[path])
}

func (f *fakeConsul) waitCancelled(path string, n int) {
	f.t.Helper()
	f.waitFor(fmt.Sprintf("%d cancelled requests to %s", n, path), func() bool { return f.cancelled[path] >= n })
}

// indexes returns the "index" parameter of each request ("" when absent).
func indexes(qs []url.Values) []string {
	out := make([]string, len(qs))
	for i, q := range qs {
		out[i] = q.Get("index")
	}
	return out
}

// recorder collects notify calls.
type recorder struct {
	mu     sync.Mutex
	events []string // "subscriber key"
	ch     chan struct{}
}

func newRecorder() *recorder { return &recorder{ch: make(chan struct{}, 1)} }

func (r *recorder) notify(sub, key string) {
	r.mu.Lock()
	r.events = append(r.events, sub+" "+key)
	r.mu.Unlock()
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

func (r *recorder) waitCount(t testing.TB, n int) {
	t.Helper()
	deadline := time.NewTimer(testutil.Scale(10 * time.Second))
	defer deadline.Stop()
	for r.count() < n {
		select {
		case <-r.ch:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %d notifications, have %v", n, r.all())
		}
	}
}

// logSink captures log records.
type logSink struct {
	mu   sync.Mutex
	msgs []string
}

func (s *logSink) Enabled(context.Context, slog.Level) bool { return true }
func (s *logSink) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Level.String() + " " + rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.Key + "=" + a.Value.String())
		return true
	})
	s.mu.Lock()
	s.msgs = append(s.msgs, b.String())
	s.mu.Unlock()
	return nil
}
func (s *logSink) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s *logSink) WithGroup(string) slog.Handler      { return s }
func (s *logSink) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.msgs)
}

// runRegistry starts r.Run and returns a stop function that cancels it and
// checks that Run returns nil promptly.
func runRegistry(t testing.TB, r *Registry) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v", err)
				}
			case <-time.After(testutil.Scale(10 * time.Second)):
				t.Errorf("Run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// fastRegistry is a registry with millisecond backoff for tests.
func fastRegistry(c *consul.Client, logger *slog.Logger, rec *recorder) *Registry {
	r := NewRegistry(c, logger, rec.notify)
	r.backoffBase = time.Millisecond
	r.backoffCap = 5 * time.Millisecond
	return r
}
