package reconcile

import (
	"context"
	"sync"
	"testing"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// checkRun is what the fake driver of the check tests was asked: the run's
// marks and how many instances it applied.
type checkRun struct {
	dataChange, deferCheck, check bool
	instances                     int
}

// checkDriver is the fake driver that, as the terraform driver does for a
// targeted data change whose full check is deferred, reports a check due
// for every run marked DeferCheck.
type checkDriver struct {
	*fakeDriver
	mu   *sync.Mutex
	runs *[]checkRun
}

func (d checkDriver) Apply(ctx context.Context, run driver.Run, in *task.Inputs) (driver.Result, error) {
	d.mu.Lock()
	*d.runs = append(*d.runs, checkRun{run.DataChange, run.DeferCheck, run.Check, len(in.Services)})
	d.mu.Unlock()
	res, err := d.fakeDriver.Apply(ctx, run, in)
	res.CheckDue = run.DeferCheck
	switch {
	case run.DeferCheck:
		res.Targeted = "targeted ...; full check: pending"
	case run.Check:
		res.Targeted = "full check: no further changes"
	}
	return res, err
}

// silentWatcher is the test watcher whose values can be replaced without
// notifying anyone: the task reads them at its next run.
type silentWatcher struct {
	*fakeWatcher
	mu     sync.Mutex
	values map[string]any
}

func (w *silentWatcher) Get(key string) (any, uint64, bool) {
	w.mu.Lock()
	v, ok := w.values[key]
	w.mu.Unlock()
	if ok {
		return v, 2, true
	}
	return w.fakeWatcher.Get(key)
}

func (w *silentWatcher) setSilently(key string, v any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.values[key] = v
}

func startCheck(t *testing.T, opts ...func(*Options)) (*harness, func() []checkRun) {
	var mu sync.Mutex
	var runs []checkRun
	h := start(t, 2, nil, servicesTask("a", "web"), func(o *Options) {
		for _, f := range opts {
			f(o)
		}
		next := o.NewDriver
		o.NewDriver = func(s task.Spec) (driver.Driver, error) {
			d, err := next(s)
			if err != nil {
				return nil, err
			}
			return checkDriver{fakeDriver: d.(*fakeDriver), mu: &mu, runs: &runs}, nil
		}
	})
	return h, func() []checkRun {
		mu.Lock()
		defer mu.Unlock()
		return append([]checkRun(nil), runs...)
	}
}

// A data change whose run leaves its full check due (driver.Result.CheckDue)
// is followed by a run of its own with driver.Run.Check, recorded with the
// trigger "check", although the desired state is the one applied; a change
// that comes before the check starts runs first (a data change again,
// whose check is due again), and the check runs once after it. Then the
// task is settled.
func TestCheckDueRunsAfterNewerChange(t *testing.T) {
	h, runs := startCheck(t)
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h.waitApplied(t, "a") // the first run

	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web"), inst("web-2", "web")})
	h.waitApplied(t, "a") // the data change: its check is due
	// A newer change within CheckDelay: it runs before the check.
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web"), inst("web-2", "web"), inst("web-3", "web")})
	h.waitApplied(t, "a")
	h.waitApplied(t, "a") // the check
	testutil.WaitFor(t, "the task settled", h.ctrl.Settled)

	got := runs()
	want := []checkRun{
		{instances: 1}, // whatever its marks
		{dataChange: true, deferCheck: true, instances: 2},
		{dataChange: true, deferCheck: true, instances: 3},
		{check: true, instances: 3},
	}
	if len(got) != len(want) {
		t.Fatalf("runs %+v, want %+v", got, want)
	}
	for i := 1; i < len(want); i++ {
		if got[i] != want[i] {
			t.Errorf("run %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	evs := h.st.Events("a") // newest first
	if len(evs) != 4 || evs[0].Trigger != "check" || !evs[0].Success ||
		evs[0].DetectedAt != nil || evs[1].Trigger == "check" {
		t.Fatalf("events: %+v", evs)
	}
}

// A task disabled while its check waits drops it: enabled again with its
// desired state unchanged, it does not run.
func TestCheckDueDroppedWhenDisabled(t *testing.T) {
	h, runs := startCheck(t)
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h.waitApplied(t, "a")
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web"), inst("web-2", "web")})
	h.waitApplied(t, "a") // its check is due
	// Disabled once the run has ended (a running task refuses it), before
	// the check starts.
	testutil.WaitFor(t, "the task disabled", func() bool {
		_, err := h.ctrl.SetEnabled(t.Context(), "a", false, EnableFlag)
		return err == nil
	})
	if _, err := h.ctrl.SetEnabled(t.Context(), "a", true, EnableFlag); err != nil {
		t.Fatal(err)
	}
	h.noApply(t)
	if n := len(runs()); n != 2 {
		t.Fatalf("%d runs, want 2", n)
	}
}

// A check whose task's desired state moved since the targeted run, with no
// notification of it (a change seen only when the check reads the data),
// runs as that data change (targeted, its check deferred again), and the
// check runs after it.
func TestCheckDueDesiredStateMoved(t *testing.T) {
	var w *silentWatcher
	h, runs := startCheck(t, func(o *Options) {
		w = &silentWatcher{fakeWatcher: o.Watcher.(*fakeWatcher), values: map[string]any{}}
		o.Watcher = w
	})
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h.waitApplied(t, "a")
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web"), inst("web-2", "web")})
	h.waitApplied(t, "a") // its check is due
	w.setSilently(healthKey("web"), []task.Service{inst("web-1", "web"), inst("web-2", "web"), inst("web-3", "web")})
	h.waitApplied(t, "a") // the check found the change
	h.waitApplied(t, "a") // the check
	testutil.WaitFor(t, "the task settled", h.ctrl.Settled)
	got := runs()
	want := []checkRun{{dataChange: true, deferCheck: true, instances: 3}, {check: true, instances: 3}}
	if len(got) != 4 || got[2] != want[0] || got[3] != want[1] {
		t.Fatalf("runs %+v, want the last two %+v", got, want)
	}
	if evs := h.st.Events("a"); evs[0].Trigger != "check" || evs[1].Trigger == "check" {
		t.Fatalf("triggers %q, %q; runs %+v", evs[0].Trigger, evs[1].Trigger, got)
	}
}
