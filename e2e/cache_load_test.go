package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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

// TestCacheServerLoad measures what consul { use_cache = true } saves the
// Consul servers (docs/performance.md). A dev server and a client agent
// joined to it; ctsync's watch registry and controller (in-process, with a
// driver that only counts) read through the client agent: 100 tasks, each
// watching its own service of 5 instances. While a loop flips one
// instance's TTL check every 50 ms (20 health changes a second, spread
// over the services), it samples the server for a window: its CPU time
// (/proc) and its RPC requests (consul_rpc_request, from its Prometheus
// metrics). Three windows: no ctsync (the churn's own cost), ctsync with
// direct health queries, ctsync with ?cached. Enabled by CTSYNC_BENCH=1;
// CTSYNC_BENCH_WINDOW sets the window (default 30s).
func TestCacheServerLoad(t *testing.T) {
	skipShort(t)
	if os.Getenv("CTSYNC_BENCH") == "" {
		t.Skip("measurement; set CTSYNC_BENCH=1")
	}
	window := 30 * time.Second
	if w, err := time.ParseDuration(os.Getenv("CTSYNC_BENCH_WINDOW")); err == nil {
		window = w
	}
	const services, instances, tasks = 100, 5, 100

	server := testutil.StartConsulWith(t, testutil.ConsulOptions{HCL: []string{
		`telemetry { prometheus_retention_time = "1h" disable_hostname = true }`}})
	var clientHCL []string
	if os.Getenv("CTSYNC_BENCH_STREAMING") == "off" {
		// An agent without the streaming backend: ?cached is then served
		// by the agent cache (one background blocking query per key).
		clientHCL = append(clientHCL, "use_streaming_backend = false")
	}
	client := startClientAgent(t, server, clientHCL...)

	// Registrations on the client agent, each with a TTL check.
	for s := 0; s < services; s++ {
		for i := 0; i < instances; i++ {
			id := fmt.Sprintf("svc-%03d-%d", s, i)
			if err := client.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: id, Name: fmt.Sprintf("svc-%03d", s),
				Port: 1000 + i, Check: &api.AgentServiceCheck{CheckID: "check-" + id, TTL: "1h", Status: api.HealthPassing}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	testutil.Eventually(t, 60*time.Second, "the registrations synced to the server", func() bool {
		svcs, _, err := server.Client.Catalog().Services(nil)
		return err == nil && len(svcs) == services+1
	})

	specs := make([]task.Spec, tasks)
	for i := range specs {
		specs[i] = task.Spec{Name: fmt.Sprintf("task-%03d", i), Module: "./m", Enabled: true, BufferPeriod: &task.BufferPeriod{},
			Condition: task.Condition{Services: &task.ServicesCondition{UseAsModuleInput: true,
				ServicesSelector: task.ServicesSelector{Names: []string{fmt.Sprintf("svc-%03d", i%services)}}}}}
	}

	// The churn: one TTL flip every 50 ms, round robin over instances.
	churnCtx, stopChurn := context.WithCancel(context.Background())
	var churn sync.WaitGroup
	var flips int
	churn.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-churnCtx.Done():
				flips = n
				return
			case <-tick.C:
			}
			s, i := n%services, (n/services)%instances
			status := api.HealthCritical
			if (n/(services*instances))%2 == 1 {
				status = api.HealthPassing
			}
			_ = client.Agent().UpdateTTL(fmt.Sprintf("check-svc-%03d-%d", s, i), "", status)
		}
	})
	defer func() { stopChurn(); churn.Wait() }()

	type sample struct {
		name           string
		cpu            time.Duration
		rpcs, queries  float64
		fetches, notes uint64
	}
	measure := func(name string, run func(ctx context.Context) (fetches, notes func() uint64)) sample {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		fetches, notes := run(ctx)
		time.Sleep(5 * time.Second) // warm-up: views started, first runs done (a measurement, not a test wait)
		cpu0, rpc0, q0, f0, n0 := serverCPU(t, server.Pid()), serverCounter(t, server.Addr, "consul_rpc_request"),
			serverCounter(t, server.Addr, "consul_rpc_query"), fetches(), notes()
		time.Sleep(window)
		cpu1, rpc1, q1, f1, n1 := serverCPU(t, server.Pid()), serverCounter(t, server.Addr, "consul_rpc_request"),
			serverCounter(t, server.Addr, "consul_rpc_query"), fetches(), notes()
		return sample{name, cpu1 - cpu0, rpc1 - rpc0, q1 - q0, f1 - f0, n1 - n0}
	}
	zero := func() uint64 { return 0 }
	withCtsync := func(useCache bool) func(ctx context.Context) (func() uint64, func() uint64) {
		return func(ctx context.Context) (func() uint64, func() uint64) {
			cl, err := consul.NewClient(ctsconfig.Consul{Address: clientAddr(client), UseCache: useCache})
			if err != nil {
				t.Fatal(err)
			}
			var ctrl *reconcile.Controller
			registry := watch.NewRegistry(cl, nil, func(s, k string) { ctrl.Notify(s, k) })
			ctrl = reconcile.New(reconcile.Options{Watcher: registry, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxParallel: 8,
				NewDriver: func(s task.Spec) (driver.Driver, error) {
					return &countingDriver{name: s.Name, count: &sync.Map{}}, nil
				}}, specs)
			var wg sync.WaitGroup
			wg.Go(func() { _ = registry.Run(ctx) })
			wg.Go(func() { _ = ctrl.Run(ctx) })
			context.AfterFunc(ctx, wg.Wait)
			return func() uint64 { return registry.Stats().Fetches }, func() uint64 { return registry.Stats().Notifications }
		}
	}
	results := []sample{
		measure("churn only, no ctsync", func(context.Context) (func() uint64, func() uint64) { return zero, zero }),
		measure("ctsync, direct health queries (default)", withCtsync(false)),
		measure("ctsync, use_cache = true (?cached, streaming)", withCtsync(true)),
	}
	stopChurn()
	churn.Wait()
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("CACHE LOAD: %d tasks, %d services x %d instances, %d check flips at 20/s, window %s, loadavg %s",
		tasks, services, instances, flips, window, strings.TrimSpace(string(load)))
	for _, r := range results {
		secs := window.Seconds()
		t.Logf("CACHE LOAD | streaming %s | %s | server CPU %.1f%% of a core | server RPC requests %.1f/s (blocking queries %.1f/s) | ctsync reads %.1f/s | notifications %.1f/s",
			map[bool]string{true: "off", false: "on (default)"}[len(clientHCL) > 0], r.name, 100*r.cpu.Seconds()/secs, r.rpcs/secs, r.queries/secs, float64(r.fetches)/secs, float64(r.notes)/secs)
	}
}

