package store

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/task"
)

// storeImpl is one implementation of Store under the contract test: open
// returns a store; reopen, when not nil, returns a new store over the same
// persisted state (a restarted daemon, a new leader).
type storeImpl struct {
	name   string
	open   func(t *testing.T) Store
	reopen func(t *testing.T) Store
}

func storeImpls(t *testing.T) []storeImpl {
	boltPath := filepath.Join(t.TempDir(), HistoryFile)
	var boltOpen *Bolt
	openBolt := func(t *testing.T) Store {
		if boltOpen != nil {
			_ = boltOpen.Close()
		}
		boltOpen = openTestBolt(t, boltPath, 5)
		t.Cleanup(func() { _ = boltOpen.Close() })
		return boltOpen
	}
	impls := []storeImpl{
		{name: "memory", open: func(*testing.T) Store { return NewMemory(5) }},
		{name: "bolt", open: openBolt, reopen: openBolt},
	}
	if !testing.Short() {
		var c func() Store
		openKV := func(t *testing.T) Store {
			if c == nil {
				cc := startConsul(t)
				c = func() Store {
					return NewConsulKV(cc.Client, ConsulKVOptions{Prefix: "ctsync/contract/state", History: 5})
				}
			}
			s := c()
			if err := s.(*ConsulKV).Load(t.Context()); err != nil {
				t.Fatal(err)
			}
			return s
		}
		impls = append(impls, storeImpl{name: "consulkv", open: openKV, reopen: openKV})
	}
	return impls
}

