package notify

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/testutil"
)

// receiver is a webhook on loopback that records what it gets.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	payloads []Payload
	headers  []http.Header
	calls    atomic.Int32
}

// newReceiver serves every request with handle (nil: 200) after recording it.
func newReceiver(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, call int32)) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := rc.calls.Add(1)
		b, _ := io.ReadAll(r.Body)
		var p Payload
		if err := json.Unmarshal(b, &p); err != nil {
			t.Errorf("webhook body is not a payload: %v: %s", err, b)
		}
		rc.mu.Lock()
		rc.payloads = append(rc.payloads, p)
		rc.headers = append(rc.headers, r.Header.Clone())
		rc.mu.Unlock()
		if handle != nil {
			handle(w, r, n)
		}
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) got() []Payload {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]Payload(nil), rc.payloads...)
}

// counts records the metrics calls.
type counts struct {
	mu                         sync.Mutex
	delivered, failed, dropped map[string]int
}

func newCounts() *counts {
	return &counts{delivered: map[string]int{}, failed: map[string]int{}, dropped: map[string]int{}}
}

func (c *counts) NotificationDelivered(n string) { c.mu.Lock(); c.delivered[n]++; c.mu.Unlock() }
func (c *counts) NotificationFailed(n string)    { c.mu.Lock(); c.failed[n]++; c.mu.Unlock() }
func (c *counts) NotificationDropped(n string)   { c.mu.Lock(); c.dropped[n]++; c.mu.Unlock() }

func (c *counts) get(m map[string]int, n string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return m[n]
}

func webhook(name, url string, events ...string) config.Notification {
	if len(events) == 0 {
		events = config.NotificationEvents
	}
	return config.Notification{Type: "webhook", Name: name, URL: url, Events: events,
		Timeout: 2 * time.Second, Retries: 3}
}

// start runs a dispatcher until the test ends.
func start(t *testing.T, opts Options) *Dispatcher {
	t.Helper()
	if opts.RetryBase == 0 {
		opts.RetryBase = 10 * time.Millisecond
	}
	d := New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return d
}

