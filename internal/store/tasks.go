package store

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	bolt "go.etcd.io/bbolt"
)

// The three stores keep task records (Tasks): ConsulKV for a cluster,
// Bolt for a daemon without high availability (so that the tasks created
// through the API survive a restart), Memory for tests and -inspect.
var (
	_ Tasks = (*Memory)(nil)
	_ Tasks = (*Bolt)(nil)
	_ Tasks = (*ConsulKV)(nil)
)

// bucketTasks holds the task records of a Bolt store: tasks/<task> is a
// TaskRecord as JSON.
var bucketTasks = []byte("tasks")

// SaveTask implements Tasks.
func (m *Memory) SaveTask(_ context.Context, name string, rec TaskRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tasks == nil {
		m.tasks = map[string]TaskRecord{}
	}
	m.tasks[name] = rec
	return nil
}

// TaskRecords implements Tasks.
func (m *Memory) TaskRecords() map[string]TaskRecord {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return maps.Clone(m.tasks)
}

// RemoveTaskRecord implements Tasks.
func (m *Memory) RemoveTaskRecord(_ context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.tasks, name)
	return nil
}

// SaveTask implements Tasks: the record is written to the file, then to
// memory. Unlike a run's event, a record that cannot be written is an
// error (the change is refused): a task created through the API that the
// file does not hold would be lost at the next restart.
func (b *Bolt) SaveTask(ctx context.Context, name string, rec TaskRecord) error {
	val, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	b.wmu.Lock()
	defer b.wmu.Unlock()
	if err := b.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketTasks).Put([]byte(name), val) }); err != nil {
		return fmt.Errorf("saving the record of task %q in %s: %w", name, b.db.Path(), err)
	}
	return b.Memory.SaveTask(ctx, name, rec)
}

// RemoveTaskRecord implements Tasks.
func (b *Bolt) RemoveTaskRecord(ctx context.Context, name string) error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	if err := b.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketTasks).Delete([]byte(name)) }); err != nil {
		return fmt.Errorf("removing the record of task %q from %s: %w", name, b.db.Path(), err)
	}
	return b.Memory.RemoveTaskRecord(ctx, name)
}

// loadTasks reads the task records of tx into the cache; an unreadable
// one is logged and skipped (the task it described is not restored).
func (b *Bolt) loadTasks(tx *bolt.Tx) error {
	bk, err := tx.CreateBucketIfNotExists(bucketTasks)
	if err != nil {
		return err
	}
	return bk.ForEach(func(k, v []byte) error {
		rec, err := decodeTaskRecord(v, 0)
		if err != nil {
			b.log.Warn("ignoring an unreadable task record in the history database: the task it describes is not restored", "task_name", string(k), "error", err)
			return nil
		}
		if b.tasks == nil {
			b.tasks = map[string]TaskRecord{}
		}
		b.tasks[string(k)] = rec
		return nil
	})
}
