// Package ha runs several ctsync instances as one cluster: they elect a
// leader through a Consul session and a KV lock, only the leader runs tasks,
// and the followers keep their watches warm so that one of them can take over
// at once. The state a new leader needs (what was applied, what was in
// flight, events, tasks changed through the API) lives in Consul KV
// (store.ConsulKV), and every write to it is fenced by the leader lock.
//
// The daemon takes part through one Coordinator, chosen once at start from
// the configuration (NewCoordinator): Solo without high availability,
// Leader (the election below) or Spread (spread_tasks: the members share
// the tasks, Spreader). It gives the daemon its state store, the fence of
// the task drivers, the controller the API uses, the API's view of the
// cluster and the long-lived parts to run for the controller.
//
// # Keys
//
//	<parent_path>/<cluster>/leader            the lock: {"id","address","beat",...}
//	<parent_path>/<cluster>/state/...         store.ConsulKV
//	<parent_path>/<cluster>/members/<id>      what each instance runs (compatibility checks)
//
// # Sessions
//
// Every instance keeps one session (TTL = session_ttl) and renews it; the
// leader is the instance whose session holds the lock key. Sessions are
// created with no health checks at all (not even the node's serfHealth), so
// Consul invalidates one only when it is not renewed within its TTL, when it
// is destroyed, or when Consul loses its data: the timing below does not
// depend on how fast a node failure is detected. Behavior is "delete": an
// invalidated session deletes the lock key, so "the key exists and is
// locked" means "there is a leader", and a dead leader's id and address never
// linger in the key.
//
// # Timing
//
// All derived from TTL = session_ttl (default 15s; Consul's minimum is 10s),
// with the numbers for the default in brackets:
//
//	H  heartbeat   = TTL/3  [5s]    the leader renews its session and rewrites
//	                                the lock key (a transaction that first
//	                                checks the key is still held by its session)
//	S  step-down   = TTL/2  [7.5s]  a leader whose last successful heartbeat
//	                                was *sent* S ago stops starting runs and
//	                                interrupts the runs in progress, by its
//	                                own clock, without asking Consul
//	T  takeover    = TTL    [15s]   a follower that has seen no new heartbeat
//	                                for T takes the lock over (below)
//	C  call timeout = TTL/6 [2.5s]  bounds every Consul call of the election,
//	                                so that H + C <= S: one slow call never
//	                                deposes a healthy leader
//	R  retry       = min(1s, TTL/10) after a failed heartbeat or acquisition
//	K  kill bound  = (T-S)/2 [3.75s] after stepping down, the old leader's
//	                                Terraform processes get SIGINT at once and,
//	                                with every process they started (provider
//	                                plugins, local-exec shells: one process
//	                                group), SIGKILL K later at the latest
//	L  lock-delay  = 1s             (LockDelay)
//
// The fencing arithmetic. Let t0 be the time the leader sent its last
// successful heartbeat. It steps down by its own clock at t0 + S and its
// Terraform process groups are dead by t0 + S + K [11.25s]. A follower
// saw that heartbeat at or after t0 and takes over no earlier than T after
// it: t0 + T [15s]. So S + K < T (checked by Timing.Validate) leaves
// T - S - K [3.75s] between the old leader's last possible side effect and
// the new leader's first, on every instance's clock (they run at the same
// rate; no clock has to agree with another).
//
// Why no two instances ever lead at once. A follower only becomes leader by
// (a) taking over: a transaction that deletes and re-locks the key only if
// it is still held by the session it watched and its ModifyIndex has not
// moved since the follower saw it change (check-session + check-index), at
// least T after it saw that change; or (b) acquiring a free key. For (a):
// the old leader sent its last successful heartbeat before the follower saw
// it, so it stopped at most S after that, and had T - S [7.5s] more to get
// its interrupted Terraform processes to exit; any later heartbeat of the old
// leader fails (its session no longer holds the key). For (b): the key is
// free only after a graceful release (immediate: the old leader had stopped
// first), after Consul invalidated the session (at least TTL > S after its
// last renewal, then the lock-delay: the old leader had stopped), or after
// Consul lost its data (a dev agent restart): then followers, which see the
// outage as errors and the restart as an index going backwards, wait T
// before acquiring, while the old leader, whose heartbeats fail from the
// restart on, may re-acquire at once. Store writes are fenced by the lock
// (check-session in the same transaction), so whatever a deposed leader's
// clock says, it cannot overwrite the new leader's state.
//
// Failover bounds:
//
//   - graceful hand-over (SIGTERM): the leader stops starting runs, waits for
//     the runs in progress (the daemon's grace period), then releases the key
//     with a "released" marker and destroys its session; followers blocked on
//     the key acquire it with one write: milliseconds, no lock-delay (a
//     release is not an invalidation).
//   - crash (SIGKILL, host lost): a follower takes over T after the last
//     heartbeat it saw, that is T-H..T [10s..15s] after the crash. That is
//     within TTL plus the lock-delay, the earliest Consul itself would free
//     the lock (it invalidates an unrenewed session between TTL and 2×TTL,
//     in practice at 2×TTL, then applies the lock-delay: 16s..31s), and
//     does not wait for Consul.
//   - partition of the leader: it steps down S after its last successful
//     heartbeat; a follower takes over T after it; when the link heals the
//     old leader finds the key held by another session and follows.
//   - Consul data loss: sessions and the key are gone; the old leader's next
//     heartbeat fails (R later at most) and it re-acquires at once; others
//     wait T.
//
// Lock-delay is not what keeps leaders apart here (the step-down rule is);
// it is set to 1s rather than Consul's default 15s because it delays every
// acquisition after an invalidation, and 1s rather than 0 so that an
// operator destroying the leader's session by hand still gives the old
// leader a moment before anyone else can lock.
package ha

