package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// HistoryFile is the name of the local history database under working_dir.
const HistoryFile = "ctsync-history.db"

// Bolt is the Store of a daemon without high availability: the run history
// and the run state are kept in a local embedded database (bbolt) so that
// they survive a restart, and read from an in-memory copy. Layout:
//
//	events/<task>/<seq>  one Event as JSON (with the path of its run log);
//	                     seq: 8-byte big-endian, grows; the newest
//	                     `history` are kept
//	run/<task>           a RunState as JSON (applied fingerprint and its
//	                     parts, failure, in-flight marker, outputs)
//	remote/<task>        a RemoteRun as JSON (terraform-cloud driver)
//	tasks/<task>         a TaskRecord as JSON: a task created, enabled or
//	                     deleted through the API (tasks.go)
//	window/<task>        a DestroyWindow as JSON (approval.window)
//	held/<task>          a HeldPlanRecord as JSON: the plan a safety gate
//	                     holds (heldplan.go; never the plan file)
//
// with the raw task name as the key of a task. A restarted daemon so knows
// what each task last applied: a task whose desired state is unchanged
// does not run again, and one whose run was in flight when the previous
// process stopped does (its marker is written before Terraform starts).
//
// A write that fails (a full or read-only disk) is logged and kept in
// memory: the daemon goes on, and only a restart loses it (a task whose
// newer state was not saved may then run, or be skipped, as the older
// state on disk says).
type Bolt struct {
	*Memory
	db  *bolt.DB
	wmu sync.Mutex // orders a write to the file and to the cache
	log *slog.Logger
}

var (
	_ Store      = (*Bolt)(nil)
	_ RemoteRuns = (*Bolt)(nil)
)

var (
	bucketEvents = []byte("events")
	bucketRun    = []byte("run")
	bucketRemote = []byte("remote")
	bucketWindow = []byte("window")
)

// boltOpenTimeout bounds the wait for the file lock held by another process.
const boltOpenTimeout = 2 * time.Second

// ErrHistoryInUse is returned by OpenBolt when another process holds the
// database (another ctsync with the same working_dir).
var ErrHistoryInUse = errors.New("the history database is in use by another process (another ctsync with the same working_dir?)")

// OpenBolt opens (creating it when missing, mode 0600) the history database
// at path, keeping history events per task (DefaultHistory when <= 0), and
// loads it. Unreadable entries are logged and skipped; events beyond the
// history length are deleted.
func OpenBolt(path string, history int, log *slog.Logger) (*Bolt, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: boltOpenTimeout})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("opening %s: %w", path, ErrHistoryInUse)
	}
	if err != nil {
		return nil, fmt.Errorf("opening the history database %s: %w (%s)", path, err, moveAway)
	}
	b := &Bolt{Memory: NewMemory(history), db: db, log: log}
	if err := b.load(); err != nil {
		db.Close()
		return nil, fmt.Errorf("reading the history database %s: %w (%s)", path, err, moveAway)
	}
	return b, nil
}

// moveAway says what a database that cannot be read costs.
const moveAway = "it holds the run history and what each task last applied: move it away to start with an empty one, every task then runs once"

// Close closes the database file.
func (b *Bolt) Close() error { return b.db.Close() }

// Path is the database file.
func (b *Bolt) Path() string { return b.db.Path() }

// storedEvent is an event as stored: with the path of its run log, which
// the API serves while the file is there.
type storedEvent struct {
	Event
	LogPath string `json:"log_path,omitempty"`
}

func seqKey(n uint64) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, n)
	return k
}

