package ha

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/consul"
)

// lockBase is what the Elector (one lock for the cluster) and the
// Spreader (a member key and one key per task) share: the Consul calls they
// make, each bounded by the call timeout and in the namespace; the session
// that holds their keys; the lease of a term and its heartbeat; and the
// blocking query that follows their keys. mu guards the state of both.
type lockBase struct {
	t     Timing
	log   *slog.Logger
	clock Clock
	ns    string
	kv    *api.KV
	sess  *api.Session

	mu sync.Mutex
}

func newLockBase(t Timing, log *slog.Logger, clk Clock, ns string, c *api.Client) lockBase {
	return lockBase{t: t, log: log, clock: clk, ns: ns, kv: c.KV(), sess: c.Session()}
}

func (b *lockBase) wopts() (*api.WriteOptions, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), b.t.CallTimeout)
	return (&api.WriteOptions{Namespace: b.ns}).WithContext(ctx), cancel
}

func (b *lockBase) qopts() (*api.QueryOptions, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), b.t.CallTimeout)
	return (&api.QueryOptions{Namespace: b.ns}).WithContext(ctx), cancel
}

// newSession creates a session: TTL session_ttl, no checks (only the TTL,
// a destroy or data loss invalidate it), behavior delete, lock-delay
// LockDelay.
func (b *lockBase) newSession(name string) (string, error) {
	w, cancel := b.wopts()
	defer cancel()
	id, _, err := b.sess.CreateNoChecks(&api.SessionEntry{
		Name:      name,
		TTL:       b.t.SessionTTL.String(),
		Behavior:  api.SessionBehaviorDelete,
		LockDelay: LockDelay,
	}, w)
	return id, err
}

// renew renews a session; ok is false when Consul no longer knows it.
func (b *lockBase) renew(id string) (ok bool, err error) {
	w, cancel := b.wopts()
	defer cancel()
	ent, _, err := b.sess.Renew(id, w)
	if err != nil {
		return false, err
	}
	return ent != nil, nil
}

// destroy destroys a session (its keys are deleted with it); a
// failure is only logged: the session expires on its own.
func (b *lockBase) destroy(id string) {
	w, cancel := b.wopts()
	defer cancel()
	if _, err := b.sess.Destroy(id, w); err != nil {
		b.log.Debug("ha: destroying the session failed; it expires on its own", "error", err)
	}
}

// txn runs a KV transaction; ok is false when it was rolled back (a check
// failed).
func (b *lockBase) txn(ops api.KVTxnOps) (ok bool, err error) {
	ok, _, err = b.txnIndex(ops, "")
	return ok, err
}

// txnIndex runs a KV transaction and also returns the ModifyIndex it gave
// key (0 when it wrote nothing there).
func (b *lockBase) txnIndex(ops api.KVTxnOps, key string) (bool, uint64, error) {
	for _, op := range ops {
		op.Namespace = b.ns
	}
	q, cancel := b.qopts()
	defer cancel()
	ok, resp, _, err := b.kv.Txn(ops, q)
	if err != nil {
		return false, 0, err
	}
	if !ok {
		if resp != nil && len(resp.Errors) > 0 {
			b.log.Debug("ha: transaction rolled back", "reason", resp.Errors[0].What)
		}
		return false, 0, nil
	}
	var idx uint64
	if resp != nil {
		for _, r := range resp.Results {
			if r != nil && r.Key == key {
				idx = max(idx, r.ModifyIndex)
			}
		}
	}
	return true, idx, nil
}

// lease is one term's hold on its key: the session, when the term began,
// and the step-down S after the last successful heartbeat.
type lease struct {
	session  string
	since    time.Time
	deadline time.Time // when the lease runs out (mu)
	nextBeat time.Time // loop goroutine only
	timer    Timer
	// expire ends the term; the timer calls it with the reason.
	expire func(reason string)
}

