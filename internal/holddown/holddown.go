// Package holddown keeps, for a task with a removal_delay (docs/safety.md),
// what left the task's condition in its effective result until it has been
// gone for the delay: a service instance deregistered or filtered out by
// health, a catalog service, a node. Additions and changes pass at once;
// an instance that comes back within the delay cancels its removal, and
// the effective result is then the same as before it left, so the task's
// fingerprint does not change and nothing runs.
//
// A Tracker works on the values of the task's watched queries, as the
// watch layer gives them ([]task.Service of a health query,
// map[string][]string of the catalog's services, []task.Node of the
// catalog's nodes): View wraps the getters the reconciler reads a task's
// data with, so that its fingerprint and its module inputs both see the
// effective result. It is plain data and decides nothing about running:
// the reconciler evaluates the task again at Next, when the first pending
// removal applies.
package holddown

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/watch"
)

// Getter and DigestGetter are the reconciler's readers of a watched
// query's latest value and its digest (reconcile.Getter, DigestGetter).
type (
	Getter       = func(key string) (value any, ok bool)
	DigestGetter = func(key string) (watch.Digest, bool)
)

// Kinds of a Removal.
const (
	KindService        = "service"         // an instance of a health query (its key in the services variable)
	KindCatalogService = "catalog-service" // a service name of the catalog
	KindNode           = "node"            // a catalog node
)

// Removal is something that left the condition's result and is kept in
// the effective result until At.
type Removal struct {
	// Query is the key of the watched query it left.
	Query string `json:"query"`
	// Kind is KindService, KindCatalogService or KindNode.
	Kind string `json:"kind"`
	// ID names it: a service instance's key in the services variable
	// ("web-1.node-a.dc1"), a service name, a node's name.
	ID string `json:"id"`
	// Since is when it was first seen gone; At is when its removal
	// applies (Since + the delay).
	Since time.Time `json:"since"`
	At    time.Time `json:"applies_at"`
}

// Actions of a Change.
const (
	// ActionPending: it left; it is kept until its removal applies.
	ActionPending = "pending"
	// ActionCancelled: it came back within the delay; nothing changed.
	ActionCancelled = "cancelled"
	// ActionApplied: it has been gone for the delay (or the delay was
	// turned off); it left the effective result.
	ActionApplied = "applied"
)

// Change is one step of a removal, for the webhook (notify) and the
// metrics.
type Change struct {
	Action  string  `json:"action"`
	Removal Removal `json:"removal"`
}

// MaxChanges bounds the changes a Tracker keeps until Drain: past it the
// oldest are dropped.
const MaxChanges = 1000

// Tracker is the hold-down of one task. It is safe for concurrent use.
type Tracker struct {
	mu      sync.Mutex
	delay   time.Duration
	keys    map[string]*keyState
	changes []Change
}

// Drain returns the changes since the last Drain, oldest first.
func (t *Tracker) Drain() []Change {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.changes
	t.changes = nil
	return out
}

// note records a change of the removal of id from the query key.
func (t *Tracker) note(action, key, kind, id string, since time.Time) {
	if len(t.changes) >= MaxChanges {
		t.changes = slices.Delete(t.changes, 0, len(t.changes)-MaxChanges+1)
	}
	t.changes = append(t.changes, Change{Action: action,
		Removal: Removal{Query: key, Kind: kind, ID: id, Since: since, At: since.Add(t.delay)}})
}

// keyState is what a Tracker keeps of one query: the effective value it
// last returned and, for what is kept, since when it is gone.
type keyState struct {
	kind   string
	seen   any                  // the last effective value
	gone   map[string]time.Time // ID -> first seen gone
	digest watch.Digest         // of seen, when it holds kept items
	holds  bool                 // seen holds kept items
	last   any                  // the last value observed (for a cheap "unchanged")
}

// New returns a Tracker with the task's removal_delay (0: everything
// passes at once).
func New(delay time.Duration) *Tracker {
	return &Tracker{delay: max(0, delay), keys: map[string]*keyState{}}
}

// SetDelay changes the delay (a configuration reload): the pending
// removals apply at Since plus the new delay; 0 applies them all now.
func (t *Tracker) SetDelay(d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.delay = max(0, d)
	if t.delay == 0 {
		for key, st := range t.keys {
			for id, since := range st.gone {
				t.note(ActionApplied, key, st.kind, id, since)
			}
		}
		clear(t.keys)
	}
}

// Delay returns the delay.
func (t *Tracker) Delay() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.delay
}

// Observe takes the current value of one watched query at now (ok false:
// it has none, e.g. a query no longer watched) and returns the effective
// value: v with what left it less than the delay ago put back, as last
// seen. effOK is false only when the query has no value and nothing of
// it is kept. Values of other types pass unchanged.
func (t *Tracker) Observe(now time.Time, key string, v any, ok bool) (eff any, effOK bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	eff, effOK, _ = t.observeLocked(now, key, v, ok)
	return eff, effOK
}