// load fills the cache from the file, newest first per task, and trims
// each task's events to the history length.
func (b *Bolt) load() error {
	return b.db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketRun, bucketRemote, bucketWindow, bucketHeld} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		if err := tx.Bucket(bucketRun).ForEach(func(k, v []byte) error {
			var rs RunState
			if err := json.Unmarshal(v, &rs); err != nil {
				b.log.Warn("ignoring an unreadable run state in the history database: the task runs once", "task_name", string(k), "error", err)
				return nil
			}
			b.run[string(k)] = rs
			return nil
		}); err != nil {
			return err
		}
		if err := tx.Bucket(bucketRemote).ForEach(func(k, v []byte) error {
			if b.remote == nil {
				b.remote = map[string]RemoteRun{}
			}
			if err := loadRemote(b.remote, string(k), v); err != nil {
				b.log.Warn("ignoring an unreadable remote run record in the history database", "task_name", string(k), "error", err)
			}
			return nil
		}); err != nil {
			return err
		}
		if err := b.loadTasks(tx); err != nil { // tasks.go
			return err
		}
		if err := tx.Bucket(bucketWindow).ForEach(func(k, v []byte) error {
			if b.window == nil {
				b.window = map[string]DestroyWindow{}
			}
			if err := loadWindow(b.window, string(k), v); err != nil {
				b.log.Warn("ignoring an unreadable destroy window in the history database", "task_name", string(k), "error", err)
			}
			return nil
		}); err != nil {
			return err
		}
		if err := tx.Bucket(bucketHeld).ForEach(func(k, v []byte) error {
			if b.held == nil {
				b.held = map[string]HeldPlanRecord{}
			}
			if err := loadHeld(b.held, string(k), v); err != nil {
				b.log.Warn("ignoring an unreadable held plan record in the history database: the task plans again", "task_name", string(k), "error", err)
			}
			return nil
		}); err != nil {
			return err
		}
		top, err := tx.CreateBucketIfNotExists(bucketEvents)
		if err != nil {
			return err
		}
		return top.ForEachBucket(func(name []byte) error {
			tb := top.Bucket(name)
			var evs []Event
			var drop [][]byte
			c := tb.Cursor()
			for k, v := c.Last(); k != nil; k, v = c.Prev() {
				if len(evs) >= b.history {
					drop = append(drop, append([]byte(nil), k...))
					continue
				}
				var se storedEvent
				if err := json.Unmarshal(v, &se); err != nil {
					b.log.Warn("ignoring unreadable entry of the history database", "task_name", string(name), "error", err)
					continue
				}
				ev := se.Event
				if se.LogPath != "" {
					if _, err := os.Stat(se.LogPath); err == nil {
						ev.LogPath = se.LogPath
					}
				}
				evs = append(evs, ev)
			}
			for _, k := range drop {
				if err := tb.Delete(k); err != nil {
					return err
				}
			}
			if len(evs) > 0 {
				b.events[string(name)] = evs
			}
			return nil
		})
	})
}

// AddEvent implements Store: the event is written to the file, then to
// the cache. A failed write of the file (a full or read-only disk) is
// logged and the event kept in memory only: the history is for people, and
// must not make a run that succeeded count as failed.
func (b *Bolt) AddEvent(ctx context.Context, ev Event) error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	b.putOrWarn(ev)
	return b.Memory.AddEvent(ctx, ev)
}

func (b *Bolt) putOrWarn(ev Event) {
	if err := b.put(ev); err != nil {
		b.log.Warn("run history not saved to disk; kept in memory until the next restart", "task", ev.TaskName, "run_id", ev.ID, "error", err)
	}
}

// put writes ev and drops the task's events beyond the history length.
func (b *Bolt) put(ev Event) error {
	err := b.db.Update(func(tx *bolt.Tx) error { return b.putTx(tx, ev) })
	if err != nil {
		return fmt.Errorf("recording the event of task %q in %s: %w", ev.TaskName, b.db.Path(), err)
	}
	return nil
}

// putTx is put within the transaction tx.
func (b *Bolt) putTx(tx *bolt.Tx, ev Event) error {
	val, err := json.Marshal(storedEvent{Event: ev, LogPath: ev.LogPath})
	if err != nil {
		return err
	}
	tb, err := tx.Bucket(bucketEvents).CreateBucketIfNotExists([]byte(ev.TaskName))
	if err != nil {
		return err
	}
	seq, err := tb.NextSequence()
	if err != nil {
		return err
	}
	if err := tb.Put(seqKey(seq), val); err != nil {
		return err
	}
	// Sequence numbers grow by one per event: the ones at or below
	// seq-history are beyond the history.
	if seq > uint64(b.history) {
		limit := seqKey(seq - uint64(b.history))
		var drop [][]byte
		c := tb.Cursor()
		for k, _ := c.First(); k != nil && bytes.Compare(k, limit) <= 0; k, _ = c.Next() {
			drop = append(drop, append([]byte(nil), k...))
		}
		for _, k := range drop {
			if err := tb.Delete(k); err != nil {
				return err
			}
		}
	}
	return nil
}

