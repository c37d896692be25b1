package ha

import (
	"encoding/json"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// This file holds the rules of spread mode as pure functions of what an
// instance saw and when (times are passed in), so that they can be tested
// without Consul or waiting; the Spreader (spread.go, spread_term.go,
// spread_claim.go) carries them out.

// memberRec is the value of a member key (spread/members/<id>).
type memberRec struct {
	ID      string  `json:"id"`
	Address string  `json:"address,omitempty"`
	Weight  float64 `json:"weight"`
	// Beat counts the member's heartbeats: every heartbeat changes the
	// key, which is how the others see that the member is alive.
	Beat  uint64    `json:"beat"`
	Since time.Time `json:"since"`
}

// ownerRec is the value of a task's owner key (spread/owners/<task>).
type ownerRec struct {
	ID    string    `json:"id"`
	Since time.Time `json:"since"`
	// Released marks a key given back on purpose: its owner had stopped
	// the task first, so anyone may lock it at once.
	Released bool `json:"released,omitempty"`
}

// memberKey is one observation of a member key.
type memberKey struct {
	session string
	index   uint64
	rec     memberRec
}

// ownerKey is one observation of a task's owner key.
type ownerKey struct {
	session string // "" free
	index   uint64
	rec     ownerRec
}

// snapshot is one consistent read of the spread folder.
type snapshot struct {
	known   bool
	members map[string]memberKey // by member id, only keys held by a session
	owners  map[string]ownerKey  // by task name
}

// parseSnapshot reads a recursive listing of <prefix>/ (the spread folder).
func parseSnapshot(prefix string, pairs api.KVPairs) snapshot {
	s := snapshot{known: true, members: map[string]memberKey{}, owners: map[string]ownerKey{}}
	for _, p := range pairs {
		rest, ok := strings.CutPrefix(p.Key, prefix+"/")
		if !ok {
			continue
		}
		kind, name, ok := strings.Cut(rest, "/")
		if !ok || name == "" || strings.Contains(name, "/") {
			continue
		}
		name, err := url.PathUnescape(name)
		if err != nil {
			continue
		}
		switch kind {
		case "members":
			if p.Session == "" {
				continue // a member key outlives no session (behavior delete); ignore leftovers
			}
			m := memberKey{session: p.Session, index: p.ModifyIndex}
			_ = json.Unmarshal(p.Value, &m.rec) // unreadable: a member of unknown weight
			if m.rec.Weight <= 0 {
				m.rec.Weight = 1
			}
			s.members[name] = m
		case "owners":
			o := ownerKey{session: p.Session, index: p.ModifyIndex}
			_ = json.Unmarshal(p.Value, &o.rec)
			s.owners[name] = o
		}
	}
	return s
}

// holder returns the id of the member whose session is session.
func (s snapshot) holder(session string) (string, bool) {
	for id, m := range s.members {
		if m.session == session {
			return id, true
		}
	}
	return "", false
}

// silence tracks, for every member key, when this instance last saw it
// change: a member whose key has not changed for the takeover bound T has
// stepped down (it stops S after its last successful heartbeat and its
// Terraform is dead K later, S + K < T) and may be expelled.
type silence struct {
	takeover time.Duration
	seen     map[string]seenKey
	// blindAt is the last time this instance could not see the folder (a
	// Consul error) or saw Consul's index go backwards (Consul lost its
	// data): any member may have heartbeaten unseen, and keys may have
	// been freed by a data loss rather than by their owners.
	blindAt time.Time
}

type seenKey struct {
	session string
	index   uint64
	at      time.Time
}

func newSilence(takeover time.Duration) *silence {
	return &silence{takeover: takeover, seen: map[string]seenKey{}}
}

// observe records a successful read at now.
func (sl *silence) observe(now time.Time, s snapshot) {
	for id, m := range s.members {
		k, ok := sl.seen[id]
		if !ok || k.session != m.session || k.index != m.index {
			sl.seen[id] = seenKey{m.session, m.index, now}
		}
	}
	for id := range sl.seen {
		if _, ok := s.members[id]; !ok {
			delete(sl.seen, id)
		}
	}
}

// blind records that, at now, this instance could not see the folder.
func (sl *silence) blind(now time.Time) {
	sl.blindAt = now
	for id, k := range sl.seen {
		k.at = now
		sl.seen[id] = k
	}
}

// blindUntil is when the last blindness stops mattering (zero: never blind).
func (sl *silence) blindUntil() time.Time {
	if sl.blindAt.IsZero() {
		return time.Time{}
	}
	return sl.blindAt.Add(sl.takeover)
}

// expellable reports whether member id (as seen in m) has been silent for
// T at now, and otherwise from when it would be.
func (sl *silence) expellable(now time.Time, id string, m memberKey) (bool, time.Time) {
	k, ok := sl.seen[id]
	if !ok || k.session != m.session || k.index != m.index {
		return false, now.Add(sl.takeover) // not observed yet: a full period
	}
	at := k.at.Add(sl.takeover)
	return !now.Before(at), at
}

// expel is a member to remove from the cluster: its key, as observed.
type expel struct {
	id    string
	index uint64
}

// takeover is a task key held by the session of a member that was expelled.
type takeover struct {
	task    string
	session string
}

// spreadPlan is what an instance should do now (decide).
type spreadPlan struct {
	// adopt: keys held by this instance's session that it does not treat
	// as owned yet (it resumed after a pause, or acquired them before its
	// state was loaded).
	adopt []string
	// acquire: free keys of tasks that belong to this instance.
	acquire []string
	// takeover: keys of tasks that belong to this instance, held by the
	// session of a member that is no longer in the cluster.
	takeover []takeover
	// expel: members silent for T.
	expel []expel
	// drain: owned tasks that belong to another member now; each is
	// released once its run in progress (if any) ends.
	drain []string
	// drop: keys held by this instance of tasks that no longer exist.
	drop []string
	// owners: the owner of every task by the assignment (diagnostics).
	owners map[string]string
	// next: when the plan may change without anything being observed (a
	// member becomes expellable, blindness ends); zero: never.
	next time.Time
}

// decide says what an instance (self, with session) that takes part in
// the cluster should do at now, given what it saw (s, sl), the cluster's
// tasks, the tasks it treats as owned, and its own candidate entry (self
// counts as a member even before its key is seen).
func decide(now time.Time, self Candidate, session string, s snapshot, sl *silence, tasks []string, owned map[string]bool, groups map[string]string) spreadPlan {
	var p spreadPlan
	if !s.known || session == "" {
		return p
	}
	cands := []Candidate{self}
	for id, m := range s.members {
		if id != self.ID {
			cands = append(cands, Candidate{ID: id, Weight: m.rec.Weight})
		}
	}
	cands = sortedCandidates(cands)
	later := func(t time.Time) {
		if t.After(now) && (p.next.IsZero() || t.Before(p.next)) {
			p.next = t
		}
	}
	for _, id := range slices.Sorted(maps.Keys(s.members)) {
		m := s.members[id]
		if m.session == session {
			continue
		}
		ok, at := sl.expellable(now, id, m)
		if ok {
			p.expel = append(p.expel, expel{id, m.index})
		} else {
			later(at)
		}
	}
	blind := now.Before(sl.blindUntil())
	if blind {
		later(sl.blindUntil())
	}
	p.owners = AssignGroups(tasks, cands, groups)
	exists := map[string]bool{}
	for _, t := range tasks {
		exists[t] = true
		want := p.owners[t] == self.ID
		o, ok := s.owners[t]
		mine := ok && o.session == session
		switch {
		case mine && want:
			if !owned[t] {
				p.adopt = append(p.adopt, t)
			}
		case mine:
			p.drain = append(p.drain, t)
		case owned[t]:
			// Treated as owned but the key says otherwise (not yet seen
			// after acquiring, or lost): the Spreader checks with Consul.
		case !want:
		case !ok || o.session == "":
			if !blind {
				p.acquire = append(p.acquire, t)
			}
		default:
			if _, member := s.holder(o.session); !member {
				p.takeover = append(p.takeover, takeover{t, o.session})
			}
			// Held by a member: it releases the task when it sees that
			// the task belongs here, or it is expelled first.
		}
	}
	for _, t := range slices.Sorted(maps.Keys(s.owners)) {
		if !exists[t] && s.owners[t].session == session {
			p.drop = append(p.drop, t)
		}
	}
	return p
}
