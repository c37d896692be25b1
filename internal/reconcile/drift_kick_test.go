package reconcile

import (
	"context"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

func driftEvents(h *harness, name string) int {
	n := 0
	for _, ev := range h.st.Events(name) {
		if ev.Kind == store.KindDrift {
			n++
		}
	}
	return n
}

// With no task to check, the drift loop sleeps for an hour: enabling a
// task again, or creating one, must wake it so its checks start on time.
func TestDriftChecksFollowEnableAndCreate(t *testing.T) {
	s := servicesTask("a", "web")
	s.DriftDetection = &task.DriftDetection{Interval: task.Duration(time.Second)}
	h := start(t, 4, nil, s)
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h.waitApplied(t, "a")
	// The fake driver's plans always have changes: each check is a drift.
	waitFor(t, "a first drift check", func() bool { return driftEvents(h, "a") >= 1 })

	ctx := context.Background()
	if _, err := h.ctrl.SetEnabled(ctx, "a", false, ""); err != nil {
		t.Fatal(err)
	}
	// Let the loop find nothing to check and go to sleep.
	time.Sleep(1500 * time.Millisecond)
	before := driftEvents(h, "a")
	time.Sleep(1500 * time.Millisecond)
	if got := driftEvents(h, "a"); got != before {
		t.Fatalf("a disabled task was checked for drift (%d -> %d)", before, got)
	}
	if _, err := h.ctrl.SetEnabled(ctx, "a", true, ""); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(4 * time.Second)
	for driftEvents(h, "a") == before {
		if time.Now().After(deadline) {
			t.Fatal("no drift check within 4s of enabling a task with a 1s interval")
		}
		time.Sleep(20 * time.Millisecond)
	}

	if _, err := h.ctrl.SetEnabled(ctx, "a", false, ""); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	b := servicesTask("b", "web")
	b.DriftDetection = &task.DriftDetection{Interval: task.Duration(time.Second)}
	if err := h.ctrl.Create(ctx, b, false); err != nil {
		t.Fatal(err)
	}
	h.waitApplied(t, "b")
	deadline = time.Now().Add(4 * time.Second)
	for driftEvents(h, "b") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no drift check within 4s of creating a task with a 1s interval")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
