package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/hashicorp/consul/api"
)

// RemoteRun is what a remote driver (terraform-cloud) records about the
// last run it queued for a task in the task's workspace, so that the next
// attempt (a retry here, or a new leader after a failover) finds that run
// by its id and waits for it instead of queuing a duplicate. It is written
// twice: before the run is created (with the configuration version it will
// use, so a run created just before a crash can be found among the
// workspace's runs) and once the run exists (with its id).
type RemoteRun struct {
	// Op is the verb: "apply" or "destroy".
	Op string `json:"op"`
	// Digest identifies the uploaded configuration ("-" for a destroy).
	Digest string `json:"digest"`
	// ConfigurationVersion is the id of the configuration version the run
	// uses.
	ConfigurationVersion string `json:"configuration_version"`
	// ID is the remote run's id; empty until the run is created.
	ID string `json:"id,omitempty"`
	// Run is the id of the ctsync run that queued it.
	Run string `json:"run,omitempty"`
	// At is when the record was first written.
	At time.Time `json:"at"`
}

// RemoteRuns keeps one RemoteRun per task. Memory, Bolt and ConsulKV
// implement it; DeleteTask forgets a task's record too.
type RemoteRuns interface {
	// RemoteRun returns the task's record, if any.
	RemoteRun(taskName string) (RemoteRun, bool)
	// SetRemoteRun replaces the task's record; under high availability the
	// write is fenced by the leader lock (ErrNotLeader).
	SetRemoteRun(ctx context.Context, taskName string, r RemoteRun) error
}

var (
	_ RemoteRuns = (*Memory)(nil)
	_ RemoteRuns = (*ConsulKV)(nil)
)

// RemoteRun implements RemoteRuns.
func (m *Memory) RemoteRun(taskName string) (RemoteRun, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, ok := m.remote[taskName]
	return r, ok
}

// SetRemoteRun implements RemoteRuns.
func (m *Memory) SetRemoteRun(_ context.Context, taskName string, r RemoteRun) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.remote == nil {
		m.remote = map[string]RemoteRun{}
	}
	m.remote[taskName] = r
	return nil
}

// RemoteRun implements RemoteRuns (from the cache, which Load fills).
func (s *ConsulKV) RemoteRun(taskName string) (RemoteRun, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, ok := s.remote[taskName]
	return r, ok
}

// SetRemoteRun implements RemoteRuns: one fenced write of
// <prefix>/remote/<task>; the cache changes once Consul has it.
func (s *ConsulKV) SetRemoteRun(ctx context.Context, taskName string, r RemoteRun) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writeTask(ctx, taskName, api.KVTxnOps{{Verb: api.KVSet, Key: s.key("remote", esc(taskName)), Value: b}}); err != nil {
		return s.logFailure("remote run", taskName, err)
	}
	s.mu.Lock()
	if s.remote == nil {
		s.remote = map[string]RemoteRun{}
	}
	s.remote[taskName] = r
	s.mu.Unlock()
	return nil
}

// loadRemote decodes a <prefix>/remote/<task> value into remote.
func loadRemote(remote map[string]RemoteRun, name string, value []byte) error {
	var r RemoteRun
	if err := json.Unmarshal(value, &r); err != nil {
		return err
	}
	remote[name] = r
	return nil
}
