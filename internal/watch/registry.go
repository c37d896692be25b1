package watch

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"golang.org/x/sync/errgroup"

	"github.com/ctsync/ctsync/internal/backoff"
	"github.com/ctsync/ctsync/internal/consul"
	"github.com/ctsync/ctsync/internal/task"
)

// Registry runs one View per distinct Query key, shared by all of the
// key's subscribers, and tells subscribers when a view's value changes.
//
// Each running view holds one blocking query open against the agent most
// of the time, i.e. one HTTP/1.1 connection (or one HTTP/2 stream over
// TLS); see consul.NewClient for the connection math.
type Registry struct {
	client *consul.Client
	logger *slog.Logger
	notify func(subscriber, key string)

	// Retry timing of views after a Consul error; tests shorten it.
	backoffBase, backoffCap time.Duration
	deadAfter               time.Duration // see Live; tests shorten it

	mu      sync.Mutex
	views   map[string]*view
	subs    map[string]map[string]struct{} // subscriber -> keys
	runCtx  context.Context                // set by Run; nil before
	stopped bool                           // Run has ended
	warned  bool                           // the connection-limit warning was logged
	wg      sync.WaitGroup                 // view and late-notify goroutines

	fetches       atomic.Uint64
	fetchErrors   atomic.Uint64
	notifications atomic.Uint64
}

// ConnWarnViews is how many distinct queries a registry may watch over
// plain HTTP before it warns: each holds a connection, and the agent's
// default limits.http_max_conns_per_client is 200 (the rest is headroom for
// KV writes, sessions and the API calls of the CLI on the same host).
const ConnWarnViews = 180

// Stats are cumulative counters of a Registry.
type Stats struct {
	Fetches       uint64 // Consul reads started by views
	FetchErrors   uint64 // reads that failed (not counting cancellation)
	Notifications uint64 // notify calls made (one per subscriber per change)
}

type view struct {
	q      Query
	key    string
	subs   map[string]struct{} // guarded by Registry.mu
	cancel context.CancelFunc  // guarded by Registry.mu; nil until started

	mu     sync.RWMutex // guards the fields below; never held while taking Registry.mu
	value  any
	digest Digest
	index  uint64
	ready  bool
	// refused is Consul's answer when it refuses the query for good (see
	// Refused); nil after any successful read.
	refused error
	// failingSince is when the view's reads started failing (zero while
	// they succeed), lastErr the latest failure: see Live.
	failingSince time.Time
	lastErr      error
}

// Digest identifies a view's value: equal values have equal digests. It is
// computed once per change of the view, so a task that depends on the view
// can fingerprint its inputs without re-encoding them.
type Digest [sha256.Size]byte

// DigestOf returns the digest of a normalised value. It hashes the raw
// bytes of every string, length-prefixed, with map keys sorted: JSON would
// fold invalid UTF-8 into U+FFFD and so hide a change between two invalid
// byte strings.
func DigestOf(v any) (Digest, error) {
	h := digester{h: sha256.New()}
	switch v := v.(type) {
	case []task.Service:
		h.int(len(v))
		for i := range v {
			s := &v[i]
			h.str(s.ID, s.Name, s.Kind, s.Address, s.Namespace, s.Status, s.Node, s.NodeID, s.NodeAddress, s.NodeDatacenter)
			h.int(s.Port)
			h.strs(s.Tags)
			h.dict(s.Meta)
			h.dict(s.NodeTaggedAddresses)
			h.dict(s.NodeMeta)
			h.dict(s.CTSUserDefinedMeta)
		}
	case map[string][]string:
		h.int(len(v))
		for _, k := range slices.Sorted(maps.Keys(v)) {
			h.str(k)
			h.strs(v[k])
		}
	case map[string]string:
		h.dict(v)
	case []task.Node:
		h.int(len(v))
		for i := range v {
			n := &v[i]
			h.str(n.ID, n.Node, n.Address, n.Datacenter)
			h.dict(n.TaggedAddresses)
			h.dict(n.Meta)
		}
	case []task.Intention:
		h.int(len(v))
		for i := range v {
			in := &v[i]
			h.str(in.SourceName, in.SourceNamespace, in.SourcePartition, in.SourcePeer, in.SourceSamenessGroup,
				in.SourceType, in.DestinationName, in.DestinationNamespace, in.DestinationPartition,
				in.Action, in.Permissions, in.Description)
			h.int(in.Precedence)
			h.dict(in.Meta)
		}
	default:
		return Digest{}, fmt.Errorf("no digest for %T", v)
	}
	var d Digest
	h.h.Sum(d[:0])
	return d, nil
}

