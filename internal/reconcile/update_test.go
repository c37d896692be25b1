package reconcile

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/reconcile/reconciletest"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// Update gives a task new settings and keeps what the controller knows of
// it: a change of its desired state (a variable) runs once, its history
// is kept; the same settings again run nothing; a new condition moves its
// queries; disabled, it does not run.
func TestUpdateReplacesSettingsKeepingHistory(t *testing.T) {
	h := start(t, 4, nil, servicesTask("a", "web"))
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h.waitApplied(t, "a")
	ctx := t.Context()

	changed := servicesTask("a", "web")
	changed.Variables = map[string]string{"size": "2"}
	if err := h.ctrl.Update(ctx, changed); err != nil {
		t.Fatal(err)
	}
	h.waitApplied(t, "a")
	testutil.WaitFor(t, "two events", func() bool { return len(h.st.Events("a")) == 2 })
	if st, _ := h.ctrl.Task("a"); st.Spec.Variables["size"] != "2" {
		t.Errorf("settings after the update: %+v", st.Spec)
	}

	if err := h.ctrl.Update(ctx, changed); err != nil {
		t.Fatal(err)
	}
	h.noApply(t)

	moved := changed
	moved.Condition = task.Condition{Services: &task.ServicesCondition{ServicesSelector: task.ServicesSelector{Names: []string{"db"}}, UseAsModuleInput: true}}
	if err := h.ctrl.Update(ctx, moved); err != nil {
		t.Fatal(err)
	}
	if h.w.Subscribed(healthKey("web")) || !h.w.Subscribed(healthKey("db")) {
		t.Errorf("queries after a new condition: web %v db %v", h.w.Subscribed(healthKey("web")), h.w.Subscribed(healthKey("db")))
	}
	h.w.Set(healthKey("db"), []task.Service{inst("db-1", "db")})
	h.waitApplied(t, "a")
	if got := h.rec.last("a").Services; len(got) != 1 || got["db-1.n1.dc1"].ID != "db-1" {
		t.Errorf("inputs after the new condition: %+v", got)
	}

	off := moved
	off.Enabled = false
	off.Variables = map[string]string{"size": "3"}
	if err := h.ctrl.Update(ctx, off); err != nil {
		t.Fatal(err)
	}
	h.noApply(t)

	if err := h.ctrl.Update(ctx, servicesTask("nope", "web")); !errors.Is(err, ErrNotFound) {
		t.Errorf("update of an unknown task: %v", err)
	}
	bad := servicesTask("a", "web")
	bad.DependsOn = []string{"a"}
	if err := h.ctrl.Update(ctx, bad); err == nil {
		t.Error("a task that depends on itself was accepted")
	}
}

// A run in progress finishes with the settings it started with: Update
// waits for it, then the new settings run.
func TestUpdateWaitsForTheRunInProgress(t *testing.T) {
	h := start(t, 4, []string{"a"}, servicesTask("a", "web"))
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	waitRunning(t, h.rec, "a")
	changed := servicesTask("a", "web")
	changed.Version = "2.0.0"
	done := make(chan error, 1)
	go func() { done <- h.ctrl.Update(context.Background(), changed) }()
	select {
	case err := <-done:
		t.Fatalf("Update returned during the run: %v", err)
	case <-time.After(testutil.Scale(200 * time.Millisecond)):
	}
	h.gates["a"] <- struct{}{}
	h.waitApplied(t, "a")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testutil.Scale(10 * time.Second)):
		t.Fatal("Update did not return after the run")
	}
	h.gates["a"] <- struct{}{} // the new settings run
	h.waitApplied(t, "a")
}

// refusingWatcher is the fake watcher with Consul's refusals (none).
type refusingWatcher struct{ *fakeWatcher }

func (refusingWatcher) RefusedError(string) error { return nil }

// Before the controller runs (the tasks a daemon restores at its start),
// Create waits for no data: Run reads every task's data, as for the tasks
// it was built with. Once it runs, Create probes Consul's answer again.
func TestCreateBeforeRunWaitsForNothing(t *testing.T) {
	w := refusingWatcher{newFakeWatcher()}
	c := New(Options{Watcher: w, NewDriver: func(task.Spec) (driver.Driver, error) { return nil, errors.New("none") }}, nil)
	t0 := time.Now()
	if err := c.Create(t.Context(), servicesTask("restored", "web"), false); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d >= createProbe {
		t.Errorf("Create before Run took %s, the whole probe", d)
	}
	if _, err := c.Task("restored"); err != nil {
		t.Fatal(err)
	}
}

// A plan held for approval was made from the old settings: Update keeps it
// held until the next plan, which the new settings' desired state makes,
// supersedes it; the task is not applied meanwhile.
func TestUpdateSupersedesTheHeldPlanWithTheNextPlan(t *testing.T) {
	g := startGates(t, &task.Approval{Required: true})
	g.set(2)
	first := g.waitHeld(t, "")
	changed := servicesTask("fw", "web")
	changed.Approval = &task.Approval{Required: true}
	changed.Variables = map[string]string{"size": "2"}
	if err := g.ctrl.Update(t.Context(), changed); err != nil {
		t.Fatal(err)
	}
	second := g.waitHeld(t, first.ID)
	var se *gate.SupersededError
	if err := g.ctrl.Approve(context.Background(), "fw", first.ID, "ops"); !errors.As(err, &se) || se.Newer != second.ID {
		t.Fatalf("approve of the plan of the old settings: %v, want SupersededError naming %s", err, second.ID)
	}
	g.noApply(t)
	if err := g.ctrl.Approve(context.Background(), "fw", second.ID, "ops"); err != nil {
		t.Fatal(err)
	}
	g.waitApplied(t, "fw")
	if st, _ := g.ctrl.Task("fw"); st.Spec.Variables["size"] != "2" {
		t.Errorf("settings after the update: %+v", st.Spec)
	}
}

// An update that gives a task a removal_delay holds its next removal (the
// hold-down comes with the new settings); one that takes the delay away
// applies what was pending.
func TestUpdateCarriesTheRemovalDelay(t *testing.T) {
	clk := reconciletest.NewClock()
	h := start(t, 4, nil, servicesTask("a", "web"), func(o *Options) { o.Clock = clk })
	two := []task.Service{inst("web-1", "web"), inst("web-2", "web")}
	h.w.Set(healthKey("web"), two)
	h.waitApplied(t, "a")
	testutil.WaitFor(t, "the first run to end", func() bool { st, err := h.ctrl.Task("a"); return err == nil && !st.Active })

	delayed := servicesTask("a", "web")
	d := task.Duration(time.Minute)
	delayed.RemovalDelay = &d
	if err := h.ctrl.Update(t.Context(), delayed); err != nil {
		t.Fatal(err)
	}
	h.noApply(t) // same desired state: nothing runs
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	testutil.WaitFor(t, "web-2's removal pending", func() bool {
		st, _ := h.ctrl.Task("a")
		return len(st.Removals) == 1 && st.Removals[0].ID == "web-2.n1.dc1"
	})
	h.noApply(t)

	if err := h.ctrl.Update(t.Context(), servicesTask("a", "web")); err != nil {
		t.Fatal(err)
	}
	h.waitApplied(t, "a")
	if got := h.rec.last("a").Services; len(got) != 1 {
		t.Errorf("inputs once the delay is gone: %+v", got)
	}
	if st, _ := h.ctrl.Task("a"); len(st.Removals) != 0 {
		t.Errorf("removals still pending: %+v", st.Removals)
	}
}
