package cli

import (
	"context"
	"log/slog"
	"net"
	"slices"
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
	"github.com/ctsync/ctsync/internal/metrics"
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
	cfg *config.HA
	log *slog.Logger
	kv  *store.ConsulKV
	el  *ha.Elector
	// sp is the spread mode's membership and task ownership (spread.go of
	// package ha); nil in leader/follower mode. In spread mode el is built
	// but never run: it only lists the registered members.
	sp         *ha.Spreader
	spm        *metrics.Spread // its metrics (haParts)
	configured map[string]bool // names of the configured tasks
	configOn   map[string]bool // their enabled flags, as configured

	prepMu       sync.Mutex // serialises preparations of successive terms and follower refreshes
	apiMu        sync.Mutex // held by an API change until it is saved and applied, and while records are applied (ha.Persisting.Mu)
	resetStorage bool       // -reset-storage: on every term

	synced     chan struct{} // closed after the first follower refresh (or term)
	syncedOnce sync.Once
	syncErr    string // the last error of applying stored task changes as a follower (logged once)
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
	w := &haWiring{cfg: h, log: a.log.With("component", "ha"), configured: map[string]bool{}, configOn: map[string]bool{},
		synced: make(chan struct{})}
	for _, s := range a.cfg.Tasks {
		w.configured[s.Name] = true
		w.configOn[s.Name] = s.Enabled
	}
	prefix := h.Prefix()
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
	a.ha = w
	kvOpts := store.ConsulKVOptions{Prefix: prefix + "/state", History: a.cfg.History, Namespace: h.Namespace, Logger: w.log}
	if h.SpreadTasks {
		return a.setupSpread(factory, prefix, kvOpts)
	}
	kvOpts.Fence = func(string) (string, string, bool) { return el.LockSession() }
	w.kv = store.NewConsulKV(a.client.Client, kvOpts)
	a.store = w.kv
	return func(spec task.Spec) (driver.Driver, error) {
		d, err := factory(spec)
		if err != nil {
			return nil, err
		}
		return ha.FenceDriver(d, el), nil
	}, nil
}

// setupSpread is setupHA in spread mode: the spreader owns tasks instead of
// an elector leading, the store's writes of a task are fenced by the
// task's owner key, and each task's driver runs only while this instance
// owns the task.
func (a *app) setupSpread(factory reconcile.DriverFactory, prefix string, kvOpts store.ConsulKVOptions) (reconcile.DriverFactory, error) {
	w, h := a.ha, a.cfg.HA
	sp, err := ha.NewSpreader(ha.SpreadOptions{
		Client:     a.client.Client,
		Prefix:     prefix,
		Namespace:  h.Namespace,
		ID:         a.cfg.ID,
		Address:    advertisedAddress(h.InstanceAddress, a.cfg.Port),
		Weight:     float64(h.Weight),
		SessionTTL: h.SessionTTL,
		Logger:     w.log,
		Metrics:    spreadMetrics{w},
		// The controller is built after setupHA; these run once Run has
		// started.
		Tasks:     func() []string { return a.ctrl.TaskNames() },
		Group:     func() map[string]string { return a.ctrl.ChainGroups() },
		Busy:      func(name string) bool { return a.ctrl.Busy(name) },
		OnJoin:    a.haJoined,
		SetActive: func(on bool) { a.ctrl.SetActive(on) },
		SetOwned:  func(owns func(string) bool) { a.ctrl.SetOwned(owns) },
		// The store is built below, before Run starts.
		Claim:   func(ctx context.Context, task string) error { return w.kv.Claim(ctx, task) },
		Unclaim: func(task string) { w.kv.Unclaim(task) },
	})
	if err != nil {
		return nil, err
	}
	w.sp = sp
	kvOpts.Fence = sp.TaskFence
	w.kv = store.NewConsulKV(a.client.Client, kvOpts)
	a.store = w.kv
	return func(spec task.Spec) (driver.Driver, error) {
		d, err := factory(spec)
		if err != nil {
			return nil, err
		}
		return ha.FenceDriver(d, sp.Fencer(spec.Name)), nil
	}, nil
}