// startClientAgent starts a client (non-server) agent joined to server and
// returns an API client for it.
func startClientAgent(t *testing.T, server *testutil.Consul, hcl ...string) *api.Client {
	t.Helper()
	httpPort, lan := testutil.FreePort(t), testutil.FreePort(t)
	dir := t.TempDir()
	args := []string{"agent", "-data-dir", filepath.Join(dir, "data"),
		"-bind", "127.0.0.1", "-client", "127.0.0.1", "-node", "client-1",
		"-http-port", strconv.Itoa(httpPort), "-serf-lan-port", strconv.Itoa(lan), "-serf-wan-port=-1",
		"-grpc-port=-1", "-grpc-tls-port=-1", "-dns-port=-1", "-retry-join", server.SerfLANAddr(), "-log-level", "warn"}
	for _, h := range hcl {
		args = append(args, "-hcl", h)
	}
	cmd := exec.Command(testutil.Binary(t, "consul"), args...)
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("client agent:\n%s", logs.String())
		}
	})
	c, err := api.NewClient(&api.Config{Address: fmt.Sprintf("127.0.0.1:%d", httpPort)})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the client agent to join", func() bool {
		ms, err := server.Client.Agent().Members(false)
		if err != nil {
			return false
		}
		for _, m := range ms {
			if m.Name == "client-1" && m.Status == 1 {
				_, err := c.Agent().Self()
				return err == nil
			}
		}
		return false
	})
	return c
}

func clientAddr(c *api.Client) string {
	self, err := c.Agent().Self()
	if err != nil {
		return ""
	}
	cfg := self["DebugConfig"]
	if addrs, ok := cfg["HTTPAddrs"].([]any); ok && len(addrs) > 0 {
		return strings.TrimPrefix(fmt.Sprint(addrs[0]), "tcp://")
	}
	return ""
}

// serverCPU is the user+system CPU time of a process (procCPU, scale_test.go).
func serverCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	secs, err := procCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(secs * float64(time.Second))
}

// serverCounter sums a counter from the agent's Prometheus metrics.
func serverCounter(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/v1/agent/metrics?format=prometheus")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, name+" ") && !strings.HasPrefix(l, name+"{") {
			continue
		}
		f := strings.Fields(l)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sum += v
	}
	return sum
}