// flush waits until every event handed to d has been handled: the count of
// notifications is final then.
func flush(t *testing.T, d *Dispatcher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
	defer cancel()
	d.Flush(ctx)
	if ctx.Err() != nil {
		t.Fatal("notifications still pending after 10s")
	}
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func run(id, task string, ok bool, at int) store.Event {
	ev := store.Event{ID: id, TaskName: task, Success: ok, Kind: store.KindApply,
		StartTime: t0.Add(time.Duration(at) * time.Minute), EndTime: t0.Add(time.Duration(at)*time.Minute + time.Second)}
	if !ok {
		ev.Error = &store.EventError{Message: "apply: Error: local-exec provisioner error: Error running command 'curl -H \"token: s3cr3t-token\" https://lb.example/pool': exit status 22. Output: 503 Service Unavailable s3cr3t-token\n\nand more"}
		ev.ErrorSummary = "Error: local-exec provisioner error: exit status 22. Output: 503 Service Unavailable s3cr3t-token"
	}
	return ev
}

func TestClassify(t *testing.T) {
	fail1, ok2, ok3 := run("1", "web", false, 1), run("2", "web", true, 2), run("3", "web", true, 3)
	drift := store.Event{ID: "d", TaskName: "web", Success: true, Kind: store.KindDrift, StartTime: t0.Add(150 * time.Second)}
	hist := []store.Event{ok3, drift, ok2, fail1} // newest first
	for _, tt := range []struct {
		name string
		ev   store.Event
		evs  []store.Event
		want string
	}{
		{"failed", fail1, hist, "failed"},
		{"recovered", ok2, hist, "recovered"},
		{"success after success (a drift check between is not a run)", ok3, hist, ""},
		{"drift", drift, hist, "drift"},
		{"first run", ok2, []store.Event{ok2}, ""},
		{"event not in the history any more", ok2, []store.Event{fail1}, "recovered"},
		{"noop after failure", store.Event{ID: "n", TaskName: "web", Success: true, Kind: store.KindNoop, StartTime: t0.Add(5 * time.Minute)},
			[]store.Event{fail1}, "recovered"},
	} {
		if got := Classify(tt.ev, tt.evs); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestDelivery(t *testing.T) {
	rc := newReceiver(t, nil)
	st := store.NewMemory(0)
	m := newCounts()
	n := webhook("ops", rc.URL+"/hook")
	n.Headers = map[string]string{"Authorization": "Bearer hdr-secret"}
	var logs strings.Builder
	var logMu sync.Mutex
	d := start(t, Options{Notifications: []config.Notification{n}, Store: st, Metrics: m,
		Redact: func(s string) string { return strings.ReplaceAll(s, "s3cr3t-token", "[redacted]") },
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))})

	record := func(ev store.Event) {
		_ = st.AddEvent(context.Background(), ev)
		d.OnEvent(ev)
	}
	ok0 := run("0", "web", true, 0)
	record(ok0) // first run: nothing to say
	fail := run("1", "web", false, 1)
	fail.LogTail = "Error: token s3cr3t-token rejected"
	record(fail)
	record(run("2", "web", true, 2)) // recovered
	record(run("3", "web", true, 3)) // nothing
	drift := store.Event{ID: "4", TaskName: "web", Success: true, Kind: store.KindDrift, StartTime: t0.Add(4 * time.Minute),
		Plan: &store.PlanSummary{Change: 1}}
	record(drift)

	flush(t, d) // every event was considered: nothing more comes
	got := rc.got()
	if len(got) != 3 {
		t.Fatalf("got %d notifications: %+v", len(got), got)
	}
	for i, want := range []struct{ typ, id string }{{"failed", "1"}, {"recovered", "2"}, {"drift", "4"}} {
		p := got[i]
		if p.Type != want.typ || p.Task != "web" || p.Event.ID != want.id || p.Time.IsZero() || p.Text == "" {
			t.Errorf("notification %d: %+v", i, p)
		}
	}
	if f := got[0]; strings.Contains(f.Event.LogTail, "s3cr3t") || strings.Contains(f.Event.Error.Message, "s3cr3t") ||
		!strings.Contains(f.Event.LogTail, "[redacted]") || strings.Contains(f.Text, "s3cr3t") {
		t.Errorf("secret not redacted: %+v", f)
	}
	if got[2].Event.Plan == nil || got[2].Event.Plan.Change != 1 || !strings.Contains(got[2].Text, "1 to change") {
		t.Errorf("drift notification: %+v", got[2])
	}
	// The failure's text is its one-line summary, the cause included.
	if want := `ctsync: task "web" failed: Error: local-exec provisioner error: exit status 22. Output: 503 Service Unavailable [redacted]`; got[0].Text != want {
		t.Errorf("failed text %q, want %q", got[0].Text, want)
	}
	rc.mu.Lock()
	h := rc.headers[0]
	rc.mu.Unlock()
	if h.Get("Authorization") != "Bearer hdr-secret" || h.Get("Content-Type") != "application/json" {
		t.Errorf("headers: %v", h)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if strings.Contains(logs.String(), "hdr-secret") || strings.Contains(logs.String(), "/hook") {
		t.Errorf("header value or URL path logged:\n%s", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func TestEventsFilter(t *testing.T) {
	rc := newReceiver(t, nil)
	m := newCounts()
	d := start(t, Options{Notifications: []config.Notification{webhook("drift-only", rc.URL, "drift")}, Metrics: m})
	d.OnEvent(run("1", "web", false, 1))
	d.OnEvent(store.Event{ID: "2", TaskName: "web", Success: true, Kind: store.KindDrift})
	flush(t, d)
	if got := rc.got(); len(got) != 1 || got[0].Type != "drift" {
		t.Errorf("got %+v", got)
	}
}

// A receiver that answers 500 and then 200 gets the notification once,
// on the second attempt.
func TestRetryAfter500(t *testing.T) {
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, call int32) {
		if call == 1 {
			http.Error(w, "try later", http.StatusInternalServerError)
		}
	})
	m := newCounts()
	d := start(t, Options{Notifications: []config.Notification{webhook("ops", rc.URL)}, Metrics: m})
	d.OnEvent(run("1", "web", false, 1))
	testutil.WaitFor(t, "delivery", func() bool { return m.get(m.delivered, "ops") == 1 })
	if c := rc.calls.Load(); c != 2 {
		t.Errorf("%d attempts, want 2", c)
	}
	if m.get(m.failed, "ops") != 0 {
		t.Error("counted as failed")
	}
}

// A 4xx other than 408/429 is not retried; retries end with a failure.
func TestGiveUp(t *testing.T) {
	bad := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int32) { w.WriteHeader(http.StatusBadRequest) })
	down := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int32) { w.WriteHeader(http.StatusServiceUnavailable) })
	m := newCounts()
	n1, n2 := webhook("bad", bad.URL), webhook("down", down.URL)
	n2.Retries = 2
	d := start(t, Options{Notifications: []config.Notification{n1, n2}, Metrics: m})
	d.OnEvent(run("1", "web", false, 1))
	testutil.WaitFor(t, "both failed", func() bool { return m.get(m.failed, "bad") == 1 && m.get(m.failed, "down") == 1 })
	if c := bad.calls.Load(); c != 1 {
		t.Errorf("400: %d attempts, want 1", c)
	}
	if c := down.calls.Load(); c != 3 {
		t.Errorf("503 with retries=2: %d attempts, want 3", c)
	}
}

