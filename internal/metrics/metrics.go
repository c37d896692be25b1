// Package metrics exposes ctsync's Prometheus metrics at /metrics: task
// runs, their outcome and duration, the run queue, drift, the watch
// registry, requests to Consul, leadership and notifications. All names
// start with "ctsync_"; docs/metrics.md lists them with example alerts.
//
// Metrics keeps its own registry (with the Go and process collectors), so
// nothing depends on the global prometheus.DefaultRegisterer. It implements
// reconcile.Metrics, notify.Metrics and ha.Metrics (SetLeader,
// CompatFailures).
package metrics

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/watch"
)

// RunBuckets are the run duration histogram buckets, in seconds: from half
// a second (a no-change plan with a warm plugin cache) to 30 minutes (a
// large apply).
var RunBuckets = []float64{0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800}

// ConsulBuckets are the Consul request latency buckets, in seconds. Only
// requests that do not block are observed (see RoundTripper).
var ConsulBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Options say where the metrics read state that is not pushed to them. Each
// function is called on every scrape and may be nil.
type Options struct {
	// Tasks returns every task the controller knows. Series of a task that
	// is not in the list any more (deleted) are removed; the drift gauge is
	// taken from it.
	Tasks func() []reconcile.TaskState
	// Views returns how many distinct queries are watched.
	Views func() int
	// WatchStats returns the watch registry's counters.
	WatchStats func() watch.Stats
	// Memory returns the Terraform memory budget's state (terraform.go).
	Memory func() MemoryStats
}

// Metrics is the set of ctsync metrics. It is safe for concurrent use.
type Metrics struct {
	opts    Options
	reg     *prometheus.Registry
	handler http.Handler

	runs        *prometheus.CounterVec
	runsFailed  *prometheus.CounterVec
	runsSkipped *prometheus.CounterVec
	runDuration *prometheus.HistogramVec
	lastSuccess *prometheus.GaugeVec
	lastRunOK   *prometheus.GaugeVec
	drifted     *prometheus.GaugeVec
	dirty       *prometheus.GaugeVec
	terminal    *prometheus.GaugeVec
	driftChecks *prometheus.CounterVec
	queueDepth  prometheus.Gauge
	inProgress  prometheus.Gauge
	isLeader    prometheus.Gauge
	compatFails prometheus.Counter
	compatNow   prometheus.Gauge
	consulReqs  *prometheus.CounterVec
	consulErrs  *prometheus.CounterVec
	consulLat   *prometheus.HistogramVec
	notifySent  *prometheus.CounterVec
	notifyDrops *prometheus.CounterVec
	tfPeakRSS   *prometheus.GaugeVec              // terraform.go
	gates       map[string]*prometheus.CounterVec // gates.go, by gate.Action*
	heldWindow  *prometheus.CounterVec            // gates.go
	removals    *prometheus.CounterVec            // removal.go, by holddown.Action*
	pendingRm   *prometheus.GaugeVec              // removal.go
	perTask     []deleter                         // every vector with a "task" label

	mu   sync.Mutex
	seen map[string]bool // tasks that may have series
}

type deleter interface {
	DeletePartialMatch(labels prometheus.Labels) int
}

var (
	_ reconcile.Metrics = (*Metrics)(nil)
	_ http.Handler      = (*Metrics)(nil)
)

