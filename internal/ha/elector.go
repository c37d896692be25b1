package ha

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/clock"
)

// watchWait is the wait of the blocking query on the lock key. The leader's
// heartbeats wake it every H anyway; the bound only matters for a
// connection that hangs.
const watchWait = 30 * time.Second

// Options configure an Elector.
type Options struct {
	// Client is the one Consul client of the daemon.
	Client *api.Client
	// Prefix is the cluster's KV folder, <parent_path>/<cluster>.
	Prefix    string
	Namespace string
	// ID is this instance's id (config `id`); Address is how API clients
	// reach it ("" when not advertised).
	ID      string
	Address string
	// SessionTTL is session_ttl; Timing, when its SessionTTL is set,
	// replaces the timing derived from it (tests).
	SessionTTL time.Duration
	Timing     Timing
	Logger     *slog.Logger
	Metrics    Metrics
	// OnElected prepares this instance to lead, with a context that ends
	// with the term (load the shared state, apply task changes). It runs
	// while the lock is already held and heartbeats go on; an error gives
	// the lock back.
	OnElected func(ctx context.Context) error
	// SetActive switches the controller: true after OnElected succeeded,
	// false as soon as the term ends. It is never called concurrently.
	SetActive func(active bool)
	// Clock is the time source of the election's schedule: heartbeats,
	// the step-down lease, takeover, retries (default: the system clock).
	// Consul calls are still bounded by the call timeout in real time.
	Clock Clock
}

// Clock is the elector's time source, so that tests can drive the timing
// rules with a fake clock instead of sleeping.
type Clock = clock.Clock

// Timer is a pending Clock.AfterFunc call.
type Timer = clock.Timer

// Elector campaigns for the lock and leads while it holds it. See the
// package documentation for the rules and the timing.
type Elector struct {
	lockBase
	o   Options
	key string

	session  string          // this instance's current session ("" none)
	own      map[string]bool // every session this process created
	term     *term           // while holding the lock
	active   bool            // leading: the controller runs tasks
	stopping bool            // no longer campaigning (shutdown)
	view     view            // latest read of the lock key
	index    uint64          // Consul's index at that read
	tr       tracker
	beat     uint64
	backoff  time.Time // no campaign before (after a failed preparation)

	nextRenew    time.Time // follower session renewal (loop goroutine only)
	sessionFails int       // failed session creations in a row (loop goroutine only)

	wake   chan struct{}
	resign chan struct{}
	// changed is closed (and replaced) when this instance starts or stops
	// leading, or reads the lock key (LeaderChanged). Guarded by mu.
	changed    chan struct{}
	resignOnce sync.Once

	// waiting, when set (tests), is called by Run each time it is about to
	// wait, with the time it looks again at the latest.
	waiting func(next time.Time)
}

// term is one period of holding the lock.
type term struct {
	lease  // steps down when no heartbeat succeeded for S
	ctx    context.Context
	cancel context.CancelFunc
	failed bool // preparation failed: give the lock back (mu)
	verify bool // the watch saw the key not held by us (mu)
}

// New returns an Elector; Run starts it.
func New(o Options) (*Elector, error) {
	t := o.Timing
	if t.SessionTTL == 0 {
		t = TimingFor(o.SessionTTL)
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("ha: %w", err)
	}
	if o.Client == nil || o.ID == "" || o.Prefix == "" {
		return nil, errors.New("ha: a client, an instance id and a KV prefix are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = nopMetrics{}
	}
	if o.OnElected == nil {
		o.OnElected = func(context.Context) error { return nil }
	}
	if o.SetActive == nil {
		o.SetActive = func(bool) {}
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	return &Elector{
		lockBase: newLockBase(t, o.Logger, o.Clock, o.Namespace, o.Client),
		o:        o, key: strings.TrimRight(o.Prefix, "/") + "/leader",
		own: map[string]bool{}, tr: tracker{takeover: t.Takeover},
		wake: make(chan struct{}, 1), resign: make(chan struct{}), changed: make(chan struct{}),
	}, nil
}

// Key returns the lock key.
func (e *Elector) Key() string { return e.key }

// Timing returns the election timing in use.
func (e *Elector) Timing() Timing { return e.t }

// IsLeader reports whether this instance leads: it holds the lock and its
// controller is active.
func (e *Elector) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.active
}

// Leader returns the leader's id and advertised address as last seen ("",
// "" when there is none or it is not known).
func (e *Elector) Leader() (id, address string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.active {
		return e.o.ID, e.o.Address
	}
	if e.view.held() {
		return e.view.rec.ID, e.view.rec.Address
	}
	return "", ""
}

// LeaderChanged returns a channel closed the next time what Leader answers
// may change. Take it before calling Leader, then wait on it.
func (e *Elector) LeaderChanged() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changed
}