type digester struct{ h hash.Hash }

func (d digester) int(n int) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(n))
	d.h.Write(b[:])
}

func (d digester) str(ss ...string) {
	for _, s := range ss {
		d.int(len(s))
		io.WriteString(d.h, s)
	}
}

func (d digester) strs(ss []string) {
	d.int(len(ss))
	d.str(ss...)
}

func (d digester) dict(m map[string]string) {
	d.int(len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		d.str(k, m[k])
	}
}

// NewRegistry returns a Registry reading through client. notify is called
// from view goroutines (so it must be safe for concurrent use and must not
// block long) when a view's value changes, once per subscriber of that
// view: subscriber is the opaque subscriber id (a task name), key the
// view's Query.Key(). notify may call back into the Registry.
func NewRegistry(client *consul.Client, logger *slog.Logger, notify func(subscriber, key string)) *Registry {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if notify == nil {
		notify = func(string, string) {}
	}
	return &Registry{
		client:      client,
		logger:      logger,
		notify:      notify,
		backoffBase: consul.DefaultBackoffBase,
		backoffCap:  consul.DefaultBackoffCap,
		deadAfter:   DeadWatchAfter,
		views:       map[string]*view{},
		subs:        map[string]map[string]struct{}{},
	}
}

// Run starts the registry; views created before Run begin fetching when Run
// starts. Run blocks until ctx is done, then stops all view goroutines and
// returns nil once they have exited. A Registry runs once.
func (r *Registry) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.runCtx != nil || r.stopped {
		r.mu.Unlock()
		return errors.New("watch: registry already started")
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.runCtx = runCtx
	for _, v := range r.views {
		r.startLocked(v)
	}
	r.mu.Unlock()

	<-ctx.Done()

	r.mu.Lock()
	r.stopped = true
	for _, v := range r.views {
		if v.cancel != nil {
			v.cancel()
		}
	}
	r.mu.Unlock()
	cancel()
	r.wg.Wait()
	return nil
}

// testHookStarted, set by tests only, runs in Subscribe right after it
// started a new view.
var testHookStarted func(*view)

// Subscribe adds subscriber to the view for q, creating it (and starting
// it, once Run has started) when it is the first subscriber. Idempotent per
// (subscriber, key). A subscriber joining a view that already has a value
// is notified once right away (from another goroutine), so it learns the
// view is ready.
func (r *Registry) Subscribe(subscriber string, q Query) {
	key := q.Key()
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.views[key]
	created := v == nil
	if created {
		v = &view{q: q, key: key, subs: map[string]struct{}{}}
		r.views[key] = v
		if r.runCtx != nil && !r.stopped {
			r.startLocked(v)
			if testHookStarted != nil {
				testHookStarted(v)
			}
		}
		if len(r.views) > ConnWarnViews && !r.warned && r.client != nil && !r.client.Multiplexed() {
			r.warned = true
			r.logger.Warn("watching more distinct queries than Consul's default per-client connection limit allows over plain HTTP",
				"queries", len(r.views), "agent_default_limit", 200,
				"advice", "give the consul block an https address (HTTP/2 shares connections) or raise limits.http_max_conns_per_client on the agent")
		}
	}
	if _, ok := v.subs[subscriber]; ok {
		return
	}
	v.subs[subscriber] = struct{}{}
	keys := r.subs[subscriber]
	if keys == nil {
		keys = map[string]struct{}{}
		r.subs[subscriber] = keys
	}
	keys[key] = struct{}{}

	// A view started here may already have its first answer (its reader
	// does not need r.mu to store it), but its first notification waits
	// for r.mu and so reaches this subscriber: telling it here as well
	// would notify twice for one answer.
	v.mu.RLock()
	ready := v.ready
	v.mu.RUnlock()
	if ready && !created && !r.stopped {
		// Not called inline: the caller may hold locks notify needs.
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.mu.Lock()
			_, still := v.subs[subscriber]
			still = still && r.views[key] == v && !r.stopped
			r.mu.Unlock()
			if still {
				r.notifications.Add(1)
				r.notify(subscriber, key)
			}
		}()
	}
}

