package reconcile

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ctsync/ctsync/internal/task"
)

// lagWatcher is the fake watcher with Consul's indexes, whose views can
// lag behind Consul: lag records a value Consul already has but the view
// has not answered yet; Refresh (the registry's read-again) delivers it.
type lagWatcher struct {
	*fakeWatcher
	mu        sync.Mutex
	idx       map[string]uint64
	pending   map[string]lagged
	early     map[string]any // shown by Get before the view's note (setEarly)
	refreshed []string
}

type lagged struct {
	v   any
	idx uint64
}

func newLagWatcher() *lagWatcher {
	return &lagWatcher{idx: map[string]uint64{}, pending: map[string]lagged{}, early: map[string]any{}}
}

// wrap makes the watcher stand in for the harness's (a start option).
func (w *lagWatcher) wrap(o *Options) {
	w.fakeWatcher = o.Watcher.(*fakeWatcher)
	o.Watcher = w
}

func (w *lagWatcher) Get(key string) (any, uint64, bool) {
	v, _, ok := w.fakeWatcher.Get(key)
	w.mu.Lock()
	defer w.mu.Unlock()
	if e, has := w.early[key]; has {
		return e, w.idx[key], true
	}
	return v, w.idx[key], ok
}

// setEarly is a view that has stored its new value but not yet told its
// subscribers (the registry stores, then notifies): Get shows it, no note
// is sent; set sends the note later.
func (w *lagWatcher) setEarly(key string, v any, idx uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.early[key] = v
	w.idx[key] = idx
}

// set is a view's answer: value v at index idx.
func (w *lagWatcher) set(key string, v any, idx uint64) {
	w.mu.Lock()
	w.idx[key] = idx
	delete(w.pending, key)
	delete(w.early, key)
	w.mu.Unlock()
	w.fakeWatcher.Set(key, v)
}

func (w *lagWatcher) lag(key string, v any, idx uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending[key] = lagged{v, idx}
}

func (w *lagWatcher) Refresh(_ context.Context, keys []string, at uint64) int {
	n := 0
	for _, k := range keys {
		w.mu.Lock()
		old := w.idx[k] < at
		p, has := w.pending[k]
		if old {
			w.refreshed = append(w.refreshed, k)
		}
		w.mu.Unlock()
		if !old {
			continue
		}
		n++
		if has {
			w.set(k, p.v, p.idx)
		}
	}
	return n
}

func (w *lagWatcher) refreshes() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.refreshed)
}

func serviceIDs(m map[string]task.Service) string {
	var out []string
	for _, s := range m {
		out = append(out, s.ID)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// A new service registers: Consul changes the catalog (which a
// catalog-services condition watches) and that service's health (which a
// services module_input reads) at the same index, but the two blocking
// queries answer one after the other. The run the catalog's answer
// triggers reads the module input as of that index, not as the health
// view last answered; instances and tags that changed before (and did not
// run the task) are in it too. Nothing else runs.
func TestConditionRunReadsModuleInputsCaughtUp(t *testing.T) {
	s := task.Spec{Name: "cat", Module: "./m", Enabled: true, BufferPeriod: &task.BufferPeriod{},
		Condition:   task.Condition{CatalogServices: &task.CatalogServicesCondition{Regexp: "^api$|^db$", UseAsModuleInput: true}},
		ModuleInput: task.ModuleInputs{Services: &task.ServicesSelector{Names: []string{"api", "db"}}}}
	w := newLagWatcher()
	h := start(t, 2, nil, s, w.wrap)
	w.set(healthKey("api"), []task.Service{inst("api-1", "api")}, 5)
	w.set(healthKey("db"), []task.Service{}, 5)
	w.set(catalogKey(), map[string][]string{"api": {"tag_a"}}, 5)
	h.waitApplied(t, "cat")
	h.noApply(t) // the start-up notes handled (a re-check of them runs nothing)

	// A second api instance with a new tag: no run.
	w.set(healthKey("api"), []task.Service{inst("api-1", "api"), inst("api-2", "api")}, 8)
	w.set(catalogKey(), map[string][]string{"api": {"tag_a", "tag_b"}}, 8)
	h.noApply(t)

	// db-1 registers at index 10: the catalog answers, db's health lags.
	w.lag(healthKey("db"), []task.Service{inst("db-1", "db")}, 10)
	w.set(catalogKey(), map[string][]string{"api": {"tag_a", "tag_b"}, "db": {"tag_c"}}, 10)
	h.waitApplied(t, "cat")
	in := h.rec.last("cat")
	if got := serviceIDs(in.Services); got != "api-1,api-2,db-1" {
		t.Fatalf("the run read services %s, want api-1,api-2,db-1", got)
	}
	if got := in.CatalogServices; len(got) != 2 || len(got["api"]) != 2 || len(got["db"]) != 1 {
		t.Fatalf("the run read catalog_services %v", got)
	}
	got := w.refreshes()
	slices.Sort(got)
	want := []string{healthKey("api"), healthKey("db")}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("read again %v, want the module input queries older than the catalog's change %v", got, want)
	}
	h.noApply(t) // db's health, delivered by the refresh, runs nothing more
}

// The catalog has stored a new service's name but its note is not handled
// yet when the note of that service's health (a module input) is: the
// module input's note runs nothing, and must not use up the change of
// names, which the catalog's own note then triggers on.
func TestCatalogNamesChangeSeenFirstByModuleInputNote(t *testing.T) {
	s := task.Spec{Name: "cat", Module: "./m", Enabled: true, BufferPeriod: &task.BufferPeriod{},
		Condition:   task.Condition{CatalogServices: &task.CatalogServicesCondition{Regexp: "^api$|^db$", UseAsModuleInput: false}},
		ModuleInput: task.ModuleInputs{Services: &task.ServicesSelector{Names: []string{"api", "db"}}}}
	w := newLagWatcher()
	h := start(t, 2, nil, s, w.wrap)
	w.set(healthKey("api"), []task.Service{inst("api-1", "api")}, 5)
	w.set(healthKey("db"), []task.Service{}, 5)
	w.set(catalogKey(), map[string][]string{"api": {}}, 5)
	h.waitApplied(t, "cat")
	h.noApply(t) // the start-up notes handled (a re-check of them runs nothing)

	cat := map[string][]string{"api": {}, "db": {}}
	w.setEarly(catalogKey(), cat, 10)
	w.set(healthKey("db"), []task.Service{inst("db-1", "db")}, 10)
	h.noApply(t) // the module input's note
	w.set(catalogKey(), cat, 10)
	h.waitApplied(t, "cat")
	if got := serviceIDs(h.rec.last("cat").Services); got != "api-1,db-1" {
		t.Fatalf("the run read services %s, want api-1,db-1", got)
	}
	h.noApply(t)
}