// A receiver that hangs: each attempt ends at the timeout, OnEvent never
// blocks, a full queue drops its oldest notification, and another
// notifier is not held up.
func TestHangingReceiver(t *testing.T) {
	release := make(chan struct{})
	hang := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int32) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	fine := newReceiver(t, nil)
	m := newCounts()
	slow := webhook("slow", hang.URL)
	slow.Timeout, slow.Retries = 100*time.Millisecond, 1
	d := start(t, Options{Notifications: []config.Notification{slow, webhook("fine", fine.URL)}, Metrics: m, QueueSize: 5})

	start := time.Now()
	for i := range 50 {
		d.OnEvent(run(string(rune('a'+i%26))+"-"+time.Now().String(), "web", false, i))
	}
	// Blocked on the webhook, 50 events would take 50 timeouts (5s).
	if el := time.Since(start); el > testutil.Scale(100*time.Millisecond) {
		t.Errorf("OnEvent took %s for 50 events while the webhook hangs", el)
	}
	testutil.WaitFor(t, "the other notifier delivers", func() bool { return m.get(m.delivered, "fine") >= 5 })
	testutil.WaitFor(t, "the hanging one fails its first notification", func() bool { return m.get(m.failed, "slow") >= 1 })
	if dropped := m.get(m.dropped, "slow"); dropped < 40 {
		t.Errorf("dropped %d, want at least 40 of 50 with a queue of 5", dropped)
	}
	// Two attempts (1 retry), each bounded by the 100ms timeout.
	if c := hang.calls.Load(); c < 2 {
		t.Errorf("%d attempts", c)
	}
}

func TestBackoff(t *testing.T) {
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second} {
		got := backoff(time.Second, i+1)
		if got < want*8/10 || got > want*12/10 {
			t.Errorf("attempt %d: %s, want %s ±20%%", i+1, got, want)
		}
	}
	if got := backoff(time.Second, 40); got > maxBackoff*12/10 {
		t.Errorf("no cap: %s", got)
	}
}

// Flush returns once every notification is delivered, not while one is
// still queued or in flight.
func TestFlush(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int32) {
		select {
		case arrived <- struct{}{}:
		case <-r.Context().Done():
			return
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	m := newCounts()
	d := start(t, Options{Notifications: []config.Notification{webhook("ops", rc.URL)}, Metrics: m})
	for i := range 3 {
		d.OnEvent(run(string(rune('a'+i)), "web", false, i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
	defer cancel()
	flushed := make(chan struct{})
	go func() { d.Flush(ctx); close(flushed) }()
	for i := range 3 {
		<-arrived
		select {
		case <-flushed:
			t.Fatalf("Flush returned while notification %d was in flight", i+1)
		default:
		}
		release <- struct{}{}
	}
	<-flushed
	if ctx.Err() != nil {
		t.Fatal("Flush timed out")
	}
	if got := m.get(m.delivered, "ops"); got != 3 {
		t.Errorf("Flush returned with %d of 3 delivered", got)
	}
}