// Unsubscribe removes subscriber from the view for key; the view stops when
// no subscriber is left.
func (r *Registry) Unsubscribe(subscriber, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unsubscribeLocked(subscriber, key)
}

// UnsubscribeAll removes subscriber from every view.
func (r *Registry) UnsubscribeAll(subscriber string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key := range r.subs[subscriber] {
		r.unsubscribeLocked(subscriber, key)
	}
}

func (r *Registry) unsubscribeLocked(subscriber, key string) {
	if keys := r.subs[subscriber]; keys != nil {
		delete(keys, key)
		if len(keys) == 0 {
			delete(r.subs, subscriber)
		}
	}
	v := r.views[key]
	if v == nil {
		return
	}
	delete(v.subs, subscriber)
	if len(v.subs) > 0 {
		return
	}
	delete(r.views, key)
	if v.cancel != nil {
		v.cancel() // the goroutine exits on its own; Run waits for it
	}
}

// Get returns the latest value of the view for key; ok is false while no
// view exists for key or before the view's first successful fetch. The
// value is shared: do not modify it.
func (r *Registry) Get(key string) (value any, index uint64, ok bool) {
	r.mu.Lock()
	v := r.views[key]
	r.mu.Unlock()
	if v == nil {
		return nil, 0, false
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.value, v.index, v.ready
}

// DeadWatchAfter is how long a view's reads may fail in a row before Live
// reports the watch as dead.
const DeadWatchAfter = 2 * time.Minute

// Live reports whether the registry is watching: it has not stopped, and
// no view's reads have failed for DeadWatchAfter or longer (Consul
// unreachable, or refusing a query). Before Run (the daemon waits for
// Consul) it is live. The error names the first failing view and its error.
func (r *Registry) Live() error {
	r.mu.Lock()
	stopped := r.stopped
	views := make([]*view, 0, len(r.views))
	for _, v := range r.views {
		views = append(views, v)
	}
	r.mu.Unlock()
	if stopped {
		return errors.New("the watch registry has stopped")
	}
	slices.SortFunc(views, func(a, b *view) int { return strings.Compare(a.key, b.key) })
	now := time.Now()
	for _, v := range views {
		v.mu.RLock()
		since, err := v.failingSince, v.lastErr
		v.mu.RUnlock()
		if !since.IsZero() && now.Sub(since) >= r.deadAfter {
			return fmt.Errorf("watch %s has failed for %s: %v", v.key, now.Sub(since).Round(time.Second), err)
		}
	}
	return nil
}

// RefusedError returns Consul's answer when the latest read of the view for
// key was refused for good (see Refused), else nil. The view keeps
// retrying: a daemon converges once the cause is fixed.
func (r *Registry) RefusedError(key string) error {
	r.mu.Lock()
	v := r.views[key]
	r.mu.Unlock()
	if v == nil {
		return nil
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.refused
}

// Refused reports whether Consul refused a query in a way that asking again
// will not change: a 4xx answer (an invalid query parameter, such as a
// namespace on Consul CE; a permission denied) other than 408 and 429, or a
// 500 for a datacenter Consul has no path to or a filter it cannot parse.
func Refused(err error) bool {
	var se api.StatusError
	if !errors.As(err, &se) {
		return false
	}
	switch {
	case se.Code >= 400 && se.Code < 500:
		return se.Code != http.StatusRequestTimeout && se.Code != http.StatusTooManyRequests
	case se.Code == http.StatusInternalServerError:
		return strings.Contains(se.Body, "No path to datacenter") ||
			strings.Contains(se.Body, "Failed to create boolean expression evaluator")
	}
	return false
}

// Digest returns the digest of the latest value of the view for key; ok is
// false exactly when Get's would be.
func (r *Registry) Digest(key string) (d Digest, ok bool) {
	r.mu.Lock()
	v := r.views[key]
	r.mu.Unlock()
	if v == nil {
		return Digest{}, false
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.digest, v.ready
}

// Views returns how many views exist (one per distinct subscribed key);
// after Run has started each of them has a running goroutine.
func (r *Registry) Views() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.views)
}

// Stats returns the registry's counters.
func (r *Registry) Stats() Stats {
	return Stats{
		Fetches:       r.fetches.Load(),
		FetchErrors:   r.fetchErrors.Load(),
		Notifications: r.notifications.Load(),
	}
}

func (r *Registry) startLocked(v *view) {
	ctx, cancel := context.WithCancel(r.runCtx)
	v.cancel = cancel
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer cancel()
		r.runView(ctx, v)
	}()
}

