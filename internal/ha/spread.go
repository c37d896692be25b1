package ha

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/clock"
)

// ErrNotOwner is returned when a run of a task is attempted on an instance
// that does not own the task (spread mode), or that stopped owning it.
var ErrNotOwner = errors.New("this instance does not own the task")

// maxTxnOps bounds the operations of one KV transaction (Consul's limit is
// 64 by default).
const maxTxnOps = 64

// SpreadOptions configure a Spreader.
type SpreadOptions struct {
	Client *api.Client
	// Prefix is the cluster's KV folder, <parent_path>/<cluster>; the
	// spread keys live under <Prefix>/spread.
	Prefix    string
	Namespace string
	// ID is this instance's id; Address how API clients and the other
	// members reach it ("" when not advertised); Weight its share of the
	// tasks relative to the others (instance.weight, default 1).
	ID      string
	Address string
	Weight  float64
	// SessionTTL is session_ttl; Timing, when its SessionTTL is set,
	// replaces the timing derived from it (tests).
	SessionTTL time.Duration
	Timing     Timing
	Logger     *slog.Logger
	Metrics    SpreadMetrics
	Clock      Clock

	// Tasks returns the names of the cluster's tasks (the controller's).
	Tasks func() []string
	// Group, when set, returns the group of each task that has one (the
	// chains of tasks that depend on each other): the tasks of a group
	// have one owner, so that a task runs where the tasks it depends on
	// run. It is called without the spreader's lock held.
	Group func() map[string]string
	// Busy reports whether a run of the task is in progress here: a task
	// that moves to another member is released only once it is not.
	Busy func(task string) bool
	// OnJoin prepares this instance to run tasks, with a context that ends
	// with the membership: load the shared state, apply the task changes
	// made through the API. It runs while the member key is held; an error
	// leaves the cluster (and joins again later).
	OnJoin func(ctx context.Context) error
	// SetActive switches the controller on once OnJoin succeeded, and off
	// as soon as the membership ends.
	SetActive func(active bool)
	// SetOwned tells the controller which tasks it may run. It is called
	// with the current predicate every time the owned set changes.
	SetOwned func(owns func(task string) bool)
	// Claim is called when this instance starts owning a task, before the
	// controller is told: it reads the task's stored state afresh (the
	// previous owner's last writes) and keeps it. Unclaim is called when it
	// stops owning it.
	Claim   func(ctx context.Context, task string) error
	Unclaim func(task string)
}

// SpreadMetrics is told about ownership.
type SpreadMetrics interface {
	// Owned is called with the number of tasks this instance owns and the
	// number of members it sees whenever either changes.
	Owned(tasks, members int)
	// OwnershipChange counts acquisitions ("acquire", "takeover"),
	// releases ("release") and expulsions ("expel").
	OwnershipChange(kind string)
}

type nopSpreadMetrics struct{}

func (nopSpreadMetrics) Owned(int, int)         {}
func (nopSpreadMetrics) OwnershipChange(string) {}

// Spreader is this instance's membership of a spread cluster and the
// ownership of its tasks (see docs/ha.md, "Spread mode"):
//
//	<prefix>/spread/members/<id>    locked by the member's session, rewritten
//	                                at every heartbeat: {"id","address","weight","beat","since"}
//	<prefix>/spread/owners/<task>   locked by the owner's session: {"id","since","released"}
//
// A member runs a task only while it holds the task's owner key with its
// session and its membership lease is valid (the heartbeat rules of the
// leader election, per member: step-down S after the last successful
// heartbeat, kill bound K, S + K < T). Keys change hands only when their
// holder released them after stopping the task, when Consul invalidated its
// session, or when a member that saw its member key silent for T expelled it
// (a check-index delete of the member key, so that a late heartbeat of the
// expelled member fails) and took its task keys over.
type Spreader struct {
	lockBase
	o      SpreadOptions
	prefix string // <Prefix>/spread
	self   string // member key

	session string
	// joined is the session that last held this instance's member key:
	// a term may resume with it (keeping the task keys it holds) only if
	// it still holds the member key, i.e. nobody expelled this instance.
	joined   string
	term     *sterm
	stopping bool
	snap     snapshot
	index    uint64
	sil      *silence
	owned    map[string]*ownedTask
	beat     uint64
	owners   map[string]string // the assignment as last computed
	members  int
	// local holds this instance's own latest writes of task keys (lock,
	// unlock) with their ModifyIndex: a read of the folder that started
	// before such a write must not make this instance forget it.
	local map[string]ownerKey

	pmu sync.Mutex // serialises what the controller is told (SetActive, SetOwned)

	wake       chan struct{}
	resign     chan struct{}
	resignOnce sync.Once
	// waiting, when set (tests), is called each time Run is about to wait.
	waiting func(next time.Time)
}

