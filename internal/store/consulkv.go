package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/depth"
	"github.com/ctsync/ctsync/internal/task"
)

// MaxTaskRecordBytes bounds the JSON of one task record (a task created
// through the API, saved for the next leader). Consul refuses a
// transaction larger than 512 KB by default (limits.txn_max_req_len), and
// a value travels base64-encoded in it; a larger record is refused before
// it is sent, with ErrRecordTooLarge.
const MaxTaskRecordBytes = 256 << 10

// ErrRecordTooLarge is the error of a task record larger than
// MaxTaskRecordBytes.
var ErrRecordTooLarge = errors.New("the task is too large to be saved in consul")

// ErrNotLeader is returned by writes of a fenced ConsulKV store when this
// instance does not hold the leader lock (or lost it while writing).
var ErrNotLeader = errors.New("not the leader or the task's owner: state in consul is written only by the instance holding the leader lock (or, with spread_tasks, the task's owner key)")

// TaskRecord is what is kept about a task changed through the API (or the
// CLI, which uses the API), so that a new leader applies the same changes to
// its configuration. Exactly one of the three shapes is used:
//   - Spec set: a task created through the API (Spec.Enabled is current);
//   - Enabled set: a task from the configuration files enabled or disabled
//     through the API;
//   - Deleted: a task deleted through the API.
//
// A deletion with destroy is recorded with Destroy set until the destroy
// has finished (and, for a task created through the API, with its Spec), so
// that a new leader finishes a destroy its predecessor did not.
type TaskRecord struct {
	Spec    *task.Spec `json:"spec,omitempty"`
	Enabled *bool      `json:"enabled,omitempty"`
	Deleted bool       `json:"deleted,omitempty"`
	Destroy bool       `json:"destroy,omitempty"`
}

// DecodeTaskRecord reads a task record as stored in Consul KV. Whoever
// can write the cluster's KV folder writes these: a record larger than
// MaxTaskRecordBytes, or nesting deeper than depth.Max levels, is refused
// before it is decoded, and so is a task whose variables nest too deep
// (task.CheckVariable: they are parsed as HCL once the task is created).
// The rest of a task's rules are the API's, applied by the caller
// (ha.FilterStored).
func DecodeTaskRecord(b []byte) (TaskRecord, error) {
	return decodeTaskRecord(b, MaxTaskRecordBytes)
}

// decodeTaskRecord is DecodeTaskRecord with the size bound maxBytes (0:
// none, for the local history database, which the API's request size
// bounds).
func decodeTaskRecord(b []byte, maxBytes int) (TaskRecord, error) {
	if maxBytes > 0 && len(b) > maxBytes {
		return TaskRecord{}, fmt.Errorf("the record is %d bytes, at most %d are accepted", len(b), maxBytes)
	}
	if err := depth.JSON(b, 0, false); err != nil {
		return TaskRecord{}, fmt.Errorf("the record %v", err)
	}
	var rec TaskRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return TaskRecord{}, err
	}
	if rec.Spec != nil {
		for _, name := range slices.Sorted(maps.Keys(rec.Spec.Variables)) {
			if err := depth.HCL([]byte(rec.Spec.Variables[name]), 0); err != nil {
				return TaskRecord{}, fmt.Errorf("task variable %q: the value %v", name, err)
			}
		}
	}
	return rec, nil
}

// Tasks keeps task records. ConsulKV, Bolt and Memory implement it
// (tasks.go). DeleteTask does not remove a task's record.
type Tasks interface {
	// SaveTask records what became of a task.
	SaveTask(ctx context.Context, name string, rec TaskRecord) error
	// TaskRecords returns every record, by task name.
	TaskRecords() map[string]TaskRecord
	// RemoveTaskRecord removes a task's record (undoing the SaveTask of
	// a task whose creation failed: it leaves no trace).
	RemoveTaskRecord(ctx context.Context, name string) error
}

