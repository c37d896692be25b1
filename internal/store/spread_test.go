package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// spreadKeys is the spread mode's lock keys in a test: a member key and one
// owner key per task, each locked by a session of the instance holding it.
type spreadKeys struct {
	t *testing.T
	c *api.Client
}

func (k spreadKeys) session() string {
	k.t.Helper()
	id, _, err := k.c.Session().CreateNoChecks(&api.SessionEntry{TTL: "30s", Behavior: api.SessionBehaviorDelete, LockDelay: time.Millisecond}, nil)
	must(k.t, err)
	k.t.Cleanup(func() { _, _ = k.c.Session().Destroy(id, nil) })
	return id
}

func ownerKey(task string) string { return "p/spread/owners/" + esc(task) }

func (k spreadKeys) lock(key, session string) {
	k.t.Helper()
	if ok, _, err := k.c.KV().Acquire(&api.KVPair{Key: key, Session: session}, nil); err != nil || !ok {
		k.t.Fatalf("lock %s: %v %v", key, ok, err)
	}
}

// release is a hand-over's release: the holder unlocks the key.
func (k spreadKeys) release(key, session string) {
	k.t.Helper()
	if ok, _, err := k.c.KV().Release(&api.KVPair{Key: key, Session: session}, nil); err != nil || !ok {
		k.t.Fatalf("release %s: %v %v", key, ok, err)
	}
}

// fence is a member's task fence as the spreader gives it: the owner key of
// the task (the member key for writes of no task), and this member's
// session, ok while it believes it owns the task.
func fence(member, session string, owns map[string]bool) func(string) (string, string, bool) {
	return func(task string) (string, string, bool) {
		if task == "" {
			return "p/spread/members/" + member, session, true
		}
		return ownerKey(task), session, owns[task]
	}
}

