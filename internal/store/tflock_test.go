package store

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// The owner of a task ends the Terraform state lock held by the session an
// owner recorded for that task, without the session's lock-delay; a lock
// held by any other session (someone running Terraform by hand), a record
// for another key, and an instance that does not hold the task's fence
// leave the lock alone.
func TestConsulKVClearStateLock(t *testing.T) {
	c := startConsul(t)
	ctx := t.Context()
	sess := func(delay time.Duration) string {
		id, _, err := c.Client.Session().CreateNoChecks(&api.SessionEntry{TTL: "15s", LockDelay: delay}, nil)
		must(t, err)
		return id
	}
	mine := sess(time.Millisecond)
	const fenceKey = "p/leader"
	if ok, _, err := c.Client.KV().Acquire(&api.KVPair{Key: fenceKey, Session: mine}, nil); err != nil || !ok {
		t.Fatalf("acquire the fence: %v %v", ok, err)
	}
	holding := true
	s := NewConsulKV(c.Client, ConsulKVOptions{Prefix: "p/state", Fence: func(string) (string, string, bool) { return fenceKey, mine, holding }})
	must(t, s.Load(ctx))
	const key = "cts/terraform-env:web/.lock"
	const info = "cts/terraform-env:web/.lockinfo"
	lock := func(session string) {
		t.Helper()
		if ok, _, err := c.Client.KV().Acquire(&api.KVPair{Key: key, Session: session, Flags: api.LockFlagValue}, nil); err != nil || !ok {
			t.Fatalf("acquire the state lock: %v %v", ok, err)
		}
		_, err := c.Client.KV().Put(&api.KVPair{Key: info, Value: []byte(`{"ID":"` + session + `","Who":"ops@host","Created":"2026-11-29T01:00:00Z"}`)}, nil)
		must(t, err)
	}
	held := func() string {
		t.Helper()
		p, _, err := c.Client.KV().Get(key, nil)
		must(t, err)
		if p == nil {
			return ""
		}
		return p.Session
	}

	// Nothing held: nothing to clear.
	if _, ok, err := s.ClearStateLock(ctx, "web", key); ok || err != nil {
		t.Fatalf("clear without a lock: %v %v", ok, err)
	}

	// A lock by hand (no record of it): left alone.
	human := sess(5 * time.Second)
	lock(human)
	if _, ok, err := s.ClearStateLock(ctx, "web", key); ok || err != nil || held() != human {
		t.Fatalf("clear of a lock taken by hand: %v %v, held by %q", ok, err, held())
	}
	// A record of another session, or of another key: still left alone.
	must(t, s.RecordStateLock(ctx, "web", key, sess(time.Second), "cts-a"))
	must(t, s.RecordStateLock(ctx, "other", key, human, "cts-a"))
	if _, ok, err := s.ClearStateLock(ctx, "web", key); ok || err != nil || held() != human {
		t.Fatalf("clear of a lock another session holds: %v %v, held by %q", ok, err, held())
	}
	must(t, s.RecordStateLock(ctx, "web", "cts/other/.lock", human, "cts-a"))
	if _, ok, err := s.ClearStateLock(ctx, "web", key); ok || err != nil || held() != human {
		t.Fatalf("clear with a record of another key: %v %v, held by %q", ok, err, held())
	}
	// Released by its holder (no lock-delay, unlike a destroyed session).
	if ok, _, err := c.Client.KV().Release(&api.KVPair{Key: key, Session: human}, nil); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}

	// The lock of a Terraform that an owner of the task ran (recorded),
	// whose session has a 5 s lock-delay: cleared, and free at once.
	tf := sess(5 * time.Second)
	must(t, s.RecordStateLock(ctx, "web", key, tf, "cts-a"))
	lock(tf)
	// Not while this instance does not hold the task's fence.
	holding = false
	_, ok, err := s.ClearStateLock(ctx, "web", key)
	if ok || !errors.Is(err, ErrNotLeader) || held() != tf {
		t.Fatalf("clear without the fence: %v %v, held by %q", ok, err, held())
	}
	holding = true
	got, ok, err := s.ClearStateLock(ctx, "web", key)
	if !ok || err != nil {
		t.Fatalf("clear of the recorded lock: %v %v", ok, err)
	}
	if got.Session != tf || got.Member != "cts-a" || got.Who != "ops@host" || got.Created != "2026-11-29T01:00:00Z" {
		t.Errorf("cleared %+v", got)
	}
	if h := held(); h != "" {
		t.Fatalf("the lock is still held by %q", h)
	}
	if p, _, _ := c.Client.KV().Get(info, nil); p != nil {
		t.Errorf("the lock info is left: %s", p.Value)
	}
	if se, _, _ := c.Client.Session().Info(tf, nil); se != nil {
		t.Errorf("the cleared lock's session still exists")
	}
	// No lock-delay: another session locks the key right away.
	next := sess(time.Second)
	if ok, _, err := c.Client.KV().Acquire(&api.KVPair{Key: key, Session: next, Flags: api.LockFlagValue}, nil); err != nil || !ok {
		t.Fatalf("the state lock is not free at once after the clear: %v %v", ok, err)
	}
}
