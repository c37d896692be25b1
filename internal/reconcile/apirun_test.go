package reconcile

import (
	"context"
	"testing"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// ctxDriver applies until released, and fails if its context ends first.
type ctxDriver struct {
	started chan struct{}
	release chan struct{}
}

func (d *ctxDriver) Init(context.Context) error { return nil }
func (d *ctxDriver) Plan(context.Context, driver.Run, *task.Inputs) (driver.Result, error) {
	return driver.Result{}, nil
}
func (d *ctxDriver) Forget(context.Context) error { return nil }
func (d *ctxDriver) Destroy(context.Context, driver.Run) (driver.Result, error) {
	return driver.Result{}, nil
}
func (d *ctxDriver) Apply(ctx context.Context, _ driver.Run, _ *task.Inputs) (driver.Result, error) {
	d.started <- struct{}{}
	select {
	case <-d.release:
		return driver.Result{Add: 1}, nil
	case <-ctx.Done():
		return driver.Result{}, ctx.Err()
	}
}

// An API client that disconnects does not interrupt the apply it started,
// and stopping the controller waits for that run.
func TestAPIRunOutlivesItsRequest(t *testing.T) {
	d := &ctxDriver{started: make(chan struct{}, 10), release: make(chan struct{})}
	s := servicesTask("a", "web")
	s.Enabled = false // only the API runs it
	h := start(t, 2, nil, s, withDriver(d))
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})

	reqCtx, disconnect := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- h.ctrl.RunNow(reqCtx, "a") }()
	<-d.started
	disconnect()
	// Stopping the controller now: it waits for the API's run.
	h.cancel()
	testutil.WaitFor(t, "the controller to refuse new API runs", func() bool {
		_, done, err := h.ctrl.apiRun(context.Background())
		if err == nil {
			done()
		}
		return err != nil
	})
	select {
	case <-h.done:
		t.Fatal("the controller stopped while a run started through the API was in progress")
	default:
	}
	close(d.release)
	if err := <-errc; err != nil {
		t.Fatalf("the run ended with %v after its client went away", err)
	}
	<-h.done
	if evs := h.st.Events("a"); len(evs) != 1 || !evs[0].Success {
		t.Fatalf("events %+v", evs)
	}
}

// A caller that waits gets the outcome of its own request: each run now
// is a request with the next generation of the task, and the caller waits
// until the task observed it.
func TestRunNowWaitsForItsGeneration(t *testing.T) {
	s := servicesTask("a", "web")
	s.Enabled = false // only the API runs it
	h := start(t, 2, nil, s)
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	for i, id := range []string{"run-1", "run-2"} {
		if err := h.ctrl.RunNow(WithRunID(context.Background(), id), "a"); err != nil {
			t.Fatal(err)
		}
		h.ctrl.mu.Lock()
		e := h.ctrl.tasks["a"]
		gen, observed, left := e.lc.reqGen, e.lc.observed, len(e.lc.results)
		h.ctrl.mu.Unlock()
		if gen != uint64(i+1) || observed != gen || left != 0 {
			t.Fatalf("after run now %d: generation %d, observed %d, %d outcomes kept; want %d, %d, 0", i+1, gen, observed, left, i+1, i+1)
		}
		if evs := h.st.Events("a"); len(evs) != i+1 || evs[0].ID != id {
			t.Fatalf("after run now %d: events %+v, want the newest with id %s", i+1, evs, id)
		}
	}
}