// runView is the loop of one view. It never returns on a Consul error,
// only when ctx ends (view unsubscribed or registry stopped).
func (r *Registry) runView(ctx context.Context, v *view) {
	var (
		waitIndex uint64 // index for the next fetch; 0 = answer at once
		bo        = consul.NewBackoff(r.backoffBase, r.backoffCap)
		failures  int
		lastLog   time.Time
		spin      = consul.NewBackoff(r.backoffBase, r.backoffCap) // paces instant "no change" answers
	)
	for ctx.Err() == nil {
		r.fetches.Add(1)
		started := time.Now()
		asked := waitIndex
		value, index, err := v.q.Fetch(ctx, r.client, waitIndex)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			r.fetchErrors.Add(1)
			failures++
			v.mu.Lock()
			if v.failingSince.IsZero() {
				v.failingSince = time.Now()
			}
			v.lastErr = err
			first := false
			if Refused(err) {
				first = v.refused == nil
				v.refused = err
			}
			v.mu.Unlock()
			if first {
				r.notifyAll(ctx, v) // a waiter (-once, task create) fails fast
			}
			delay := bo.Next()
			// One line per backoff step at most: the first failure, then
			// whenever a full step's ceiling has passed since the last line.
			if failures == 1 || time.Since(lastLog) >= bo.Ceiling() {
				lastLog = time.Now()
				r.logger.Warn("consul query failed, retrying", "key", v.key, "error", err.Error(),
					"failures", failures, "retry_in", delay.Round(time.Millisecond).String())
			}
			// After an error start over with a non-blocking read: Consul
			// may have restarted with a smaller index.
			waitIndex = 0
			if !backoff.Sleep(ctx, delay) {
				return
			}
			continue
		}
		if failures > 0 {
			r.logger.Info("consul query recovered", "key", v.key, "failures", failures)
			failures = 0
			bo.Reset()
			v.mu.Lock()
			v.failingSince, v.lastErr = time.Time{}, nil
			v.mu.Unlock()
		}
		if index == 0 {
			index = 1 // Consul's advice: never block on index 0
		}
		if waitIndex != 0 && index == waitIndex {
			// The wait ended without a change (normally after WaitTime).
			// An answer that came back much sooner is a misbehaving
			// endpoint or proxy; pause so the loop cannot spin.
			if time.Since(started) < minUnchangedWait {
				if !backoff.Sleep(ctx, spin.Next()) {
					return
				}
			} else {
				spin.Reset()
			}
			continue
		}
		spin.Reset()
		next := index
		if waitIndex != 0 && index < waitIndex {
			// The index went backwards (Consul restarted or its state was
			// restored): keep this answer, but re-read from scratch.
			next = 0
		}
		waitIndex = next

		digest, err := DigestOf(value)
		if err != nil { // values are plain data; cannot happen
			r.logger.Error("cannot fingerprint a consul answer", "key", v.key, "error", err.Error())
			continue
		}
		v.mu.Lock()
		if v.ready && asked != 0 && index >= asked && index < v.index {
			// Refresh stored a newer answer while this query was
			// waiting: keep it (the next query, from this older index,
			// answers at once).
			v.mu.Unlock()
			continue
		}
		changed := v.storeLocked(value, digest, index)
		v.failingSince, v.lastErr = time.Time{}, nil
		v.mu.Unlock()
		if !changed {
			// Consul's index moved for something this query does not
			// show (e.g. one of two instances with the same tags left a
			// catalog-services answer): nobody is told.
			r.logger.Debug("consul answer unchanged; not notifying", "key", v.key, "index", index)
			continue
		}
		r.notifyAll(ctx, v)
	}
}