func (t *Tracker) observeLocked(now time.Time, key string, v any, ok bool) (any, bool, *keyState) {
	if t.delay == 0 {
		return v, ok, nil
	}
	st := t.keys[key]
	if st == nil {
		kind := kindOf(v)
		if !ok || kind == "" {
			return v, ok, nil // nothing seen before: nothing to keep
		}
		st = &keyState{kind: kind, gone: map[string]time.Time{}}
		t.keys[key] = st
	}
	orig := v
	if !ok {
		v = emptyOf(st.kind)
	} else if kindOf(v) != st.kind {
		delete(t.keys, key) // another kind of value: start again
		return v, ok, nil
	}
	if ok && len(st.gone) == 0 && st.last != nil && same(st.last, v) {
		return st.seen, true, st // unchanged, nothing pending
	}
	var kept int
	note := func(action, id string, since time.Time) { t.note(action, key, st.kind, id, since) }
	switch cur := v.(type) {
	case []task.Service:
		prev, _ := st.seen.([]task.Service)
		var eff []task.Service
		eff, kept = merge(now, t.delay, st.gone, cur, prev, serviceID, compareServices, note)
		st.seen = eff
	case []task.Node:
		prev, _ := st.seen.([]task.Node)
		var eff []task.Node
		eff, kept = merge(now, t.delay, st.gone, cur, prev, nodeID, compareNodes, note)
		st.seen = eff
	case map[string][]string:
		prev, _ := st.seen.(map[string][]string)
		var eff map[string][]string
		eff, kept = mergeCatalog(now, t.delay, st.gone, cur, prev, note)
		st.seen = eff
	}
	st.last = nil
	if ok {
		st.last = v
	}
	st.holds = kept > 0
	if !st.holds {
		if !ok {
			delete(t.keys, key) // gone, and nothing kept any more
			return orig, false, nil
		}
		st.seen = v // exactly the watched value: its digest is the watch's
		return v, true, st
	}
	d, err := watch.DigestOf(st.seen)
	if err != nil { // the three kinds have digests
		panic("holddown: " + err.Error())
	}
	st.digest = d
	return st.seen, true, st
}

// View returns getters over get and digest for one evaluation of the task
// at now: the value of every query track accepts (the task's condition
// queries, reconcile.ConditionKeys), and of every query the Tracker still
// keeps something of, is its effective value; digest gives the digest of
// an effective value that holds kept items, and the watch's otherwise.
// With a delay of 0 they are get and digest.
func (t *Tracker) View(now time.Time, track func(key string) bool, get Getter, digest DigestGetter) (Getter, DigestGetter) {
	if t.Delay() == 0 {
		return get, digest
	}
	g := func(key string) (any, bool) {
		v, ok := get(key)
		t.mu.Lock()
		defer t.mu.Unlock()
		if _, known := t.keys[key]; !known && !track(key) {
			return v, ok
		}
		eff, effOK, _ := t.observeLocked(now, key, v, ok)
		return eff, effOK
	}
	d := func(key string) (watch.Digest, bool) {
		v, ok := get(key)
		t.mu.Lock()
		defer t.mu.Unlock()
		if _, known := t.keys[key]; !known && !track(key) {
			return digest(key)
		}
		_, effOK, st := t.observeLocked(now, key, v, ok)
		if st != nil && st.holds {
			return st.digest, true
		}
		if !effOK {
			return watch.Digest{}, false
		}
		return digest(key)
	}
	return g, d
}

// Pending returns the removals waiting for their delay, by the time they
// apply (then by query and ID).
func (t *Tracker) Pending() []Removal {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Removal
	for key, st := range t.keys {
		for id, since := range st.gone {
			out = append(out, Removal{Query: key, Kind: st.kind, ID: id, Since: since, At: since.Add(t.delay)})
		}
	}
	slices.SortFunc(out, func(a, b Removal) int {
		return cmp.Or(a.At.Compare(b.At), strings.Compare(a.Query, b.Query), strings.Compare(a.ID, b.ID))
	})
	return out
}

// Next returns when the first pending removal applies: the reconciler
// evaluates the task again then (ok false: nothing pending).
func (t *Tracker) Next() (at time.Time, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, st := range t.keys {
		for _, since := range st.gone {
			if a := since.Add(t.delay); !ok || a.Before(at) {
				at, ok = a, true
			}
		}
	}
	return at, ok
}

// Retain forgets the queries track does not accept and of which nothing
// is kept (a condition edited to watch other services).
func (t *Tracker) Retain(track func(key string) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	maps.DeleteFunc(t.keys, func(key string, st *keyState) bool { return !track(key) && len(st.gone) == 0 })
}

