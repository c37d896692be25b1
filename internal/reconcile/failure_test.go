package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/reconcile/reconciletest"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// scripted is a driver whose applies fail with whatever err holds at the
// time; every apply is reported on runs with its services.
type scripted struct {
	mu   sync.Mutex
	err  error
	runs chan []string
}

func newScripted() *scripted { return &scripted{runs: make(chan []string, 100)} }

func (d *scripted) fail(err error) { d.mu.Lock(); d.err = err; d.mu.Unlock() }

func (d *scripted) Init(context.Context) error { return nil }
func (d *scripted) Plan(context.Context, driver.Run, *task.Inputs) (driver.Result, error) {
	return driver.Result{}, nil
}
func (d *scripted) Forget(context.Context) error { return nil }
func (d *scripted) Destroy(context.Context, driver.Run) (driver.Result, error) {
	return driver.Result{}, nil
}
func (d *scripted) Apply(_ context.Context, _ driver.Run, in *task.Inputs) (driver.Result, error) {
	d.mu.Lock()
	err := d.err
	d.mu.Unlock()
	var ids []string
	for _, s := range in.Services {
		ids = append(ids, s.ID)
	}
	d.runs <- ids
	if err != nil {
		return driver.Result{}, err
	}
	return driver.Result{Add: 1, Changes: true}, nil
}

func (d *scripted) waitRun(t *testing.T) []string {
	t.Helper()
	select {
	case ids := <-d.runs:
		return ids
	case <-time.After(testutil.Scale(10 * time.Second)):
		t.Fatal("no run")
		return nil
	}
}

// idle waits until the task is neither running nor queued: the controller
// has finished with it (a positive signal, not a sleep).
func idle(t *testing.T, h *harness, name string) {
	t.Helper()
	testutil.WaitFor(t, name+" to be idle", func() bool {
		st, err := h.ctrl.Task(name)
		return err == nil && !st.Active
	})
}

// retries are the fake clock's pending delays other than the hour the
// schedule and drift loops sleep with nothing to do: the retry timers.
func retries(clk *reconciletest.Clock) []time.Duration {
	var out []time.Duration
	for _, d := range clk.Pending() {
		if d < time.Hour {
			out = append(out, d)
		}
	}
	return out
}

// waitRetry waits until a retry timer is pending.
func waitRetry(clk *reconciletest.Clock) bool {
	deadline := time.Now().Add(testutil.Scale(10 * time.Second))
	for len(retries(clk)) == 0 {
		if time.Now().After(deadline) {
			return false
		}
		clk.WaitPending(len(clk.Pending())+1, 10*time.Millisecond)
	}
	return true
}

func withDriver(d driver.Driver) func(*Options) {
	return func(o *Options) { o.NewDriver = func(task.Spec) (driver.Driver, error) { return d, nil } }
}

// The delay before each retry doubles from the base up to the cap, with
// at most a quarter taken off at random.
func TestRetryDelay(t *testing.T) {
	base, capD := 2*time.Second, 5*time.Minute
	for attempt, want := range map[int]time.Duration{1: 2 * time.Second, 2: 4 * time.Second, 3: 8 * time.Second,
		8: 256 * time.Second, 9: capD, 40: capD, 100: capD} {
		p := retryPolicy(base, capD)
		if got := p.Step(attempt); got != want {
			t.Errorf("attempt %d: %s, want %s", attempt, got, want)
		}
		if got := p.Delay(attempt); got < want*3/4 || got > want {
			t.Errorf("attempt %d with jitter: %s, want within [%s, %s]", attempt, got, want*3/4, want)
		}
	}
}