// storeLocked keeps an answer of Consul at index as the view's latest (its
// value only when its digest differs) and reports whether the value
// changed; v.mu is held.
func (v *view) storeLocked(value any, digest Digest, index uint64) bool {
	changed := !v.ready || digest != v.digest
	if changed {
		v.value, v.digest = value, digest
	}
	v.index = index
	v.ready = true
	v.refused = nil
	return changed
}

// refreshTimeout bounds one Refresh: its reads are non-blocking, so this
// is only reached when Consul does not answer.
const refreshTimeout = 10 * time.Second

// refreshParallel is how many reads one Refresh has in flight at once.
const refreshParallel = 8

// Refresh makes the values of keys at least as new as Consul's index at.
// A view whose latest answer has a lower index may simply not have changed
// since, or its blocking query may not have returned a change yet: it is
// read again at once (a non-blocking query) and, when the value changed,
// its subscribers are told, as when its own query returns. Views with an
// index of at least at, and keys without a view, are left as they are.
// Refresh returns when every read has answered or failed (a failed read
// leaves the view as it was; its own query goes on) or ctx ends. It
// reports how many views were read again.
//
// The controller calls it before a run that a change of one query (at
// index at) triggers, so that the other data the run reads is not older
// than that change.
func (r *Registry) Refresh(ctx context.Context, keys []string, at uint64) int {
	r.mu.Lock()
	var stale []*view
	for _, k := range keys {
		v := r.views[k]
		if v == nil {
			continue
		}
		v.mu.RLock()
		old := !v.ready || v.index < at
		v.mu.RUnlock()
		if old {
			stale = append(stale, v)
		}
	}
	r.mu.Unlock()
	if len(stale) == 0 {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	defer cancel()
	var g errgroup.Group
	g.SetLimit(refreshParallel)
	for _, v := range stale {
		g.Go(func() error {
			r.refreshView(ctx, v)
			return nil
		})
	}
	_ = g.Wait()
	return len(stale)
}

// refreshView reads v at once and stores the answer unless the view holds
// a newer one; subscribers are told when the value changed.
func (r *Registry) refreshView(ctx context.Context, v *view) {
	r.fetches.Add(1)
	value, index, err := v.q.Fetch(ctx, r.client, 0)
	if err != nil {
		if ctx.Err() == nil {
			r.fetchErrors.Add(1)
			r.logger.Debug("consul query could not be read again; its watch goes on", "key", v.key, "error", err.Error())
		}
		return
	}
	if index == 0 {
		index = 1 // as runView
	}
	digest, err := DigestOf(value)
	if err != nil { // values are plain data; cannot happen
		return
	}
	v.mu.Lock()
	if v.ready && index < v.index {
		v.mu.Unlock() // the view's own query got further meanwhile
		return
	}
	changed := v.storeLocked(value, digest, index)
	v.mu.Unlock()
	if changed {
		r.logger.Debug("consul answer read again ahead of its watch", "key", v.key, "index", index)
		r.notifyAll(ctx, v)
	}
}

// minUnchangedWait: a blocking read answering "no change" faster than this
// is treated as spinning and paced with the retry backoff. Consul itself
// answers "no change" only after WaitTime, so this never delays real changes
// from a healthy agent.
const minUnchangedWait = 50 * time.Millisecond

func (r *Registry) notifyAll(ctx context.Context, v *view) {
	r.mu.Lock()
	subs := make([]string, 0, len(v.subs))
	for s := range v.subs {
		subs = append(subs, s)
	}
	r.mu.Unlock()
	slices.Sort(subs)
	for _, s := range subs {
		if ctx.Err() != nil {
			return
		}
		r.notifications.Add(1)
		r.notify(s, v.key)
	}
}

// Answered reports whether the registry runs and every view has had its
// first answer from Consul: a value, or a failed read (the view keeps
// retrying). The daemon tells its service manager it is ready once this
// holds (internal/cli).
func (r *Registry) Answered() bool {
	r.mu.Lock()
	if r.runCtx == nil {
		r.mu.Unlock()
		return false
	}
	views := make([]*view, 0, len(r.views))
	for _, v := range r.views {
		views = append(views, v)
	}
	r.mu.Unlock()
	for _, v := range views {
		v.mu.RLock()
		answered := v.ready || v.lastErr != nil || v.refused != nil
		v.mu.RUnlock()
		if !answered {
			return false
		}
	}
	return true
}
