package ha

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// This file holds a Spreader's membership in the cluster: its loop (Run),
// its session and member key (its term), and its view of the spread folder.

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
