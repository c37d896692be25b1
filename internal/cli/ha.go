package cli

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	ctsapi "github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/consul"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/driver/terraform"
	"github.com/ctsync/ctsync/internal/ha"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

// haWiring is high availability as the daemon wires it (the
// high_availability block): the shared store in Consul KV, the elector that
// switches the controller between follower and leader, the controller the
// API uses (which saves API changes), the cluster status, and the
// compatibility checks. app.ha is nil without high availability.
type haWiring struct {
	cfg        *config.HA
	log        *slog.Logger
	kv         *store.ConsulKV
	el         *ha.Elector
	configured map[string]bool // names of the configured tasks

	prepMu       sync.Mutex // serialises preparations of successive terms
	resetStorage bool       // -reset-storage: on every term
}

// setupHA prepares high availability when it is configured: the state
// store becomes the Consul KV one (fenced by the leader lock), every task's
// driver is fenced (it only runs while this instance leads), and the
// controller starts as a follower. It runs in newApp before the controller
// and the observability parts are built.
func (a *app) setupHA(factory reconcile.DriverFactory) (reconcile.DriverFactory, error) {
	h := a.cfg.HA
	if h == nil {
		return factory, nil
	}
	w := &haWiring{cfg: h, log: a.log.With("component", "ha"), configured: map[string]bool{}}
	for _, s := range a.cfg.Tasks {
		w.configured[s.Name] = true
	}
	prefix := h.Prefix()
	w.kv = store.NewConsulKV(a.client.Client, prefix+"/state", a.cfg.History)
	w.kv.SetNamespace(h.Namespace)
	w.kv.SetLogger(w.log)
	el, err := ha.New(ha.Options{
		Client:     a.client.Client,
		Prefix:     prefix,
		Namespace:  h.Namespace,
		ID:         a.cfg.ID,
		Address:    advertisedAddress(h.InstanceAddress, a.cfg.Port),
		SessionTTL: h.SessionTTL,
		Logger:     w.log,
		Metrics:    haMetrics{a},
		OnElected:  a.haElected,
		SetActive:  func(on bool) { a.ctrl.SetActive(on) },
	})
	if err != nil {
		return nil, err
	}
	w.el = el
	w.kv.SetFence(el.LockSession)
	a.store = w.kv
	a.ha = w
	return func(spec task.Spec) (driver.Driver, error) {
		d, err := factory(spec)
		if err != nil {
			return nil, err
		}
		return ha.FenceDriver(d, el), nil
	}, nil
}

// advertisedAddress is instance.address with the API port when it has none.
func advertisedAddress(addr string, port int) string {
	if addr == "" || strings.Contains(addr, "://") {
		return addr
	}
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	return net.JoinHostPort(strings.Trim(addr, "[]"), strconv.Itoa(port))
}

// haResetStorage records the -reset-storage flag.
func (a *app) haResetStorage(reset bool) {
	if !reset {
		return
	}
	if a.ha == nil {
		a.log.Warn("-reset-storage is ignored: high_availability is not configured")
		return
	}
	a.ha.resetStorage = true
}

