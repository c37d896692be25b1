package reconcile

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// lockedDriver fails its first `locked` applies because the state is
// locked, then succeeds.
type lockedDriver struct {
	locked  atomic.Int32
	applies atomic.Int32
	done    chan bool // one value per apply: success
}

func (d *lockedDriver) Init(context.Context) error { return nil }
func (d *lockedDriver) Plan(context.Context, driver.Run, *task.Inputs) (driver.Result, error) {
	return driver.Result{}, nil
}
func (d *lockedDriver) Forget(context.Context) error { return nil }
func (d *lockedDriver) Destroy(context.Context, driver.Run) (driver.Result, error) {
	return driver.Result{}, nil
}
func (d *lockedDriver) Apply(context.Context, driver.Run, *task.Inputs) (driver.Result, error) {
	d.applies.Add(1)
	if d.locked.Add(-1) >= 0 {
		d.done <- false
		return driver.Result{}, &driver.Error{Op: "apply", Summary: "the Terraform state is locked by another process",
			Err: fmt.Errorf("%w: exit status 1", driver.ErrStateLocked)}
	}
	d.done <- true
	return driver.Result{Add: 1, Changes: true}, nil
}

// A run that fails on a locked state is retried past MaxRetries, until the
// lock is free, without any new change; other failures still stop after
// MaxRetries (TestFailedApplyRetriesThenWaits).
func TestStateLockedRetriesUntilFree(t *testing.T) {
	d := &lockedDriver{done: make(chan bool, 100)}
	d.locked.Store(6) // three times the retries of an ordinary failure
	h := start(t, 2, nil, servicesTask("a", "web"), func(o *Options) {
		o.NewDriver = func(task.Spec) (driver.Driver, error) { return d, nil }
	})
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	for i := 0; ; i++ {
		select {
		case ok := <-d.done:
			if ok {
				if i != 6 {
					t.Fatalf("succeeded after %d failures, want 6", i)
				}
				testutil.WaitFor(t, "the 7 events", func() bool { return len(h.ctrl.Events("a")) >= 7 })
				evs := h.ctrl.Events("a")
				if len(evs) != 7 || !evs[0].Success || evs[1].Success || evs[1].Trigger != "retry" {
					t.Fatalf("events: %+v", evs)
				}
				return
			}
		case <-time.After(testutil.Scale(10 * time.Second)):
			t.Fatalf("no run after %d failures on a locked state", i)
		}
	}
}