// reset carries out -reset-storage: the cluster's stored state is deleted.
func (w *haWiring) reset(ctx context.Context) error {
	if err := w.kv.Reset(ctx); err != nil {
		return err
	}
	w.log.Warn("ha: -reset-storage: the cluster's stored state was deleted; this instance's configuration is the cluster's now",
		"prefix", w.kv.Prefix())
	return nil
}

// haJoined prepares this instance to run the tasks it will own (spread
// mode), before its controller becomes active: -reset-storage (first join
// only), load the cluster's state, apply the task changes made through the
// API.
func (a *app) haJoined(ctx context.Context) error {
	w := a.ha
	w.prepMu.Lock()
	defer w.prepMu.Unlock()
	if w.resetStorage {
		if err := w.reset(ctx); err != nil {
			return err
		}
		w.resetStorage = false
	}
	if err := ha.LoadState(ctx, w.kv.Load, w.log); err != nil {
		return err
	}
	a.haApplySpread(ctx)
	w.syncedOnce.Do(func() { close(w.synced) })
	return nil
}

// haApplySpread applies the cluster's task records to this member's
// controller (spread mode: every member keeps every task), finishes the
// pending deletions with destroy of the tasks it owns, and tells the
// spreader the task list may have changed. w.prepMu is held.
func (a *app) haApplySpread(ctx context.Context) {
	w := a.ha
	w.apiMu.Lock()
	recs := ha.FilterStored(w.kv.TaskRecords(), w.configured, a.checkStoredTask, w.log)
	destroys, err := ha.ApplyStored(ctx, a.ctrl, recs, w.configured, w.configOn, w.log)
	w.apiMu.Unlock()
	switch {
	case err != nil && err.Error() != w.syncErr:
		w.log.Error("ha: some task changes made through the api cannot be applied here", "error", err)
		w.syncErr = err.Error()
	case err == nil:
		w.syncErr = ""
	}
	var mine []string
	for _, name := range destroys {
		if w.sp.Owns(name) {
			mine = append(mine, name)
		}
	}
	if len(mine) > 0 {
		go ha.ResumeDestroys(context.WithoutCancel(ctx), a.apiController().(*ha.Persisting), mine, w.log)
	}
	w.sp.Kick()
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
		if err := w.reset(ctx); err != nil {
			return err
		}
	}
	// Reading the state may take a while (a large history, a slow Consul):
	// a new leader keeps trying while it holds the lock.
	if err := ha.LoadState(ctx, w.kv.Load, w.log); err != nil {
		return err
	}
	// A record is input from whoever can write the KV folder: only tasks
	// the API would accept are applied (daemon_api.go).
	w.apiMu.Lock()
	recs := ha.FilterStored(w.kv.TaskRecords(), w.configured, a.checkStoredTask, w.log)
	destroys, err := ha.ApplyStored(ctx, a.ctrl, recs, w.configured, w.configOn, w.log)
	w.apiMu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		w.log.Error("ha: some task changes made through the api could not be applied", "error", err)
	}
	// Deletions with destroy the previous leader did not finish: finished
	// once this instance leads (for the rest of this term).
	go ha.ResumeDestroys(ctx, a.apiController().(*ha.Persisting), destroys, w.log)
	if w.cfg.RerunAllOnFailover {
		w.kv.ForgetApplied()
	}
	w.syncedOnce.Do(func() { close(w.synced) })
	return nil
}

