package ha

import (
	"context"
	"encoding/json"
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

// Run takes part in the cluster until ctx is done; then it keeps its tasks
// (and heartbeats) until Resign, so that the runs in progress finish.
func (s *Spreader) Run(ctx context.Context) error {
	wctx, stopWatch := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.watch(wctx) })
	defer func() {
		stopWatch()
		wg.Wait()
	}()
	s.log.Info("ha: spread mode: joining the cluster", "id", s.o.ID, "weight", s.o.Weight, "prefix", s.prefix,
		"session_ttl", s.t.SessionTTL, "heartbeat", s.t.Heartbeat, "step_down", s.t.StepDown, "takeover", s.t.Takeover)
	done := ctx.Done()
	for {
		next := s.step(s.clock.Now())
		timer := s.clock.AfterFunc(max(next.Sub(s.clock.Now()), 0), func() { signal(s.wake) })
		if s.waiting != nil {
			s.waiting(next)
		}
		select {
		case <-done:
			done = nil
			s.mu.Lock()
			s.stopping = true
			s.mu.Unlock()
		case <-s.resign:
			timer.Stop()
			s.leave()
			return nil
		case <-s.wake:
		}
		timer.Stop()
	}
}

// wrote records one of this instance's writes of a task key (see local).
func (s *Spreader) wrote(task string, k ownerKey) {
	if k.index == 0 {
		return
	}
	s.mu.Lock()
	s.local[task] = k
	if cur, ok := s.snap.owners[task]; s.snap.owners != nil && (!ok || cur.index < k.index) {
		s.snap.owners[task] = k
	}
	s.mu.Unlock()
}

func (s *Spreader) memberValue(since time.Time) []byte {
	s.mu.Lock()
	s.beat++
	beat := s.beat
	s.mu.Unlock()
	b, _ := json.Marshal(memberRec{ID: s.o.ID, Address: s.o.Address, Weight: s.o.Weight, Beat: beat, Since: since})
	return b
}

func (s *Spreader) ownerValue(released bool) []byte {
	b, _ := json.Marshal(ownerRec{ID: s.o.ID, Since: s.clock.Now().UTC(), Released: released})
	return b
}

// step does what is due now and returns when to look again.
func (s *Spreader) step(now time.Time) time.Time {
	next := now.Add(s.t.Heartbeat)
	s.mu.Lock()
	t, stopping := s.term, s.stopping
	s.mu.Unlock()
	if t == nil {
		if !stopping {
			next = s.join(now)
		}
	} else {
		s.mu.Lock()
		failed := t.failed
		s.mu.Unlock()
		if failed {
			s.endTerm(t, "preparing to run tasks failed")
			s.dropMember(t.session)
			return now.Add(s.t.Heartbeat)
		}
		if !now.Before(t.nextBeat) {
			s.heartbeat(t)
		}
		next = t.nextBeat
	}
	if n := s.reconcile(now, stopping); !n.IsZero() && n.Before(next) {
		next = n
	}
	return next
}

// join creates a session if needed and locks this instance's member key.
func (s *Spreader) join(now time.Time) time.Time {
	s.mu.Lock()
	session := s.session
	s.mu.Unlock()
	if session == "" {
		id, err := s.newSession("ctsync " + s.o.ID + " (spread)")
		if err != nil {
			s.log.Debug("ha: cannot create a consul session; retrying", "error", err)
			return now.Add(s.t.Retry)
		}
		s.mu.Lock()
		s.session, session = id, id
		s.mu.Unlock()
	}
	t0 := s.clock.Now()
	ok, err := s.renew(session)
	if err != nil {
		return now.Add(s.t.Retry)
	}
	if !ok {
		s.dropSession(session)
		return now
	}
	s.mu.Lock()
	resume := s.joined == session
	s.mu.Unlock()
	ops := api.KVTxnOps{{Verb: api.KVLock, Key: s.self, Value: s.memberValue(t0.UTC()), Session: session}}
	if resume {
		ops = append(api.KVTxnOps{{Verb: api.KVCheckSession, Key: s.self, Session: session}}, ops...)
	}
	ok, err = s.txn(ops)
	switch {
	case err != nil:
		return now.Add(s.t.Retry)
	case !ok && resume:
		// Expelled meanwhile: the task keys this session may still hold
		// are no longer this instance's to run (others may have taken
		// them). A new session starts afresh.
		s.log.Info("ha: this instance was expelled while cut off; joining again with a new session")
		s.dropMember(session)
		return now
	case !ok:
		// Held by a session of an earlier process with this id: the
		// others (or this instance) expel it once it has been silent for T.
		return now.Add(s.t.Retry)
	}
	s.mu.Lock()
	s.joined = session
	s.mu.Unlock()
	t := &sterm{lease: lease{session: session}}
	t.expire = func(reason string) { s.endTerm(t, reason) }
	t.ctx, t.cancel = context.WithCancel(context.Background())
	s.mu.Lock()
	s.term = t
	s.startLocked(&t.lease, t0)
	s.mu.Unlock()
	s.log.Info("ha: joined the cluster", "id", s.o.ID, "session", session)
	go s.prepare(t)
	return t.nextBeat
}

