package reconcile

import (
	"context"
	"testing"

	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

type ownedSet map[string]bool

func (s ownedSet) owns(name string) bool { return s[name] }

// Spread mode: only owned tasks run; a change of a task owned elsewhere
// starts nothing here; a newly owned task is reconciled at once (skipped
// when its desired state was applied by the previous owner, run when its
// in-flight marker is set); a task that stops being owned runs no more.
func TestSetOwned(t *testing.T) {
	h := start(t, 4, nil, servicesTask("a", "web"), servicesTask("b", "web"), servicesTask("c", "web"),
		func(o *Options) { o.Standby = true })
	h.ctrl.SetOwned(ownedSet{}.owns) // as the spreader does before the controller is active
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h.ctrl.SetActive(true)
	h.ctrl.SetOwned(ownedSet{"a": true}.owns)
	h.waitApplied(t, "a")
	h.noApply(t)
	if h.rec.count("b") != 0 || h.rec.count("c") != 0 {
		t.Fatalf("tasks owned elsewhere ran: b=%d c=%d", h.rec.count("b"), h.rec.count("c"))
	}
	if st, _ := h.ctrl.Task("b"); st.Active {
		t.Fatal("a task owned elsewhere stays queued")
	}

	// A change: only the owner's task runs.
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web"), inst("web-2", "web")})
	h.waitApplied(t, "a")
	h.noApply(t)
	if h.rec.count("b") != 0 {
		t.Fatal("a change ran a task owned elsewhere")
	}

	// b moves here: the previous owner applied the current state (same
	// fingerprint in the shared store): skipped. c moves here with its
	// in-flight marker set: run although its fingerprint matches.
	wantB := h.ctrl.desiredFor(t, "b")
	if err := h.st.FinishRun(context.Background(), "b", store.RunState{Applied: wantB.Fingerprint, Parts: wantB.Parts}, nil); err != nil {
		t.Fatal(err)
	}
	wantC := h.ctrl.desiredFor(t, "c")
	if err := h.st.FinishRun(context.Background(), "c", store.RunState{Applied: wantC.Fingerprint, Parts: wantC.Parts}, nil); err != nil {
		t.Fatal(err)
	}
	if err := h.st.StartRun(context.Background(), "c", "run-of-the-dead-owner"); err != nil {
		t.Fatal(err)
	}
	h.ctrl.SetOwned(ownedSet{"a": true, "b": true, "c": true}.owns)
	h.waitApplied(t, "c")
	h.noApply(t)
	if h.rec.count("b") != 0 {
		t.Fatal("a task whose applied state is current ran when it moved here")
	}
	if h.rec.count("c") != 1 {
		t.Fatalf("c ran %d times after moving here in flight, want 1", h.rec.count("c"))
	}

	// a leaves: a change runs b and c only.
	h.ctrl.SetOwned(ownedSet{"b": true, "c": true}.owns)
	na := h.rec.count("a")
	h.w.Set(healthKey("web"), []task.Service{inst("web-3", "web")})
	if got := []string{nextApplied(t, h), nextApplied(t, h)}; !(got[0] == "b" && got[1] == "c" || got[0] == "c" && got[1] == "b") {
		t.Fatalf("applied %v after the change, want b and c (in either order: they run in parallel)", got)
	}
	h.noApply(t)
	if h.rec.count("a") != na {
		t.Fatal("a task no longer owned ran")
	}
	if names := h.ctrl.TaskNames(); len(names) != 3 || names[0] != "a" {
		t.Fatalf("TaskNames = %v", names)
	}
	if h.ctrl.Busy("a") {
		t.Fatal("Busy without a run")
	}
	if h.rec.overlap {
		t.Fatal("a task ran twice at once")
	}
}

// desiredFor computes a task's desired state as a run would now.
func (c *Controller) desiredFor(t *testing.T, name string) Desired {
	t.Helper()
	c.mu.Lock()
	s := c.tasks[name].spec
	c.mu.Unlock()
	d, ready, err := c.obs.desired(context.Background(), &s)
	if !ready || err != nil {
		t.Fatalf("desired state of %s: ready=%v err=%v", name, ready, err)
	}
	return d
}