// changedLocked wakes the waiters of LeaderChanged. e.mu is held.
func (e *Elector) changedLocked() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// LockSession returns the lock key and the session holding it while this
// instance holds the lock (also while it prepares to lead); it is the fence
// of the state store.
func (e *Elector) LockSession() (key, session string, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.term == nil {
		return "", "", false
	}
	return e.key, e.term.session, true
}

// Session returns this instance's current session ("" none).
func (e *Elector) Session() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.session
}

// RunContext returns a context for one run of a task: it is cancelled when
// ctx is or when this instance stops leading. It fails with ErrNotLeader
// when this instance does not lead now.
func (e *Elector) RunContext(ctx context.Context) (context.Context, context.CancelFunc, error) {
	e.mu.Lock()
	t, active := e.term, e.active
	e.mu.Unlock()
	if t == nil || !active {
		return nil, nil, ErrNotLeader
	}
	rctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(t.ctx, cancel)
	return rctx, func() { stop(); cancel() }, nil
}

// Resign ends the campaign: if this instance leads, it stops leading and
// releases the lock for a follower to take at once (the caller has let the
// runs in progress finish), then destroys its session. Run returns
// afterwards. Safe to call more than once, and after Run returned.
func (e *Elector) Resign() { e.resignOnce.Do(func() { close(e.resign) }) }

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Run campaigns until ctx is done. Then a follower destroys its session and
// returns, while a leader keeps the lock (and its heartbeats) until Resign,
// so that the runs in progress finish under its lead.
func (e *Elector) Run(ctx context.Context) error {
	wctx, stopWatch := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { e.watch(wctx) })
	defer func() {
		stopWatch()
		wg.Wait()
	}()
	e.o.Metrics.SetLeader(false)
	e.log.Info("ha: campaigning for leadership", "id", e.o.ID, "lock", e.key,
		"session_ttl", e.t.SessionTTL, "heartbeat", e.t.Heartbeat, "step_down", e.t.StepDown, "takeover", e.t.Takeover)
	done := ctx.Done()
	for {
		next := e.step(e.clock.Now())
		e.mu.Lock()
		finished := e.stopping && e.term == nil
		e.mu.Unlock()
		if finished {
			e.destroySession()
			return nil
		}
		// The timer only wakes the loop: a late call after Stop costs one
		// more step, which does nothing that is not due.
		timer := e.clock.AfterFunc(max(next.Sub(e.clock.Now()), 0), func() { signal(e.wake) })
		if e.waiting != nil {
			e.waiting(next)
		}
		select {
		case <-done:
			done = nil
			e.mu.Lock()
			e.stopping = true
			leading := e.term != nil
			e.mu.Unlock()
			if leading {
				e.log.Info("ha: shutting down: keeping the lead until the runs in progress finish")
			}
		case <-e.resign:
			timer.Stop()
			e.resignNow()
			return nil
		case <-e.wake:
		}
		timer.Stop()
	}
}

// step does what is due now and returns when to look again.
func (e *Elector) step(now time.Time) time.Time {
	e.mu.Lock()
	t := e.term
	var failed, verify bool
	if t != nil {
		failed, verify = t.failed, t.verify
		t.verify = false
	}
	e.mu.Unlock()
	if t != nil {
		if failed {
			e.endTerm(t, "preparing to lead failed")
			e.release(t.session)
			e.mu.Lock()
			e.backoff = now.Add(e.t.Heartbeat)
			e.mu.Unlock()
			return now
		}
		if verify || !now.Before(t.nextBeat) {
			e.heartbeat(t)
		}
		return t.nextBeat
	}
	return e.follow(now)
}