func (s *Spreader) prepare(t *sterm) {
	err := s.o.OnJoin(t.ctx)
	s.pmu.Lock()
	defer s.pmu.Unlock()
	s.mu.Lock()
	if s.term != t {
		s.mu.Unlock()
		return
	}
	if err != nil {
		s.log.Error("ha: cannot take part in the cluster; leaving it", "error", err)
		t.failed = true
		s.mu.Unlock()
		signal(s.wake)
		return
	}
	t.active = true
	s.mu.Unlock()
	// Nothing is claimed yet (claims wait for this): the controller
	// starts nothing until the first tasks are.
	s.o.SetOwned(func(string) bool { return false })
	s.o.SetActive(true)
	s.log.Info("ha: member: this instance runs the tasks it owns", "id", s.o.ID)
	signal(s.wake)
}

// heartbeat renews the session and rewrites the member key (see
// keepAlive).
func (s *Spreader) heartbeat(t *sterm) {
	value := func() []byte { return s.memberValue(t.since.UTC()) }
	switch s.keepAlive(&t.lease, s.self, value, func() bool { return s.term == t }) {
	case beatSessionGone:
		s.endTerm(t, "consul invalidated the session")
		s.dropSession(t.session)
	case beatKeyLost:
		// Expelled: another member saw this one silent for T. Its task
		// keys may still be held by this session: destroying it frees
		// them (everything was stopped when the lease ran out).
		s.endTerm(t, "expelled from the cluster (the member key is no longer held by this instance's session)")
		s.dropMember(t.session)
	}
}

// endTerm stops running tasks at once (idempotent per term): the
// controller is switched off, every owned task's runs are interrupted.
// The keys stay held by the session: a member that resumes (its member key
// still held) finds them again.
func (s *Spreader) endTerm(t *sterm, reason string) {
	s.pmu.Lock()
	s.mu.Lock()
	if s.term != t {
		s.mu.Unlock()
		s.pmu.Unlock()
		return
	}
	s.term = nil
	t.timer.Stop()
	t.cancel() // every owned task's context: runs in progress are interrupted
	owned := s.owned
	s.owned = map[string]*ownedTask{}
	s.mu.Unlock()
	if t.active {
		s.o.SetActive(false)
	}
	s.o.SetOwned(func(string) bool { return false })
	s.pmu.Unlock()
	for task, ot := range owned {
		ot.cancel()
		s.o.Unclaim(task)
	}
	s.o.Metrics.Owned(0, 0)
	if reason == "left" {
		s.log.Info("ha: left the cluster", "id", s.o.ID)
	} else {
		s.log.Warn("ha: stopped running tasks", "id", s.o.ID, "reason", reason, "tasks", len(owned))
	}
	signal(s.wake)
}

func (s *Spreader) dropSession(id string) {
	s.mu.Lock()
	if s.session == id {
		s.session = ""
	}
	s.mu.Unlock()
}

// dropMember destroys a session that lost its member key (its task keys
// go with it) and forgets it.
func (s *Spreader) dropMember(id string) {
	s.dropSession(id)
	s.destroy(id)
}