// sterm is one period of membership: from a successful join to the end of
// the lease (or a leave).
type sterm struct {
	lease
	ctx    context.Context
	cancel context.CancelFunc
	active bool // OnJoin succeeded
	failed bool // OnJoin failed: leave
}

// ownedTask is a task this instance holds the key of.
type ownedTask struct {
	ctx      context.Context
	cancel   context.CancelFunc
	index    uint64 // the ModifyIndex of this instance's lock of the key (0 unknown)
	claimed  bool   // its state was read: the controller may run it
	draining bool   // it belongs elsewhere now: released once idle
}

// NewSpreader returns a Spreader; Run starts it.
func NewSpreader(o SpreadOptions) (*Spreader, error) {
	t := o.Timing
	if t.SessionTTL == 0 {
		t = TimingFor(o.SessionTTL)
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("ha: %w", err)
	}
	if o.Client == nil || o.ID == "" || o.Prefix == "" || o.Tasks == nil {
		return nil, errors.New("ha: a client, an instance id, a KV prefix and the task list are required")
	}
	if o.Weight <= 0 {
		o.Weight = 1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = nopSpreadMetrics{}
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Busy == nil {
		o.Busy = func(string) bool { return false }
	}
	if o.OnJoin == nil {
		o.OnJoin = func(context.Context) error { return nil }
	}
	if o.SetActive == nil {
		o.SetActive = func(bool) {}
	}
	if o.SetOwned == nil {
		o.SetOwned = func(func(string) bool) {}
	}
	if o.Claim == nil {
		o.Claim = func(context.Context, string) error { return nil }
	}
	if o.Unclaim == nil {
		o.Unclaim = func(string) {}
	}
	prefix := strings.TrimRight(o.Prefix, "/") + "/spread"
	s := &Spreader{
		lockBase: newLockBase(t, o.Logger, o.Clock, o.Namespace, o.Client),
		o:        o, prefix: prefix,
		self: prefix + "/members/" + url.PathEscape(o.ID),
		sil:  newSilence(t.Takeover), owned: map[string]*ownedTask{}, local: map[string]ownerKey{},
		wake: make(chan struct{}, 1), resign: make(chan struct{}),
	}
	return s, nil
}

// Timing returns the timing in use.
func (s *Spreader) Timing() Timing { return s.t }

func (s *Spreader) ownerKey(task string) string { return s.prefix + "/owners/" + url.PathEscape(task) }

// Kick makes the spreader look at the task list again (a task was created
// or deleted).
func (s *Spreader) Kick() { signal(s.wake) }

// Member reports whether this instance is a member now (its lease is
// valid and its state loaded).
func (s *Spreader) Member() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.term != nil && s.term.active
}

// Owns reports whether this instance owns the task and may run it.
func (s *Spreader) Owns(task string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ot := s.owned[task]
	return s.term != nil && s.term.active && ot != nil && ot.claimed && !ot.draining
}

// MemberInfo is a member of the cluster as this instance sees it.
type MemberInfo struct {
	ID      string
	Address string
	Weight  float64
	// Tasks are the tasks whose key it holds, sorted.
	Tasks []string
}

// Members returns the cluster's members and the tasks each owns, from the
// last read of the spread folder (this instance is listed while it is a
// member, with its own view of what it owns).
func (s *Spreader) Members() []MemberInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	by := map[string]*MemberInfo{}
	bySession := map[string]*MemberInfo{}
	for id, m := range s.snap.members {
		mi := &MemberInfo{ID: id, Address: m.rec.Address, Weight: m.rec.Weight}
		by[id], bySession[m.session] = mi, mi
	}
	if s.term != nil {
		mi := by[s.o.ID]
		if mi == nil {
			mi = &MemberInfo{ID: s.o.ID}
			by[s.o.ID] = mi
		}
		mi.Address, mi.Weight, mi.Tasks = s.o.Address, s.o.Weight, nil
		bySession[s.term.session] = mi
	}
	for task, o := range s.snap.owners {
		if o.session == "" {
			continue
		}
		if s.term != nil && o.session == s.term.session {
			continue // this instance's own list is below
		}
		if mi := bySession[o.session]; mi != nil {
			mi.Tasks = append(mi.Tasks, task)
		}
	}
	if s.term != nil {
		for task := range s.owned {
			by[s.o.ID].Tasks = append(by[s.o.ID].Tasks, task)
		}
	}
	out := make([]MemberInfo, 0, len(by))
	for _, id := range slices.Sorted(maps.Keys(by)) {
		mi := by[id]
		slices.Sort(mi.Tasks)
		out = append(out, *mi)
	}
	return out
}

