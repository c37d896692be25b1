package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/api/testcerts"
	ctsconfig "github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/consul"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
	"github.com/ctsync/ctsync/internal/watch"
)

// Consul load does not grow with tasks: 100 tasks watching overlapping
// windows of 50 names out of 1,000 services (5,000 task × service pairs)
// hold one blocking query per DISTINCT query: 1,000. Measured in process
// with a real Consul agent, the real watch registry and controller, the
// production Consul client, and a driver that does nothing.
//
// Over plain HTTP/1.1 every blocking query in flight holds its own TCP
// connection, so 1,000 distinct queries would need ~1,000 connections from
// one client address, far above the agent's default
// limits.http_max_conns_per_client (200). Over TLS the client speaks HTTP/2
// and multiplexes the queries on a few connections: this test runs against
// an agent with the DEFAULT limit on its TLS port and requires everything
// to work. (The plain-HTTP numbers are measured by the scale harness.)
func TestCompatConsulLoadDistinctQueries(t *testing.T) {
	skipShort(t)
	if runtime.GOOS != "linux" {
		t.Skip("counts connections through /proc")
	}
	const (
		services = 1000
		tasks    = 100
		window   = 50 // names per task
		step     = 10 // window start of task i: i*step
	)
	specs := make([]task.Spec, tasks)
	distinct := map[string]bool{}
	for i := range specs {
		var names []string
		for j := 0; j < window; j++ {
			n := fmt.Sprintf("load-%04d", (i*step+j)%services)
			names = append(names, n)
			distinct[n] = true
		}
		specs[i] = task.Spec{Name: fmt.Sprintf("load-task-%03d", i), Module: "./m", Enabled: true,
			BufferPeriod: &task.BufferPeriod{},
			Condition: task.Condition{Services: &task.ServicesCondition{
				ServicesSelector: task.ServicesSelector{Names: names}, UseAsModuleInput: true}}}
	}

	certs := testcerts.Generate(t)
	httpsPort := testutil.FreePort(t)
	c := testutil.StartConsulWith(t, testutil.ConsulOptions{HCL: []string{
		fmt.Sprintf("ports { https = %d }", httpsPort),
		fmt.Sprintf("tls { defaults { ca_file = %q cert_file = %q key_file = %q } }", certs.CACert, certs.ServerCert, certs.ServerKey),
	}})
	registerLoadServices(t, c.Client, services)
	client, err := consul.NewClient(ctsconfig.Consul{Address: fmt.Sprintf("127.0.0.1:%d", httpsPort),
		TLS: ctsconfig.ConsulTLS{Enabled: true, Verify: true, CACert: certs.CACert}})
	if err != nil {
		t.Fatal(err)
	}
	// As the daemon does before its views start: one request opens the
	// HTTP/2 connection the views then share.
	if err := consul.WaitReady(context.Background(), client.Client, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	m := runLoad(t, client, specs, strconv.Itoa(httpsPort))
	t.Logf("LOAD (TLS/HTTP2, default http_max_conns_per_client=200): %d tasks, %d distinct queries -> %d views, "+
		"%d TCP connections to the agent, %d fetch errors, every task ran after %s; one service change -> %d notifications, %d runs",
		tasks, len(distinct), m.views, m.conns, m.fetchErrors, m.ready.Round(time.Millisecond), m.notifications, m.runsAfterChange)
	if m.views != len(distinct) {
		t.Errorf("%d views for %d distinct queries", m.views, len(distinct))
	}
	if m.fetchErrors != 0 {
		t.Errorf("%d fetch errors", m.fetchErrors)
	}
	if m.conns >= 200 {
		t.Errorf("%d connections to the agent: not under its default per-client limit of 200", m.conns)
	}
	// One changed service reaches only the tasks that watch it.
	if m.notifications != window/step || m.runsAfterChange != window/step || !slices.Equal(m.ran, m.watchers) {
		t.Errorf("one change: %d notifications, %d runs of %v; want %d, of the tasks watching that service %v",
			m.notifications, m.runsAfterChange, m.ran, window/step, m.watchers)
	}
}

type loadResult struct {
	views, conns               int
	fetchErrors, notifications uint64
	runsAfterChange            int
	ready                      time.Duration
	// watchers are the tasks watching the changed service; ran, the tasks
	// that ran after the change.
	watchers, ran []string
}

// countingDriver counts applies per task and does nothing else.
type countingDriver struct {
	name  string
	count *sync.Map // task name -> *atomic.Int64
}

func (d *countingDriver) Init(context.Context) error { return nil }
func (d *countingDriver) Plan(context.Context, driver.Run, *task.Inputs) (driver.Result, error) {
	return driver.Result{}, nil
}
func (d *countingDriver) Forget(context.Context) error { return nil }
func (d *countingDriver) Destroy(context.Context, driver.Run) (driver.Result, error) {
	return driver.Result{}, nil
}
func (d *countingDriver) Apply(context.Context, driver.Run, *task.Inputs) (driver.Result, error) {
	v, _ := d.count.LoadOrStore(d.name, &atomic.Int64{})
	v.(*atomic.Int64).Add(1)
	return driver.Result{}, nil
}

// runLoad runs the controller over specs until every task ran once, then
// changes one service and counts who hears of it.
func runLoad(t *testing.T, client *consul.Client, specs []task.Spec, agentPort string) loadResult {
	t.Helper()
	counts := &sync.Map{}
	var ctrl *reconcile.Controller
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	registry := watch.NewRegistry(client, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), func(s, k string) { ctrl.Notify(s, k) })
	ctrl = reconcile.New(reconcile.Options{Watcher: registry, Logger: logger, MaxParallel: 8,
		NewDriver: func(s task.Spec) (driver.Driver, error) { return &countingDriver{name: s.Name, count: counts}, nil }}, specs)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = registry.Run(ctx) })
	wg.Go(func() { _ = ctrl.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	total := func() (tasks int, runs int64) {
		counts.Range(func(_, v any) bool { tasks++; runs += v.(*atomic.Int64).Load(); return true })
		return tasks, runs
	}
	var m loadResult
	start := time.Now()
	// The starting state is settled before the change: every task ran
	// once, every view answered, every task heard of each of its queries
	// (the first answer notifies each subscriber once) and the controller
	// handled all of it. Counting from an earlier moment would count what
	// is left of the start as the change's doing.
	pairs := 0
	for _, s := range specs {
		pairs += len(s.Condition.Services.Names)
	}
	testutil.Eventually(t, 2*time.Minute, "every task's first run and a settled start", func() bool {
		n, _ := total()
		return n == len(specs) && registry.Answered() && registry.Stats().Notifications >= uint64(pairs) && ctrl.Settled()
	})
	m.ready = time.Since(start)
	m.views = registry.Views()
	m.conns = agentConns(t, agentPort)
	m.fetchErrors = registry.Stats().FetchErrors

	// One service changes: only the tasks watching it hear of it and run.
	runsBefore := map[string]int64{}
	counts.Range(func(k, v any) bool { runsBefore[k.(string)] = v.(*atomic.Int64).Load(); return true })
	_, before := total()
	notes := registry.Stats().Notifications
	if err := client.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "load-0500-b", Name: "load-0500", Port: 2}); err != nil {
		t.Fatal(err)
	}
	want := int64(0)
	for _, s := range specs {
		for _, n := range s.Condition.Services.Names {
			if n == "load-0500" {
				want++
				m.watchers = append(m.watchers, s.Name)
			}
		}
	}
	// Done when the watchers' runs and notifications are all in and the
	// controller has nothing left to do: a notification or run beyond
	// them would have been counted by then.
	testutil.Eventually(t, 60*time.Second, "the watching tasks to run and the controller to settle", func() bool {
		_, runs := total()
		return runs-before >= want && registry.Stats().Notifications-notes >= uint64(want) && ctrl.Settled()
	})
	_, after := total()
	m.runsAfterChange = int(after - before)
	m.notifications = registry.Stats().Notifications - notes
	counts.Range(func(k, v any) bool {
		if v.(*atomic.Int64).Load() > runsBefore[k.(string)] {
			m.ran = append(m.ran, k.(string))
		}
		return true
	})
	slices.Sort(m.ran)
	slices.Sort(m.watchers)
	return m
}

