package reconcile

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// chained is task b of the chain tests: it watches web too, and receives
// a's outputs.
func chained(name, upstream string) task.Spec {
	s := servicesTask(name, "web")
	s.ModuleInput.TaskOutputs = &task.TaskOutputsSelector{Tasks: []string{upstream}}
	return s
}

// nextApplied returns the next task that applied.
func nextApplied(t *testing.T, h *harness) string {
	t.Helper()
	select {
	case got := <-h.rec.applied:
		return got
	case <-time.After(testutil.Scale(10 * time.Second)):
		t.Fatal("no apply")
		return ""
	}
}

// A change that reaches both tasks of a chain runs the upstream first and
// the downstream after it, with the upstream's new outputs; the downstream
// is held (its status says why) while the upstream runs.
func TestChainRunsDownstreamAfterUpstreamWithItsOutputs(t *testing.T) {
	h := start(t, 4, []string{"a"}, servicesTask("a", "web"), chained("b", "a"))
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	for round, n := range []int{1, 2} {
		if round > 0 {
			h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web"), inst("web-2", "web")})
		}
		testutil.WaitFor(t, "b held while a runs", func() bool {
			st, err := h.ctrl.Task("b")
			return err == nil && strings.Contains(st.Waiting, `upstream task "a"`)
		})
		if got := h.rec.count("b"); got != round {
			t.Fatalf("round %d: b applied %d times before a finished", round, got)
		}
		h.gates["a"] <- struct{}{}
		if got := nextApplied(t, h); got != "a" {
			t.Fatalf("round %d: %s applied first, want a", round, got)
		}
		if got := nextApplied(t, h); got != "b" {
			t.Fatalf("round %d: %s applied second, want b", round, got)
		}
		out := h.rec.last("b").TaskOutputs["a"]
		if want := []byte(`{"instances":` + string(rune('0'+n)) + `}`); !bytes.Equal(out, want) {
			t.Fatalf("round %d: b received a's outputs %s, want %s", round, out, want)
		}
		if len(h.rec.last("b").Services) != n {
			t.Fatalf("round %d: b saw %d services, want %d", round, len(h.rec.last("b").Services), n)
		}
		testutil.WaitFor(t, "the chain to settle", h.ctrl.Settled)
		if st, _ := h.ctrl.Task("b"); st.Waiting != "" {
			t.Fatalf("round %d: b still waiting after a applied: %q", round, st.Waiting)
		}
	}
}

// A failed upstream holds the downstream until it succeeds.
func TestChainFailedUpstreamHoldsDownstream(t *testing.T) {
	a := servicesTask("a", "web")
	b := servicesTask("b", "web")
	b.DependsOn = []string{"a"}
	h := start(t, 4, nil, a, b)
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	for range 2 {
		nextApplied(t, h)
	}
	h.mu.Lock()
	h.drv["a"].failing.Store(true)
	h.mu.Unlock()
	h.ctrl.opts.MaxRetries = -1 // no retry: the hold must last
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web"), inst("web-2", "web")})
	if got := nextApplied(t, h); got != "a" {
		t.Fatalf("%s applied, want a (failing)", got)
	}
	testutil.WaitFor(t, "b held by the failed a", func() bool {
		st, err := h.ctrl.Task("b")
		return err == nil && strings.Contains(st.Waiting, `upstream task "a" failed`)
	})
	// a may run (and fail) once more: the note of the change can reach it
	// after b's look made it due; b must not run at all.
	testutil.WaitFor(t, "the controller to settle", h.ctrl.Settled)
	for len(h.rec.applied) > 0 {
		if got := <-h.rec.applied; got != "a" {
			t.Fatalf("%s applied while its upstream failed", got)
		}
	}
	if n := len(h.rec.last("b").Services); n != 1 {
		t.Fatalf("b ran with the new data (%d services) although a failed", n)
	}
	if err := h.ctrl.RunNow(context.Background(), "b"); err == nil || !strings.Contains(err.Error(), "failed") {
		t.Fatalf("run=now of a held task: %v, want an error saying the upstream failed", err)
	}
	h.mu.Lock()
	h.drv["a"].failing.Store(false)
	h.mu.Unlock()
	if err := h.ctrl.RunNow(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	// a has applied the change: b runs it now.
	for {
		if got := nextApplied(t, h); got == "b" {
			break
		}
	}
	if n := len(h.rec.last("b").Services); n != 2 {
		t.Fatalf("b saw %d services, want 2", n)
	}
}

// -once runs a chain in order, and a downstream of a failed task not at all.
func TestRunOnceOrdersChains(t *testing.T) {
	w := newFakeWatcher()
	rec := newRecorder()
	gate := make(chan struct{})
	c := New(Options{Watcher: w, MaxParallel: 4, NewDriver: func(s task.Spec) (driver.Driver, error) {
		d := &fakeDriver{name: s.Name, rec: rec, exports: s.ExportOutputs}
		if s.Name == "a" {
			d.gate = gate
		}
		return d, nil
	}}, []task.Spec{servicesTask("a", "web"), chained("b", "a")})
	w.Notify = c.Notify
	w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	errc := make(chan error, 1)
	go func() { errc <- c.RunOnce(context.Background(), nil, false, 10*time.Second, nil) }()
	close(gate)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if got := []string{<-rec.applied, <-rec.applied}; got[0] != "a" || got[1] != "b" {
		t.Fatalf("order %v, want a then b", got)
	}
	if out := rec.last("b").TaskOutputs["a"]; string(out) != `{"instances":1}` {
		t.Fatalf("b received %s", out)
	}
}

// ChainGroups names each chain by its smallest task, for the tasks in one.
func TestChainGroups(t *testing.T) {
	b := servicesTask("b", "web")
	b.DependsOn = []string{"c"}
	d := chained("d", "b")
	e := servicesTask("e", "web")
	e.DependsOn = []string{"f"}
	c := New(Options{Watcher: newFakeWatcher()}, []task.Spec{servicesTask("a", "web"), b, servicesTask("c", "web"), d, e, servicesTask("f", "web")})
	got := c.ChainGroups()
	want := map[string]string{"b": "b", "c": "b", "d": "b", "e": "e", "f": "e"}
	if len(got) != len(want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("group of %s = %q, want %q", k, got[k], v)
		}
	}
}

