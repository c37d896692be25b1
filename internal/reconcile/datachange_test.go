package reconcile

import (
	"context"
	"sync"
	"testing"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// refreshDriver is the fake driver reporting, as the terraform driver
// under the refresh policy "auto" does, a run marked DataChange as applied
// without refresh; it keeps the marks it was given.
type refreshDriver struct {
	*fakeDriver
	mu    *sync.Mutex
	marks *[]bool
}

func (d refreshDriver) Apply(ctx context.Context, run driver.Run, in *task.Inputs) (driver.Result, error) {
	d.mu.Lock()
	*d.marks = append(*d.marks, run.DataChange)
	d.mu.Unlock()
	res, err := d.fakeDriver.Apply(ctx, run, in)
	res.Refresh = "full"
	if run.DataChange {
		res.Refresh = "skipped"
		res.Targeted = "targeted 1 of 2 resource instances; full check: no further changes"
	}
	return res, err
}

// A run triggered by a change of the task's Consul data alone is marked
// driver.Run.DataChange; a run now and a run of new settings are not. The
// driver's refresh report and its targeted note reach the run's event.
func TestRunsOfADataChangeAreMarked(t *testing.T) {
	var mu sync.Mutex
	var marks []bool
	h := start(t, 2, nil, servicesTask("a", "web"), func(o *Options) {
		next := o.NewDriver
		o.NewDriver = func(s task.Spec) (driver.Driver, error) {
			d, err := next(s)
			if err != nil {
				return nil, err
			}
			return refreshDriver{fakeDriver: d.(*fakeDriver), mu: &mu, marks: &marks}, nil
		}
	})
	lastMark := func(n int) bool {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if len(marks) != n {
			t.Fatalf("%d applies, want %d", len(marks), n)
		}
		return marks[n-1]
	}
	lastEvent := func(n int) store.Event {
		t.Helper()
		testutil.WaitFor(t, "the run's event", func() bool { return len(h.st.Events("a")) == n })
		return h.st.Events("a")[0]
	}
	lastRefresh := func(n int) string {
		t.Helper()
		ev := lastEvent(n)
		if want := map[bool]string{true: "targeted 1 of 2 resource instances; full check: no further changes"}[ev.Refresh == "skipped"]; ev.Targeted != want {
			t.Errorf("run %d (refresh %q): event targeted %q, want %q", n, ev.Refresh, ev.Targeted, want)
		}
		return ev.Refresh
	}

	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h.waitApplied(t, "a")
	lastMark(1) // the first run reads every object whatever its mark (the driver's first run)
	lastRefresh(1)

	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web"), inst("web-2", "web")})
	h.waitApplied(t, "a")
	if m, r := lastMark(2), lastRefresh(2); !m || r != "skipped" {
		t.Errorf("catalog change: marked as a data change %v, event refresh %q", m, r)
	}

	testutil.WaitFor(t, "the task settled", h.ctrl.Settled)
	if err := h.ctrl.RunNow(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	h.waitApplied(t, "a")
	if m, r := lastMark(3), lastRefresh(3); m || r != "full" {
		t.Errorf("run now: marked as a data change %v, event refresh %q", m, r)
	}

	changed := servicesTask("a", "web")
	changed.Variables = map[string]string{"size": "2"}
	if err := h.ctrl.Update(t.Context(), changed); err != nil {
		t.Fatal(err)
	}
	h.waitApplied(t, "a")
	if m, r := lastMark(4), lastRefresh(4); m || r != "full" {
		t.Errorf("new settings: marked as a data change %v, event refresh %q", m, r)
	}
}

func TestDataChangeDecision(t *testing.T) {
	change := Trigger{Kind: TriggerChange, Detail: "health.service(web)"}
	for _, c := range []struct {
		req     Request
		trigger string
		want    bool
	}{
		{Request{Trigger: change}, change.String(), true},
		{Request{Trigger: change, Force: true}, change.String(), false},
		{Request{Trigger: change}, "module changed", false},
		{Request{Trigger: Due(TriggerRetry)}, "retry", false},
		{Request{Trigger: Due(TriggerStart)}, "start", false},
		{Request{Trigger: Due(TriggerAPI)}, "api", false},
		{Request{Trigger: Due(TriggerDrift)}, "drift", false},
	} {
		if got := dataChange(c.req, c.trigger); got != c.want {
			t.Errorf("dataChange(%+v, %q) = %v, want %v", c.req, c.trigger, got, c.want)
		}
	}
}
