package ha

import (
	"context"
	"log/slog"
	"sync"
	"time"

	ctsapi "github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/consul"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

// membership is what the Leader and Spread coordinators share: the cluster's
// state in Consul KV, the task records applied to the controller, the
// follower's refresh and the compatibility checks.
type membership struct {
	o          CoordinatorOptions
	h          *config.HA
	log        *slog.Logger // component "ha"
	prefix     string       // <parent_path>/<cluster>
	address    string       // this instance's advertised address
	kv         *store.ConsulKV
	configured *Configured // the configured tasks and their flags, as configured (replaced by a reload)
	// ctrl is the controller, given by Parts before any part runs (the
	// callbacks of the elector and the spreader only run from there).
	ctrl Controller

	prepMu       sync.Mutex // serialises preparations of successive terms and refreshes
	apiMu        sync.Mutex // held by an API change until it is saved and applied, and while records are applied (Persisting.Mu)
	resetStorage bool       // -reset-storage still to be done (prepMu)
	syncErr      string     // the last error of applying the records in a refresh (logged once; prepMu)

	synced     chan struct{} // closed after the first refresh (or term)
	syncedOnce sync.Once
}

func newMembership(o CoordinatorOptions) *membership {
	c := &membership{o: o, h: o.HA, log: o.Logger.With("component", "ha"), prefix: o.HA.Prefix(), address: AdvertisedAddress(o.HA.InstanceAddress, o.Port),
		configured: NewConfigured(o.Tasks), resetStorage: o.ResetStorage, synced: make(chan struct{})}
	return c
}

// newStore builds the cluster's state store, its writes fenced by fence.
func (c *membership) newStore(fence store.Fence) {
	c.kv = store.NewConsulKV(c.o.Client, store.ConsulKVOptions{Prefix: c.prefix + "/state", History: c.o.History,
		Namespace: c.h.Namespace, Logger: c.log, Fence: fence})
}

// Store implements Coordinator.
func (c *membership) Store() store.Store { return c.kv }

// Standby implements Coordinator: inactive until elected or joined.
func (c *membership) Standby() bool { return true }

// Registration implements Coordinator: the cluster tag.
func (c *membership) Registration(reg consul.Registration) consul.Registration {
	reg.Tags = append(append([]string{}, reg.Tags...), ClusterTag(c.h.ClusterName))
	return reg
}

// persisting is the controller the API uses (Coordinator.API).
func (c *membership) persisting(ctrl Controller) *Persisting {
	return &Persisting{Controller: ctrl, Store: c.kv, Configured: c.configured, Logger: c.log, Mu: &c.apiMu}
}

// Restore implements Coordinator: nothing, each term applies the
// cluster's records.
func (c *membership) Restore(context.Context, Controller) error { return nil }

// Reconfigure implements Coordinator: the configured tasks are replaced
// and apply runs holding the lock of API changes and of the application
// of the cluster's records (apiMu), so that a refresh never removes a
// task the reload just added (it is configured by then).
func (c *membership) Reconfigure(specs []task.Spec, apply func() error) error {
	c.apiMu.Lock()
	defer c.apiMu.Unlock()
	c.configured.Set(specs)
	return apply()
}

// reset carries out -reset-storage: the cluster's stored state is deleted.
// c.prepMu is held.
func (c *membership) reset(ctx context.Context) error {
	if err := c.kv.Reset(ctx); err != nil {
		return err
	}
	c.log.Warn("ha: -reset-storage: the cluster's stored state was deleted; this instance's configuration is the cluster's now",
		"prefix", c.kv.Prefix())
	return nil
}

// prepare readies this instance to run tasks, before its controller becomes
// active, holding prepMu: -reset-storage when asked (every time, or with
// resetOnce only the first time), then the cluster's state is read, retried
// while ctx (the term) lasts: reading may take a while (a large history, a
// slow Consul); then the rest (then).
func (c *membership) prepare(ctx context.Context, resetOnce bool, then func(context.Context) error) error {
	c.prepMu.Lock()
	defer c.prepMu.Unlock()
	if c.resetStorage {
		if err := c.reset(ctx); err != nil {
			return err
		}
		c.resetStorage = !resetOnce
	}
	if err := LoadState(ctx, c.kv.Load, c.log); err != nil {
		return err
	}
	return then(ctx)
}

// apply makes the controller's tasks what the cluster's records say (only
// the records the API would accept: they are input from whoever can write
// the KV folder), holding apiMu so that an API change is never seen half
// done. It returns the deletions with destroy left to finish.
func (c *membership) apply(ctx context.Context) ([]string, error) {
	c.apiMu.Lock()
	defer c.apiMu.Unlock()
	configured, configOn := c.configured.Snapshot()
	recs := FilterStored(c.kv.TaskRecords(), configured, c.o.CheckStored, c.log)
	return ApplyStored(ctx, c.ctrl, recs, configured, configOn, c.log)
}

// applied logs an error of applying the records in a refresh once, until
// it changes or an application succeeds. c.prepMu is held.
func (c *membership) applied(err error, msg string) {
	switch {
	case err != nil && err.Error() != c.syncErr:
		c.log.Error(msg, "error", err)
		c.syncErr = err.Error()
	case err == nil:
		c.syncErr = ""
	}
}

// markSynced notes that this instance has read the cluster's state once.
func (c *membership) markSynced() { c.syncedOnce.Do(func() { close(c.synced) }) }

// parts are the parts of a cluster member: member (the elector or the
// spreader) in the front stage, and in the back stage the refresh of this
// instance's copy of the cluster's state (refresh) and the compatibility
// checks against the leader (leader, changed; none in spread mode).
func (c *membership) parts(member Part, refresh func(context.Context) error, leader func() (string, string), changed func() <-chan struct{}) []Part {
	follow := func(ctx context.Context) error {
		FollowState(ctx, FollowOptions{Client: c.o.Client, Prefix: c.kv.Prefix(), Namespace: c.h.Namespace, Refresh: refresh, Logger: c.log})
		return nil
	}
	compat := func(ctx context.Context) error {
		// The first check covers the tasks created through the API: wait
		// (a little) for the first read of the stored state.
		select {
		case <-c.synced:
		case <-time.After(30 * time.Second):
		case <-ctx.Done():
			return nil
		}
		self := Instance{ID: c.o.ID}
		if c.o.Self != nil {
			self = c.o.Self()
		}
		return NewCompat(CompatOptions{
			Client: c.o.Client, Prefix: c.prefix, Namespace: c.h.Namespace, Self: self,
			Leader: leader, LeaderChanged: changed, Modules: c.modules,
			Logger: c.o.Logger.With("component", "ha.compat"), Metrics: c.o.Metrics,
		}).Run(ctx)
	}
	return []Part{member, {Name: "ha.follow", Back: true, Run: follow}, {Name: "ha.compat", Back: true, Run: compat}}
}

// modules are the controller's tasks, and the tasks created through the
// API that are stored in Consul KV (also those this instance could not
// add, e.g. for a missing module).
func (c *membership) modules() []Module {
	var out []Module
	seen := map[string]bool{}
	for _, st := range c.ctrl.Tasks() {
		seen[st.Spec.Name] = true
		out = append(out, Module{Task: st.Spec.Name, Source: st.Spec.Module})
	}
	for name, rec := range c.kv.TaskRecords() {
		if rec.Spec != nil && !seen[name] && !c.configured.Has(name) {
			out = append(out, Module{Task: name, Source: rec.Spec.Module})
		}
	}
	return out
}

// members lists the members registered in Consul (Registered), given the
// leader ("" none).
func (c *membership) members(ctx context.Context, leaderID, leaderAddr string) ([]Member, error) {
	return Registered(ctx, c.o.Client, Lookup{Cluster: c.h.ClusterName, ServiceName: c.o.ServiceName,
		SelfID: c.o.ID, SelfAddr: c.address, LeaderID: leaderID, LeaderAddr: leaderAddr})
}

// status is the cluster status without its members.
func (c *membership) status() ctsapi.ClusterStatus {
	return ctsapi.ClusterStatus{ClusterName: c.h.ClusterName}
}

// Leader is the coordinator of leader/follower mode: the instance whose
// session holds the lock runs every task; the others keep a copy of the
// cluster's state and take over when it fails.
type Leader struct {
	*membership
	el *Elector
}

func newLeader(c *membership) (*Leader, error) {
	l := &Leader{membership: c}
	el, err := New(Options{
		Client: c.o.Client, Prefix: c.prefix, Namespace: c.h.Namespace, ID: c.o.ID, Address: c.address,
		SessionTTL: c.h.SessionTTL, Logger: c.log, Metrics: c.o.Metrics,
		OnElected: func(ctx context.Context) error { return l.prepare(ctx, false, l.lead) }, // -reset-storage every term, as CTS documents
		SetActive: func(on bool) { l.ctrl.SetActive(on) },
	})
	if err != nil {
		return nil, err
	}
	l.el = el
	c.newStore(func(string) (string, string, bool) { return el.LockSession() })
	return l, nil
}

// Driver implements Coordinator: Terraform runs only while this instance
// leads.
func (l *Leader) Driver(f reconcile.DriverFactory) reconcile.DriverFactory {
	return fenceFactory(f, func(string) Fencer { return l.el })
}

// KillBound implements Coordinator.
func (l *Leader) KillBound() time.Duration { return l.el.Timing().Kill }

// API implements Coordinator.
func (l *Leader) API(ctrl Controller) ctsapi.Controller { return l.persisting(ctrl) }

// Cluster implements Coordinator.
func (l *Leader) Cluster() ctsapi.Cluster { return leaderView{l} }

// Parts implements Coordinator: the elector (front: a follower stops
// campaigning at shutdown, a leader keeps the lock until Resign), the
// follower's refresh and the compatibility checks.
func (l *Leader) Parts(ctrl Controller) []Part {
	l.ctrl = ctrl
	return l.parts(Part{Name: "ha.elector", Run: l.el.Run}, l.refresh, l.el.Leader, l.el.LeaderChanged)
}

// Resign implements Coordinator.
func (l *Leader) Resign() { l.el.Resign() }

// lead finishes the preparation of a new leader once the cluster's state
// is read (prepare): the task changes made through the API are applied,
// and with rerun_all_on_failover the applied hashes forgotten so that
// every task runs once. l.prepMu is held.
func (l *Leader) lead(ctx context.Context) error {
	destroys, err := l.apply(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		l.log.Error("ha: some task changes made through the api could not be applied", "error", err)
	}
	// Deletions with destroy the previous leader did not finish: finished
	// once this instance leads (for the rest of this term).
	go ResumeDestroys(ctx, l.persisting(l.ctrl), destroys, l.log)
	if l.h.RerunAllOnFailover {
		l.kv.ForgetApplied()
	}
	l.markSynced()
	return nil
}

// refresh brings a follower's copy of the cluster's state up to date
// (FollowState calls it when the stored state changes): the run history,
// run states and task records are read from Consul KV and the records
// applied to its (inactive) controller, so that its API (?stale reads),
// dashboard and compatibility checks show the cluster's tasks and history.
// It does nothing while this instance holds the lock: the leader's copy is
// the one it writes, and a new leader's prepare, which takes the same
// mutex, always reloads after a refresh that raced with an election.
func (l *Leader) refresh(ctx context.Context) error {
	l.prepMu.Lock()
	defer l.prepMu.Unlock()
	if _, _, held := l.el.LockSession(); held {
		return nil
	}
	if err := l.kv.Load(ctx); err != nil {
		return err
	}
	_, err := l.apply(ctx) // destroys are the leader's
	l.applied(err, "ha: follower: some task changes made through the api cannot be applied here")
	l.markSynced()
	return nil
}

// leaderView is the API's view of a leader/follower cluster.
type leaderView struct{ l *Leader }

func (c leaderView) IsLeader() bool               { return c.l.el.IsLeader() }
func (c leaderView) Leader() (id, address string) { return c.l.el.Leader() }

func (c leaderView) Status(ctx context.Context) (ctsapi.ClusterStatus, error) {
	id, addr := c.l.el.Leader()
	ms, err := c.l.members(ctx, id, addr)
	if err != nil {
		return ctsapi.ClusterStatus{}, err
	}
	st := c.l.status()
	st.Members = make([]ctsapi.ClusterMember, 0, len(ms))
	for _, m := range ms {
		st.Members = append(st.Members, ctsapi.ClusterMember{ID: m.ID, ServiceName: m.ServiceName,
			Healthy: m.Healthy, Leader: m.Leader, Address: m.Address})
	}
	return st, nil
}