// startLocked begins l's lease at t0 (when the renewal that began it was
// sent): it runs out S later unless a heartbeat extends it (mu held).
func (b *lockBase) startLocked(l *lease, t0 time.Time) {
	l.since = t0
	l.nextBeat = t0.Add(b.t.Heartbeat)
	l.deadline = t0.Add(b.t.StepDown)
	b.armLocked(l)
}

// armLocked (re)arms l's step-down at its deadline (mu held).
func (b *lockBase) armLocked(l *lease) {
	if l.timer != nil {
		l.timer.Stop()
	}
	l.timer = b.clock.AfterFunc(l.deadline.Sub(b.clock.Now()), func() {
		l.expire(fmt.Sprintf("no successful heartbeat for %s", b.t.StepDown))
	})
}

// beatResult is what one heartbeat found.
type beatResult int

const (
	beatOK          beatResult = iota // renewed and rewritten: the lease is extended
	beatRetry                         // a call failed: the next beat is a retry
	beatSessionGone                   // Consul no longer knows the session
	beatKeyLost                       // the key is no longer held by the session
)

// keepAlive renews l's session and rewrites key with value() (only if the
// session still holds it). Success extends the lease by S from the time the
// renewal was sent, if current() (called with mu held) says the term is
// still the running one; a failed call schedules a retry. The caller ends
// the term on beatSessionGone and beatKeyLost.
func (b *lockBase) keepAlive(l *lease, key string, value func() []byte, current func() bool) beatResult {
	t0 := b.clock.Now()
	ok, err := b.renew(l.session)
	if err == nil && !ok {
		return beatSessionGone
	}
	if err == nil {
		ok, err = b.txn(api.KVTxnOps{
			{Verb: api.KVCheckSession, Key: key, Session: l.session},
			{Verb: api.KVLock, Key: key, Value: value(), Session: l.session},
		})
	}
	switch {
	case err != nil:
		b.mu.Lock()
		left := l.deadline.Sub(b.clock.Now()).Round(time.Millisecond)
		b.mu.Unlock()
		b.log.Warn("ha: heartbeat failed; retrying", "error", err, "step_down_in", left)
		l.nextBeat = b.clock.Now().Add(b.t.Retry)
		return beatRetry
	case !ok:
		return beatKeyLost
	}
	b.mu.Lock()
	if current() {
		l.deadline = t0.Add(b.t.StepDown)
		b.armLocked(l)
	}
	b.mu.Unlock()
	l.nextBeat = t0.Add(b.t.Heartbeat)
	return beatOK
}

// follow reads with blocking queries until ctx ends, handing each answer
// and its index to observe, which returns the index to wait on next. A
// failed read calls blind and backs off; the next read starts afresh
// (index 0): Consul may have come back with a fresh raft log (a dev agent
// restart) whose index is below ours, and a blocking query would then wait
// for a long time.
func follow[T any](ctx context.Context, b *lockBase, what string,
	get func(*api.QueryOptions) (T, *api.QueryMeta, error), observe func(T, uint64) uint64, blind func()) {
	var idx uint64
	bo := consul.NewBackoff(100*time.Millisecond, 2*time.Second)
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, watchWait+watchWait/16+b.t.CallTimeout)
		v, meta, err := get((&api.QueryOptions{WaitIndex: idx, WaitTime: watchWait, Namespace: b.ns}).WithContext(rctx))
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			blind()
			idx = 0
			if bo.Attempts() == 3 {
				b.log.Warn("ha: cannot read "+what, "error", err)
			}
			if !b.sleep(ctx, bo.Next()) {
				return
			}
			continue
		}
		bo.Reset()
		idx = observe(v, meta.LastIndex)
	}
}

// sleep waits d on the clock; false when ctx ended first.
func (b *lockBase) sleep(ctx context.Context, d time.Duration) bool {
	ch := make(chan struct{})
	tm := b.clock.AfterFunc(d, func() { close(ch) })
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-ch:
		return true
	}
}