// A disabled upstream holds nothing back, even when its last run failed.
func TestChainDisabledUpstreamHoldsNothing(t *testing.T) {
	a := servicesTask("a", "web")
	b := servicesTask("b", "web")
	b.DependsOn = []string{"a"}
	h := start(t, 4, nil, a, b)
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	for range 2 {
		nextApplied(t, h)
	}
	testutil.WaitFor(t, "the controller to settle", h.ctrl.Settled)
	if _, err := h.ctrl.SetEnabled(context.Background(), "a", false, ""); err != nil {
		t.Fatal(err)
	}
	if err := h.st.FinishRun(context.Background(), "a", store.RunState{Failed: "x"}, nil); err != nil {
		t.Fatal(err)
	}
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web"), inst("web-2", "web")})
	if got := nextApplied(t, h); got != "b" {
		t.Fatalf("%s applied, want b", got)
	}
	if n := len(h.rec.last("b").Services); n != 2 {
		t.Fatalf("b saw %d services, want 2", n)
	}
}

// A task with depends_on and no condition is triggered by its upstream
// only: it runs after each change the upstream applies, with its outputs
// when it receives them, and never on its own (a change of its module
// input alone runs nothing).
func TestChainTaskWithoutCondition(t *testing.T) {
	a := servicesTask("a", "web")
	b := task.Spec{Name: "b", Module: "./m", Enabled: true, BufferPeriod: &task.BufferPeriod{},
		DependsOn:   []string{"a"},
		ModuleInput: task.ModuleInputs{ConsulKV: &task.ConsulKVSelector{Path: "cfg", Recurse: true}}}
	c := task.Spec{Name: "c", Module: "./m", Enabled: true, BufferPeriod: &task.BufferPeriod{},
		ModuleInput: task.ModuleInputs{TaskOutputs: &task.TaskOutputsSelector{Tasks: []string{"a"}}}}
	for _, s := range []task.Spec{b, c} {
		if err := s.Validate(); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
	}
	h := start(t, 4, []string{"a"}, a, b, c)
	h.w.Set(kvKey("cfg"), map[string]string{"cfg/x": "1"})
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	for round := 1; round <= 2; round++ {
		h.gates["a"] <- struct{}{}
		if got := nextApplied(t, h); got != "a" {
			t.Fatalf("round %d: %s applied first, want a", round, got)
		}
		got := map[string]bool{nextApplied(t, h): true, nextApplied(t, h): true}
		if !got["b"] || !got["c"] {
			t.Fatalf("round %d: after a, applied %v; want b and c", round, got)
		}
		testutil.WaitFor(t, "the chain to settle", h.ctrl.Settled)
		if out := h.rec.last("c").TaskOutputs["a"]; string(out) != `{"instances":`+string(rune('0'+round))+`}` {
			t.Fatalf("round %d: c received %s", round, out)
		}
		if round == 1 {
			// b's module input alone: nothing runs.
			h.w.Set(kvKey("cfg"), map[string]string{"cfg/x": "2"})
			h.noApply(t)
			h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web"), inst("web-2", "web")})
		}
	}
	if got := h.rec.last("b").ConsulKV["cfg/x"]; got != "2" {
		t.Fatalf("b read cfg/x = %q, want the current value", got)
	}
	// Without depends_on or task-outputs a task still needs a condition.
	b.DependsOn = nil
	if err := b.Validate(); err == nil || !strings.Contains(err.Error(), "task should be configured with a condition block") {
		t.Fatalf("no condition, no upstream: %v", err)
	}
}