// ConsulKV is the Store of high availability: the state lives in Consul KV
// under a prefix (<parent_path>/<cluster>/state), so that a new leader knows
// what the previous one applied. Layout, one small JSON value per key:
//
//	<prefix>/run/<task>          a RunState: {"applied":"<fingerprint>","parts":{...},
//	                             "failed":"<fingerprint>","terminal":true,"in_flight":"<run id>"}
//	<prefix>/events/<task>/<seq> one Event (seq: 20 digits, grows; the newest
//	                             `history` are kept)
//	<prefix>/tasks/<task>        a TaskRecord
//	<prefix>/remote/<task>       a RemoteRun (terraform-cloud driver, remote.go)
//	<prefix>/window/<task>       a DestroyWindow (approval.window, window.go)
//	<prefix>/held/<task>         a HeldPlanRecord: the plan a safety gate holds
//	                             (heldplan.go; never the plan file)
//
// Task names are path-escaped. Reads are served from memory: Load fills the
// cache when the instance becomes leader (one consistent recursive read),
// and every write goes to the cache and, synchronously, to Consul. A run
// costs four small writes (in-flight set and cleared, applied hash, event);
// a write that changes nothing is skipped.
//
// With a fence (ConsulKVOptions.Fence), every write is a transaction that
// starts with a check-session on the leader lock key (or, in spread mode, on
// the task's owner key): a deposed leader, or one cut from Consul whose lock
// was taken over, cannot overwrite what the new leader wrote, whatever its
// clock says.
type ConsulKV struct {
	kv       *api.KV
	sessions *api.Session // tflock.go
	prefix   string
	history  int
	ns       string
	timeout  time.Duration
	log      *slog.Logger

	fence Fence

	wmu sync.Mutex // serialises writes, so the KV sees them in cache order

	mu     sync.RWMutex
	events map[string][]seqEvent // newest first
	next   map[string]uint64     // next event sequence number per task
	run    map[string]RunState
	tasks  map[string]TaskRecord
	remote map[string]RemoteRun      // remote.go
	window map[string]DestroyWindow  // window.go
	held   map[string]HeldPlanRecord // heldplan.go
	// claimed holds the tasks this instance owns in spread mode: their
	// cached state is the one this instance writes, and Load keeps it.
	claimed map[string]bool
}

type seqEvent struct {
	seq uint64
	ev  Event
}

// kvEvent is an event as stored: with the path of its run log, which is
// only kept for the instance that has the file.
type kvEvent struct {
	Event
	LogPath string `json:"log_path,omitempty"`
}

var (
	_ Store = (*ConsulKV)(nil)
	_ Tasks = (*ConsulKV)(nil)
)

// kvTimeout bounds each Consul call of the store.
const kvTimeout = 5 * time.Second

// Fence returns the key and session a write is conditional on: for a write
// of a task's state (task != ""), and for a write that belongs to no task
// (task records, Reset; task == ""). ok=false means this instance may not
// write it now: the write fails with ErrNotLeader without reaching Consul.
// With a leader lock the task does not matter (the lock key and this
// instance's session); in spread mode it is the task's owner key, and the
// member key for writes of no task.
type Fence func(task string) (key, session string, ok bool)

// ConsulKVOptions configure a ConsulKV.
type ConsulKVOptions struct {
	// Prefix is where the state is kept (no trailing slash needed).
	Prefix string
	// History is how many events are kept per task (DefaultHistory when
	// <= 0).
	History int
	// Namespace is the Consul namespace of the keys (Consul Enterprise).
	Namespace string
	// Logger is where failed writes are reported (at debug level: the
	// callers decide what a failure means) and unreadable entries.
	Logger *slog.Logger
	// Fence, when set, makes every write conditional on it (see Fence).
	Fence Fence
}

