package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

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
// connection, so 1,000 distinct queries need ~1,000 connections from one
// client address: above the agent's default limits.http_max_conns_per_client
// (200). The test measures both: an agent with the limit raised (everything
// works, connections ≈ distinct queries) and the default agent (what
// happens past the limit). The numbers are logged for docs/performance.md.
func TestCompatConsulLoadDistinctQueries(t *testing.T) {
	skipShort(t)
	const (
		services = 1000
		tasks    = 100
		window   = 50 // names per task
		step     = 10 // window start of task i: i*step
	)
	specs := make([]task.Spec, tasks)
	pairs := 0
	distinct := map[string]bool{}
	for i := range specs {
		var names []string
		for j := 0; j < window; j++ {
			n := fmt.Sprintf("load-%04d", (i*step+j)%services)
			names = append(names, n)
			distinct[n] = true
		}
		pairs += len(names)
		specs[i] = task.Spec{Name: fmt.Sprintf("load-task-%03d", i), Module: "./m", Enabled: true,
			BufferPeriod: &task.BufferPeriod{},
			Condition: task.Condition{Services: &task.ServicesCondition{
				ServicesSelector: task.ServicesSelector{Names: names}, UseAsModuleInput: true}}}
	}
	if len(distinct) != services || pairs != tasks*window {
		t.Fatalf("test setup: %d distinct names, %d pairs", len(distinct), pairs)
	}

	t.Run("agent limit raised", func(t *testing.T) {
		addr, cli := startLoadAgent(t, "limits { http_max_conns_per_client = 5000 }")
		m := measureLoad(t, addr, cli, specs, services, 90*time.Second)
		t.Logf("LOAD (http_max_conns_per_client=5000): %d tasks, %d task×service pairs, %d distinct queries -> %d views, "+
			"%d TCP connections to the agent once idle ones expired (peak %d), %d/%d tasks ran, %d fetch errors, "+
			"every task ran after %s; one service change -> %d notifications, %d runs",
			tasks, pairs, len(distinct), m.views, m.conns, m.peakConns, m.tasksRan, tasks, m.fetchErrors,
			m.ready.Round(time.Millisecond), m.notifications, m.runsAfterChange)
		if m.views != len(distinct) {
			t.Errorf("%d views for %d distinct queries", m.views, len(distinct))
		}
		if m.tasksRan != tasks || m.fetchErrors != 0 {
			t.Errorf("%d of %d tasks ran, %d fetch errors", m.tasksRan, tasks, m.fetchErrors)
		}
		// Over HTTP/1.1 each blocking query waiting in the agent holds a
		// connection: connections ≈ distinct queries, not tasks × services.
		if m.conns < len(distinct)*9/10 || m.conns > len(distinct)+20 {
			t.Errorf("%d connections to the agent, want ≈ %d (one per distinct query)", m.conns, len(distinct))
		}
		// One changed service reaches only the tasks that watch it.
		if m.notifications != window/step || m.runsAfterChange != window/step {
			t.Errorf("one change: %d notifications, %d runs; want %d (the tasks watching that service)",
				m.notifications, m.runsAfterChange, window/step)
		}
	})

	t.Run("agent default limit", func(t *testing.T) {
		c := testutil.StartConsul(t)
		// net/http logs every 429 the agent sends on an idle connection.
		log.SetOutput(io.Discard)
		defer log.SetOutput(os.Stderr)
		m := measureLoad(t, c.Addr, c.Client, specs, services, 10*time.Second)
		t.Logf("LOAD (default http_max_conns_per_client=200): %d distinct queries -> %d views, "+
			"%d TCP connections to the agent (peak %d), %d/%d tasks ran within 10s, %d fetch errors",
			len(distinct), m.views, m.conns, m.peakConns, m.tasksRan, tasks, m.fetchErrors)
		if m.views != len(distinct) {
			t.Errorf("%d views for %d distinct queries", m.views, len(distinct))
		}
	})
}