import (
	"errors"
	"fmt"
	"time"
)

const (
	// DefaultSessionTTL is session_ttl's default (CTS).
	DefaultSessionTTL = 15 * time.Second
	// MinSessionTTL is Consul's default session_ttl_min.
	MinSessionTTL = 10 * time.Second
	// LockDelay is the lock-delay of every session (see the package doc).
	LockDelay = time.Second
	// CompatInterval is how often the compatibility checks run (CTS).
	CompatInterval = 5 * time.Minute
)

// ErrNotLeader is returned when something only the leader may do is
// attempted on another instance (or after this one lost the lead).
var ErrNotLeader = errors.New("this instance is not the leader")

// Timing is the election timing (see the package documentation).
type Timing struct {
	SessionTTL  time.Duration // TTL of the Consul session
	Heartbeat   time.Duration // H
	StepDown    time.Duration // S
	Takeover    time.Duration // T
	CallTimeout time.Duration // C
	Retry       time.Duration // R
	Kill        time.Duration // K
}

// TimingFor derives the timing from the session TTL.
func TimingFor(ttl time.Duration) Timing {
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	return Timing{
		SessionTTL:  ttl,
		Heartbeat:   ttl / 3,
		StepDown:    ttl / 2,
		Takeover:    ttl,
		CallTimeout: ttl / 6,
		Retry:       min(time.Second, ttl/10),
		Kill:        (ttl - ttl/2) / 2,
	}
}

// Validate checks the orderings the safety argument relies on.
func (t Timing) Validate() error {
	switch {
	case t.SessionTTL < MinSessionTTL:
		return fmt.Errorf("session TTL %s is below Consul's minimum %s", t.SessionTTL, MinSessionTTL)
	case t.Heartbeat <= 0 || t.CallTimeout <= 0 || t.Retry <= 0:
		return errors.New("heartbeat, call timeout and retry must be positive")
	case t.Heartbeat+t.CallTimeout > t.StepDown:
		return fmt.Errorf("heartbeat %s + call timeout %s must not exceed the step-down bound %s", t.Heartbeat, t.CallTimeout, t.StepDown)
	case t.StepDown >= t.Takeover:
		return fmt.Errorf("step-down bound %s must be below the takeover bound %s", t.StepDown, t.Takeover)
	case t.StepDown >= t.SessionTTL:
		return fmt.Errorf("step-down bound %s must be below the session TTL %s", t.StepDown, t.SessionTTL)
	case t.Kill <= 0 || t.StepDown+t.Kill >= t.Takeover:
		return fmt.Errorf("step-down bound %s + kill bound %s must be below the takeover bound %s", t.StepDown, t.Kill, t.Takeover)
	}
	return nil
}

// Metrics is told about leadership and compatibility (the metrics package
// wires it to Prometheus).
type Metrics interface {
	// SetLeader is called with true when this instance starts leading and
	// false when it stops.
	SetLeader(leader bool)
	// CompatFailures is called after every compatibility check with the
	// number of problems it found (0 when compatible).
	CompatFailures(n int)
}

type nopMetrics struct{}

func (nopMetrics) SetLeader(bool)     {}
func (nopMetrics) CompatFailures(int) {}