// haFollowerRefresh brings a follower's copy of the cluster's state up to
// date (ha.FollowState calls it when the stored state changes): the run
// history, run states and task changes made through the API are read from
// Consul KV and the task changes applied to its (inactive) controller, so
// that its API (?stale reads), dashboard and compatibility checks show the
// cluster's tasks and history. It does nothing while this instance holds
// the lock: the leader's copy is the one it writes, and haElected, which
// takes the same mutex, always reloads after a refresh that raced with an
// election.
func (a *app) haFollowerRefresh(ctx context.Context) error {
	w := a.ha
	w.prepMu.Lock()
	defer w.prepMu.Unlock()
	if w.sp != nil {
		// Spread mode: every member refreshes; the tasks it owns keep
		// their cached state (the store's Claim).
		if err := w.kv.Load(ctx); err != nil {
			return err
		}
		a.haApplySpread(ctx)
		w.syncedOnce.Do(func() { close(w.synced) })
		return nil
	}
	if _, _, held := w.el.LockSession(); held {
		return nil
	}
	if err := w.kv.Load(ctx); err != nil {
		return err
	}
	recs := ha.FilterStored(w.kv.TaskRecords(), w.configured, a.checkStoredTask, w.log)
	_, err := ha.ApplyStored(ctx, a.ctrl, recs, w.configured, w.configOn, w.log) // destroys are the leader's
	switch {
	case err != nil && err.Error() != w.syncErr:
		w.log.Error("ha: follower: some task changes made through the api cannot be applied here", "error", err)
		w.syncErr = err.Error()
	case err == nil:
		w.syncErr = ""
	}
	w.syncedOnce.Do(func() { close(w.synced) })
	return nil
}

// stagedPart is a part of the daemon and its stage (daemon.go).
type stagedPart struct {
	part
	back bool
}

// haParts are the parts of high availability (none without it): the
// elector (front: a follower stops campaigning at shutdown, a leader keeps
// the lock until haResign), and, in the back stage, the follower's refresh
// of the cluster's state and the compatibility checks.
func (a *app) haParts() []stagedPart {
	w := a.ha
	if w == nil {
		return nil
	}
	follow := func(ctx context.Context) error {
		ha.FollowState(ctx, ha.FollowOptions{
			Client: a.client.Client, Prefix: w.kv.Prefix(), Namespace: w.cfg.Namespace,
			Refresh: a.haFollowerRefresh, Logger: w.log,
		})
		return nil
	}
	leader := w.el.Leader
	if w.sp != nil {
		leader = func() (string, string) { return "", "" } // no leader to compare with
		if a.obs.metrics != nil && w.spm == nil {
			w.spm = metrics.RegisterSpread(a.obs.metrics.Registry())
			a.obs.metrics.SetLeader(false) // no leader in spread mode
		}
	}
	compat := func(ctx context.Context) error {
		// The first check covers the tasks created through the API: wait
		// (a little) for the first read of the stored state.
		select {
		case <-w.synced:
		case <-time.After(30 * time.Second):
		case <-ctx.Done():
			return nil
		}
		self := ha.Instance{ID: a.cfg.ID}
		if b, err := terraform.DetectBinary(a.cfg.Driver.Path); err == nil {
			self.TerraformVersion, self.OpenTofu = b.Version.String(), b.OpenTofu
		}
		return ha.NewCompat(ha.CompatOptions{
			Client: a.client.Client, Prefix: w.cfg.Prefix(), Namespace: w.cfg.Namespace, Self: self,
			Leader: leader, LeaderChanged: w.el.LeaderChanged,
			Modules: func() []ha.Module {
				// The controller's tasks, and the tasks created through
				// the API that are stored in Consul KV (also those this
				// instance could not add, e.g. for a missing module).
				var out []ha.Module
				seen := map[string]bool{}
				for _, st := range a.ctrl.Tasks() {
					seen[st.Spec.Name] = true
					out = append(out, ha.Module{Task: st.Spec.Name, Source: st.Spec.Module})
				}
				for name, rec := range w.kv.TaskRecords() {
					if rec.Spec != nil && !seen[name] && !w.configured[name] {
						out = append(out, ha.Module{Task: name, Source: rec.Spec.Module})
					}
				}
				return out
			},
			Logger:  a.log.With("component", "ha.compat"),
			Metrics: haMetrics{a},
		}).Run(ctx)
	}
	member := part{"ha.elector", w.el.Run}
	if w.sp != nil {
		member = part{"ha.spread", w.sp.Run}
	}
	return []stagedPart{
		{member, false},
		{part{"ha.follow", follow}, true},
		{part{"ha.compat", compat}, true},
	}
}