type loadResult struct {
	views, conns, peakConns, tasksRan int
	fetchErrors, notifications        uint64
	runsAfterChange                   int
	ready                             time.Duration
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
func (d *countingDriver) Destroy(context.Context, driver.Run) (driver.Result, error) {
	return driver.Result{}, nil
}
func (d *countingDriver) Apply(context.Context, driver.Run, *task.Inputs) (driver.Result, error) {
	v, _ := d.count.LoadOrStore(d.name, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	return driver.Result{}, nil
}

func measureLoad(t *testing.T, addr string, reg *api.Client, specs []task.Spec, services int, wait time.Duration) loadResult {
	t.Helper()
	registerLoadServices(t, reg, services)

	// The production client, transport defaults included.
	client, err := consul.NewClient(ctsconfig.Consul{Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	baseline := agentConns(t, port)

	counts := &sync.Map{}
	var ctrl *reconcile.Controller
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	registry := watch.NewRegistry(client, logger, func(s, k string) { ctrl.Notify(s, k) })
	ctrl = reconcile.New(reconcile.Options{Watcher: registry, Logger: logger, MaxParallel: 8,
		NewDriver: func(s task.Spec) (driver.Driver, error) { return &countingDriver{name: s.Name, count: counts}, nil }}, specs)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = registry.Run(ctx) })
	wg.Go(func() { _ = ctrl.Run(ctx, context.Background()) })
	defer func() { cancel(); wg.Wait() }()

	ran := func() int {
		n := 0
		counts.Range(func(_, _ any) bool { n++; return true })
		return n
	}
	var m loadResult
	start := time.Now()
	deadline := start.Add(wait)
	for time.Now().Before(deadline) && ran() < len(specs) {
		m.peakConns = max(m.peakConns, agentConns(t, port)-baseline)
		time.Sleep(200 * time.Millisecond)
	}
	m.ready = time.Since(start)
	// Let the views settle into their blocking waits, and the transport's
	// idle connections (up to MaxIdleConnsPerHost, 100) expire after its
	// IdleConnTimeout (5s): what is left is one connection per blocking
	// query waiting in the agent.
	m.peakConns = max(m.peakConns, agentConns(t, port)-baseline)
	time.Sleep(2 * time.Second)
	m.peakConns = max(m.peakConns, agentConns(t, port)-baseline)
	time.Sleep(5 * time.Second)
	m.views = registry.Views()
	m.conns = agentConns(t, port) - baseline
	m.peakConns = max(m.peakConns, m.conns)
	m.tasksRan = ran()
	m.fetchErrors = registry.Stats().FetchErrors
	if m.tasksRan < len(specs) {
		return m
	}

	// One service changes: only the tasks watching it hear of it and run.
	total := func() int64 {
		var n int64
		counts.Range(func(_, v any) bool { n += v.(*atomic.Int64).Load(); return true })
		return n
	}
	before, notes := total(), registry.Stats().Notifications
	if err := reg.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "load-0500-b", Name: "load-0500", Port: 2}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	m.notifications = registry.Stats().Notifications - notes
	m.runsAfterChange = int(total() - before)
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
}

// agentConns counts established TCP connections whose remote end is the
// agent's HTTP port (this machine's network namespace: the test process
// and nothing else talks to this agent).
func agentConns(t *testing.T, port string) int {
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

// startLoadAgent starts a Consul dev agent on free ports with extra HCL
// configuration; it is stopped when the test ends.
func startLoadAgent(t *testing.T, hcl string) (string, *api.Client) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("counts connections through /proc")
	}
	bin := testutil.Binary(t, "consul")
	httpPort := testutil.FreePort(t)
	args := []string{"agent", "-dev", "-client", "127.0.0.1", "-bind", "127.0.0.1",
		"-http-port", strconv.Itoa(httpPort), "-grpc-port=-1", "-grpc-tls-port=-1", "-dns-port=-1",
		"-server-port", strconv.Itoa(testutil.FreePort(t)), "-serf-lan-port", strconv.Itoa(testutil.FreePort(t)),
		"-serf-wan-port", strconv.Itoa(testutil.FreePort(t)), "-log-level", "warn", "-node", "node-1", "-hcl", hcl}
	var logs syncBuffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	addr := fmt.Sprintf("127.0.0.1:%d", httpPort)
	cli, err := api.NewClient(&api.Config{Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the load agent's leader", func() bool {
		select {
		case <-done:
			t.Fatalf("consul exited:\n%s", logs.String())
		default:
		}
		l, err := cli.Status().Leader()
		return err == nil && l != ""
	})
	return addr, cli
}