// Spread mode: a task moves from member A to member B. B's Claim reads what
// A wrote last (its in-flight marker, applied fingerprint, events), B's
// events continue A's sequence, B's Load keeps the tasks it claimed, and
// the per-task fence refuses every write of a session that does not hold
// the task's owner key, while writes of the tasks it does hold land.
func TestConsulKVClaimSpread(t *testing.T) {
	c := startConsul(t)
	ctx := context.Background()
	k := spreadKeys{t, c.Client}
	sa, sb := k.session(), k.session()
	k.lock("p/spread/members/a", sa)
	k.lock("p/spread/members/b", sb)
	k.lock(ownerKey("web/x"), sa)
	k.lock(ownerKey("db"), sb)
	ownsA := map[string]bool{"web/x": true}
	ownsB := map[string]bool{"db": true}

	a := NewConsulKV(c.Client, ConsulKVOptions{Prefix: "p/state", History: 3, Fence: fence("a", sa, ownsA)})
	b := NewConsulKV(c.Client, ConsulKVOptions{Prefix: "p/state", History: 3, Fence: fence("b", sb, ownsB)})
	must(t, a.Load(ctx))
	must(t, b.Load(ctx)) // B's copy of web/x is empty from here on
	must(t, a.Claim(ctx, "web/x"))
	must(t, b.Claim(ctx, "db"))

	// A runs web/x twice; the second run is in flight when the task moves.
	must(t, a.StartRun(t.Context(), "web/x", "run-1"))
	e1 := ev("web/x", 1, true)
	must(t, a.FinishRun(t.Context(), "web/x", RunState{Applied: "h1", Parts: map[string]string{"module": "m"}}, &e1))
	must(t, a.StartRun(t.Context(), "web/x", "run-2"))
	// A's gate holds a plan of web/x (its record: heldplan.go).
	held := HeldPlanRecord{ID: "plan-1", State: "pending", Fingerprint: "h2", Digest: "sha256:x"}
	must(t, a.SaveHeldPlan(t.Context(), "web/x", held))
	// B's own task is written by B alone.
	e9 := ev("db", 9, true)
	must(t, b.FinishRun(t.Context(), "db", RunState{Applied: "d1"}, &e9))

	// Each member's writes of a task it does not hold the key of are
	// refused by Consul, even when its fence says it owns the task (a
	// member that has not noticed yet).
	ownsA["db"] = true
	e2 := ev("db", 2, true)
	if err := a.FinishRun(t.Context(), "db", RunState{Applied: "forged"}, &e2); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("A's write of B's task: %v, want ErrNotLeader", err)
	}
	if err := a.AddEvent(t.Context(), ev("db", 3, true)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("A's event of B's task: %v, want ErrNotLeader", err)
	}
	delete(ownsA, "db")
	// A fence that says "not owned" refuses before reaching Consul.
	if err := a.StartRun(t.Context(), "db", "run-x"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("A's in-flight marker of a task it does not own: %v", err)
	}

	// Hand-over: A releases web/x, B locks it and claims it. B's cached
	// state was read before A's writes; the claim must see them.
	if b.Run("web/x").Applied != "" {
		t.Fatalf("B's load before A's writes already has them: %+v", b.Run("web/x"))
	}
	k.release(ownerKey("web/x"), sa)
	k.lock(ownerKey("web/x"), sb)
	ownsB["web/x"] = true
	must(t, b.Claim(ctx, "web/x"))
	got := b.Run("web/x")
	if got.Applied != "h1" || got.InFlight != "run-2" || got.Parts["module"] != "m" || ids(b.Events("web/x")) != "run-1" {
		t.Fatalf("B's claim of web/x: %+v, events %s; want A's last writes (applied h1, in flight run-2, run-1)", got, ids(b.Events("web/x")))
	}
	if r, ok := b.HeldPlan("web/x"); !ok || r.ID != held.ID || r.Digest != held.Digest {
		t.Fatalf("B's claim of web/x: held plan %+v %v, want A's %+v", r, ok, held)
	}
	// A's late removal of the record (it dropped the plan) is refused:
	// the record is the new owner's.
	if err := a.DeleteHeldPlan(t.Context(), "web/x", held.ID); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("old owner's removal of the held plan: %v, want ErrNotLeader", err)
	}
	if ks := keys(t, c.Client, "p/state/held/"); len(ks) != 1 {
		t.Fatalf("held plan keys after the old owner's removal: %v", ks)
	}

	// A has not noticed it lost the task: its late writes are refused and
	// change neither Consul nor its cache.
	e3 := ev("web/x", 3, true)
	if err := a.FinishRun(t.Context(), "web/x", RunState{Applied: "late"}, &e3); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("old owner's write after the hand-over: %v, want ErrNotLeader", err)
	}
	if a.Run("web/x").Applied != "h1" || a.Run("web/x").InFlight != "run-2" {
		t.Fatalf("a refused write changed the old owner's cache: %+v", a.Run("web/x"))
	}

	// B re-runs the interrupted run; its event continues A's sequence
	// (A's event is kept, not overwritten).
	must(t, b.StartRun(t.Context(), "web/x", "run-4"))
	e4 := ev("web/x", 4, true)
	must(t, b.FinishRun(t.Context(), "web/x", RunState{Applied: "h4"}, &e4))
	if got := ids(b.Events("web/x")); got != "run-4,run-1" {
		t.Fatalf("B's events of web/x: %s", got)
	}
	if ks := keys(t, c.Client, "p/state/events/web%2Fx/"); len(ks) != 2 {
		t.Fatalf("event keys of web/x: %v", ks)
	}

	// B's Load refreshes what it does not own and keeps what it claimed,
	// even when Consul holds something else (here written behind its back:
	// the cache of an owned task is the one this member writes).
	if _, err := c.Client.KV().Put(&api.KVPair{Key: "p/state/run/web%2Fx", Value: []byte(`{"applied":"outside"}`)}, nil); err != nil {
		t.Fatal(err)
	}
	must(t, b.Load(ctx))
	if b.Run("web/x").Applied != "h4" || b.Run("db").Applied != "d1" || ids(b.Events("web/x")) != "run-4,run-1" {
		t.Fatalf("B's load changed its claimed tasks: web/x %+v db %+v", b.Run("web/x"), b.Run("db"))
	}
	// A's Load, web/x no longer claimed, shows what Consul holds.
	a.Unclaim("web/x")
	delete(ownsA, "web/x")
	must(t, a.Load(ctx))
	if a.Run("web/x").Applied != "outside" || a.Run("db").Applied != "d1" || ids(a.Events("web/x")) != "run-4,run-1" {
		t.Fatalf("A's load after unclaiming: web/x %+v db %+v events %s", a.Run("web/x"), a.Run("db"), ids(a.Events("web/x")))
	}
	// B unclaims: its Load now refreshes web/x too.
	b.Unclaim("web/x")
	must(t, b.Load(ctx))
	if b.Run("web/x").Applied != "outside" {
		t.Fatalf("B's load after unclaiming: %+v", b.Run("web/x"))
	}

	// Writes of no task (task records) are fenced by the member key: a
	// member expelled (its member key deleted) cannot write them.
	must(t, a.SaveTask(t.Context(), "api-made", TaskRecord{Deleted: true}))
	if _, err := c.Client.KV().Delete("p/spread/members/a", nil); err != nil {
		t.Fatal(err)
	}
	if err := a.SaveTask(t.Context(), "api-made", TaskRecord{Deleted: false, Destroy: true}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("task record from an expelled member: %v, want ErrNotLeader", err)
	}
	must(t, b.Load(ctx))
	if r := b.TaskRecords()["api-made"]; !r.Deleted || r.Destroy {
		t.Fatalf("task record after an expelled member's write: %+v", r)
	}
}