// NewConsulKV returns a store of the state in client's Consul KV, as o
// says. The cache starts empty: call Load.
func NewConsulKV(client *api.Client, o ConsulKVOptions) *ConsulKV {
	if o.History <= 0 {
		o.History = DefaultHistory
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &ConsulKV{
		kv:       client.KV(),
		sessions: client.Session(),
		prefix:   strings.TrimRight(o.Prefix, "/"),
		history:  o.History,
		ns:       o.Namespace,
		timeout:  kvTimeout,
		log:      o.Logger,
		fence:    o.Fence,
		events:   map[string][]seqEvent{},
		next:     map[string]uint64{},
		run:      map[string]RunState{},
		tasks:    map[string]TaskRecord{},
		remote:   map[string]RemoteRun{},
		window:   map[string]DestroyWindow{},
		held:     map[string]HeldPlanRecord{},
		claimed:  map[string]bool{},
	}
}

// Claim makes this instance the writer of a task's state (spread mode: it
// now owns the task): the task's run state, events and remote run are read
// afresh from Consul, with a consistent read that sees the previous
// owner's last writes, and Load keeps them from then on (until Unclaim).
func (s *ConsulKV) Claim(ctx context.Context, taskName string) error {
	s.mu.Lock()
	s.claimed[taskName] = true
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	q := (&api.QueryOptions{RequireConsistent: true, Namespace: s.ns}).WithContext(ctx)
	runPair, _, err := s.kv.Get(s.key("run", esc(taskName)), q)
	if err != nil {
		return fmt.Errorf("reading the state of task %q from consul: %w", taskName, err)
	}
	remotePair, _, err := s.kv.Get(s.key("remote", esc(taskName)), q)
	if err != nil {
		return fmt.Errorf("reading the remote run of task %q from consul: %w", taskName, err)
	}
	windowPair, _, err := s.kv.Get(s.key("window", esc(taskName)), q)
	if err != nil {
		return fmt.Errorf("reading the destroy window of task %q from consul: %w", taskName, err)
	}
	heldPair, _, err := s.kv.Get(s.key("held", esc(taskName)), q)
	if err != nil {
		return fmt.Errorf("reading the held plan of task %q from consul: %w", taskName, err)
	}
	pairs, _, err := s.kv.List(s.key("events", esc(taskName))+"/", q)
	if err != nil {
		return fmt.Errorf("reading the events of task %q from consul: %w", taskName, err)
	}
	var rs RunState
	if runPair != nil {
		if err := json.Unmarshal(runPair.Value, &rs); err != nil {
			s.log.Warn("ignoring unreadable state entry in consul", "key", runPair.Key, "error", err)
			rs = RunState{}
		}
	}
	remote := map[string]RemoteRun{}
	if remotePair != nil {
		if err := loadRemote(remote, taskName, remotePair.Value); err != nil {
			s.log.Warn("ignoring unreadable state entry in consul", "key", remotePair.Key, "error", err)
		}
	}
	window := map[string]DestroyWindow{}
	if windowPair != nil {
		if err := loadWindow(window, taskName, windowPair.Value); err != nil {
			s.log.Warn("ignoring unreadable state entry in consul", "key", windowPair.Key, "error", err)
		}
	}
	held := map[string]HeldPlanRecord{}
	if heldPair != nil {
		if err := loadHeld(held, taskName, heldPair.Value); err != nil {
			s.log.Warn("ignoring unreadable state entry in consul", "key", heldPair.Key, "error", err)
		}
	}
	evs, next := s.parseEvents(pairs)
	s.wmu.Lock() // not in the middle of one of this instance's writes
	defer s.wmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setRunLocked(taskName, rs)
	if len(evs) > 0 {
		s.events[taskName], s.next[taskName] = evs, next
	} else {
		delete(s.events, taskName)
		delete(s.next, taskName)
	}
	if r, ok := remote[taskName]; ok {
		s.remote[taskName] = r
	} else {
		delete(s.remote, taskName)
	}
	if w, ok := window[taskName]; ok {
		s.window[taskName] = w
	} else {
		delete(s.window, taskName)
	}
	if h, ok := held[taskName]; ok {
		s.held[taskName] = h
	} else {
		delete(s.held, taskName)
	}
	return nil
}

// Unclaim ends Claim: Load refreshes the task's state again.
func (s *ConsulKV) Unclaim(taskName string) {
	s.mu.Lock()
	delete(s.claimed, taskName)
	s.mu.Unlock()
}

// parseEvents reads a task's stored events: newest first, within the
// history, and the next sequence number.
func (s *ConsulKV) parseEvents(pairs api.KVPairs) ([]seqEvent, uint64) {
	var (
		evs  []seqEvent
		next uint64
	)
	for _, p := range pairs {
		i := strings.LastIndexByte(p.Key, '/')
		seq, err := strconv.ParseUint(p.Key[i+1:], 10, 64)
		var kev kvEvent
		if err == nil {
			err = json.Unmarshal(p.Value, &kev)
		}
		if err != nil {
			s.log.Warn("ignoring unreadable state entry in consul", "key", p.Key, "error", err)
			continue
		}
		ev := kev.Event
		if kev.LogPath != "" {
			if _, err := os.Stat(kev.LogPath); err == nil {
				ev.LogPath = kev.LogPath // a run of this instance
			}
		}
		evs = append(evs, seqEvent{seq, ev})
		next = max(next, seq+1)
	}
	slices.SortFunc(evs, func(a, b seqEvent) int { return compareDesc(a.seq, b.seq) })
	if len(evs) > s.history {
		evs = evs[:s.history]
	}
	return evs, next
}

// Prefix returns the KV prefix of the state.
func (s *ConsulKV) Prefix() string { return s.prefix }

func (s *ConsulKV) key(parts ...string) string {
	return s.prefix + "/" + strings.Join(parts, "/")
}

func esc(name string) string { return url.PathEscape(name) }

// Load replaces the cache with what Consul holds, with a consistent read:
// every write the previous leader made before losing the lock is seen.
func (s *ConsulKV) Load(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	q := (&api.QueryOptions{RequireConsistent: true, Namespace: s.ns}).WithContext(ctx)
	pairs, _, err := s.kv.List(s.prefix+"/", q)
	if err != nil {
		return fmt.Errorf("reading state from consul at %s/: %w", s.prefix, err)
	}
	events := map[string][]seqEvent{}
	next := map[string]uint64{}
	run := map[string]RunState{}
	tasks := map[string]TaskRecord{}
	remote := map[string]RemoteRun{}
	window := map[string]DestroyWindow{}
	held := map[string]HeldPlanRecord{}
	for _, p := range pairs {
		rest := strings.TrimPrefix(p.Key, s.prefix+"/")
		parts := strings.Split(rest, "/")
		bad := func(err error) {
			s.log.Warn("ignoring unreadable state entry in consul", "key", p.Key, "error", err)
		}
		switch {
		case len(parts) == 2 && parts[0] == "run":
			name, err := url.PathUnescape(parts[1])
			var rs RunState
			if err == nil {
				err = json.Unmarshal(p.Value, &rs)
			}
			if err != nil {
				bad(err)
				continue
			}
			run[name] = rs
		case len(parts) == 2 && parts[0] == "tasks":
			name, err := url.PathUnescape(parts[1])
			var rec TaskRecord
			if err == nil {
				rec, err = DecodeTaskRecord(p.Value)
			}
			if err != nil {
				s.log.Error("ignoring a task record in consul that cannot be read", "key", p.Key, "error", err)
				continue
			}
			tasks[name] = rec
		case len(parts) == 2 && parts[0] == "remote":
			name, err := url.PathUnescape(parts[1])
			if err == nil {
				err = loadRemote(remote, name, p.Value)
			}
			if err != nil {
				bad(err)
			}
		case len(parts) == 2 && parts[0] == "window":
			name, err := url.PathUnescape(parts[1])
			if err == nil {
				err = loadWindow(window, name, p.Value)
			}
			if err != nil {
				bad(err)
			}
		case len(parts) == 2 && parts[0] == "held":
			name, err := url.PathUnescape(parts[1])
			if err == nil {
				err = loadHeld(held, name, p.Value)
			}
			if err != nil {
				bad(err)
			}
		case len(parts) == 3 && parts[0] == "events":
			name, err := url.PathUnescape(parts[1])
			var seq uint64
			if err == nil {
				seq, err = strconv.ParseUint(parts[2], 10, 64)
			}
			var kev kvEvent
			if err == nil {
				err = json.Unmarshal(p.Value, &kev)
			}
			if err != nil {
				bad(err)
				continue
			}
			ev := kev.Event
			if kev.LogPath != "" {
				if _, err := os.Stat(kev.LogPath); err == nil {
					ev.LogPath = kev.LogPath // a run of this instance
				}
			}
			events[name] = append(events[name], seqEvent{seq, ev})
			next[name] = max(next[name], seq+1)
		}
	}
	for name, evs := range events {
		slices.SortFunc(evs, func(a, b seqEvent) int { return compareDesc(a.seq, b.seq) })
		if len(evs) > s.history {
			evs = evs[:s.history]
		}
		events[name] = evs
	}
	s.mu.Lock()
	for name := range s.claimed { // this instance's own tasks: its cache is current
		keepOwn(run, s.run, name)
		keepOwn(events, s.events, name)
		keepOwn(next, s.next, name)
		keepOwn(remote, s.remote, name)
		keepOwn(window, s.window, name)
		keepOwn(held, s.held, name)
	}
	s.events, s.next, s.run, s.tasks, s.remote, s.window, s.held = events, next, run, tasks, remote, window, held
	s.mu.Unlock()
	return nil
}

// keepOwn makes loaded[name] what cached holds (Load, for a claimed task).
func keepOwn[V any](loaded, cached map[string]V, name string) {
	if v, ok := cached[name]; ok {
		loaded[name] = v
	} else {
		delete(loaded, name)
	}
}

func compareDesc(a, b uint64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// Reset deletes every stored entry (-reset-storage) and empties the cache.
func (s *ConsulKV) Reset(ctx context.Context) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.write(ctx, api.KVTxnOps{{Verb: api.KVDeleteTree, Key: s.prefix + "/"}}); err != nil {
		return fmt.Errorf("resetting the state in consul at %s/: %w", s.prefix, err)
	}
	s.mu.Lock()
	s.events, s.next, s.run, s.tasks = map[string][]seqEvent{}, map[string]uint64{}, map[string]RunState{}, map[string]TaskRecord{}
	s.remote = map[string]RemoteRun{}
	s.window = map[string]DestroyWindow{}
	s.held = map[string]HeldPlanRecord{}
	s.mu.Unlock()
	return nil
}

// ForgetApplied forgets, in memory only, every applied hash: each task then
// runs once when the controller becomes active (rerun_all_on_failover).
// The hashes in Consul are overwritten by those runs.
func (s *ConsulKV) ForgetApplied() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, rs := range s.run {
		rs.Applied, rs.Parts = "", nil
		s.run[name] = rs
	}
}