// A failing run is retried with exponential backoff, forever by default,
// until a run succeeds; the fake clock shows every delay, no sleeps.
func TestFailedRunRetriesWithBackoffUntilSuccess(t *testing.T) {
	clk := reconciletest.NewClock()
	d := newScripted()
	d.fail(errors.New("provider unreachable"))
	h := start(t, 2, nil, servicesTask("a", "web"), withDriver(d), func(o *Options) {
		o.Clock, o.RetryBase, o.RetryMax = clk, time.Second, 10*time.Second
	})
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	d.waitRun(t)
	var seen []time.Duration
	for len(seen) < 7 {
		if !waitRetry(clk) {
			t.Fatalf("after %d failures: no retry scheduled", len(h.st.Events("a")))
		}
		idle(t, h, "a")
		failures := len(h.st.Events("a"))
		w := min(time.Second<<(failures-1), 10*time.Second)
		p := retries(clk)
		if len(p) != 1 || p[0] > w || p[0] < w*3/4 {
			t.Fatalf("after %d failures: pending delays %v, want one in [%s, %s]", failures, p, w*3/4, w)
		}
		seen = append(seen, w)
		if len(seen) == 7 {
			d.fail(nil)
		}
		clk.Advance(p[0])
		d.waitRun(t)
	}
	if seen[len(seen)-1] != 10*time.Second {
		t.Fatalf("delays %v never reached the cap", seen)
	}
	idle(t, h, "a")
	testutil.WaitFor(t, "the success to be recorded", func() bool { return !h.st.Run("a").Dirty() })
	if p := retries(clk); len(p) != 0 {
		t.Fatalf("retries still scheduled after a success: %v", p)
	}
	evs := h.st.Events("a")
	if !evs[0].Success || evs[1].Success || evs[1].Trigger != "retry" {
		t.Fatalf("events: %d, newest %+v", len(evs), evs[0])
	}
}

// The partial-failure scenario: a run fails after changing some of the
// infrastructure, then the catalog goes back to the value of the last
// successful run. The task is dirty, so it runs again (CTS would too).
func TestFailureIsNotHiddenByARevert(t *testing.T) {
	clk := reconciletest.NewClock() // retries never fire: the revert alone must run it
	d := newScripted()
	h := start(t, 2, nil, servicesTask("a", "web"), withDriver(d), func(o *Options) { o.Clock = clk })
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	d.waitRun(t)
	idle(t, h, "a")
	applied := h.st.Run("a").Applied

	d.fail(errors.New("second resource failed"))
	h.w.Set(healthKey("web"), []task.Service{inst("web-2", "web")})
	d.waitRun(t)
	idle(t, h, "a")
	if st := h.st.Run("a"); !st.Dirty() || st.Applied != applied {
		t.Fatalf("after the failure: %+v (want dirty, last success kept)", st)
	}

	d.fail(nil)
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")}) // back to the applied value
	if ids := d.waitRun(t); len(ids) != 1 || ids[0] != "web-1" {
		t.Fatalf("revert ran with %v", ids)
	}
	idle(t, h, "a")
	if st := h.st.Run("a"); st.Dirty() || st.Applied != applied {
		t.Fatalf("after the revert: %+v, want clean with the first fingerprint", st)
	}
	if evs := h.st.Events("a"); evs[0].Trigger != healthKey("web") {
		t.Fatalf("revert trigger %q", evs[0].Trigger)
	}
}

// A terminal error is recorded as such and not retried; the next change of
// the desired state runs the task again.
func TestTerminalFailureWaitsForAChange(t *testing.T) {
	clk := reconciletest.NewClock()
	d := newScripted()
	d.fail(&driver.Error{Op: "plan", Summary: "Error: Unsupported argument", Terminal: true})
	h := start(t, 2, nil, servicesTask("a", "web"), withDriver(d), func(o *Options) { o.Clock = clk })
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	d.waitRun(t)
	idle(t, h, "a")
	if p := retries(clk); len(p) != 0 {
		t.Fatalf("a terminal failure scheduled retries: %v", p)
	}
	st := h.st.Run("a")
	evs := h.st.Events("a")
	if !st.Terminal || !st.Dirty() || len(evs) != 1 || !evs[0].Terminal {
		t.Fatalf("run state %+v, events %+v", st, evs)
	}
	// Becoming active again (a start, a new leadership) re-evaluates the
	// task: the same desired state is not run again.
	h.ctrl.SetActive(false)
	h.ctrl.SetActive(true)
	idle(t, h, "a")
	if n := len(h.st.Events("a")); n != 1 {
		t.Fatalf("%d runs after re-evaluation, want still 1", n)
	}
	d.fail(nil)
	h.w.Set(healthKey("web"), []task.Service{inst("web-2", "web")})
	d.waitRun(t)
	idle(t, h, "a")
	testutil.WaitFor(t, "the success", func() bool { return !h.st.Run("a").Dirty() })
}