// TestStoreContract: the three stores hold the same things the same way:
// the run state (applied fingerprint and its parts, failure, terminal
// flag, in-flight marker, outputs), the run history, the remote-run
// records, the destroy windows; the persistent ones (bbolt for a single daemon, Consul KV for
// high availability) keep them across a reopen, which is what makes a
// restarted daemon with nothing changed run nothing.
func TestStoreContract(t *testing.T) {
	for _, impl := range storeImpls(t) {
		t.Run(impl.name, func(t *testing.T) {
			ctx := t.Context()
			s := impl.open(t)
			if st := s.Run("web"); !st.zero() {
				t.Fatalf("a new store has a run state: %+v", st)
			}
			// Applied, then a run in flight.
			applied := RunState{Applied: "f1", Parts: map[string]string{"task": "t1", "consul data": "d1"},
				Outputs: json.RawMessage(`{"n":1}`)}
			if err := s.FinishRun(ctx, "web", applied, &Event{ID: "r1", TaskName: "web", Success: true, StartTime: time.Unix(1, 0).UTC()}); err != nil {
				t.Fatal(err)
			}
			if err := s.StartRun(ctx, "web", "r2"); err != nil {
				t.Fatal(err)
			}
			want := applied.clone()
			want.InFlight = "r2"
			if got := s.Run("web"); !got.equal(want) {
				t.Fatalf("run state %+v, want %+v", got, want)
			}
			// A failed, terminal run of another task.
			failed := RunState{Applied: "g0", Parts: map[string]string{"task": "t0"}, Failed: "g1", Terminal: true}
			if err := s.StartRun(ctx, "db", "r3"); err != nil {
				t.Fatal(err)
			}
			if err := s.FinishRun(ctx, "db", failed, &Event{ID: "r3", TaskName: "db", Error: &EventError{Message: "boom"}}); err != nil {
				t.Fatal(err)
			}
			if got := s.Run("db"); !got.equal(failed) || !got.Dirty() {
				t.Fatalf("failed run state %+v, want %+v", got, failed)
			}
			rr, ok := s.(RemoteRuns)
			if !ok {
				t.Fatalf("%T does not keep remote runs", s)
			}
			remote := RemoteRun{Op: "apply", Digest: "d", ConfigurationVersion: "cv-1", ID: "run-1", Run: "r3", At: time.Unix(5, 0).UTC()}
			if err := rr.SetRemoteRun(ctx, "db", remote); err != nil {
				t.Fatal(err)
			}
			if got, ok := rr.RemoteRun("db"); !ok || got != remote {
				t.Fatalf("remote run %+v %v", got, ok)
			}
			// The destroy windows (approval.window): two applies of db,
			// one of web, the oldest of db dropped by a third past the
			// window.
			dw, ok := s.(DestroyWindows)
			if !ok {
				t.Fatalf("%T does not keep destroy windows", s)
			}
			if w := dw.DestroyWindow("db"); len(w.Entries) != 0 {
				t.Fatalf("a new store has a destroy window: %+v", w)
			}
			t0 := time.Unix(1000, 0).UTC()
			for _, r := range []struct {
				task string
				e    WindowEntry
			}{
				{"db", WindowEntry{At: t0, Destroyed: 1, Before: 10, After: 9}},
				{"db", WindowEntry{At: t0.Add(30 * time.Minute), Destroyed: 2, Before: 9, After: 7}},
				{"web", WindowEntry{At: t0, Destroyed: 0, Before: 3, After: 5, Approved: true}},
				{"db", WindowEntry{At: t0.Add(70 * time.Minute), Destroyed: 1, Before: 7, After: 6}},
			} {
				if err := dw.RecordApply(ctx, r.task, r.e, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			wantDB := DestroyWindow{Entries: []WindowEntry{
				{At: t0.Add(30 * time.Minute), Destroyed: 2, Before: 9, After: 7},
				{At: t0.Add(70 * time.Minute), Destroyed: 1, Before: 7, After: 6},
			}}
			wantWeb := DestroyWindow{Entries: []WindowEntry{{At: t0, Before: 3, After: 5, Approved: true}}}
			check := func(s Store, when string) {
				t.Helper()
				if got := s.Run("web"); !got.equal(want) {
					t.Errorf("%s: run state of web %+v, want %+v", when, got, want)
				}
				if got := s.Run("db"); !got.equal(failed) {
					t.Errorf("%s: run state of db %+v, want %+v", when, got, failed)
				}
				if evs := s.Events("web"); len(evs) != 1 || evs[0].ID != "r1" {
					t.Errorf("%s: events of web %+v", when, evs)
				}
				if got, ok := s.(RemoteRuns).RemoteRun("db"); !ok || got != remote {
					t.Errorf("%s: remote run of db %+v %v", when, got, ok)
				}
				if got := s.(DestroyWindows).DestroyWindow("db"); !reflect.DeepEqual(got, wantDB) {
					t.Errorf("%s: destroy window of db %+v, want %+v", when, got, wantDB)
				}
				if got := s.(DestroyWindows).DestroyWindow("web"); !reflect.DeepEqual(got, wantWeb) {
					t.Errorf("%s: destroy window of web %+v, want %+v", when, got, wantWeb)
				}
			}
			check(s, "before a reopen")
			if impl.reopen != nil {
				s = impl.reopen(t)
				check(s, "after a reopen")
			}
			// The run in flight finishes; the task is deleted.
			if err := s.FinishRun(ctx, "web", applied, nil); err != nil {
				t.Fatal(err)
			}
			if got := s.Run("web"); got.InFlight != "" || got.Applied != "f1" {
				t.Fatalf("after FinishRun: %+v", got)
			}
			if err := s.DeleteTask(ctx, "db"); err != nil {
				t.Fatal(err)
			}
			gone := func(s Store, when string) {
				t.Helper()
				if got := s.Run("web"); !got.equal(applied) {
					t.Errorf("%s: run state of web %+v, want %+v", when, got, applied)
				}
				if st, evs := s.Run("db"), s.Events("db"); !st.zero() || len(evs) != 0 {
					t.Errorf("%s: a deleted task kept %+v, %+v", when, st, evs)
				}
				if _, ok := s.(RemoteRuns).RemoteRun("db"); ok {
					t.Errorf("%s: a deleted task kept its remote run", when)
				}
				if w := s.(DestroyWindows).DestroyWindow("db"); len(w.Entries) != 0 {
					t.Errorf("%s: a deleted task kept its destroy window %+v", when, w)
				}
				if got := s.(DestroyWindows).DestroyWindow("web"); !reflect.DeepEqual(got, wantWeb) {
					t.Errorf("%s: destroy window of web %+v, want %+v", when, got, wantWeb)
				}
			}
			gone(s, "after the deletion")
			if impl.reopen != nil {
				gone(impl.reopen(t), "after the deletion and a reopen")
			}
		})
	}
}

// TestTasksContract: the three stores keep task records (a task created,
// enabled or deleted through the API) the same way, and the persistent
// ones keep them across a reopen: a restarted daemon (bbolt) or a new
// leader (Consul KV) restores the tasks created through the API. A task's
// record outlives DeleteTask (the run state), and RemoveTaskRecord removes
// it for good.
func TestTasksContract(t *testing.T) {
	for _, impl := range storeImpls(t) {
		t.Run(impl.name, func(t *testing.T) {
			ctx := t.Context()
			s := impl.open(t)
			ts, ok := s.(Tasks)
			if !ok {
				t.Fatalf("%T does not keep task records", s)
			}
			if recs := ts.TaskRecords(); len(recs) != 0 {
				t.Fatalf("a new store has task records: %+v", recs)
			}
			on := false
			created := TaskRecord{Spec: &task.Spec{Name: "api", Module: "./m", Enabled: true, Variables: map[string]string{"n": "1"}}}
			recs := map[string]TaskRecord{
				"api":    created,
				"file":   {Enabled: &on},
				"gone":   {Deleted: true},
				"doomed": {Deleted: true, Destroy: true, Spec: &task.Spec{Name: "doomed", Module: "./d"}},
			}
			for name, rec := range recs {
				if err := ts.SaveTask(ctx, name, rec); err != nil {
					t.Fatal(err)
				}
			}
			if err := ts.RemoveTaskRecord(ctx, "doomed"); err != nil {
				t.Fatal(err)
			}
			delete(recs, "doomed")
			if err := s.DeleteTask(ctx, "api"); err != nil { // the run state only
				t.Fatal(err)
			}
			check := func(s Store, when string) {
				t.Helper()
				got := s.(Tasks).TaskRecords()
				if len(got) != len(recs) {
					t.Errorf("%s: records %+v, want %+v", when, got, recs)
				}
				for name, want := range recs {
					g, ok := got[name]
					if !ok {
						t.Errorf("%s: no record of %q", when, name)
						continue
					}
					gb, _ := json.Marshal(g)
					wb, _ := json.Marshal(want)
					if string(gb) != string(wb) {
						t.Errorf("%s: record of %q is %s, want %s", when, name, gb, wb)
					}
				}
			}
			check(s, "before a reopen")
			if impl.reopen != nil {
				check(impl.reopen(t), "after a reopen")
			}
		})
	}
}

// TestHeldPlansContract: the three stores keep the record of a task's held
// plan the same way (heldplan.go), the persistent ones across a reopen (a
// restarted daemon holds the same plan, a new leader too); a delete of
// another plan's id leaves the record, DeleteTask removes it.
func TestHeldPlansContract(t *testing.T) {
	for _, impl := range storeImpls(t) {
		t.Run(impl.name, func(t *testing.T) {
			ctx := t.Context()
			s := impl.open(t)
			hp, ok := s.(HeldPlans)
			if !ok {
				t.Fatalf("%T does not keep held plans", s)
			}
			if r, ok := hp.HeldPlan("web"); ok {
				t.Fatalf("a new store has a held plan: %+v", r)
			}
			created := time.Unix(2000, 0).UTC()
			rec := HeldPlanRecord{ID: "p1", State: "pending", Created: created, Expires: created.Add(time.Hour),
				Reason: "approval required", Rule: "required", Window: json.RawMessage(`{"window":"1h"}`),
				Add: 1, Destroy: 2, Replace: 1, InState: 4, Text: "plan (redacted)", ConsulChanges: []string{"node added: n1"},
				Fingerprint: "f1", Trigger: "web", Digest: "sha256:ab", Ref: "run-1", Changes: true}
			destroy := HeldPlanRecord{ID: "p2", State: "pending", Created: created, Fingerprint: "f2", DeletesTask: true, Enabled: true}
			if err := hp.SaveHeldPlan(ctx, "web", rec); err != nil {
				t.Fatal(err)
			}
			if err := hp.SaveHeldPlan(ctx, "db", destroy); err != nil {
				t.Fatal(err)
			}
			check := func(s Store, when string) {
				t.Helper()
				if got, ok := s.(HeldPlans).HeldPlan("web"); !ok || !reflect.DeepEqual(got, rec) {
					t.Errorf("%s: held plan of web %+v %v, want %+v", when, got, ok, rec)
				}
				if got, ok := s.(HeldPlans).HeldPlan("db"); !ok || !reflect.DeepEqual(got, destroy) {
					t.Errorf("%s: held plan of db %+v %v, want %+v", when, got, ok, destroy)
				}
			}
			check(s, "before a reopen")
			if impl.reopen != nil {
				s = impl.reopen(t)
				check(s, "after a reopen")
			}
			hp = s.(HeldPlans)
			// Another plan's id leaves the record; its own removes it.
			if err := hp.DeleteHeldPlan(ctx, "web", "p0"); err != nil {
				t.Fatal(err)
			}
			if _, ok := hp.HeldPlan("web"); !ok {
				t.Fatal("the delete of another plan removed the record")
			}
			if err := hp.DeleteHeldPlan(ctx, "web", "p1"); err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteTask(ctx, "db"); err != nil {
				t.Fatal(err)
			}
			gone := func(s Store, when string) {
				t.Helper()
				for _, name := range []string{"web", "db"} {
					if r, ok := s.(HeldPlans).HeldPlan(name); ok {
						t.Errorf("%s: held plan of %s kept: %+v", when, name, r)
					}
				}
			}
			gone(s, "after the deletes")
			if impl.reopen != nil {
				gone(impl.reopen(t), "after the deletes and a reopen")
			}
		})
	}
}
