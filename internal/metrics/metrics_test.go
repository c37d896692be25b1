package metrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/watch"
)

// scrape returns the metrics text.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

func has(t *testing.T, text string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(text, l+"\n") {
			t.Errorf("metrics lack %q", l)
		}
	}
}

func hasNot(t *testing.T, text string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if strings.Contains(text, s) {
			t.Errorf("metrics still contain %q", s)
		}
	}
}

type tasks struct {
	mu sync.Mutex
	ts []reconcile.TaskState
}

func (l *tasks) set(ts ...reconcile.TaskState) {
	l.mu.Lock()
	l.ts = ts
	l.mu.Unlock()
}

func (l *tasks) get() []reconcile.TaskState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]reconcile.TaskState(nil), l.ts...)
}

func state(name string, drifted bool) reconcile.TaskState {
	return reconcile.TaskState{Spec: task.Spec{Name: name}, Drifted: drifted}
}

func TestRunMetrics(t *testing.T) {
	list := &tasks{}
	list.set(state("web", false), state("db", false), state("idle", false))
	m := New(Options{Tasks: list.get, Views: func() int { return 7 },
		WatchStats: func() watch.Stats { return watch.Stats{Fetches: 12, FetchErrors: 2} }})

	m.QueueDepth(3)
	m.RunStarted("web")
	m.RunStarted("db")
	text := scrape(t, m)
	has(t, text, "ctsync_runs_in_progress 2", "ctsync_run_queue_depth 3", "ctsync_watch_views 7",
		"ctsync_watch_fetches_total 12", "ctsync_watch_fetch_errors_total 2", "ctsync_is_leader 1",
		// counters of tasks that never ran exist at zero
		`ctsync_task_runs_total{kind="apply",task="idle"} 0`,
		`ctsync_task_runs_failed_total{kind="apply",task="idle"} 0`,
		`ctsync_task_drifted{task="idle"} 0`)

	m.RunFinished("web", "apply", true, 3*time.Second)
	m.RunFinished("db", "apply", false, 90*time.Second)
	m.RunSkipped("web")
	m.Drift("db", true)
	m.SetLeader(false)
	m.CompatFailures(2)
	list.set(state("web", false), state("db", true), state("idle", false))
	text = scrape(t, m)
	has(t, text, "ctsync_runs_in_progress 0",
		`ctsync_task_runs_total{kind="apply",task="web"} 1`,
		`ctsync_task_runs_failed_total{kind="apply",task="web"} 0`,
		`ctsync_task_runs_total{kind="apply",task="db"} 1`,
		`ctsync_task_runs_failed_total{kind="apply",task="db"} 1`,
		`ctsync_task_runs_skipped_total{task="web"} 1`,
		`ctsync_task_last_run_success{task="web"} 1`,
		`ctsync_task_last_run_success{task="db"} 0`,
		`ctsync_task_run_duration_seconds_bucket{kind="apply",task="web",le="5"} 1`,
		`ctsync_task_run_duration_seconds_bucket{kind="apply",task="db",le="60"} 0`,
		`ctsync_task_run_duration_seconds_bucket{kind="apply",task="db",le="120"} 1`,
		`ctsync_task_run_duration_seconds_bucket{kind="apply",task="db",le="1800"} 1`,
		`ctsync_task_drifted{task="db"} 1`,
		`ctsync_task_drift_checks_total{result="drift",task="db"} 1`,
		"ctsync_is_leader 0", "ctsync_ha_compat_failures_total 2", "ctsync_ha_compat_problems 2")
	m.CompatFailures(0)
	has(t, scrape(t, m), "ctsync_ha_compat_failures_total 2", "ctsync_ha_compat_problems 0")
	if !strings.Contains(text, `ctsync_task_last_success_timestamp_seconds{task="web"} 1.`) {
		t.Errorf("no last success timestamp for web")
	}
	hasNot(t, text, `ctsync_task_last_success_timestamp_seconds{task="db"}`)
	// Go and process collectors are there.
	has(t, text, "# TYPE go_goroutines gauge")

	// The controller's state wins for drift: an apply cleared it.
	list.set(state("web", false), state("db", false), state("idle", false))
	has(t, scrape(t, m), `ctsync_task_drifted{task="db"} 0`)

	// A failed last run: dirty, and terminal when it waits for a change.
	failing := state("db", false)
	failing.Dirty, failing.Terminal = true, true
	list.set(state("web", false), failing, state("idle", false))
	has(t, scrape(t, m), `ctsync_task_dirty{task="db"} 1`, `ctsync_task_failed_terminal{task="db"} 1`,
		`ctsync_task_dirty{task="web"} 0`, `ctsync_task_failed_terminal{task="web"} 0`)

	// db is deleted: every series of it goes.
	list.set(state("web", false), state("idle", false))
	text = scrape(t, m)
	hasNot(t, text, `task="db"`)
	has(t, text, `ctsync_task_runs_total{kind="apply",task="web"} 1`)

	m.ForgetTask("web")
	list.set(state("idle", false))
	hasNot(t, scrape(t, m), `task="web"`)
}

