package cli

import (
	ctsapi "github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/holddown"
	"github.com/ctsync/ctsync/internal/metrics"
	"github.com/ctsync/ctsync/internal/notify"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/redact"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/ui"
	"github.com/ctsync/ctsync/internal/watch"
)

// observe is the operator side of the daemon: Prometheus metrics, the web
// dashboard, notifications and the redaction of secrets in what is served.
type observe struct {
	metrics  *metrics.Metrics
	notifier *notify.Dispatcher
	redactor *redact.Redactor
}

// setupObserve builds the metrics and the redactor, and instruments the
// Consul client. It runs in newApp before the coordinator and the
// controller are built, once the provider values read from Consul are
// resolved (they are secrets too). The metrics read the controller and
// registry lazily.
func (a *app) setupObserve() {
	a.obs.redactor = redact.NewRedactor(a.cfg.Secrets())
	// When the daemon's logger redacts (redact.RedactingHandler), it
	// redacts these secrets from now on, the Terraform output forwarded
	// with driver.log = true included.
	redact.SetLoggerRedactor(a.log, a.obs.redactor)
	a.obs.metrics = metrics.New(metrics.Options{
		Tasks:      func() []reconcile.TaskState { return a.ctrl.Tasks() },
		Views:      func() int { return a.registry.Views() },
		WatchStats: func() watch.Stats { return a.registry.Stats() },
		Memory: func() metrics.MemoryStats {
			s := a.memory.Stats()
			return metrics.MemoryStats{Limit: s.Limit, Reserved: s.Reserved, Waiting: s.Waiting}
		},
	})
	a.client.WrapTransport(a.obs.metrics.RoundTripper)
}

// setupNotify builds the notifier, which reads the store the coordinator
// picked (setupCoordinator).
func (a *app) setupNotify() {
	a.obs.notifier = notify.New(notify.Options{
		Notifications: a.cfg.Notifications,
		Store:         a.store,
		Redact:        a.obs.redactor.Redact,
		Logger:        a.log.With("component", "notify"),
		Metrics:       a.obs.metrics,
	})
}

// onEvent is the controller's event hook: the notifier queues the event
// and never blocks.
func (o *observe) onEvent(ev store.Event) { o.notifier.OnEvent(ev) }

// onGate is the controller's gate hook: the safety gates' outcomes are
// counted and notified (webhooks of kind approval and policy).
func (o *observe) onGate(ev gate.Event) {
	o.metrics.OnGate(ev)
	o.notifier.OnGate(ev)
}

// onRemoval is the controller's removal hook: the steps of a task's
// removal hold-down are counted (ctsync_task_removals_*) and notified
// (webhooks of kind removal).
func (o *observe) onRemoval(name string, changes []holddown.Change, pending int) {
	o.metrics.OnRemoval(name, changes, pending)
	o.notifier.OnRemoval(name, changes)
}

// mountObserve adds /metrics and the dashboard (/ui/, and / redirecting to
// it) to the API server.
func (a *app) mountObserve(srv *ctsapi.Server) {
	srv.Handle("GET /metrics", a.obs.metrics)
	srv.Handle(ui.Path, ui.Handler())
	srv.Handle("GET /{$}", ui.RedirectHome())
}