// follow keeps the session alive and campaigns when the rules allow it.
func (e *Elector) follow(now time.Time) time.Time {
	e.mu.Lock()
	session, stopping, backoff := e.session, e.stopping, e.backoff
	e.mu.Unlock()
	if stopping {
		return now.Add(e.t.Heartbeat)
	}
	if session == "" {
		if err := e.createSession(); err != nil {
			if e.sessionFails%30 == 0 { // once per ~30 retries while Consul is away
				e.log.Warn("ha: cannot create a consul session; retrying", "error", err, "attempts", e.sessionFails+1)
			}
			e.sessionFails++
			return now.Add(e.t.Retry)
		}
		e.sessionFails = 0
		e.nextRenew = now.Add(e.t.Heartbeat)
	} else if !now.Before(e.nextRenew) {
		switch ok, err := e.renew(session); {
		case err != nil:
			e.log.Debug("ha: session renewal failed; retrying", "error", err)
			e.nextRenew = now.Add(e.t.Retry)
		case !ok:
			e.log.Info("ha: session invalidated by consul; creating a new one", "session", session)
			e.dropSession(session)
			return now
		default:
			e.nextRenew = now.Add(e.t.Heartbeat)
		}
	}
	next := e.nextRenew
	if now.Before(backoff) {
		return minTime(next, backoff)
	}
	e.mu.Lock()
	v := e.view
	act, at := e.tr.decide(v, e.mineLocked, now)
	e.mu.Unlock()
	if act == actNone {
		return next
	}
	if at.After(now) {
		return minTime(next, at)
	}
	if !e.campaign(act, v) {
		return minTime(next, now.Add(e.t.Retry))
	}
	return now
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (e *Elector) mineLocked(session string) bool { return e.own[session] }

// createSession creates this instance's session (see newSession).
func (e *Elector) createSession() error {
	id, err := e.newSession("ctsync " + e.o.ID)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.session = id
	e.own[id] = true
	e.mu.Unlock()
	e.log.Debug("ha: session created", "session", id)
	return nil
}

func (e *Elector) dropSession(id string) {
	e.mu.Lock()
	if e.session == id {
		e.session = ""
	}
	e.mu.Unlock()
}

func (e *Elector) value(beat uint64, since time.Time, released bool) []byte {
	b, _ := json.Marshal(record{ID: e.o.ID, Address: e.o.Address, Beat: beat, Since: since, Released: released})
	return b
}

// campaign tries to become leader the way act says. The session is renewed
// first: the new term's lease counts from that call.
func (e *Elector) campaign(act action, v view) bool {
	e.mu.Lock()
	session := e.session
	e.mu.Unlock()
	if session == "" {
		return false
	}
	t0 := e.clock.Now()
	ok, err := e.renew(session)
	if err != nil {
		return false
	}
	if !ok {
		e.dropSession(session)
		return false
	}
	e.nextRenew = t0.Add(e.t.Heartbeat)
	e.mu.Lock()
	e.beat++
	beat := e.beat
	e.mu.Unlock()
	val := e.value(beat, t0, false)
	var ops api.KVTxnOps
	switch act {
	case actAcquire:
		ops = api.KVTxnOps{{Verb: api.KVLock, Key: e.key, Value: val, Session: session}}
	case actTakeover:
		ops = api.KVTxnOps{
			{Verb: api.KVCheckSession, Key: e.key, Session: v.session},
			{Verb: api.KVCheckIndex, Key: e.key, Index: v.index},
			{Verb: api.KVDelete, Key: e.key},
			{Verb: api.KVLock, Key: e.key, Value: val, Session: session},
		}
	case actResume:
		ops = api.KVTxnOps{
			{Verb: api.KVCheckSession, Key: e.key, Session: session},
			{Verb: api.KVLock, Key: e.key, Value: val, Session: session},
		}
	}
	ok, err = e.txn(ops)
	if err != nil || !ok {
		if err != nil {
			e.log.Debug("ha: campaign failed", "action", act.String(), "error", err)
		}
		e.refresh()
		return false
	}
	e.startTerm(t0, session, act, v)
	return true
}

// startTerm begins a term that won the lock with a session renewed at t0.
func (e *Elector) startTerm(t0 time.Time, session string, act action, v view) {
	t := &term{lease: lease{session: session}}
	t.expire = func(reason string) { e.endTerm(t, reason) }
	t.ctx, t.cancel = context.WithCancel(context.Background())
	e.mu.Lock()
	e.term = t
	e.startLocked(&t.lease, t0)
	e.mu.Unlock()
	attrs := []any{"id", e.o.ID, "how", act.String()}
	if act == actTakeover {
		attrs = append(attrs, "previous", v.rec.ID, "silent_for", e.t.Takeover)
	} else if v.exists && v.rec.ID != "" && v.rec.ID != e.o.ID {
		attrs = append(attrs, "previous", v.rec.ID)
	}
	e.log.Info("ha: acquired leadership", attrs...)
	go e.prepare(t)
}

// prepare runs OnElected, then activates the controller if the term still
// holds.
func (e *Elector) prepare(t *term) {
	start := e.clock.Now()
	err := e.o.OnElected(t.ctx)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.term != t {
		return
	}
	if err != nil {
		e.log.Error("ha: cannot take up leadership; giving the lock back", "error", err)
		t.failed = true
		signal(e.wake)
		return
	}
	if e.stopping {
		return
	}
	e.active = true
	e.changedLocked()
	e.o.SetActive(true)
	e.o.Metrics.SetLeader(true)
	e.log.Info("ha: leading: this instance runs the tasks", "id", e.o.ID, "prepared_in", e.clock.Now().Sub(start).Round(time.Millisecond))
}

// endTerm stops leading at once (idempotent per term).
func (e *Elector) endTerm(t *term, reason string) {
	e.mu.Lock()
	if e.term != t {
		e.mu.Unlock()
		return
	}
	e.term = nil
	t.timer.Stop()
	t.cancel()
	if e.active {
		e.active = false
		e.changedLocked()
		e.o.SetActive(false)
		e.o.Metrics.SetLeader(false)
	}
	e.mu.Unlock()
	if reason == "resigned" {
		e.log.Info("ha: stepped down", "id", e.o.ID, "reason", reason)
	} else {
		e.log.Warn("ha: lost leadership", "id", e.o.ID, "reason", reason)
	}
	signal(e.wake)
}

// heartbeat renews the session and rewrites the key (see
// keepAlive).
func (e *Elector) heartbeat(t *term) {
	value := func() []byte {
		e.mu.Lock()
		e.beat++
		beat := e.beat
		e.mu.Unlock()
		return e.value(beat, t.since, false)
	}
	switch e.keepAlive(&t.lease, e.key, value, func() bool { return e.term == t }) {
	case beatSessionGone:
		e.dropSession(t.session)
		e.endTerm(t, "consul invalidated the session")
	case beatKeyLost:
		e.endTerm(t, "the lock is no longer held by this instance's session")
	}
}

// release gives the lock back with the released marker: followers may
// acquire it at once.
func (e *Elector) release(session string) {
	e.mu.Lock()
	e.beat++
	beat := e.beat
	e.mu.Unlock()
	ok, err := e.txn(api.KVTxnOps{
		{Verb: api.KVCheckSession, Key: e.key, Session: session},
		{Verb: api.KVUnlock, Key: e.key, Value: e.value(beat, e.clock.Now(), true), Session: session},
	})
	if err != nil || !ok {
		e.log.Warn("ha: could not release the lock; followers take over when the session expires", "error", err)
		return
	}
	e.log.Info("ha: released leadership", "id", e.o.ID)
}

func (e *Elector) resignNow() {
	e.mu.Lock()
	t := e.term
	e.stopping = true
	e.mu.Unlock()
	if t != nil {
		e.endTerm(t, "resigned")
		e.release(t.session)
	}
	e.destroySession()
}

func (e *Elector) destroySession() {
	e.mu.Lock()
	id := e.session
	e.session = ""
	e.mu.Unlock()
	if id != "" {
		e.destroy(id)
	}
}

// watch follows the lock key with blocking queries and feeds the tracker.
func (e *Elector) watch(ctx context.Context) {
	follow(ctx, &e.lockBase, "the lock key", func(q *api.QueryOptions) (*api.KVPair, *api.QueryMeta, error) {
		return e.kv.Get(e.key, q)
	}, e.observe, e.blind)
}

// refresh reads the key once, without blocking (after a failed campaign,
// whose view may be out of date).
func (e *Elector) refresh() {
	q, cancel := e.qopts()
	defer cancel()
	pair, meta, err := e.kv.Get(e.key, q)
	if err != nil {
		e.blind()
		return
	}
	e.observe(pair, meta.LastIndex)
}

func (e *Elector) blind() {
	e.mu.Lock()
	e.tr.blind(e.clock.Now(), e.term != nil)
	e.mu.Unlock()
	signal(e.wake)
}

// observe records a read of the key at Consul index idx and returns the
// index to wait on next (0 after Consul's index went backwards).
func (e *Elector) observe(pair *api.KVPair, idx uint64) uint64 {
	now := e.clock.Now()
	v := viewOf(pair)
	e.mu.Lock()
	reset := idx < e.index
	e.index = idx
	if reset {
		e.tr.blind(now, e.term != nil)
	}
	e.view = v
	e.changedLocked()
	e.tr.observe(now, v, e.mineLocked)
	if t := e.term; t != nil && (!v.held() || v.session != t.session) {
		t.verify = true
	}
	e.mu.Unlock()
	if reset {
		e.log.Info("ha: consul's index went backwards (consul lost its data?)")
		idx = 0
	}
	signal(e.wake)
	return idx
}
