package ha

import (
	"encoding/json"
	"time"

	"github.com/hashicorp/consul/api"
)

// record is the value of the lock key.
type record struct {
	ID      string `json:"id"`
	Address string `json:"address,omitempty"`
	// Beat counts the leader's heartbeats; every heartbeat changes the
	// key, which is how followers see that the leader is alive.
	Beat  uint64    `json:"beat"`
	Since time.Time `json:"since"`
	// Released marks a key released on purpose (graceful hand-over): the
	// previous leader stopped everything first, so it may be acquired at
	// once.
	Released bool `json:"released,omitempty"`
}

// view is one observation of the lock key.
type view struct {
	known   bool   // at least one successful read
	exists  bool   // the key exists
	session string // the session holding it ("" free)
	index   uint64 // the key's ModifyIndex
	rec     record
}

func viewOf(p *api.KVPair) view {
	v := view{known: true}
	if p == nil {
		return v
	}
	v.exists, v.session, v.index = true, p.Session, p.ModifyIndex
	_ = json.Unmarshal(p.Value, &v.rec) // an unreadable value is a leader of unknown id
	return v
}

func (v view) held() bool { return v.exists && v.session != "" }

// action is what a follower may do about the lock.
type action int

const (
	actNone     action = iota
	actAcquire         // the key is free
	actTakeover        // the key is held by a session that stopped beating
	actResume          // the key is still held by this instance's session
)

func (a action) String() string {
	return [...]string{"none", "acquire", "takeover", "resume"}[a]
}

// tracker keeps what a follower needs to decide when it may lead. It is
// pure (times are passed in) so that the rules can be tested without
// waiting.
type tracker struct {
	takeover time.Duration
	// lastOther is the last time another instance may have proven that it
	// leads: when this instance saw the key change while held by another
	// session, or could not see at all (a Consul error, or an index that
	// went backwards: Consul lost its data) while not leading itself.
	lastOther time.Time
	// session and index of the other holder's key at lastOther.
	session string
	index   uint64
}

// observe records a successful read of the key at now. mine reports
// whether a session is this instance's; leading whether it leads now.
func (tr *tracker) observe(now time.Time, v view, mine func(string) bool) {
	if !v.held() || mine(v.session) {
		return
	}
	if v.session != tr.session || v.index != tr.index {
		tr.lastOther, tr.session, tr.index = now, v.session, v.index
	}
}

// blind records that, at now, this instance could not see the key (an
// error) or saw Consul's index go backwards. While it leads, that changes
// nothing: its own heartbeats decide. Otherwise any other instance may have
// led meanwhile.
func (tr *tracker) blind(now time.Time, leading bool) {
	if !leading {
		tr.lastOther = now
		tr.session, tr.index = "", 0
	}
}

// decide says what this (non-leading) instance may do about the key it
// sees, and from when.
func (tr *tracker) decide(v view, mine func(string) bool, now time.Time) (action, time.Time) {
	if !v.known {
		return actNone, time.Time{}
	}
	after := func(a action) (action, time.Time) {
		if tr.lastOther.IsZero() {
			return a, now
		}
		return a, tr.lastOther.Add(tr.takeover)
	}
	switch {
	case v.held() && mine(v.session):
		return actResume, now
	case v.held():
		if v.session != tr.session || v.index != tr.index {
			// Not yet observed (observe runs first): wait a full period.
			return actTakeover, now.Add(tr.takeover)
		}
		return actTakeover, tr.lastOther.Add(tr.takeover)
	case v.exists && v.rec.Released:
		return actAcquire, now
	default:
		return after(actAcquire)
	}
}