// reconcile carries out decide: expels silent members, and, while this
// instance is an active member, acquires, takes over, drains and releases
// task keys. It returns when to look again (zero: at the next event).
func (s *Spreader) reconcile(now time.Time, stopping bool) time.Time {
	tasks := slices.Sorted(slices.Values(s.o.Tasks()))
	var groups map[string]string
	if s.o.Group != nil {
		groups = s.o.Group()
	}
	s.mu.Lock()
	t := s.term
	snap := s.snap
	session := ""
	active := t != nil && t.active && !stopping
	if t != nil {
		session = t.session
	} else if s.session != "" {
		session = s.session // not a member: only the expel part applies
	}
	owned := map[string]bool{}
	for task := range s.owned {
		owned[task] = true
	}
	p := decide(now, Candidate{ID: s.o.ID, Weight: s.o.Weight}, session, snap, s.sil, tasks, owned, groups)
	s.owners = p.owners
	s.mu.Unlock()
	next := p.next
	for _, x := range p.expel {
		ok, err := s.txn(api.KVTxnOps{
			{Verb: api.KVCheckIndex, Key: s.prefix + "/members/" + url.PathEscape(x.id), Index: x.index},
			{Verb: api.KVDelete, Key: s.prefix + "/members/" + url.PathEscape(x.id)},
		})
		if err == nil && ok {
			s.log.Warn("ha: expelled a silent member: its tasks move", "member", x.id, "silent_for", s.t.Takeover)
			s.o.Metrics.OwnershipChange("expel")
		}
	}
	if !active {
		return next
	}
	changed := false
	for _, task := range p.adopt {
		changed = s.claim(t.ctx, t, task) || changed
	}
	for _, task := range p.acquire {
		if s.lock(t, task, "") && s.claim(t.ctx, t, task) {
			changed = true
		}
	}
	for _, x := range p.takeover {
		if s.lock(t, x.task, x.session) && s.claim(t.ctx, t, x.task) {
			changed = true
		}
	}
	// A task treated as owned whose key a read newer than this instance's
	// own lock shows held by another session was lost (nobody can take a
	// key from a member that was not expelled, so this is defensive):
	// stop running it.
	s.mu.Lock()
	for task, ot := range s.owned {
		if o, ok := s.snap.owners[task]; ok && ot.index > 0 && o.index > ot.index && o.session != "" && o.session != t.session {
			ot.cancel()
			delete(s.owned, task)
			changed = true
			s.log.Error("ha: a task key this instance held is held by another session; stopped running it", "task_name", task)
		}
	}
	s.mu.Unlock()
	for _, task := range p.drain {
		s.mu.Lock()
		ot := s.owned[task]
		if ot != nil && !ot.draining {
			ot.draining = true
			changed = true
		}
		s.mu.Unlock()
	}
	if changed {
		s.publish()
		changed = false
	}
	pending := false
	for _, task := range p.drain {
		if s.o.Busy(task) {
			pending = true // look again soon: released once idle
			continue
		}
		changed = s.release(t, task, false) || changed
	}
	for _, task := range p.drop {
		if s.o.Busy(task) { // its deletion (a destroy) is still running
			pending = true
			continue
		}
		changed = s.release(t, task, true) || changed
	}
	if changed {
		s.publish()
	}
	if pending {
		if n := now.Add(s.t.Retry); next.IsZero() || n.Before(next) {
			next = n
		}
	}
	return next
}

// lock locks a task's key with this term's session: a free key, or (when
// from is set) a key held by from, the session of an expelled member. The
// member key's session is checked in the same transaction.
func (s *Spreader) lock(t *sterm, task, from string) bool {
	key := s.ownerKey(task)
	ops := api.KVTxnOps{{Verb: api.KVCheckSession, Key: s.self, Session: t.session}}
	if from != "" {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVCheckSession, Key: key, Session: from}, &api.KVTxnOp{Verb: api.KVDelete, Key: key})
	}
	val := s.ownerValue(false)
	ops = append(ops, &api.KVTxnOp{Verb: api.KVLock, Key: key, Value: val, Session: t.session})
	ok, idx, err := s.txnIndex(ops, key)
	if err != nil || !ok {
		return false
	}
	s.wrote(task, ownerKey{session: t.session, index: idx, rec: ownerRec{ID: s.o.ID}})
	s.mu.Lock()
	if s.term == t {
		ot := s.owned[task]
		if ot == nil {
			ctx, cancel := context.WithCancel(t.ctx)
			ot = &ownedTask{ctx: ctx, cancel: cancel}
			s.owned[task] = ot
		}
		ot.index = idx
	}
	s.mu.Unlock()
	kind := "acquire"
	if from != "" {
		kind = "takeover"
	}
	s.o.Metrics.OwnershipChange(kind)
	s.log.Info("ha: owning task", "task_name", task, "how", kind)
	return true
}