// merge computes the effective value of a list query: cur, plus the items
// of prev (the last effective value) that are not in cur and were first
// seen gone (recorded in gone, from now on for a new one) less than delay
// ago, sorted as the watch sorts. An item back in cur is no longer gone;
// one gone for the delay is dropped. It returns how many items are kept,
// and tells note of each step (Action*).
func merge[T any](now time.Time, delay time.Duration, gone map[string]time.Time, cur, prev []T,
	id func(*T) string, compare func(a, b *T) int, note func(action, id string, since time.Time)) ([]T, int) {
	in := make(map[string]bool, len(cur))
	for i := range cur {
		in[id(&cur[i])] = true
	}
	returned(gone, func(k string) bool { return in[k] }, note)
	var kept []T
	for i := range prev {
		k := id(&prev[i])
		if in[k] {
			continue
		}
		if _, ok := leaving(now, delay, gone, k, note); !ok {
			continue // gone for the delay: its removal applies
		}
		kept = append(kept, prev[i])
	}
	// Gone entries of items no longer in prev (cannot happen, kept items
	// stay in prev until dropped) are dropped with them.
	if len(kept) == 0 {
		clear(gone)
		return cur, 0
	}
	eff := append(slices.Clone(cur), kept...)
	slices.SortStableFunc(eff, func(a, b T) int { return compare(&a, &b) })
	return eff, len(kept)
}

// mergeCatalog is merge for the catalog's services (name -> tags).
func mergeCatalog(now time.Time, delay time.Duration, gone map[string]time.Time, cur, prev map[string][]string,
	note func(action, id string, since time.Time)) (map[string][]string, int) {
	returned(gone, func(k string) bool { _, in := cur[k]; return in }, note)
	var eff map[string][]string
	kept := 0
	for _, name := range slices.Sorted(maps.Keys(prev)) {
		tags := prev[name]
		if _, in := cur[name]; in {
			continue
		}
		if _, ok := leaving(now, delay, gone, name, note); !ok {
			continue
		}
		if eff == nil {
			eff = maps.Clone(cur)
			if eff == nil {
				eff = map[string][]string{}
			}
		}
		eff[name] = tags
		kept++
	}
	if kept == 0 {
		clear(gone)
		return cur, 0
	}
	return eff, kept
}

// returned drops from gone what is back (in), telling note.
func returned(gone map[string]time.Time, in func(string) bool, note func(action, id string, since time.Time)) {
	for _, k := range slices.Sorted(maps.Keys(gone)) {
		if in(k) {
			note(ActionCancelled, k, gone[k])
			delete(gone, k)
		}
	}
}

// leaving records that k is not in the current value (from now on when it
// was not known gone) and reports whether it is still kept: false once it
// has been gone for the delay, when its removal applies and it leaves
// gone.
func leaving(now time.Time, delay time.Duration, gone map[string]time.Time, k string, note func(action, id string, since time.Time)) (time.Time, bool) {
	since, was := gone[k]
	if !was {
		since = now
		gone[k] = now
		note(ActionPending, k, since)
	}
	if now.Sub(since) >= delay {
		delete(gone, k)
		note(ActionApplied, k, since)
		return since, false
	}
	return since, true
}

func kindOf(v any) string {
	switch v.(type) {
	case []task.Service:
		return KindService
	case map[string][]string:
		return KindCatalogService
	case []task.Node:
		return KindNode
	}
	return ""
}

func emptyOf(kind string) any {
	switch kind {
	case KindService:
		return []task.Service{}
	case KindCatalogService:
		return map[string][]string{}
	}
	return []task.Node{}
}

// same reports whether a and b are the very same watched value (the watch
// keeps a value until it changes), without comparing their contents.
func same(a, b any) bool {
	switch a := a.(type) {
	case []task.Service:
		b, _ := b.([]task.Service)
		return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
	case []task.Node:
		b, _ := b.([]task.Node)
		return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
	}
	return false // maps: compared by merge
}

func serviceID(s *task.Service) string { return s.Key() }

func nodeID(n *task.Node) string { return n.Node }

// compareServices and compareNodes are the orders the watch layer sorts a
// health query's instances and the catalog's nodes in (watch's
// normaliseHealth and the nodes query), so that an effective value that
// holds the same items as an earlier watched value is equal to it, and
// so is its digest.
func compareServices(a, b *task.Service) int {
	return cmp.Or(strings.Compare(a.Node, b.Node), strings.Compare(a.ID, b.ID),
		strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.NodeDatacenter, b.NodeDatacenter))
}

func compareNodes(a, b *task.Node) int {
	return cmp.Or(strings.Compare(a.Node, b.Node), strings.Compare(a.ID, b.ID))
}
