package reconcile

import (
	"sync/atomic"
	"time"

	"github.com/ctsync/ctsync/internal/holddown"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/watch"
)

// querySet is what a task watches, derived once from its spec when the
// task is defined (newEntry) and kept with it: immutable, replaced with
// the entry's spec. The subscriptions (Controller.subscribe,
// sources.syncDynamic), the trigger rule (inputOnly), the desired state
// and the inputs (observer) all read it. Its one dynamic part, the health
// queries of the services a regexp selector matches in the catalog now,
// is computed here too (dynamic), from the catalog's latest value.
type querySet struct {
	// static are the queries the task always watches (StaticQueries),
	// staticKeys their keys.
	static     []watch.Query
	staticKeys map[string]bool
	// condStatic are the keys of the static queries of the condition (the
	// data that triggers the task; ConditionKeys).
	condStatic map[string]bool
	// regexp is the services selector whose matches are watched
	// dynamically (nil: none); regexpCond: it is the condition's.
	regexp     *task.ServicesSelector
	regexpCond bool
	// inputs: the task has module inputs (a query may feed only them).
	inputs bool
}

// querySetBuilt is called each time a task's query set is built (tests
// count them).
var querySetBuilt atomic.Pointer[func(name string)]

// newQuerySet derives the query set of the task s.
func newQuerySet(s *task.Spec) *querySet {
	if f := querySetBuilt.Load(); f != nil {
		(*f)(s.Name)
	}
	q := &querySet{static: staticQueries(s), staticKeys: map[string]bool{}, condStatic: map[string]bool{}}
	for _, x := range q.static {
		q.staticKeys[x.Key()] = true
	}
	if sel, _ := servicesSource(s); sel != nil && sel.Regexp != nil {
		q.regexp, q.regexpCond = sel, s.Condition.Services != nil
	}
	c := s.Condition
	if c.Services != nil {
		sel := &c.Services.ServicesSelector
		if sel.Regexp != nil {
			q.condStatic[selectorCatalog(sel).Key()] = true
		} else {
			for _, n := range sel.Names {
				q.condStatic[healthQuery(sel, n).Key()] = true
			}
		}
	}
	if c.CatalogServices != nil {
		q.condStatic[conditionCatalog(c.CatalogServices).Key()] = true
	}
	if c.ConsulKV != nil {
		q.condStatic[kvQuery(&c.ConsulKV.ConsulKVSelector).Key()] = true
	}
	if c.Nodes != nil {
		q.condStatic[nodesQuery(&c.Nodes.NodesSelector).Key()] = true
	}
	if c.Intentions != nil {
		q.condStatic[intentionsQuery(&c.Intentions.IntentionsSelector).Key()] = true
	}
	m := s.ModuleInput
	q.inputs = m.Services != nil || m.ConsulKV != nil || m.Nodes != nil || m.Intentions != nil
	return q
}

// dynamic returns the health queries of the services the regexp selector
// matches now, according to the catalog's latest value (nil: no regexp
// selector, or the catalog is not known yet).
func (q *querySet) dynamic(get Getter) []watch.Query {
	if q.regexp == nil {
		return nil
	}
	names, ok := matchingServices(q.regexp, get)
	if !ok {
		return nil
	}
	qs := make([]watch.Query, 0, len(names))
	for _, n := range names {
		qs = append(qs, healthQuery(q.regexp, n))
	}
	return qs
}

// all returns every query the task watches now: the static ones and the
// dynamic ones.
func (q *querySet) all(get Getter) []watch.Query {
	return append(append([]watch.Query(nil), q.static...), q.dynamic(get)...)
}

// conditionKeys returns the keys of the queries whose data triggers the
// task: the condition's static queries and, for a services condition with
// a regexp, the health queries of the services it matches now.
func (q *querySet) conditionKeys(get Getter) map[string]bool {
	keys := make(map[string]bool, len(q.condStatic))
	for k := range q.condStatic {
		keys[k] = true
	}
	if q.regexpCond {
		for _, x := range q.dynamic(get) {
			keys[x.Key()] = true
		}
	}
	return keys
}

// inputOnly reports whether key is a query the task watches only for its
// module inputs (not for its condition).
func (q *querySet) inputOnly(key string, get Getter) bool {
	if !q.inputs {
		return false // the common case, at no cost per notification
	}
	if q.conditionKeys(get)[key] {
		return false
	}
	if q.staticKeys[key] {
		return true
	}
	for _, x := range q.dynamic(get) {
		if x.Key() == key {
			return true
		}
	}
	return false
}

// evalView is what one evaluation of a task reads its watched data
// through: the task's query set, and getters that show the effective
// data, with its removal hold-down applied (holddown.Tracker.View). The
// desired state's fingerprint and the inputs of the same run read the
// same view, so a flap within removal_delay changes neither.
type evalView struct {
	qs     *querySet
	get    Getter
	digest DigestGetter
}

// viewOf returns the view of one evaluation at now of a task with the
// query set qs and the hold-down tracker hd (nil: none), over the
// observer's raw getters.
func (o *observer) viewOf(now time.Time, qs *querySet, hd *holddown.Tracker) evalView {
	v := evalView{qs: qs, get: o.get, digest: o.digest}
	if hd == nil {
		return v
	}
	var cond map[string]bool
	track := func(key string) bool {
		if cond == nil {
			cond = qs.conditionKeys(o.get)
		}
		return cond[key]
	}
	g, d := hd.View(now, track, holddown.Getter(o.get), holddown.DigestGetter(o.digest))
	v.get, v.digest = g, d
	return v
}

// rawView is the view of a task without its entry (a spec alone): no
// hold-down, its query set built for the occasion.
func (o *observer) rawView(s *task.Spec) evalView {
	return evalView{qs: newQuerySet(s), get: o.get, digest: o.digest}
}