// New builds the metrics and registers them, with the Go runtime and
// process collectors, in a registry of their own. is_leader starts at 1:
// without high availability the single instance leads; the HA elector sets
// it with SetLeader.
func New(opts Options) *Metrics {
	m := &Metrics{opts: opts, reg: prometheus.NewRegistry(), seen: map[string]bool{}}
	task := []string{"task"}
	taskKind := []string{"task", "kind"}
	m.runs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctsync_task_runs_total",
		Help: "Terraform runs of a task that finished, by kind (apply, plan), failed or not.",
	}, taskKind)
	m.runsFailed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctsync_task_runs_failed_total",
		Help: "Terraform runs of a task that failed, by kind.",
	}, taskKind)
	m.runsSkipped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctsync_task_runs_skipped_total",
		Help: "Runs of a task that were skipped because its inputs equal the ones last applied.",
	}, task)
	m.runDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ctsync_task_run_duration_seconds",
		Help:    "Duration of a task's Terraform runs (init, plan and apply), by kind.",
		Buckets: RunBuckets,
	}, taskKind)
	m.lastSuccess = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ctsync_task_last_success_timestamp_seconds",
		Help: "Unix time of the end of the task's last successful apply.",
	}, task)
	m.lastRunOK = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ctsync_task_last_run_success",
		Help: "1 when the task's last apply succeeded, 0 when it failed.",
	}, task)
	m.dirty = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ctsync_task_dirty",
		Help: "1 while the task's last run failed: it has not converged to its desired state and is retried (0 once a run succeeds).",
	}, task)
	m.terminal = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ctsync_task_failed_terminal",
		Help: "1 while the task's last run failed with a terminal error (invalid configuration): it is not retried until its desired state changes.",
	}, task)
	m.drifted = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ctsync_task_drifted",
		Help: "1 when the task's last drift check found changes made outside Terraform (and no apply happened since), else 0.",
	}, task)
	m.driftChecks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctsync_task_drift_checks_total",
		Help: "Drift checks (plans) of a task, by result: drift, clean (no drift or the check failed).",
	}, []string{"task", "result"})
	m.queueDepth = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ctsync_run_queue_depth",
		Help: "Tasks waiting for a free run slot.",
	})
	m.inProgress = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ctsync_runs_in_progress",
		Help: "Terraform runs in progress.",
	})
	m.isLeader = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ctsync_is_leader",
		Help: "1 when this instance runs tasks (the high availability leader, or a single instance), else 0.",
	})
	m.isLeader.Set(1)
	m.compatFails = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ctsync_ha_compat_failures_total",
		Help: "Problems found by the high availability compatibility checks (this instance's configuration differs from the cluster's), summed over every check.",
	})
	m.compatNow = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ctsync_ha_compat_problems",
		Help: "Problems found by the last high availability compatibility check (0: compatible).",
	})
	m.consulReqs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctsync_consul_requests_total",
		Help: "HTTP requests to Consul, by endpoint class (health, catalog, kv, other), status code (\"error\" when no response came) and whether it was a blocking query.",
	}, []string{"endpoint", "code", "blocking"})
	m.consulErrs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctsync_consul_request_errors_total",
		Help: "HTTP requests to Consul that failed: no response, or status 429 or 5xx. Cancelled requests do not count.",
	}, []string{"endpoint"})
	m.consulLat = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ctsync_consul_request_duration_seconds",
		Help:    "Time to the response headers of Consul requests that do not block (blocking queries wait for a change by design and are not observed).",
		Buckets: ConsulBuckets,
	}, []string{"endpoint"})
	m.notifySent = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctsync_notifications_total",
		Help: "Notifications sent, by notifier and result (delivered, failed after every retry).",
	}, []string{"notifier", "result"})
	m.notifyDrops = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctsync_notifications_dropped_total",
		Help: "Notifications dropped because the notifier's queue was full (the oldest is dropped).",
	}, []string{"notifier"})

	m.handler = promhttp.HandlerFor(prometheus.GathererFunc(m.Gather), promhttp.HandlerOpts{})
	m.perTask = []deleter{m.runs, m.runsFailed, m.runsSkipped, m.runDuration, m.lastSuccess,
		m.lastRunOK, m.drifted, m.dirty, m.terminal, m.driftChecks}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.runs, m.runsFailed, m.runsSkipped, m.runDuration, m.lastSuccess, m.lastRunOK,
		m.drifted, m.dirty, m.terminal, m.driftChecks, m.queueDepth, m.inProgress, m.isLeader, m.compatFails, m.compatNow,
		m.consulReqs, m.consulErrs, m.consulLat, m.notifySent, m.notifyDrops,
	)
	m.registerTerraform(opts) // terraform.go
	m.registerGates()         // gates.go
	m.registerRemovals()      // removal.go
	if opts.Views != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ctsync_watch_views",
			Help: "Distinct Consul queries watched (one blocking query loop each, shared by every task that needs it).",
		}, func() float64 { return float64(opts.Views()) }))
	}
	if opts.WatchStats != nil {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ctsync_watch_fetches_total",
			Help: "Consul reads started by the watch loops.",
		}, func() float64 { return float64(opts.WatchStats().Fetches) }))
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ctsync_watch_fetch_errors_total",
			Help: "Consul reads of the watch loops that failed (they are retried with backoff).",
		}, func() float64 { return float64(opts.WatchStats().FetchErrors) }))
	}
	return m
}

// Registry returns the registry, to register more collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ServeHTTP serves the metrics in the Prometheus text (or negotiated)
// format.
func (m *Metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) { m.handler.ServeHTTP(w, r) }