// claim reads a held task's state and marks it claimed (the controller may
// run it); false when the state could not be read (tried again later).
func (s *Spreader) claim(ctx context.Context, t *sterm, task string) bool {
	s.mu.Lock()
	if s.term != t {
		s.mu.Unlock()
		return false
	}
	ot := s.owned[task]
	if ot == nil {
		c, cancel := context.WithCancel(t.ctx)
		ot = &ownedTask{ctx: c, cancel: cancel}
		s.owned[task] = ot
	}
	if ot.claimed {
		s.mu.Unlock()
		return false
	}
	s.mu.Unlock()
	if err := s.o.Claim(ctx, task); err != nil {
		s.log.Warn("ha: cannot read the state of an owned task; retrying", "task_name", task, "error", err)
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term != t || s.owned[task] != ot {
		return false
	}
	ot.claimed = true
	return true
}

// release gives a task's key back (with the released marker), or deletes
// it (the task no longer exists). The task's runs are interrupted first
// (there are none when it was drained).
func (s *Spreader) release(t *sterm, task string, del bool) bool {
	s.mu.Lock()
	ot := s.owned[task]
	if ot != nil {
		ot.cancel()
	}
	s.mu.Unlock()
	key := s.ownerKey(task)
	ok, idx, err := s.txnIndex(api.KVTxnOps{
		{Verb: api.KVCheckSession, Key: key, Session: t.session},
		{Verb: api.KVUnlock, Key: key, Value: s.ownerValue(true), Session: t.session},
	}, key)
	if err != nil {
		return false // tried again at the next step; the task does not run meanwhile
	}
	if ok {
		s.wrote(task, ownerKey{index: idx, rec: ownerRec{ID: s.o.ID, Released: true}})
		if del { // the task is gone: so is its key, unless someone locked it since
			_, _ = s.txn(api.KVTxnOps{{Verb: api.KVDeleteCAS, Key: key, Index: idx}})
		}
	}
	s.mu.Lock()
	if s.owned[task] == ot {
		delete(s.owned, task)
	}
	s.mu.Unlock()
	s.o.Unclaim(task)
	if ok {
		s.o.Metrics.OwnershipChange("release")
		s.log.Info("ha: released task", "task_name", task, "deleted", del)
	}
	return true
}

// publish tells the controller what it owns now.
func (s *Spreader) publish() {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	s.mu.Lock()
	set := map[string]bool{}
	if s.term != nil && s.term.active {
		for task, ot := range s.owned {
			if ot.claimed && !ot.draining {
				set[task] = true
			}
		}
	}
	members := len(s.snap.members)
	s.mu.Unlock()
	s.o.SetOwned(func(task string) bool { return set[task] })
	s.o.Metrics.Owned(len(set), members)
}

// leave releases everything (graceful shutdown).
func (s *Spreader) leave() {
	s.mu.Lock()
	t := s.term
	s.stopping = true
	var tasks []string
	if t != nil {
		tasks = slices.Sorted(maps.Keys(s.owned))
	}
	s.mu.Unlock()
	if t != nil {
		s.endTerm(t, "left")
		// The keys in batches, each behind the member key's check (this
		// session still holds it), then the member key.
		for len(tasks) > 0 {
			n := min(len(tasks), maxTxnOps/2-1)
			ops := api.KVTxnOps{{Verb: api.KVCheckSession, Key: s.self, Session: t.session}}
			for _, task := range tasks[:n] {
				key := s.ownerKey(task)
				ops = append(ops, &api.KVTxnOp{Verb: api.KVCheckSession, Key: key, Session: t.session},
					&api.KVTxnOp{Verb: api.KVUnlock, Key: key, Value: s.ownerValue(true), Session: t.session})
			}
			if ok, err := s.txn(ops); err != nil || !ok {
				s.log.Warn("ha: could not release some tasks; the others take them over when the session expires", "error", err)
			}
			tasks = tasks[n:]
		}
		if _, err := s.txn(api.KVTxnOps{
			{Verb: api.KVCheckSession, Key: s.self, Session: t.session},
			{Verb: api.KVDelete, Key: s.self},
		}); err != nil {
			s.log.Debug("ha: could not delete the member key", "error", err)
		}
	}
	s.mu.Lock()
	id := s.session
	s.session = ""
	s.mu.Unlock()
	if id != "" {
		s.destroy(id)
	}
}

// watch follows the spread folder with blocking queries.
func (s *Spreader) watch(ctx context.Context) {
	follow(ctx, &s.lockBase, "the cluster's members", func(q *api.QueryOptions) (api.KVPairs, *api.QueryMeta, error) {
		return s.kv.List(s.prefix+"/", q)
	}, s.observe, func() {
		s.mu.Lock()
		s.sil.blind(s.clock.Now())
		s.mu.Unlock()
		signal(s.wake)
	})
}

// observe records a read of the folder at Consul index idx and returns the
// index to wait on next.
func (s *Spreader) observe(pairs api.KVPairs, idx uint64) uint64 {
	now := s.clock.Now()
	snap := parseSnapshot(s.prefix, pairs)
	s.mu.Lock()
	reset := idx < s.index
	s.index = idx
	if reset {
		s.sil.blind(now)
	}
	for task, k := range s.local {
		if reset || k.index <= idx {
			delete(s.local, task) // the read covers it
			continue
		}
		snap.owners[task] = k
	}
	s.snap = snap
	s.sil.observe(now, snap)
	members := len(snap.members)
	changed := members != s.members
	s.members = members
	owned := len(s.owned)
	s.mu.Unlock()
	if changed {
		s.o.Metrics.Owned(owned, members)
	}
	if reset {
		s.log.Info("ha: consul's index went backwards (consul lost its data?)")
		idx = 0
	}
	signal(s.wake)
	return idx
}