// write runs ops as one transaction, behind the fence when there is one.
// The caller holds wmu.
func (s *ConsulKV) write(ctx context.Context, ops api.KVTxnOps) error {
	return s.writeTask(ctx, "", ops)
}

// writeTask is write for the state of one task ("": of no task), which
// spread mode fences with the task's owner key (see Fence).
func (s *ConsulKV) writeTask(ctx context.Context, taskName string, ops api.KVTxnOps) error {
	first := 0
	if s.fence != nil {
		key, session, ok := s.fence(taskName)
		if !ok {
			return ErrNotLeader
		}
		ops = append(api.KVTxnOps{{Verb: api.KVCheckSession, Key: key, Session: session}}, ops...)
		first = 1
	}
	for _, op := range ops { // the fence check too: the lock key lives in the same namespace
		op.Namespace = s.ns
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := time.Now()
	ok, resp, _, err := s.kv.Txn(ops, (&api.QueryOptions{Namespace: s.ns}).WithContext(ctx))
	if d := time.Since(start); d > time.Second {
		s.log.Warn("slow state write to consul", "duration", d.Round(time.Millisecond), "ops", len(ops), "error", err)
	}
	if err != nil {
		return err
	}
	if !ok {
		if first == 1 && resp != nil {
			for _, e := range resp.Errors {
				if e.OpIndex == 0 {
					return fmt.Errorf("%w (%s)", ErrNotLeader, e.What)
				}
			}
		}
		var msgs []string
		if resp != nil {
			for _, e := range resp.Errors {
				msgs = append(msgs, e.What)
			}
		}
		return fmt.Errorf("consul transaction rolled back: %s", strings.Join(msgs, "; "))
	}
	return nil
}

func (s *ConsulKV) logFailure(what, taskName string, err error) error {
	if err != nil {
		s.log.Debug("state not written to consul", "what", what, "task_name", taskName, "error", err)
	}
	return err
}

// AddEvent implements Store: one transaction writes the event and drops the
// oldest beyond the history length.
func (s *ConsulKV) AddEvent(ctx context.Context, ev Event) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	ops, evs, next, err := s.eventOps(ev)
	if err != nil {
		return err
	}
	if err := s.writeTask(ctx, ev.TaskName, ops); err != nil {
		return s.logFailure("event", ev.TaskName, err)
	}
	s.mu.Lock()
	s.events[ev.TaskName], s.next[ev.TaskName] = evs, next
	s.mu.Unlock()
	return nil
}