// Owner returns the member that owns a task now (from the last read of the
// spread folder): its id and address, self when it is this instance, ok
// false when no member holds the task's key. For a task that does not exist
// yet (or has no key yet), it is the member the assignment gives it to.
func (s *Spreader) Owner(task string) (id, address string, self, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mySession := ""
	if s.term != nil {
		mySession = s.term.session
	}
	if ot := s.owned[task]; ot != nil && s.term != nil {
		return s.o.ID, s.o.Address, true, true
	}
	if o, held := s.snap.owners[task]; held && o.session != "" {
		if o.session == mySession {
			return s.o.ID, s.o.Address, true, true
		}
		if mid, member := s.snap.holder(o.session); member {
			return mid, s.snap.members[mid].rec.Address, false, true
		}
		return "", "", false, false // held by an expelled member: moving
	}
	// No owner yet: where the assignment puts it (the last one computed,
	// which places chained tasks together; for a task it does not know
	// yet, by its name).
	if mid, known := s.owners[task]; known && mid != "" {
		if mid == s.o.ID {
			return s.o.ID, s.o.Address, true, true
		}
		if m, member := s.snap.members[mid]; member {
			return mid, m.rec.Address, false, true
		}
	}
	cands := []Candidate{}
	if s.term != nil {
		cands = append(cands, Candidate{ID: s.o.ID, Weight: s.o.Weight})
	}
	for mid, m := range s.snap.members {
		if mid != s.o.ID {
			cands = append(cands, Candidate{ID: mid, Weight: m.rec.Weight})
		}
	}
	mid := Owner(task, cands)
	switch {
	case mid == "":
		return "", "", false, false
	case mid == s.o.ID:
		return s.o.ID, s.o.Address, true, true
	default:
		return mid, s.snap.members[mid].rec.Address, false, true
	}
}

// Holder returns the id of the member holding a task's key now ("" none,
// or a member that was expelled).
func (s *Spreader) Holder(task string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term != nil && s.owned[task] != nil {
		return s.o.ID
	}
	if o, ok := s.snap.owners[task]; ok && o.session != "" {
		if id, member := s.snap.holder(o.session); member {
			return id
		}
	}
	return ""
}

// TaskFence is the fence of the state store in spread mode: the writes of a
// task's state are conditional on this instance's session holding the
// task's owner key; the writes that belong to no task (task changes made
// through the API, -reset-storage) on it holding its member key.
func (s *Spreader) TaskFence(task string) (key, session string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term == nil {
		return "", "", false
	}
	if task == "" {
		return s.self, s.term.session, true
	}
	if s.owned[task] == nil {
		return "", "", false
	}
	return s.ownerKey(task), s.term.session, true
}

// Fencer returns the run fence of one task (FenceDriver).
func (s *Spreader) Fencer(task string) Fencer { return taskFencer{s, task} }

type taskFencer struct {
	s    *Spreader
	task string
}

func (f taskFencer) RunContext(ctx context.Context) (context.Context, context.CancelFunc, error) {
	return f.s.RunContext(ctx, f.task)
}

// RunContext returns a context for one run of a task: cancelled when ctx
// is, when this instance stops owning the task, or when its membership
// ends. It fails with ErrNotOwner when this instance does not own the task
// now (or is handing it over).
func (s *Spreader) RunContext(ctx context.Context, task string) (context.Context, context.CancelFunc, error) {
	s.mu.Lock()
	ot := s.owned[task]
	ok := s.term != nil && s.term.active && ot != nil && ot.claimed && !ot.draining
	s.mu.Unlock()
	if !ok {
		return nil, nil, ErrNotOwner
	}
	rctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(ot.ctx, cancel)
	return rctx, func() { stop(); cancel() }, nil
}

// Acquire makes this instance the owner of a task now, if the assignment
// gives the task to it and its key is free (a task created through the API
// with run=now, on the member the request was sent to). The task need not
// be in the task list yet.
func (s *Spreader) Acquire(ctx context.Context, task string) error {
	s.mu.Lock()
	t := s.term
	if t == nil || !t.active {
		s.mu.Unlock()
		return ErrNotOwner
	}
	if ot := s.owned[task]; ot != nil && ot.claimed && !ot.draining {
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	if id, _, self, ok := s.Owner(task); !ok || !self {
		return fmt.Errorf("%w: the task belongs to %q", ErrNotOwner, id)
	}
	if !s.lock(t, task, "") {
		return fmt.Errorf("%w: its key is held", ErrNotOwner)
	}
	if !s.claim(ctx, t, task) {
		return fmt.Errorf("%w: its state could not be read", ErrNotOwner)
	}
	s.publish()
	return nil
}

// Resign leaves the cluster: every task key is released with the released
// marker (the caller has let the runs in progress finish), the member key
// deleted and the session destroyed, so that the other members take the
// tasks over at once. Run returns afterwards.
func (s *Spreader) Resign() { s.resignOnce.Do(func() { close(s.resign) }) }