// Gather brings the per-task series in line with the controller's tasks
// (drops the series of deleted tasks, zero-initialises the counters of
// tasks that never ran, sets the drift gauge) and gathers every metric.
func (m *Metrics) Gather() ([]*dto.MetricFamily, error) {
	if m.opts.Tasks != nil {
		m.syncTasks(m.opts.Tasks())
	}
	return m.reg.Gather()
}

// syncTasks runs before each scrape. A run of a task that finishes while
// the task is being deleted may bring a series back; the next scrape
// removes it again.
func (m *Metrics) syncTasks(tasks []reconcile.TaskState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	known := make(map[string]bool, len(tasks))
	for _, t := range tasks {
		if t.Deleting {
			continue
		}
		name := t.Spec.Name
		known[name] = true
		m.seen[name] = true
		// Counters exist from the start, so rate() and increase() see the
		// first failure.
		m.runs.WithLabelValues(name, "apply")
		m.runsFailed.WithLabelValues(name, "apply")
		m.runsSkipped.WithLabelValues(name)
		m.drifted.WithLabelValues(name).Set(b2f(t.Drifted))
		m.dirty.WithLabelValues(name).Set(b2f(t.Dirty))
		m.terminal.WithLabelValues(name).Set(b2f(t.Terminal))
		m.gateZeros(t.Spec)    // gates.go
		m.removalZeros(t.Spec) // removal.go
	}
	for name := range m.seen {
		if !known[name] {
			m.forget(name)
			delete(m.seen, name)
		}
	}
}

// ForgetTask removes every series of a task (it was deleted).
func (m *Metrics) ForgetTask(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forget(name)
	delete(m.seen, name)
}

func (m *Metrics) forget(name string) {
	for _, v := range m.perTask {
		v.DeletePartialMatch(prometheus.Labels{"task": name})
	}
}

// touch records that a task has series, so a later scrape can remove them
// when the task is gone.
func (m *Metrics) touch(name string) {
	m.mu.Lock()
	m.seen[name] = true
	m.mu.Unlock()
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// RunStarted implements reconcile.Metrics.
func (m *Metrics) RunStarted(string) { m.inProgress.Inc() }

// RunFinished implements reconcile.Metrics.
func (m *Metrics) RunFinished(taskName, kind string, success bool, d time.Duration) {
	m.touch(taskName)
	m.inProgress.Dec()
	m.runs.WithLabelValues(taskName, kind).Inc()
	m.runDuration.WithLabelValues(taskName, kind).Observe(d.Seconds())
	if !success {
		m.runsFailed.WithLabelValues(taskName, kind).Inc()
	}
	if kind == "plan" {
		return // a plan changes nothing: the last apply's outcome stands
	}
	m.lastRunOK.WithLabelValues(taskName).Set(b2f(success))
	if success {
		m.lastSuccess.WithLabelValues(taskName).Set(float64(time.Now().UnixNano()) / 1e9)
		m.drifted.WithLabelValues(taskName).Set(0) // just applied: matches the configuration
	}
}

// RunSkipped implements reconcile.Metrics.
func (m *Metrics) RunSkipped(taskName string) {
	m.touch(taskName)
	m.runsSkipped.WithLabelValues(taskName).Inc()
}

// QueueDepth implements reconcile.Metrics.
func (m *Metrics) QueueDepth(n int) { m.queueDepth.Set(float64(n)) }

// Drift implements reconcile.Metrics.
func (m *Metrics) Drift(taskName string, drifted bool) {
	m.touch(taskName)
	m.drifted.WithLabelValues(taskName).Set(b2f(drifted))
	result := "clean"
	if drifted {
		result = "drift"
	}
	m.driftChecks.WithLabelValues(taskName, result).Inc()
}

// SetLeader records whether this instance is the high availability leader.
func (m *Metrics) SetLeader(leader bool) { m.isLeader.Set(b2f(leader)) }

// CompatFailures records the outcome of a high availability compatibility
// check: the number of problems it found (0 when compatible).
func (m *Metrics) CompatFailures(n int) {
	m.compatNow.Set(float64(n))
	if n > 0 {
		m.compatFails.Add(float64(n))
	}
}

// NotificationDelivered counts a notification a notifier delivered.
func (m *Metrics) NotificationDelivered(notifier string) {
	m.notifySent.WithLabelValues(notifier, "delivered").Inc()
}

// NotificationFailed counts a notification that failed after every retry.
func (m *Metrics) NotificationFailed(notifier string) {
	m.notifySent.WithLabelValues(notifier, "failed").Inc()
}

// NotificationDropped counts a notification dropped from a full queue.
func (m *Metrics) NotificationDropped(notifier string) {
	m.notifyDrops.WithLabelValues(notifier).Inc()
}