// putRunTx writes a task's run state in tx (deletes it when zero).
func putRunTx(tx *bolt.Tx, taskName string, rs RunState) error {
	bk := tx.Bucket(bucketRun)
	if rs.zero() {
		return bk.Delete([]byte(taskName))
	}
	val, err := json.Marshal(rs)
	if err != nil {
		return err
	}
	return bk.Put([]byte(taskName), val)
}

// StartRun implements Store: the in-flight marker is written to the file
// (synchronously: a daemon killed during the run finds it at its next
// start and runs the task again), then to memory. A failed write is
// logged; the run goes on.
func (b *Bolt) StartRun(ctx context.Context, taskName, runID string) error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	rs := b.Memory.Run(taskName)
	if rs.InFlight != runID {
		rs.InFlight = runID
		err := b.db.Update(func(tx *bolt.Tx) error { return putRunTx(tx, taskName, rs) })
		if err != nil {
			b.log.Warn("in-flight marker not saved to disk: if ctsync stops during this run, the task may not run again at the next start",
				"task", taskName, "run_id", runID, "error", err)
		}
	}
	return b.Memory.StartRun(ctx, taskName, runID)
}

// FinishRun implements Store: the run state (without the in-flight
// marker) and the event, if any, are written to the file in one
// transaction (see Bolt for a failed write), then to memory.
func (b *Bolt) FinishRun(ctx context.Context, taskName string, st RunState, ev *Event) error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	st = st.clone()
	st.InFlight = ""
	if ev != nil || !b.Memory.Run(taskName).equal(st) {
		err := b.db.Update(func(tx *bolt.Tx) error {
			if err := putRunTx(tx, taskName, st); err != nil {
				return err
			}
			if ev != nil {
				return b.putTx(tx, *ev)
			}
			return nil
		})
		if err != nil {
			b.log.Warn("run state and history not saved to disk; kept in memory until the next restart", "task", taskName, "error", err)
		}
	}
	return b.Memory.FinishRun(ctx, taskName, st, ev)
}

// SetRemoteRun implements RemoteRuns: written to the file, then to memory
// (a failed write is logged).
func (b *Bolt) SetRemoteRun(ctx context.Context, taskName string, r RemoteRun) error {
	val, err := json.Marshal(r)
	if err != nil {
		return err
	}
	b.wmu.Lock()
	defer b.wmu.Unlock()
	err = b.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketRemote).Put([]byte(taskName), val) })
	if err != nil {
		b.log.Warn("remote run record not saved to disk; kept in memory until the next restart", "task", taskName, "error", err)
	}
	return b.Memory.SetRemoteRun(ctx, taskName, r)
}

// DeleteTask implements Store.
func (b *Bolt) DeleteTask(ctx context.Context, taskName string) error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	err := b.db.Update(func(tx *bolt.Tx) error {
		err := tx.Bucket(bucketEvents).DeleteBucket([]byte(taskName))
		if err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
			return err
		}
		if err := tx.Bucket(bucketRun).Delete([]byte(taskName)); err != nil {
			return err
		}
		if err := tx.Bucket(bucketRemote).Delete([]byte(taskName)); err != nil {
			return err
		}
		if err := tx.Bucket(bucketWindow).Delete([]byte(taskName)); err != nil {
			return err
		}
		return tx.Bucket(bucketHeld).Delete([]byte(taskName))
	})
	if err != nil {
		b.log.Warn("a deleted task's run history and state could not be removed from disk", "task", taskName, "error", err)
	}
	return b.Memory.DeleteTask(ctx, taskName)
}