// haElected prepares this instance to lead, before its controller becomes
// active: -reset-storage (first term only), load the cluster's state, apply
// the task changes made through the API, and with rerun_all_on_failover
// forget the applied hashes so that every task runs once.
func (a *app) haElected(ctx context.Context) error {
	w := a.ha
	w.prepMu.Lock()
	defer w.prepMu.Unlock()
	if w.resetStorage {
		// As CTS documents: every time this instance becomes leader.
		if err := w.kv.Reset(ctx); err != nil {
			return err
		}
		w.log.Warn("ha: -reset-storage: the cluster's stored state was deleted; this instance's configuration is the cluster's now",
			"prefix", w.kv.Prefix())
	}
	// Reading the state may take a while (a large history, a slow Consul):
	// keep trying while the lock is held (the heartbeats go on meanwhile)
	// rather than giving the lock back after one slow read.
	for attempt := 1; ; attempt++ {
		err := w.kv.Load(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return err
		}
		delay := min(time.Duration(attempt)*500*time.Millisecond, 5*time.Second)
		w.log.Warn("ha: reading the cluster's state failed; retrying while holding the lock", "attempt", attempt, "retry_in", delay, "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
	// A record is input from whoever can write the KV folder: only tasks
	// the API would accept are applied (daemon_api.go).
	recs := ha.FilterStored(w.kv.TaskRecords(), w.configured, a.checkStoredTask, w.log)
	if err := ha.ApplyStored(ctx, a.ctrl, recs, w.configured, w.log); err != nil {
		if ctx.Err() != nil {
			return err
		}
		w.log.Error("ha: some task changes made through the api could not be applied", "error", err)
	}
	if w.cfg.RerunAllOnFailover {
		w.kv.ForgetApplied()
	}
	return nil
}

// runHA starts the elector and the compatibility checks. The returned stop
// resigns (after the controller has let its runs finish) and waits.
func (a *app) runHA(ctx context.Context) (stop func()) {
	w := a.ha
	if w == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.el.Run(ctx)
	}()
	cctx, cancel := context.WithCancel(context.Background())
	compatDone := make(chan struct{})
	go func() {
		defer close(compatDone)
		self := ha.Instance{ID: a.cfg.ID}
		if b, err := terraform.DetectBinary(a.cfg.Driver.Path); err == nil {
			self.TerraformVersion, self.OpenTofu = b.Version.String(), b.OpenTofu
		}
		_ = ha.NewCompat(ha.CompatOptions{
			Client: a.client.Client, Prefix: w.cfg.Prefix(), Namespace: w.cfg.Namespace, Self: self,
			Leader: w.el.Leader,
			Modules: func() []ha.Module {
				var out []ha.Module
				for _, st := range a.ctrl.Tasks() {
					out = append(out, ha.Module{Task: st.Spec.Name, Source: st.Spec.Module})
				}
				return out
			},
			Logger:  a.log.With("component", "ha.compat"),
			Metrics: haMetrics{a},
		}).Run(cctx)
	}()
	return func() {
		w.el.Resign()
		<-done
		cancel()
		<-compatDone
	}
}

// apiController is the controller the API uses: with high availability it
// saves every task change in the cluster's store.
func (a *app) apiController() ctsapi.Controller {
	if a.ha == nil {
		return a.ctrl
	}
	return &ha.Persisting{Controller: a.ctrl, Store: a.ha.kv, Configured: a.ha.configured, Logger: a.ha.log}
}

// apiCluster is the API's view of the cluster (nil without high
// availability: /v1/status/cluster then answers 405, as CTS).
func (a *app) apiCluster() ctsapi.Cluster {
	if a.ha == nil {
		return nil
	}
	return haCluster{a}
}

// haRegistration adds the cluster tag to the self-registration.
func (a *app) haRegistration(reg consul.Registration) consul.Registration {
	if a.ha == nil {
		return reg
	}
	reg.Tags = append(append([]string{}, reg.Tags...), ha.ClusterTag(a.ha.cfg.ClusterName))
	return reg
}

type haCluster struct{ a *app }

func (c haCluster) IsLeader() bool               { return c.a.ha.el.IsLeader() }
func (c haCluster) Leader() (id, address string) { return c.a.ha.el.Leader() }

func (c haCluster) Status(ctx context.Context) (ctsapi.ClusterStatus, error) {
	w := c.a.ha
	ms, err := w.el.Members(ctx, w.cfg.ClusterName, c.a.cfg.Consul.ServiceRegistration.ServiceName)
	if err != nil {
		return ctsapi.ClusterStatus{}, err
	}
	st := ctsapi.ClusterStatus{ClusterName: w.cfg.ClusterName, Members: make([]ctsapi.ClusterMember, 0, len(ms))}
	for _, m := range ms {
		st.Members = append(st.Members, ctsapi.ClusterMember{ID: m.ID, ServiceName: m.ServiceName,
			Healthy: m.Healthy, Leader: m.Leader, Address: m.Address})
	}
	return st, nil
}

// haMetrics hands leadership and compatibility to the Prometheus metrics
// (read lazily: they are built after setupHA).
type haMetrics struct{ a *app }

func (m haMetrics) SetLeader(leader bool) {
	if m.a.obs.metrics != nil {
		m.a.obs.metrics.SetLeader(leader)
	}
}

func (m haMetrics) CompatFailures(n int) {
	if m.a.obs.metrics == nil {
		return
	}
	m.a.obs.metrics.CompatFailures(n)
}
