package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
	"github.com/ctsync/ctsync/internal/watch"
)

// apiRun measures GET /v1/status/tasks with 200 tasks while tasks run: a
// real Consul, the real registry, controller and API server on loopback; a
// stream of catalog changes keeps tasks applying (200 ms simulated applies,
// 4 at a time); 8 clients request the endpoint back to back for 15 s.
func apiRun(t *testing.T, res *results) {
	c := testutil.StartConsul(t)
	cat := loadCatalog(t, c, 20, 10)
	client, _ := instrumentedClient(t, c.Addr)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	var specs []task.Spec
	for k := 0; k < 200; k++ {
		specs = append(specs, task.Spec{Name: fmt.Sprintf("t%03d", k), Module: "./m", Enabled: true,
			BufferPeriod: &task.BufferPeriod{},
			Condition: task.Condition{Services: &task.ServicesCondition{
				ServicesSelector: task.ServicesSelector{Names: taskWindow(k, 1, 20)}, UseAsModuleInput: true}}})
	}
	stamps := make(chan applyStamp, 100000)
	var ctrl *reconcile.Controller
	reg := watch.NewRegistry(client, logger, func(s, k string) { ctrl.Notify(s, k) })
	ctrl = reconcile.New(reconcile.Options{Watcher: reg, Logger: logger, MaxParallel: 4, Store: store.NewMemory(0),
		NewDriver: func(s task.Spec) (driver.Driver, error) {
			return &simDriver{name: s.Name, out: stamps, delay: 200 * time.Millisecond}, nil
		}}, specs)
	srv, err := api.New(api.Options{Addr: "127.0.0.1:0", Controller: ctrl, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = reg.Run(ctx) })
	wg.Go(func() { _ = ctrl.Run(ctx) })
	wg.Go(func() { _ = srv.Run(ctx) })
	wg.Go(func() { // drain apply stamps
		for {
			select {
			case <-stamps:
			case <-ctx.Done():
				return
			}
		}
	})
	defer func() { cancel(); wg.Wait() }()
	// Keep tasks busy: one change every 50 ms, rotating over the services.
	wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for k := 0; ; k++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				// A health flip of one instance, down and up again.
				if err := cat.tryChange(k%20, 4*(k/20)); err != nil {
					t.Error(err)
					return
				}
				if err := cat.tryChange(k%20, 4*(k/20)+1); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})
	url := "http://" + srv.Addr() + "/v1/status/tasks"
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	var mu sync.Mutex
	var lat []time.Duration
	errs := 0
	end := time.Now().Add(15 * time.Second)
	var clients sync.WaitGroup
	for w := 0; w < 8; w++ {
		clients.Go(func() {
			for time.Now().Before(end) {
				begin := time.Now()
				resp, err := hc.Get(url)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				d := time.Since(begin)
				mu.Lock()
				if err != nil || resp.StatusCode != 200 {
					errs++
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
			}
		})
	}
	clients.Wait()
	if errs > 0 {
		t.Errorf("%d failed requests", errs)
	}
	params := fmt.Sprintf("200 tasks running (4 at a time, 200 ms applies, 40 changes/s), 8 clients, %d requests in 15 s", len(lat))
	res.add("API under load", params, "GET /v1/status/tasks p50", ms(percentile(lat, 0.5)), "ms", "")
	res.add("API under load", params, "GET /v1/status/tasks p99", ms(percentile(lat, 0.99)), "ms", "< 20")
}