// Events implements Store.
func (s *ConsulKV) Events(taskName string) []Event {
	s.mu.RLock()
	defer s.mu.RUnlock()
	evs := s.events[taskName]
	out := make([]Event, len(evs))
	for i, se := range evs {
		out[i] = se.ev
	}
	return out
}

// AllEvents implements Store.
func (s *ConsulKV) AllEvents() map[string][]Event {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string][]Event, len(s.events))
	for name, evs := range s.events {
		list := make([]Event, len(evs))
		for i, se := range evs {
			list[i] = se.ev
		}
		out[name] = list
	}
	return out
}

// eventOps adds ev to the task's history in the cache-to-be: it returns
// the ops that write it and drop the oldest events beyond the history, and
// the new event list. The caller holds wmu.
func (s *ConsulKV) eventOps(ev Event) (api.KVTxnOps, []seqEvent, uint64, error) {
	b, err := json.Marshal(kvEvent{Event: ev, LogPath: ev.LogPath})
	if err != nil {
		return nil, nil, 0, err
	}
	s.mu.RLock()
	name := ev.TaskName
	seq := s.next[name]
	evs := append([]seqEvent{{seq, ev}}, s.events[name]...)
	s.mu.RUnlock()
	var drop []seqEvent
	if len(evs) > s.history {
		drop = evs[s.history:]
		evs = evs[:s.history]
	}
	ops := api.KVTxnOps{{Verb: api.KVSet, Key: s.key("events", esc(name), fmt.Sprintf("%020d", seq)), Value: b}}
	for _, d := range drop {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVDelete, Key: s.key("events", esc(name), fmt.Sprintf("%020d", d.seq))})
	}
	return ops, evs, seq + 1, nil
}

