package reconcile

import (
	"fmt"
	"runtime"
	"testing"
	"weak"

	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// The events kept in memory (up to 200 per task) do not keep their runs'
// records alive: a run's input digests (about 0.44 MB each at 2,000
// instances) are freed once a later run replaces them, whatever the
// stored events point to (DetectedAt was a pointer into the run record).
func TestStoredEventsDoNotKeepRunRecords(t *testing.T) {
	h := start(t, 1, nil, servicesTask("a", "web"))
	const runs = 6
	var digests []weak.Pointer[inputsDigest]
	var last *inputsDigest
	for i := range runs {
		var svcs []task.Service
		for j := range i + 1 {
			svcs = append(svcs, inst(fmt.Sprintf("web-%d", j), "web"))
		}
		h.w.Set(healthKey("web"), svcs)
		h.waitApplied(t, "a")
		testutil.WaitFor(t, "the run's event and digest recorded", func() bool {
			h.ctrl.mu.Lock()
			d := h.ctrl.tasks["a"].prevInputs
			h.ctrl.mu.Unlock()
			if d == nil || d == last || len(h.st.Events("a")) != i+1 {
				return false
			}
			last = d
			return true
		})
		if ev := h.st.Events("a")[0]; ev.DetectedAt == nil {
			t.Fatalf("run %d: no DetectedAt: the test does not cover it", i+1)
		}
		digests = append(digests, weak.Make(last))
	}
	testutil.WaitFor(t, "the controller to settle", h.ctrl.Settled)
	last = nil
	runtime.GC()
	runtime.GC()
	// The last run's digest is the task's (what the next run is told
	// against); the earlier ones are garbage.
	for i, w := range digests[:runs-1] {
		if w.Value() != nil {
			t.Errorf("run %d's input digest is still alive after %d later runs", i+1, runs-1-i)
		}
	}
	if len(h.st.Events("a")) != runs {
		t.Fatalf("%d events kept, want %d", len(h.st.Events("a")), runs)
	}
}