// registerLoadServices registers one instance of each of n services.
func registerLoadServices(t *testing.T, c *api.Client, n int) {
	t.Helper()
	ids := make(chan int)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Go(func() {
			for i := range ids {
				name := fmt.Sprintf("load-%04d", i)
				if err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: name + "-a", Name: name,
					Address: "10.0.0.1", Port: 1000 + i}); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := 0; i < n; i++ {
		ids <- i
	}
	close(ids)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("register: %v", err)
	default:
	}
	// The agent copies its registrations into the catalog in the
	// background (anti-entropy), slowly under load: wait until the catalog
	// has them all, or what a test measures next would include them.
	testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("the %d services in the catalog", n), func() bool {
		svcs, _, err := c.Catalog().Services(nil)
		if err != nil {
			return false
		}
		got := 0
		for name := range svcs {
			if strings.HasPrefix(name, "load-") {
				got++
			}
		}
		return got == n
	})
}

// agentConns counts established TCP connections whose remote end is the
// agent's port (this machine's network namespace: the test process and
// nothing else talks to this agent's port).
func agentConns(t testing.TB, port string) int {
	t.Helper()
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(":%04X", p)
	n := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 || fields[3] != "01" { // ESTABLISHED
				continue
			}
			if strings.HasSuffix(fields[2], want) && !strings.HasSuffix(fields[1], want) {
				n++
			}
		}
		fh.Close()
	}
	return n
}