// runOp is the op that writes a task's run state (or deletes it when zero).
func (s *ConsulKV) runOp(taskName string, rs RunState) *api.KVTxnOp {
	op := &api.KVTxnOp{Verb: api.KVDelete, Key: s.key("run", esc(taskName))}
	if !rs.zero() {
		b, _ := json.Marshal(rs) // plain strings and a string map: cannot fail
		op = &api.KVTxnOp{Verb: api.KVSet, Key: op.Key, Value: b}
	}
	return op
}

// setRunLocked updates the cached run state. s.mu is held.
func (s *ConsulKV) setRunLocked(taskName string, rs RunState) {
	if rs.zero() {
		delete(s.run, taskName)
	} else {
		s.run[taskName] = rs
	}
}

// Run implements Store.
func (s *ConsulKV) Run(taskName string) RunState {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.run[taskName].clone()
}

// StartRun implements Store: the marker is in Consul before it returns.
func (s *ConsulKV) StartRun(ctx context.Context, taskName, runID string) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.RLock()
	rs := s.run[taskName].clone()
	s.mu.RUnlock()
	if rs.InFlight == runID {
		return nil
	}
	rs.InFlight = runID
	if err := s.writeTask(ctx, taskName, api.KVTxnOps{s.runOp(taskName, rs)}); err != nil {
		return s.logFailure("in-flight marker", taskName, err)
	}
	s.mu.Lock()
	s.setRunLocked(taskName, rs)
	s.mu.Unlock()
	return nil
}

