package store

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/hashicorp/consul/api"
	bolt "go.etcd.io/bbolt"
)

// WindowEntry is one apply of a task recorded in its destroy window
// (approval.window, docs/safety.md): when it was applied, how many
// resources it destroyed without creating them again (replacements are
// not counted), and how many resources the task managed before and after
// it.
type WindowEntry struct {
	At        time.Time `json:"at"`
	Destroyed int       `json:"destroyed"`
	Before    int       `json:"before"`
	After     int       `json:"after"`
	// Approved marks the apply of a plan an operator approved: the
	// destroys up to it were seen and accepted, so the window's rules
	// count only what comes after it (gate.Judge).
	Approved bool `json:"approved,omitempty"`
}

// DestroyWindow is what a task applied within its approval.window, oldest
// first: the gate judges the destroys in it plus a plan's against the
// most resources the task managed in it.
type DestroyWindow struct {
	Entries []WindowEntry `json:"entries,omitempty"`
}

// MaxWindowEntries bounds a DestroyWindow (a task applied more often than
// this within its window): past it the two oldest entries are merged into
// one, at the later time, with their destroys summed and the larger of
// their counts, so that nothing destroyed stops counting sooner than it
// would have.
const MaxWindowEntries = 256

// With returns the window with e recorded (in time order) and the entries
// older than keep before e dropped; keep <= 0 keeps nothing. w is not
// changed.
func (w DestroyWindow) With(e WindowEntry, keep time.Duration) DestroyWindow {
	if keep <= 0 {
		return DestroyWindow{}
	}
	e.At = e.At.UTC()
	from := e.At.Add(-keep)
	out := make([]WindowEntry, 0, len(w.Entries)+1)
	for _, x := range w.Entries {
		if !x.At.Before(from) {
			out = append(out, x)
		}
	}
	i, _ := slices.BinarySearchFunc(out, e.At, func(x WindowEntry, t time.Time) int {
		if x.At.After(t) {
			return 1
		}
		return -1 // equal times: after the ones recorded before
	})
	out = slices.Insert(out, i, e)
	for len(out) > MaxWindowEntries {
		a, b := out[0], out[1]
		// Approved only when the later one is: an approval of the
		// older alone did not cover the newer's destroys.
		out[1] = WindowEntry{At: b.At, Destroyed: a.Destroyed + b.Destroyed,
			Before: max(a.Before, b.Before), After: max(a.After, b.After), Approved: b.Approved}
		out = out[1:]
	}
	return DestroyWindow{Entries: slices.Clip(out)}
}

// Since returns the entries at or after from.
func (w DestroyWindow) Since(from time.Time) []WindowEntry {
	i := slices.IndexFunc(w.Entries, func(x WindowEntry) bool { return !x.At.Before(from) })
	if i < 0 {
		return nil
	}
	return w.Entries[i:]
}

func (w DestroyWindow) clone() DestroyWindow {
	return DestroyWindow{Entries: slices.Clone(w.Entries)}
}

// DestroyWindows keeps one DestroyWindow per task, so that a restart or a
// new leader judges a plan with the destroys applied before it. Memory,
// Bolt and ConsulKV implement it; DeleteTask forgets a task's window too.
type DestroyWindows interface {
	// DestroyWindow returns the task's window (empty when none).
	DestroyWindow(taskName string) DestroyWindow
	// RecordApply records an apply in the task's window, dropping the
	// entries older than keep (the task's approval.window) before it; keep
	// <= 0 removes the window. Under high availability the write is fenced
	// by the leader lock (ErrNotLeader).
	RecordApply(ctx context.Context, taskName string, e WindowEntry, keep time.Duration) error
}

var (
	_ DestroyWindows = (*Memory)(nil)
	_ DestroyWindows = (*Bolt)(nil)
	_ DestroyWindows = (*ConsulKV)(nil)
)

// DestroyWindow implements DestroyWindows.
func (m *Memory) DestroyWindow(taskName string) DestroyWindow {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.window[taskName].clone()
}

// RecordApply implements DestroyWindows.
func (m *Memory) RecordApply(_ context.Context, taskName string, e WindowEntry, keep time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setWindowLocked(taskName, m.window[taskName].With(e, keep))
	return nil
}

func (m *Memory) setWindowLocked(taskName string, w DestroyWindow) {
	if len(w.Entries) == 0 {
		delete(m.window, taskName)
		return
	}
	if m.window == nil {
		m.window = map[string]DestroyWindow{}
	}
	m.window[taskName] = w
}

// RecordApply implements DestroyWindows: written to the file, then to
// memory (a failed write is logged and kept in memory).
func (b *Bolt) RecordApply(ctx context.Context, taskName string, e WindowEntry, keep time.Duration) error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	w := b.Memory.DestroyWindow(taskName).With(e, keep)
	err := b.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketWindow)
		if len(w.Entries) == 0 {
			return bk.Delete([]byte(taskName))
		}
		val, err := json.Marshal(w)
		if err != nil {
			return err
		}
		return bk.Put([]byte(taskName), val)
	})
	if err != nil {
		b.log.Warn("destroy window not saved to disk; kept in memory until the next restart", "task", taskName, "error", err)
	}
	b.Memory.mu.Lock()
	b.Memory.setWindowLocked(taskName, w)
	b.Memory.mu.Unlock()
	return nil
}

// DestroyWindow implements DestroyWindows (from the cache, which Load
// fills).
func (s *ConsulKV) DestroyWindow(taskName string) DestroyWindow {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.window[taskName].clone()
}

// RecordApply implements DestroyWindows: one fenced write (or delete) of
// <prefix>/window/<task>; the cache changes once Consul has it.
func (s *ConsulKV) RecordApply(ctx context.Context, taskName string, e WindowEntry, keep time.Duration) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	w := s.DestroyWindow(taskName).With(e, keep)
	op := &api.KVTxnOp{Verb: api.KVDelete, Key: s.key("window", esc(taskName))}
	if len(w.Entries) > 0 {
		b, err := json.Marshal(w)
		if err != nil {
			return err
		}
		op = &api.KVTxnOp{Verb: api.KVSet, Key: s.key("window", esc(taskName)), Value: b}
	}
	if err := s.writeTask(ctx, taskName, api.KVTxnOps{op}); err != nil {
		return s.logFailure("destroy window", taskName, err)
	}
	s.mu.Lock()
	if len(w.Entries) == 0 {
		delete(s.window, taskName)
	} else {
		s.window[taskName] = w
	}
	s.mu.Unlock()
	return nil
}

// loadWindow decodes a window record (bbolt or Consul KV) into window.
func loadWindow(window map[string]DestroyWindow, name string, value []byte) error {
	var w DestroyWindow
	if err := json.Unmarshal(value, &w); err != nil {
		return err
	}
	if len(w.Entries) > 0 {
		window[name] = w
	}
	return nil
}
