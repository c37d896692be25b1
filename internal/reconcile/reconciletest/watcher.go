// Package reconciletest has test doubles for code built on the reconcile
// controller: an in-memory watcher that notifies subscribers like the watch
// registry does.
package reconciletest

import (
	"sync"

	"github.com/ctsync/ctsync/internal/watch"
)

// Watcher is an in-memory watch registry. Tests Set values; subscribers
// are notified through Notify, which the test wires to the controller
// (w.Notify = ctrl.Notify) before any value is set.
type Watcher struct {
	// Notify receives (subscriber, key) for every change, like the
	// registry's notify callback.
	Notify func(sub, key string)

	mu   sync.Mutex
	vals map[string]any
	subs map[string]map[string]bool // key -> subscribers
}

// NewWatcher returns an empty Watcher.
func NewWatcher() *Watcher {
	return &Watcher{vals: map[string]any{}, subs: map[string]map[string]bool{}}
}

// Subscribe implements reconcile.Watcher; a subscriber of a key that has a
// value is notified at once.
func (w *Watcher) Subscribe(sub string, q watch.Query) {
	w.mu.Lock()
	k := q.Key()
	if w.subs[k] == nil {
		w.subs[k] = map[string]bool{}
	}
	w.subs[k][sub] = true
	_, ready := w.vals[k]
	w.mu.Unlock()
	if ready {
		w.Notify(sub, k)
	}
}

// Unsubscribe implements reconcile.Watcher.
func (w *Watcher) Unsubscribe(sub, key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.subs[key], sub)
}

// UnsubscribeAll implements reconcile.Watcher.
func (w *Watcher) UnsubscribeAll(sub string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.subs {
		delete(s, sub)
	}
}

// Get implements reconcile.Watcher.
func (w *Watcher) Get(key string) (any, uint64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	v, ok := w.vals[key]
	return v, 1, ok
}

// Subscribed reports whether anyone subscribes to key.
func (w *Watcher) Subscribed(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.subs[key]) > 0
}

// Set stores a value and notifies the key's subscribers.
func (w *Watcher) Set(key string, v any) {
	w.mu.Lock()
	w.vals[key] = v
	var subs []string
	for s := range w.subs[key] {
		subs = append(subs, s)
	}
	w.mu.Unlock()
	for _, s := range subs {
		w.Notify(s, key)
	}
}
