package ha

import (
	"context"
	"maps"
	"net/url"
	"slices"
	"time"

	"github.com/hashicorp/consul/api"
)

// This file holds what a Spreader does with the task keys: it carries out
// decide (spread_rules.go), locks, claims and releases tasks, tells the
// controller what it owns, and releases everything when it leaves.

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