// Each part of the desired state outside the task and Consul (module,
// provider config, ...) makes the task run once when it changes, and the
// run's trigger names it; nothing changed, nothing runs.
func TestDesiredStatePartsTriggerOneRun(t *testing.T) {
	var mu sync.Mutex
	parts := map[string]string{driver.PartModule: "m1", driver.PartProviders: "p1", driver.PartBinary: "b1"}
	desired := func(context.Context, task.Spec) (map[string]string, error) {
		mu.Lock()
		defer mu.Unlock()
		return map[string]string{driver.PartModule: parts[driver.PartModule], driver.PartProviders: parts[driver.PartProviders], driver.PartBinary: parts[driver.PartBinary]}, nil
	}
	d := newScripted()
	h := start(t, 2, nil, servicesTask("a", "web"), withDriver(d), func(o *Options) { o.Desired = desired })
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	d.waitRun(t)
	idle(t, h, "a")
	restart := func() { h.ctrl.SetActive(false); h.ctrl.SetActive(true); idle(t, h, "a") }
	restart()
	if n := len(h.st.Events("a")); n != 1 {
		t.Fatalf("nothing changed, yet %d runs", n)
	}
	for _, c := range []struct{ part, trigger string }{
		{driver.PartModule, "module changed"}, {driver.PartProviders, "provider config changed"}, {driver.PartBinary, "binary changed"},
	} {
		mu.Lock()
		parts[c.part] += "'"
		mu.Unlock()
		before := len(h.st.Events("a"))
		restart()
		d.waitRun(t)
		idle(t, h, "a")
		evs := h.st.Events("a")
		if len(evs) != before+1 || evs[0].Trigger != c.trigger {
			t.Fatalf("%s changed: %d new runs, trigger %q, want 1 run triggered by %q", c.part, len(evs)-before, evs[0].Trigger, c.trigger)
		}
		restart()
		if n := len(h.st.Events("a")); n != before+1 {
			t.Fatalf("%s: ran again with nothing changed", c.part)
		}
	}
}

// A desired state that cannot be read (a module directory that vanished)
// is an error event naming what, and the task stays dirty and is retried.
func TestUnreadableDesiredStateIsAnErrorEvent(t *testing.T) {
	clk := reconciletest.NewClock()
	var mu sync.Mutex
	missing := true
	desired := func(context.Context, task.Spec) (map[string]string, error) {
		mu.Lock()
		defer mu.Unlock()
		if missing {
			return nil, fmt.Errorf("module: reading /srv/modules/lb: no such file or directory")
		}
		return map[string]string{driver.PartModule: "m"}, nil
	}
	d := newScripted()
	h := start(t, 2, nil, servicesTask("a", "web"), withDriver(d), servicesTask("b", "db"), func(o *Options) {
		o.Desired = func(ctx context.Context, s task.Spec) (map[string]string, error) {
			if s.Name == "b" {
				return nil, nil
			}
			return desired(ctx, s)
		}
		o.Clock = clk
	})
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	testutil.WaitFor(t, "an error event", func() bool { return len(h.st.Events("a")) >= 1 })
	ev := h.st.Events("a")[0]
	if ev.Success || ev.Error == nil || !strings.Contains(ev.Error.Message, "/srv/modules/lb") || !h.st.Run("a").Dirty() {
		t.Fatalf("event %+v, run state %+v", ev, h.st.Run("a"))
	}
	// Nothing else stops: another task still runs.
	h.w.Set(healthKey("db"), []task.Service{inst("db-1", "db")})
	d.waitRun(t)
	// The retry is scheduled (a change during the failing run may have
	// made it run once more first); then the module comes back.
	if !waitRetry(clk) {
		t.Fatal("no retry scheduled")
	}
	mu.Lock()
	missing = false
	mu.Unlock()
	clk.Advance(time.Hour)
	d.waitRun(t)
	testutil.WaitFor(t, "a clean task", func() bool { return !h.st.Run("a").Dirty() && h.st.Run("a").Applied != "" })
}

