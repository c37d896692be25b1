package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// Terraform's consul backend locks a state at "<state path>/.lock" with a
// Consul session of its own (TTL 15 s, lock-delay 5 s, renewed by the
// Terraform process) and describes the lock at "<state path>/.lockinfo".
// When the Terraform process is killed without unlocking (ctsync's fence
// killed it on a member cut from Consul), the lock outlives it until Consul
// invalidates that session, up to 2 x 15 s after its last renewal, plus the
// lock-delay. The records below let a task's next owner end such a lock at
// once, and only such a lock: one taken by a Terraform that ctsync ran for
// the same task.

// StateLock is the record of the Terraform state lock session that the
// latest Terraform command of a task created (state/tflock/<task>).
type StateLock struct {
	Session string    `json:"session"`
	Key     string    `json:"key"`
	Member  string    `json:"member,omitempty"`
	At      time.Time `json:"at"`
}

// RecordStateLock stores that this instance's Terraform command for task
// created the lock session session for the lock key key. The write is
// behind the task's fence: only the task's current owner (or leader)
// records, so a record always names a Terraform that an owner of the task
// ran.
func (s *ConsulKV) RecordStateLock(ctx context.Context, taskName, key, session, member string) error {
	b, err := json.Marshal(StateLock{Session: session, Key: key, Member: member, At: time.Now().UTC()})
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	err = s.writeTask(ctx, taskName, api.KVTxnOps{{Verb: api.KVSet, Key: s.key("tflock", esc(taskName)), Value: b}})
	return s.logFailure("terraform lock record", taskName, err)
}

// ClearedLock says what ClearStateLock ended.
type ClearedLock struct {
	Session string // the lock's session
	Member  string // the instance whose Terraform created it
	Who     string // the lock info's "Who" (user@host)
	Created string // the lock info's "Created"
}

// ClearStateLock ends the Terraform state lock at key when it is held by
// the session recorded by RecordStateLock for the same task and key, i.e.
// by a Terraform command that an owner of the task ran. It is called by the
// task's owner before its own command: the fence guarantees that the
// Terraform of any earlier owner (or of this instance's earlier run) is
// stopped by now, so such a lock only waits for Consul to expire a dead
// process's session. The lock key and its lock info are deleted in one
// transaction behind the task's fence that also checks the key is still
// held by that session (a deleted key gets no lock-delay, unlike one whose
// session is invalidated); the session is then destroyed. A lock held by
// any other session (someone running Terraform by hand) is left alone:
// ok=false.
func (s *ConsulKV) ClearStateLock(ctx context.Context, taskName, key string) (cleared ClearedLock, ok bool, err error) {
	if s.ns != "" {
		return cleared, false, nil // the backend's keys are not in the store's namespace
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	q := (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx)
	lock, _, err := s.kv.Get(key, q)
	if err != nil {
		return cleared, false, fmt.Errorf("reading the terraform state lock %q: %w", key, err)
	}
	if lock == nil || lock.Session == "" {
		return cleared, false, nil
	}
	recPair, _, err := s.kv.Get(s.key("tflock", esc(taskName)), q)
	if err != nil {
		return cleared, false, fmt.Errorf("reading the terraform lock record of task %q: %w", taskName, err)
	}
	if recPair == nil {
		return cleared, false, nil
	}
	var rec StateLock
	if json.Unmarshal(recPair.Value, &rec) != nil || rec.Session != lock.Session || rec.Key != key {
		return cleared, false, nil
	}
	cleared = ClearedLock{Session: rec.Session, Member: rec.Member}
	infoKey := strings.TrimSuffix(key, "/.lock") + "/.lockinfo"
	if info, _, err := s.kv.Get(infoKey, q); err == nil && info != nil {
		var li struct {
			Who     string `json:"Who"`
			Created string `json:"Created"`
		}
		if json.Unmarshal(info.Value, &li) == nil {
			cleared.Who, cleared.Created = li.Who, li.Created
		}
	}
	s.wmu.Lock()
	err = s.writeTask(ctx, taskName, api.KVTxnOps{
		{Verb: api.KVCheckSession, Key: key, Session: rec.Session},
		{Verb: api.KVDelete, Key: key},
		{Verb: api.KVDelete, Key: infoKey},
	})
	s.wmu.Unlock()
	if err != nil {
		return cleared, false, s.logFailure("terraform lock clear", taskName, err)
	}
	// The session holds nothing now; destroying it is tidiness (it would
	// expire anyway), so a failure is not one of the clear.
	_, _ = s.sessions.Destroy(rec.Session, (&api.WriteOptions{}).WithContext(ctx))
	return cleared, true, nil
}
