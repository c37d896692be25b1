package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

func startConsul(t *testing.T) *testutil.Consul {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a Consul agent")
	}
	return testutil.StartConsul(t)
}

func ev(taskName string, i int, ok bool) Event {
	e := Event{ID: fmt.Sprintf("run-%d", i), TaskName: taskName, Success: ok,
		StartTime: time.Unix(int64(1000+i), 0).UTC(), EndTime: time.Unix(int64(1001+i), 0).UTC(),
		Kind: KindApply, InputsHash: fmt.Sprintf("h%d", i), LogTail: "Apply complete!"}
	if !ok {
		e.Error = &EventError{Message: "boom"}
	}
	return e
}

func ids(evs []Event) string {
	var out []string
	for _, e := range evs {
		out = append(out, e.ID)
	}
	return strings.Join(out, ",")
}

func keys(t *testing.T, c *api.Client, prefix string) []string {
	t.Helper()
	ks, _, err := c.KV().Keys(prefix, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

func TestConsulKVRoundTrip(t *testing.T) {
	c := startConsul(t)
	ctx := context.Background()
	s := NewConsulKV(c.Client, ConsulKVOptions{Prefix: "consul-terraform-sync/prod/state/", History: 3})
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		if err := s.AddEvent(t.Context(), ev("web/a", i, i != 4)); err != nil {
			t.Fatal(err)
		}
	}
	must(t, s.AddEvent(t.Context(), ev("db", 9, true)))
	must(t, s.FinishRun(t.Context(), "web/a", RunState{Applied: "hash-5"}, nil))
	must(t, s.StartRun(t.Context(), "web/a", "run-6"))
	must(t, s.FinishRun(t.Context(), "db", RunState{Applied: "hash-9", Outputs: []byte(`{"zone":"dmz"}`)}, nil)) // outputs: chaining
	must(t, s.SaveTask(t.Context(), "api-made", TaskRecord{Spec: &task.Spec{Name: "api-made", Enabled: true, Module: "m",
		Condition: task.Condition{Schedule: &task.ScheduleCondition{Cron: "* * * * *"}}}}))
	off := false
	must(t, s.SaveTask(t.Context(), "web/a", TaskRecord{Enabled: &off}))
	must(t, s.SaveTask(t.Context(), "gone", TaskRecord{Deleted: true}))

	if got := ids(s.Events("web/a")); got != "run-5,run-4,run-3" {
		t.Fatalf("events (newest first, history 3) = %s", got)
	}
	// Only history events are in Consul, one key each, under escaped names.
	if got := keys(t, c.Client, "consul-terraform-sync/prod/state/events/web%2Fa/"); len(got) != 3 ||
		!strings.HasSuffix(got[0], "/00000000000000000002") {
		t.Fatalf("event keys = %v", got)
	}

	// A new leader reads it all back.
	s2 := NewConsulKV(c.Client, ConsulKVOptions{Prefix: "consul-terraform-sync/prod/state", History: 3})
	must(t, s2.Load(ctx))
	if got := ids(s2.Events("web/a")); got != "run-5,run-4,run-3" {
		t.Fatalf("reloaded events = %s", got)
	}
	got := s2.Events("web/a")[1]
	if want := ev("web/a", 4, false); got.ID != want.ID || got.Success || got.Error == nil || got.Error.Message != "boom" ||
		!got.StartTime.Equal(want.StartTime) || got.InputsHash != "h4" || got.LogTail != "Apply complete!" {
		t.Fatalf("reloaded event = %+v", got)
	}
	if s2.Run("web/a").Applied != "hash-5" || s2.Run("web/a").InFlight != "run-6" || s2.Run("db").Applied != "hash-9" || s2.Run("db").InFlight != "" {
		t.Fatalf("reloaded run state: applied=%q inflight=%q db=%q", s2.Run("web/a").Applied, s2.Run("web/a").InFlight, s2.Run("db").Applied)
	}
	if got := string(s2.Run("db").Outputs); got != `{"zone":"dmz"}` {
		t.Fatalf("reloaded outputs = %q", got)
	}
	if len(s2.AllEvents()) != 2 {
		t.Fatalf("AllEvents: %v", s2.AllEvents())
	}
	recs := s2.TaskRecords()
	if len(recs) != 3 || recs["api-made"].Spec == nil || recs["api-made"].Spec.Condition.Schedule == nil ||
		recs["web/a"].Enabled == nil || *recs["web/a"].Enabled || !recs["gone"].Deleted {
		t.Fatalf("task records = %+v", recs)
	}
	// Sequence numbers continue after a reload.
	must(t, s2.AddEvent(t.Context(), ev("web/a", 7, true)))
	if got := ids(s2.Events("web/a")); got != "run-7,run-5,run-4" {
		t.Fatalf("events after reload + add = %s", got)
	}

	must(t, s2.FinishRun(t.Context(), "web/a", s2.Run("web/a"), nil))
	must(t, s2.DeleteTask(t.Context(), "db"))
	s3 := NewConsulKV(c.Client, ConsulKVOptions{Prefix: "consul-terraform-sync/prod/state", History: 3})
	must(t, s3.Load(ctx))
	if s3.Run("web/a").InFlight != "" || s3.Run("web/a").Applied != "hash-5" || len(s3.Events("db")) != 0 || s3.Run("db").Applied != "" {
		t.Fatalf("after clear + delete: inflight=%q applied=%q db events=%d", s3.Run("web/a").InFlight, s3.Run("web/a").Applied, len(s3.Events("db")))
	}
	if ks := keys(t, c.Client, "consul-terraform-sync/prod/state/run/db"); len(ks) != 0 {
		t.Fatalf("run state of a deleted task left in consul: %v", ks)
	}

	s3.ForgetApplied()
	if s3.Run("web/a").Applied != "" {
		t.Fatal("ForgetApplied kept a hash")
	}
	must(t, s3.Reset(ctx))
	if ks := keys(t, c.Client, "consul-terraform-sync/prod/state/"); len(ks) != 0 {
		t.Fatalf("reset left keys: %v", ks)
	}
	if len(s3.TaskRecords()) != 0 || len(s3.Events("web/a")) != 0 {
		t.Fatal("reset left the cache")
	}
}

// Writing what is already there costs no Consul write.
func TestConsulKVSkipsNoopWrites(t *testing.T) {
	c := startConsul(t)
	s := NewConsulKV(c.Client, ConsulKVOptions{Prefix: "p/state"})
	must(t, s.Load(context.Background()))
	must(t, s.FinishRun(t.Context(), "a", RunState{Applied: "h1"}, nil))
	_, meta, err := c.Client.KV().Get("p/state/run/a", nil)
	must(t, err)
	before := meta.LastIndex
	must(t, s.FinishRun(t.Context(), "a", RunState{Applied: "h1"}, nil))
	must(t, s.FinishRun(t.Context(), "a", s.Run("a"), nil))
	_, meta, err = c.Client.KV().Get("p/state/run/a", nil)
	must(t, err)
	if meta.LastIndex != before {
		t.Fatalf("no-op writes moved the index from %d to %d", before, meta.LastIndex)
	}
}

// With a fence, a write only lands while the session holds the lock key.
func TestConsulKVFence(t *testing.T) {
	c := startConsul(t)
	ctx := context.Background()
	sess := func() string {
		id, _, err := c.Client.Session().CreateNoChecks(&api.SessionEntry{TTL: "10s", Behavior: api.SessionBehaviorDelete, LockDelay: time.Millisecond}, nil)
		must(t, err)
		return id
	}
	mine, other := sess(), sess()
	const lock = "p/leader"
	ok, _, err := c.Client.KV().Acquire(&api.KVPair{Key: lock, Session: mine}, nil)
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	holding := true
	s := NewConsulKV(c.Client, ConsulKVOptions{Prefix: "p/state", Fence: func(string) (string, string, bool) { return lock, mine, holding }})
	must(t, s.Load(ctx))
	must(t, s.FinishRun(t.Context(), "a", RunState{Applied: "h1"}, nil))

	// The lock moves to another session (a follower took over): the old
	// leader's writes are refused by Consul and change nothing.
	ops := api.KVTxnOps{{Verb: api.KVDelete, Key: lock}, {Verb: api.KVLock, Key: lock, Session: other}}
	if ok, _, _, err := c.Client.KV().Txn(ops, nil); err != nil || !ok {
		t.Fatalf("take over: %v %v", ok, err)
	}
	err = s.FinishRun(t.Context(), "a", RunState{Applied: "h2"}, nil)
	if !errors.Is(err, ErrNotLeader) {
		t.Fatalf("write after losing the lock: %v, want ErrNotLeader", err)
	}
	err = s.AddEvent(t.Context(), ev("a", 1, true))
	if !errors.Is(err, ErrNotLeader) {
		t.Fatalf("event after losing the lock: %v, want ErrNotLeader", err)
	}
	fresh := NewConsulKV(c.Client, ConsulKVOptions{Prefix: "p/state"})
	must(t, fresh.Load(ctx))
	if fresh.Run("a").Applied != "h1" || len(fresh.Events("a")) != 0 {
		t.Fatalf("a deposed leader's writes landed: applied=%q events=%d", fresh.Run("a").Applied, len(fresh.Events("a")))
	}

	// Not holding the lock at all: refused before reaching Consul.
	holding = false
	if err := s.SaveTask(t.Context(), "x", TaskRecord{Deleted: true}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("SaveTask without the lock: %v", err)
	}
	if len(s.TaskRecords()) != 0 {
		t.Fatal("a refused task record reached the cache")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The path of a run's log survives a reload only where the file is.
func TestConsulKVKeepsLocalLogPaths(t *testing.T) {
	c := startConsul(t)
	s := NewConsulKV(c.Client, ConsulKVOptions{Prefix: "p/state"})
	must(t, s.Load(context.Background()))
	here := t.TempDir() + "/run.log"
	must(t, os.WriteFile(here, []byte("log"), 0o600))
	e1, e2 := ev("a", 1, true), ev("a", 2, true)
	e1.LogPath, e2.LogPath = here, "/nonexistent/other-instance/run.log"
	must(t, s.AddEvent(t.Context(), e1))
	must(t, s.AddEvent(t.Context(), e2))
	s2 := NewConsulKV(c.Client, ConsulKVOptions{Prefix: "p/state"})
	must(t, s2.Load(context.Background()))
	evs := s2.Events("a")
	if len(evs) != 2 || evs[1].LogPath != here || evs[0].LogPath != "" {
		t.Fatalf("log paths after reload: %q %q", evs[0].LogPath, evs[1].LogPath)
	}
}

// A run's outcome is one transaction: the in-flight marker goes, the run
// state (with the parts of the fingerprint and the failure) and the event
// land together, and a fenced-out write changes neither Consul nor the cache.
func TestConsulKVFinishRunIsOneWrite(t *testing.T) {
	c := startConsul(t)
	ctx := context.Background()
	id, _, err := c.Client.Session().CreateNoChecks(&api.SessionEntry{TTL: "10s", LockDelay: time.Millisecond}, nil)
	must(t, err)
	const lock = "p/leader"
	if ok, _, err := c.Client.KV().Acquire(&api.KVPair{Key: lock, Session: id}, nil); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	holder := id
	s := NewConsulKV(c.Client, ConsulKVOptions{Prefix: "p/state", Fence: func(string) (string, string, bool) { return lock, holder, true }})
	must(t, s.Load(ctx))
	must(t, s.StartRun(t.Context(), "a", "run-1"))
	failed := ev("a", 1, false)
	must(t, s.FinishRun(t.Context(), "a", RunState{Applied: "old", Parts: map[string]string{"module": "m1"}, Failed: "new", Terminal: true}, &failed))

	fresh := NewConsulKV(c.Client, ConsulKVOptions{Prefix: "p/state"})
	must(t, fresh.Load(ctx))
	got := fresh.Run("a")
	if got.InFlight != "" || got.Applied != "old" || got.Failed != "new" || !got.Terminal || got.Parts["module"] != "m1" ||
		!got.Dirty() || ids(fresh.Events("a")) != "run-1" {
		t.Fatalf("stored outcome = %+v, events %s", got, ids(fresh.Events("a")))
	}

	// Fenced out (another session holds the lock now): nothing lands,
	// and the cache still says what Consul says.
	holder = "00000000-0000-0000-0000-000000000000"
	ok2 := ev("a", 2, true)
	if err := s.FinishRun(t.Context(), "a", RunState{Applied: "new"}, &ok2); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("fenced FinishRun: %v, want ErrNotLeader", err)
	}
	if s.Run("a").Applied != "old" || ids(s.Events("a")) != "run-1" {
		t.Fatalf("cache changed by a refused write: %+v %s", s.Run("a"), ids(s.Events("a")))
	}
	must(t, fresh.Load(ctx))
	if fresh.Run("a").Applied != "old" || ids(fresh.Events("a")) != "run-1" {
		t.Fatalf("consul changed by a refused write: %+v", fresh.Run("a"))
	}
}

// A task record larger than MaxTaskRecordBytes is refused before it is
// sent (Consul would refuse the transaction); RemoveTaskRecord removes a
// record from Consul and from the copy.
func TestConsulKVTaskRecordLimitAndRemove(t *testing.T) {
	c := startConsul(t)
	s := NewConsulKV(c.Client, ConsulKVOptions{Prefix: "p/state"})
	must(t, s.Load(context.Background()))
	big := task.Spec{Name: "big", Description: strings.Repeat("d", MaxTaskRecordBytes)}
	if err := s.SaveTask(t.Context(), "big", TaskRecord{Spec: &big}); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("SaveTask of a large record: %v", err)
	}
	if len(keys(t, c.Client, "p/state/tasks/")) != 0 {
		t.Fatal("the large record was written")
	}
	small := task.Spec{Name: "small"}
	must(t, s.SaveTask(t.Context(), "small", TaskRecord{Spec: &small}))
	must(t, s.RemoveTaskRecord(t.Context(), "small"))
	if _, ok := s.TaskRecords()["small"]; ok || len(keys(t, c.Client, "p/state/tasks/")) != 0 {
		t.Fatal("the removed record is still there")
	}
}
