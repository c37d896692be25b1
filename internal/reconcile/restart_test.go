package reconcile

import (
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// A daemon without high availability keeps its run state in the history
// database (store.Bolt): restarted with nothing changed it runs nothing; a
// task whose run was in flight when it stopped runs again, and so does one
// whose working directory is gone (Options.Prepared), and one whose data
// changed meanwhile.
func TestRestartRunsOnlyWhatChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), store.HistoryFile)
	var prepared atomic.Bool
	prepared.Store(true)
	daemon := func() (*harness, *store.Bolt) {
		b, err := store.OpenBolt(path, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		h := start(t, 2, nil, servicesTask("a", "web"), servicesTask("b", "db"), func(o *Options) {
			o.Store = b
			o.Prepared = func(task.Spec) bool { return prepared.Load() }
		})
		h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
		h.w.Set(healthKey("db"), []task.Service{inst("db-1", "db")})
		return h, b
	}
	stop := func(h *harness, b *store.Bolt) {
		h.cancel()
		<-h.done
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
	h, b := daemon()
	bothApplied(t, h)
	testutil.WaitFor(t, "both runs recorded", func() bool { return len(b.Events("a")) == 1 && len(b.Events("b")) == 1 })
	stop(h, b)

	// Nothing changed: nothing runs.
	h, b = daemon()
	h.noApply(t)
	if n, m := len(b.Events("a")), len(b.Events("b")); n != 1 || m != 1 {
		t.Fatalf("events after a restart with nothing changed: %d, %d", n, m)
	}
	// The daemon stops in the middle of a run of a (its marker stays).
	if err := b.StartRun(t.Context(), "a", "interrupted-run"); err != nil {
		t.Fatal(err)
	}
	stop(h, b)

	h, b = daemon()
	h.waitApplied(t, "a")
	h.noApply(t)
	if evs := b.Events("a"); len(evs) != 2 || evs[0].Trigger != StartInterrupted {
		t.Fatalf("the run of an interrupted task at start: %+v", evs)
	}
	if st := b.Run("a"); st.InFlight != "" {
		t.Fatalf("in-flight marker left: %+v", st)
	}
	stop(h, b)

	// The working directories are gone: both tasks run.
	prepared.Store(false)
	h, b = daemon()
	bothApplied(t, h)
	h.noApply(t)
	if evs := b.Events("b"); len(evs) != 2 || evs[0].Trigger != StartNotPrepared {
		t.Fatalf("the run of a task without its working directory at start: %+v", evs)
	}
	stop(h, b)

	// The data of b changed while the daemon was stopped: only b runs.
	prepared.Store(true)
	b2, err := store.OpenBolt(path, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	h = start(t, 2, nil, servicesTask("a", "web"), servicesTask("b", "db"), func(o *Options) { o.Store = b2 })
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h.w.Set(healthKey("db"), []task.Service{inst("db-1", "db"), inst("db-2", "db")})
	h.waitApplied(t, "b")
	h.noApply(t)
	if h.rec.count("a") != 0 {
		t.Fatal("a ran with nothing changed")
	}
	stop(h, b2)
}

// bothApplied waits for one apply of a and one of b, in either order.
func bothApplied(t *testing.T, h *harness) {
	t.Helper()
	seen := map[string]bool{}
	for len(seen) < 2 {
		select {
		case name := <-h.rec.applied:
			if seen[name] {
				t.Fatalf("%s applied twice", name)
			}
			seen[name] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("applied: %v, want a and b", seen)
		}
	}
}
