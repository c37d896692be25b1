package ha

import (
	"context"
	"slices"
	"strings"
	"time"

	ctsapi "github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/task"
)

// Spread is the coordinator of spread mode (spread_tasks): the members
// share the tasks (Spreader); every member keeps every task and a copy of
// the cluster's state, and runs the tasks it owns.
type Spread struct {
	*membership
	sp *Spreader
}

func newSpread(c *membership) (*Spread, error) {
	s := &Spread{membership: c}
	var m SpreadMetrics
	if c.o.SpreadMetrics != nil {
		m = c.o.SpreadMetrics()
	}
	sp, err := NewSpreader(SpreadOptions{
		Client: c.o.Client, Prefix: c.prefix, Namespace: c.h.Namespace, ID: c.o.ID, Address: c.address,
		Weight: float64(c.h.Weight), SessionTTL: c.h.SessionTTL, Logger: c.log, Metrics: m,
		// The controller (Parts) and the store (below) are there before
		// Run starts, the only caller of these.
		Tasks:     func() []string { return s.ctrl.TaskNames() },
		Group:     func() map[string]string { return s.ctrl.ChainGroups() },
		Busy:      func(name string) bool { return s.ctrl.Busy(name) },
		OnJoin:    func(ctx context.Context) error { return s.prepare(ctx, true, s.sync) }, // -reset-storage on the first join only
		SetActive: func(on bool) { s.ctrl.SetActive(on) },
		SetOwned:  func(owns func(string) bool) { s.ctrl.SetOwned(owns) },
		Claim:     func(ctx context.Context, task string) error { return s.kv.Claim(ctx, task) },
		Unclaim:   func(task string) { s.kv.Unclaim(task) },
	})
	if err != nil {
		return nil, err
	}
	s.sp = sp
	c.newStore(sp.TaskFence) // a task's state is written by its owner only
	return s, nil
}

// Driver implements Coordinator: Terraform runs a task only while this
// instance owns it.
func (s *Spread) Driver(f reconcile.DriverFactory) reconcile.DriverFactory {
	return fenceFactory(f, s.sp.Fencer)
}

// KillBound implements Coordinator.
func (s *Spread) KillBound() time.Duration { return s.sp.Timing().Kill }

// API implements Coordinator: a task created with run=now is owned here
// first, and the spreader hears of every change of the task list.
func (s *Spread) API(ctrl Controller) ctsapi.Controller {
	p := s.persisting(ctrl)
	p.Acquire, p.Changed = s.sp.Acquire, s.sp.Kick
	return p
}

// Reconfigure implements Coordinator: as a member's, then the spreader
// hears that the task list changed (new tasks get an owner).
func (s *Spread) Reconfigure(specs []task.Spec, apply func() error) error {
	err := s.membership.Reconfigure(specs, apply)
	s.sp.Kick()
	return err
}

// Cluster implements Coordinator.
func (s *Spread) Cluster() ctsapi.Cluster { return spreadView{s} }

// Parts implements Coordinator: the spreader, the refresh of this
// member's copy of the cluster's state and the compatibility checks (with
// no leader to compare with).
func (s *Spread) Parts(ctrl Controller) []Part {
	s.ctrl = ctrl
	noLeader := func() (string, string) { return "", "" }
	return s.parts(Part{Name: "ha.spread", Run: s.sp.Run}, s.refresh, noLeader, nil)
}

// Resign implements Coordinator.
func (s *Spread) Resign() { s.sp.Resign() }

// refresh brings this member's copy of the cluster's state up to date
// (FollowState calls it when the stored state changes); every member
// refreshes, and the tasks it owns keep their cached state (the store's
// Claim).
func (s *Spread) refresh(ctx context.Context) error {
	s.prepMu.Lock()
	defer s.prepMu.Unlock()
	if err := s.kv.Load(ctx); err != nil {
		return err
	}
	return s.sync(ctx)
}

// sync applies the cluster's task records to this member's controller
// (every member keeps every task), finishes the pending deletions with
// destroy of the tasks it owns, and tells the spreader the task list may
// have changed. It never fails (an error of applying the records is
// logged). s.prepMu is held.
func (s *Spread) sync(ctx context.Context) error {
	destroys, err := s.apply(ctx)
	s.applied(err, "ha: some task changes made through the api cannot be applied here")
	var mine []string
	for _, name := range destroys {
		if s.sp.Owns(name) {
			mine = append(mine, name)
		}
	}
	if len(mine) > 0 {
		go ResumeDestroys(context.WithoutCancel(ctx), s.persisting(s.ctrl), mine, s.log)
	}
	s.sp.Kick()
	s.markSynced()
	return nil
}

// spreadView is the API's view of a spread cluster: no leader; each
// task has its owner.
type spreadView struct{ s *Spread }

func (spreadView) IsLeader() bool               { return false }
func (spreadView) Leader() (id, address string) { return "", "" }
func (c spreadView) Spread() bool               { return true }
func (c spreadView) Self() string               { return c.s.o.ID }
func (c spreadView) Holder(task string) string  { return c.s.sp.Holder(task) }
func (c spreadView) Owner(task string) (id, address string, self, ok bool) {
	return c.s.sp.Owner(task)
}

// Status lists the members (those registered, with their Consul health,
// and those holding a member key), each with its address, weight and the
// tasks it owns; no leader.
func (c spreadView) Status(ctx context.Context) (ctsapi.ClusterStatus, error) {
	registered, err := c.s.members(ctx, "", "")
	if err != nil {
		return ctsapi.ClusterStatus{}, err
	}
	return spreadStatus(c.s.status(), registered, c.s.sp.Members(), c.s.o.ServiceName), nil
}

// spreadStatus is the cluster status of spread mode from the registered
// members and those holding a member key.
func spreadStatus(st ctsapi.ClusterStatus, registered []Member, members []MemberInfo, service string) ctsapi.ClusterStatus {
	st.SpreadTasks = true
	byID := map[string]MemberInfo{}
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
