package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/hashicorp/consul/api"
	bolt "go.etcd.io/bbolt"
)

// HeldPlanRecord is what is kept of a plan a safety gate holds for
// approval, so that a restarted daemon or a new leader holds the same plan
// (same id, same expiry) instead of planning again under a new id. It never
// holds the plan file, which has every value of the run, secrets included
// (docs/security.md): only what the operator is shown (Text is the
// redacted plan text, at most MaxPlanText bytes), what the gate decided,
// the desired state the plan was made for, the digest of its changes
// (ChangesDigest: sensitive values masked) and, for a driver whose plan
// outlives the process (terraform-cloud: a remote run waiting for its
// confirmation), the driver's reference to it.
type HeldPlanRecord struct {
	ID      string    `json:"id"`
	State   string    `json:"state"`
	Created time.Time `json:"created"`
	// Expires is when the plan expires, wall-clock (zero: never).
	Expires time.Time `json:"expires,omitzero"`
	Reason  string    `json:"reason,omitempty"`
	Rule    string    `json:"rule,omitempty"`
	// Window is the gate's note on approval.window (gate.WindowNote).
	Window  json.RawMessage `json:"window,omitempty"`
	Add     int             `json:"add"`
	Change  int             `json:"change"`
	Destroy int             `json:"destroy"`
	Replace int             `json:"replace,omitempty"`
	InState int             `json:"in_state"`
	// Text is the plan as the API shows it (redacted, clipped).
	Text string `json:"text,omitempty"`
	// ConsulChanges are the plan's lines of what changed in Consul.
	ConsulChanges []string `json:"consul_changes,omitempty"`
	// Fingerprint is the desired state the plan was made for.
	Fingerprint string `json:"fingerprint"`
	// Trigger is what caused the run that made the plan.
	Trigger string `json:"trigger,omitempty"`
	// DeletesTask marks the destroy plan of a deletion with destroy;
	// Enabled is the task's enabled flag before the deletion, given back
	// when the plan is rejected or expires.
	DeletesTask bool `json:"deletes_task,omitempty"`
	Enabled     bool `json:"enabled,omitempty"`
	// Digest is the digest of the plan's changes as the operator saw them
	// (gate.ChangesDigest); "" when the driver gave no JSON plan.
	Digest string `json:"digest,omitempty"`
	// Ref is the driver's reference to the plan when it outlives the
	// process (driver.HeldPlan.Durable), "" otherwise; Changes is the
	// driver's plan's changes flag, kept with it.
	Ref     string `json:"ref,omitempty"`
	Changes bool   `json:"changes,omitempty"`
}

// HeldPlans keeps the record of the plan each task's safety gate holds
// (at most one per task). Memory, Bolt and ConsulKV implement it;
// DeleteTask forgets a task's record too.
type HeldPlans interface {
	// HeldPlan returns the task's record, if any.
	HeldPlan(taskName string) (HeldPlanRecord, bool)
	// SaveHeldPlan replaces the task's record; under high availability
	// the write is fenced (ErrNotLeader).
	SaveHeldPlan(ctx context.Context, taskName string, rec HeldPlanRecord) error
	// DeleteHeldPlan removes the task's record when it is the plan id
	// (any plan when id is ""); a record of another plan stays.
	DeleteHeldPlan(ctx context.Context, taskName, id string) error
}

var (
	_ HeldPlans = (*Memory)(nil)
	_ HeldPlans = (*Bolt)(nil)
	_ HeldPlans = (*ConsulKV)(nil)
)

// bucketHeld holds the held-plan records of a Bolt store: held/<task> is
// a HeldPlanRecord as JSON.
var bucketHeld = []byte("held")

func (r HeldPlanRecord) clone() HeldPlanRecord {
	r.Window = append(json.RawMessage(nil), r.Window...)
	r.ConsulChanges = append([]string(nil), r.ConsulChanges...)
	return r
}

// HeldPlan implements HeldPlans.
func (m *Memory) HeldPlan(taskName string) (HeldPlanRecord, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, ok := m.held[taskName]
	return r.clone(), ok
}

// SaveHeldPlan implements HeldPlans.
func (m *Memory) SaveHeldPlan(_ context.Context, taskName string, rec HeldPlanRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held == nil {
		m.held = map[string]HeldPlanRecord{}
	}
	m.held[taskName] = rec.clone()
	return nil
}

// DeleteHeldPlan implements HeldPlans.
func (m *Memory) DeleteHeldPlan(_ context.Context, taskName, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.held[taskName]; ok && (id == "" || r.ID == id) {
		delete(m.held, taskName)
	}
	return nil
}

// SaveHeldPlan implements HeldPlans: written to the file, then to memory.
// A failed write is an error (the caller retries it); memory is changed
// only once the file has it.
func (b *Bolt) SaveHeldPlan(ctx context.Context, taskName string, rec HeldPlanRecord) error {
	val, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	b.wmu.Lock()
	defer b.wmu.Unlock()
	if err := b.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketHeld).Put([]byte(taskName), val) }); err != nil {
		return err
	}
	return b.Memory.SaveHeldPlan(ctx, taskName, rec)
}

// DeleteHeldPlan implements HeldPlans.
func (b *Bolt) DeleteHeldPlan(ctx context.Context, taskName, id string) error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	if r, ok := b.Memory.HeldPlan(taskName); !ok || (id != "" && r.ID != id) {
		return nil
	}
	if err := b.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketHeld).Delete([]byte(taskName)) }); err != nil {
		return err
	}
	return b.Memory.DeleteHeldPlan(ctx, taskName, id)
}

// HeldPlan implements HeldPlans (from the cache, which Load fills).
func (s *ConsulKV) HeldPlan(taskName string) (HeldPlanRecord, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, ok := s.held[taskName]
	return r.clone(), ok
}

// SaveHeldPlan implements HeldPlans: one fenced write of
// <prefix>/held/<task>; the cache changes once Consul has it.
func (s *ConsulKV) SaveHeldPlan(ctx context.Context, taskName string, rec HeldPlanRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writeTask(ctx, taskName, api.KVTxnOps{{Verb: api.KVSet, Key: s.key("held", esc(taskName)), Value: b}}); err != nil {
		return s.logFailure("held plan", taskName, err)
	}
	s.mu.Lock()
	s.held[taskName] = rec.clone()
	s.mu.Unlock()
	return nil
}

// DeleteHeldPlan implements HeldPlans: one fenced delete of
// <prefix>/held/<task> when the cache holds plan id.
func (s *ConsulKV) DeleteHeldPlan(ctx context.Context, taskName, id string) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if r, ok := s.HeldPlan(taskName); !ok || (id != "" && r.ID != id) {
		return nil
	}
	if err := s.writeTask(ctx, taskName, api.KVTxnOps{{Verb: api.KVDelete, Key: s.key("held", esc(taskName))}}); err != nil {
		return s.logFailure("held plan removal", taskName, err)
	}
	s.mu.Lock()
	delete(s.held, taskName)
	s.mu.Unlock()
	return nil
}

// loadHeld decodes a held-plan record (bbolt or Consul KV) into held.
func loadHeld(held map[string]HeldPlanRecord, name string, value []byte) error {
	var r HeldPlanRecord
	if err := json.Unmarshal(value, &r); err != nil {
		return err
	}
	held[name] = r
	return nil
}
