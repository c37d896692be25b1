package reconcile

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/reconcile/reconciletest"
	"github.com/ctsync/ctsync/internal/testutil"

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
	wantB := desiredFor(t, h.ctrl, "b")
	if err := h.st.FinishRun(context.Background(), "b", store.RunState{Applied: wantB.Fingerprint, Parts: wantB.Parts}, nil); err != nil {
		t.Fatal(err)
	}
	wantC := desiredFor(t, h.ctrl, "c")
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
func desiredFor(t *testing.T, c *Controller, name string) Desired {
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

// TestOwnershipIsOneFilter checks that high availability's ownership is
// asked in one place, where a worker takes a task off the queue
// (nextLocked), not in the sources or the runs.
func TestOwnershipIsOneFilter(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var at []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			ast.Inspect(fn, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "ownsLocked" {
					at = append(at, fn.Name.Name)
				}
				return true
			})
		}
	}
	if len(at) != 1 || at[0] != "nextLocked" {
		t.Fatalf("ownership is asked in %v, want only in nextLocked", at)
	}
}

// A drift check falls due on every member; only the task's owner does it.
func TestDriftCheckOnlyOnTheOwner(t *testing.T) {
	spec := servicesTask("a", "web")
	spec.DriftDetection = &task.DriftDetection{Interval: task.Duration(time.Second)}
	clk := reconciletest.NewClock()
	h := start(t, 2, nil, spec, func(o *Options) { o.Clock = clk })
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h.waitApplied(t, "a")
	testutil.WaitFor(t, "the start-up run to be over", h.ctrl.Settled)
	h.ctrl.SetOwned(ownedSet{}.owns)
	driftParked(t, h, clk, 0)
	wakes := h.ctrl.src.driftWakes.Load()
	clk.Advance(2 * time.Second)
	testutil.WaitFor(t, "the drift check to be asked and dropped", func() bool {
		return h.ctrl.src.driftWakes.Load() > wakes && h.ctrl.Settled()
	})
	if n := driftEvents(h, "a"); n != 0 {
		t.Fatalf("a member that does not own the task checked it for drift: %d drift events", n)
	}
	h.ctrl.SetOwned(ownedSet{"a": true}.owns)
	advanceUntil(t, clk, "the owner's drift check", func() bool { return driftEvents(h, "a") > 0 })
}