// The outcome is written once, with the event, and a store that refuses
// the write (this instance no longer leads) does not turn the run into a
// success: the in-flight marker stays for the next leader.
func TestRunNotSuccessfulUntilRecorded(t *testing.T) {
	d := newScripted()
	st := &refusingStore{Memory: store.NewMemory(0)}
	h := start(t, 2, nil, servicesTask("a", "web"), withDriver(d), func(o *Options) { o.Store = st; o.MaxRetries = -1 })
	st.refuse.Store(true)
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	d.waitRun(t)
	idle(t, h, "a")
	if got := st.Run("a"); got.InFlight == "" || got.Applied != "" {
		t.Fatalf("run state after an unrecorded run: %+v (want the in-flight marker kept, nothing applied)", got)
	}
	if n := len(st.Events("a")); n != 0 {
		t.Fatalf("%d events recorded although the store refused the outcome", n)
	}
}

// refusingStore refuses run outcomes while refuse is set, as a fenced
// Consul store does once another instance leads.
type refusingStore struct {
	*store.Memory
	refuse atomic.Bool
}

func (s *refusingStore) FinishRun(ctx context.Context, name string, st store.RunState, ev *store.Event) error {
	if s.refuse.Load() {
		return store.ErrNotLeader
	}
	return s.Memory.FinishRun(ctx, name, st, ev)
}

// A task that waits (ErrWaiting: a provider waiting for Vault) is not a
// failed run: no event, not dirty; its status says why, and it runs once
// the cause is gone and it is notified.
func TestWaitingIsNotAFailure(t *testing.T) {
	clk := reconciletest.NewClock()
	var mu sync.Mutex
	waiting := true
	d := newScripted()
	h := start(t, 2, nil, servicesTask("a", "web"), withDriver(d), func(o *Options) {
		o.Clock = clk
		o.Desired = func(context.Context, task.Spec) (map[string]string, error) {
			mu.Lock()
			defer mu.Unlock()
			if waiting {
				return nil, fmt.Errorf("%w: terraform_provider \"aws\" is waiting for Vault: connection refused", ErrWaiting)
			}
			return map[string]string{driver.PartProviders: "p"}, nil
		}
	})
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	testutil.WaitFor(t, "the task's status to say it waits", func() bool {
		st, _ := h.ctrl.Task("a")
		return strings.Contains(st.Waiting, "waiting for Vault")
	})
	idle(t, h, "a")
	if evs := h.st.Events("a"); len(evs) != 0 || h.st.Run("a").Dirty() {
		t.Fatalf("waiting recorded a run: %+v, dirty=%v", evs, h.st.Run("a").Dirty())
	}
	mu.Lock()
	waiting = false
	mu.Unlock()
	h.ctrl.Notify("a", "vault") // the secrets loop does this when Vault answers
	d.waitRun(t)
	testutil.WaitFor(t, "a clean success", func() bool { return h.st.Run("a").Applied != "" })
	if st, _ := h.ctrl.Task("a"); st.Waiting != "" {
		t.Fatalf("still waiting: %q", st.Waiting)
	}
}
