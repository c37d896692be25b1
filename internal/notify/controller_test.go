package notify

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/reconcile/reconciletest"
	"github.com/ctsync/ctsync/internal/testutil"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/watch"
)

// failingDriver fails every apply at once.
type failingDriver struct{}

func (failingDriver) Init(context.Context) error { return nil }
func (failingDriver) Plan(context.Context, driver.Run, *task.Inputs) (driver.Result, error) {
	return driver.Result{}, nil
}
func (failingDriver) Apply(context.Context, driver.Run, *task.Inputs) (driver.Result, error) {
	return driver.Result{}, errors.New("Error: the module always fails")
}
func (failingDriver) Forget(context.Context) error { return nil }
func (failingDriver) Destroy(context.Context, driver.Run) (driver.Result, error) {
	return driver.Result{}, nil
}

// While the only webhook hangs on every request, the controller keeps
// running the task on every change: each failed run is recorded at once,
// and the notifications queue up (and drop) behind the hanging webhook.
func TestRunsProceedWhileWebhookHangs(t *testing.T) {
	release := make(chan struct{})
	hang := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int32) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)

	st := store.NewMemory(100)
	m := newCounts()
	n := webhook("stuck", hang.URL)
	n.Timeout = time.Hour // only the test's end releases it
	d := start(t, Options{Notifications: []config.Notification{n}, Store: st, Metrics: m, QueueSize: 3})

	w := reconciletest.NewWatcher()
	spec := task.Spec{Name: "web", Module: "./m", Enabled: true, BufferPeriod: &task.BufferPeriod{},
		Condition: task.Condition{Services: &task.ServicesCondition{
			ServicesSelector: task.ServicesSelector{Names: []string{"web"}}, UseAsModuleInput: true}}}
	ctrl := reconcile.New(reconcile.Options{Watcher: w, Store: st, MaxRetries: -1, OnEvent: d.OnEvent,
		NewDriver: func(task.Spec) (driver.Driver, error) { return failingDriver{}, nil }}, []task.Spec{spec})
	w.Notify = ctrl.Notify
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = ctrl.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	key := watch.HealthService("web", watch.ServiceOptions{}).Key()
	const changes = 20
	begin := time.Now()
	for i := range changes {
		w.Set(key, []task.Service{{ID: fmt.Sprintf("web-%d", i), Name: "web", Node: "n1", NodeDatacenter: "dc1", Status: "passing"}})
		want := i + 1
		testutil.WaitFor(t, fmt.Sprintf("run %d recorded", want), func() bool { return len(st.Events("web")) >= want })
	}
	el := time.Since(begin)
	if el > testutil.Scale(5*time.Second) { // the webhook hangs for an hour
		t.Errorf("%d runs took %s while the webhook hangs", changes, el)
	}
	for _, ev := range st.Events("web") {
		if ev.Success {
			t.Fatalf("unexpected success: %+v", ev)
		}
	}
	// One notification hangs in flight; of the others only the 3 newest
	// wait, the older ones were dropped.
	testutil.WaitFor(t, "a request to reach the webhook", func() bool { return hang.calls.Load() == 1 })
	if dropped, queued := m.get(m.dropped, "stuck"), d.Len(); queued != 3 || dropped+queued != changes-1 {
		t.Errorf("%d dropped, %d queued; want %d and 3", dropped, queued, changes-1-3)
	}
	// Every notification is accounted for (dropped, queued, or the one in
	// flight): no second request was sent.
	if c := hang.calls.Load(); c != 1 {
		t.Errorf("%d requests reached the hanging webhook, want 1", c)
	}
	t.Logf("%d failed runs in %s with the webhook hanging", changes, el.Round(time.Millisecond))
}