// haResign hands the lead over once the runs in progress are over (the
// elector's Run then returns); nothing without high availability.
func (a *app) haResign() {
	switch {
	case a.ha == nil:
	case a.ha.sp != nil:
		a.ha.sp.Resign()
	default:
		a.ha.el.Resign()
	}
}

// apiController is the controller the API uses: with high availability it
// saves every task change in the cluster's store.
func (a *app) apiController() ctsapi.Controller {
	if a.ha == nil {
		return a.ctrl
	}
	p := &ha.Persisting{Controller: a.ctrl, Store: a.ha.kv, Configured: a.ha.configured, Logger: a.ha.log, Mu: &a.ha.apiMu}
	if sp := a.ha.sp; sp != nil {
		p.Acquire, p.Changed = sp.Acquire, sp.Kick
	}
	return p
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
	if w.sp != nil {
		return spreadStatus(st, ms, w.sp.Members(), c.a.cfg.Consul.ServiceRegistration.ServiceName), nil
	}
	for _, m := range ms {
		st.Members = append(st.Members, ctsapi.ClusterMember{ID: m.ID, ServiceName: m.ServiceName,
			Healthy: m.Healthy, Leader: m.Leader, Address: m.Address})
	}
	return st, nil
}

// spreadStatus is the cluster status of spread mode: the members (those
// registered, with their Consul health, and those holding a member key),
// each with its address, weight and the tasks it owns; no leader.
func spreadStatus(st ctsapi.ClusterStatus, registered []ha.Member, members []ha.MemberInfo, service string) ctsapi.ClusterStatus {
	st.SpreadTasks = true
	byID := map[string]ha.MemberInfo{}
	for _, m := range members {
		byID[m.ID] = m
	}
	seen := map[string]bool{}
	add := func(id, svc string, healthy bool) {
		seen[id] = true
		cm := ctsapi.ClusterMember{ID: id, ServiceName: svc, Healthy: healthy}
		if mi, ok := byID[id]; ok {
			cm.Address, cm.Tasks, cm.Weight = mi.Address, mi.Tasks, int(mi.Weight)
		}
		st.Members = append(st.Members, cm)
	}
	for _, m := range registered {
		add(m.ID, m.ServiceName, m.Healthy)
	}
	for _, m := range members {
		if !seen[m.ID] {
			add(m.ID, service, true)
		}
	}
	slices.SortFunc(st.Members, func(a, b ctsapi.ClusterMember) int { return strings.Compare(a.ID, b.ID) })
	return st
}

// Spread, Self, Owner and Holder make haCluster an api.SpreadCluster.
func (c haCluster) Spread() bool { return c.a.ha.sp != nil }
func (c haCluster) Self() string { return c.a.cfg.ID }
func (c haCluster) Owner(task string) (id, address string, self, ok bool) {
	return c.a.ha.sp.Owner(task)
}
func (c haCluster) Holder(task string) string { return c.a.ha.sp.Holder(task) }

// spreadMetrics hands ownership to the Prometheus metrics (registered in
// haParts, after setupHA).
type spreadMetrics struct{ w *haWiring }

func (m spreadMetrics) Owned(tasks, members int) {
	if m.w.spm != nil {
		m.w.spm.Owned(tasks, members)
	}
}

func (m spreadMetrics) OwnershipChange(kind string) {
	if m.w.spm != nil {
		m.w.spm.OwnershipChange(kind)
	}
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