// FinishRun implements Store: one transaction (behind the fence) writes the
// run state without the in-flight marker and the event; the cache changes
// only once Consul has them.
func (s *ConsulKV) FinishRun(ctx context.Context, taskName string, rs RunState, ev *Event) error {
	rs = rs.clone()
	rs.InFlight = ""
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.RLock()
	same := s.run[taskName].equal(rs)
	s.mu.RUnlock()
	if same && ev == nil {
		return nil
	}
	ops := api.KVTxnOps{s.runOp(taskName, rs)}
	var (
		evs  []seqEvent
		next uint64
	)
	if ev != nil {
		evOps, list, n, err := s.eventOps(*ev)
		if err != nil {
			return err
		}
		ops, evs, next = append(ops, evOps...), list, n
	}
	if err := s.writeTask(ctx, taskName, ops); err != nil {
		return s.logFailure("run outcome", taskName, err)
	}
	s.mu.Lock()
	s.setRunLocked(taskName, rs)
	if ev != nil {
		s.events[taskName], s.next[taskName] = evs, next
	}
	s.mu.Unlock()
	return nil
}

// DeleteTask implements Store: the task's events and run state go; its
// task record (if any) is the business of SaveTask.
func (s *ConsulKV) DeleteTask(ctx context.Context, taskName string) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	delete(s.events, taskName)
	delete(s.run, taskName)
	delete(s.remote, taskName)
	delete(s.window, taskName)
	delete(s.held, taskName)
	s.mu.Unlock()
	ops := api.KVTxnOps{
		{Verb: api.KVDeleteTree, Key: s.key("events", esc(taskName)) + "/"},
		{Verb: api.KVDelete, Key: s.key("run", esc(taskName))},
		{Verb: api.KVDelete, Key: s.key("remote", esc(taskName))},
		{Verb: api.KVDelete, Key: s.key("window", esc(taskName))},
		{Verb: api.KVDelete, Key: s.key("held", esc(taskName))},
	}
	return s.logFailure("task deletion", taskName, s.writeTask(ctx, taskName, ops))
}

// SaveTask implements Tasks.
func (s *ConsulKV) SaveTask(ctx context.Context, name string, rec TaskRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if len(b) > MaxTaskRecordBytes {
		return fmt.Errorf("%w: its record is %d bytes, at most %d are accepted", ErrRecordTooLarge, len(b), MaxTaskRecordBytes)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	err = s.write(ctx, api.KVTxnOps{{Verb: api.KVSet, Key: s.key("tasks", esc(name)), Value: b}})
	if err != nil {
		return s.logFailure("task record", name, err)
	}
	s.mu.Lock()
	s.tasks[name] = rec
	s.mu.Unlock()
	return nil
}

// RemoveTaskRecord implements Tasks.
func (s *ConsulKV) RemoveTaskRecord(ctx context.Context, name string) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.write(ctx, api.KVTxnOps{{Verb: api.KVDelete, Key: s.key("tasks", esc(name))}}); err != nil {
		return s.logFailure("task record removal", name, err)
	}
	s.mu.Lock()
	delete(s.tasks, name)
	s.mu.Unlock()
	return nil
}

// TaskRecords implements Tasks.
func (s *ConsulKV) TaskRecords() map[string]TaskRecord {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]TaskRecord, len(s.tasks))
	for k, v := range s.tasks {
		out[k] = v
	}
	return out
}