func TestEndpointClass(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/health/service/web": "health",
		"/v1/catalog/services":   "catalog",
		"/v1/kv/a/b":             "kv",
		"/v1/kv":                 "kv",
		"/v1/session/create":     "other",
		"/v1/status/leader":      "other",
		"/ui/":                   "other",
	} {
		if got := EndpointClass(path); got != want {
			t.Errorf("EndpointClass(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestConsulRoundTripper(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Query().Get("index") == "9":
			select { // a blocking query that waits
			case <-time.After(300 * time.Millisecond):
			case <-r.Context().Done():
			}
			w.WriteHeader(200)
		case strings.HasPrefix(r.URL.Path, "/v1/kv/missing"):
			w.WriteHeader(404)
		case strings.HasPrefix(r.URL.Path, "/v1/catalog"):
			w.WriteHeader(500)
		default:
			w.WriteHeader(200)
		}
	}))
	defer srv.Close()
	m := New(Options{})
	c := &http.Client{Transport: m.RoundTripper(http.DefaultTransport)}
	get := func(path string) {
		resp, err := c.Get(srv.URL + path)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	get("/v1/health/service/web?index=9&wait=5m")
	get("/v1/health/service/web")
	get("/v1/health/service/web?index=0")
	get("/v1/kv/missing")
	get("/v1/catalog/services")
	get("/v1/agent/self")

	// A blocking query cancelled by ctsync is not an error.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/kv/x?index=9", nil)
	time.AfterFunc(20*time.Millisecond, cancel)
	if _, err := c.Do(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: %v", err)
	}
	// No server at all: a transport error.
	dead := &http.Client{Transport: m.RoundTripper(nil)}
	if _, err := dead.Get("http://127.0.0.1:1/v1/kv/y"); err == nil {
		t.Fatal("request to a closed port succeeded")
	}

	text := scrape(t, m)
	has(t, text,
		`ctsync_consul_requests_total{blocking="true",code="200",endpoint="health"} 1`,
		`ctsync_consul_requests_total{blocking="false",code="200",endpoint="health"} 2`,
		`ctsync_consul_requests_total{blocking="false",code="404",endpoint="kv"} 1`,
		`ctsync_consul_requests_total{blocking="false",code="500",endpoint="catalog"} 1`,
		`ctsync_consul_requests_total{blocking="false",code="200",endpoint="other"} 1`,
		`ctsync_consul_requests_total{blocking="false",code="error",endpoint="kv"} 1`,
		`ctsync_consul_request_errors_total{endpoint="catalog"} 1`,
		`ctsync_consul_request_errors_total{endpoint="kv"} 1`,
		// the blocking query is not a latency sample
		`ctsync_consul_request_duration_seconds_count{endpoint="health"} 2`,
		`ctsync_consul_request_duration_seconds_count{endpoint="kv"} 1`,
	)
	hasNot(t, text, `ctsync_consul_request_errors_total{endpoint="health"}`)
}

func TestNotificationMetrics(t *testing.T) {
	m := New(Options{})
	m.NotificationDelivered("ops")
	m.NotificationDelivered("ops")
	m.NotificationFailed("ops")
	m.NotificationDropped("ops")
	has(t, scrape(t, m),
		`ctsync_notifications_total{notifier="ops",result="delivered"} 2`,
		`ctsync_notifications_total{notifier="ops",result="failed"} 1`,
		`ctsync_notifications_dropped_total{notifier="ops"} 1`)
}
