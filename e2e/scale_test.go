package e2e

// The scale harness behind `make bench`: a real Consul dev agent loaded with
// N services × M instances, T tasks, and measurements of reaction time,
// Consul load, start-up, memory/CPU and churn. It only runs with
// CTSYNC_BENCH=1 and writes its results to $CTSYNC_BENCH_OUT (default
// docs/bench): results.md, results.csv and reaction.png.

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/consul"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
	"github.com/ctsync/ctsync/internal/watch"
)

func benchEnabled(t *testing.T) {
	t.Helper()
	if os.Getenv("CTSYNC_BENCH") != "1" {
		t.Skip("scale benchmarks run with CTSYNC_BENCH=1 (make bench)")
	}
}

// results collects rows for the report.
type results struct {
	mu   sync.Mutex
	rows [][]string // scenario, parameters, metric, value, unit, target
}

func (r *results) add(scenario, params, metric string, value float64, unit, target string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows = append(r.rows, []string{scenario, params, metric, strconv.FormatFloat(value, 'f', 2, 64), unit, target})
}

// ---- catalog loading -----------------------------------------------------

// catalog registers services directly in the catalog (on external nodes)
// through transactions, so 10,000 instances load in seconds.
type catalog struct {
	c        *testutil.Consul
	services int
	per      int
}

const benchNodes = 100

func instanceID(s, i int) string { return fmt.Sprintf("svc-%d-%d", s, i) }
func serviceName(s int) string   { return fmt.Sprintf("svc-%d", s) }
func nodeName(i int) string      { return fmt.Sprintf("bench-node-%d", i%benchNodes) }

func loadCatalog(t testing.TB, c *testutil.Consul, services, per int) *catalog {
	t.Helper()
	var ops api.TxnOps
	flush := func() {
		if len(ops) == 0 {
			return
		}
		ok, resp, _, err := c.Client.Txn().Txn(ops, nil)
		if err != nil || !ok {
			t.Fatalf("txn: %v %+v", err, resp)
		}
		ops = ops[:0]
	}
	add := func(op *api.TxnOp) {
		ops = append(ops, op)
		if len(ops) == 64 {
			flush()
		}
	}
	for n := 0; n < benchNodes; n++ {
		add(&api.TxnOp{Node: &api.NodeTxnOp{Verb: api.NodeSet, Node: api.Node{Node: nodeName(n),
			Address: fmt.Sprintf("10.1.%d.%d", n/250, n%250+1)}}})
	}
	for s := 0; s < services; s++ {
		for i := 0; i < per; i++ {
			for _, op := range instanceOps(s, i, api.HealthPassing) {
				add(op)
			}
		}
	}
	flush()
	return &catalog{c: c, services: services, per: per}
}

func instanceOps(s, i int, status string) []*api.TxnOp {
	id := instanceID(s, i)
	return []*api.TxnOp{
		{Service: &api.ServiceTxnOp{Verb: api.ServiceSet, Node: nodeName(i), Service: api.AgentService{
			ID: id, Service: serviceName(s), Port: 10000 + i, Tags: []string{"bench", "v1"},
			Meta: map[string]string{"version": "1"}}}},
		{Check: &api.CheckTxnOp{Verb: api.CheckSet, Check: api.HealthCheck{Node: nodeName(i),
			CheckID: "chk-" + id, Name: "bench", Status: status, ServiceID: id}}},
	}
}

// instanceStep returns the change number k for which change(t, s, k)
// makes the step-th change of instance i.
func instanceStep(i, step, per int) int { return (step/4*per+i)*4 + step%4 }

// change makes the k-th change to service s: a cycle of health flip down,
// flip up, deregistration and registration of one instance.
func (cat *catalog) change(t testing.TB, s, k int) {
	t.Helper()
	if err := cat.tryChange(s, k); err != nil {
		t.Fatal(err)
	}
}

// tryChange is change for goroutines other than the test's own.
func (cat *catalog) tryChange(s, k int) error {
	i := (k / 4) % cat.per
	var ops api.TxnOps
	switch k % 4 {
	case 0:
		ops = instanceOps(s, i, api.HealthCritical)[1:]
	case 1:
		ops = instanceOps(s, i, api.HealthPassing)[1:]
	case 2:
		ops = api.TxnOps{{Service: &api.ServiceTxnOp{Verb: api.ServiceDelete, Node: nodeName(i),
			Service: api.AgentService{ID: instanceID(s, i), Service: serviceName(s)}}}}
	case 3:
		ops = instanceOps(s, i, api.HealthPassing)
	}
	ok, resp, _, err := cat.c.Client.Txn().Txn(ops, nil)
	if err != nil || !ok {
		var msgs []string
		if resp != nil {
			for _, e := range resp.Errors {
				msgs = append(msgs, fmt.Sprintf("op %d: %s", e.OpIndex, e.What))
			}
		}
		return fmt.Errorf("change txn (kind %d): %v %v", k%4, err, msgs)
	}
	return nil
}

// ---- an instrumented in-process pipeline ---------------------------------

// connCounter counts TCP connections to Consul and HTTP requests.
type connCounter struct {
	open, dialed, requests atomic.Int64
	base                   http.RoundTripper
}

type countedConn struct {
	net.Conn
	once sync.Once
	c    *connCounter
}

func (cc *countedConn) Close() error {
	cc.once.Do(func() { cc.c.open.Add(-1) })
	return cc.Conn.Close()
}

func (c *connCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.requests.Add(1)
	return c.base.RoundTrip(r)
}

func instrumentedClient(t testing.TB, addr string) (*consul.Client, *connCounter) {
	t.Helper()
	cnt := &connCounter{}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		MaxIdleConnsPerHost: 1000, IdleConnTimeout: 90 * time.Second, DisableCompression: true,
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, a)
			if err != nil {
				return nil, err
			}
			cnt.open.Add(1)
			cnt.dialed.Add(1)
			return &countedConn{Conn: conn, c: cnt}, nil
		},
	}
	cnt.base = tr
	c, err := consul.FromAPIConfig(&api.Config{Address: addr, HttpClient: &http.Client{Transport: cnt}})
	if err != nil {
		t.Fatal(err)
	}
	return c, cnt
}

// applyStamp is one apply seen by the stamp driver.
type applyStamp struct {
	task string
	at   time.Time
	in   task.Inputs
}

// simDriver starts applies instantly and reports them; with delay it
// pretends an apply takes that long (a stand-in for Terraform in the churn
// scenario).
type simDriver struct {
	name  string
	out   chan<- applyStamp
	delay time.Duration
}

func (d *simDriver) Init(context.Context) error { return nil }
func (d *simDriver) Plan(context.Context, driver.Run, *task.Inputs) (driver.Result, error) {
	return driver.Result{}, nil
}
func (d *simDriver) Forget(context.Context) error { return nil }
func (d *simDriver) Destroy(context.Context, driver.Run) (driver.Result, error) {
	return driver.Result{}, nil
}
func (d *simDriver) Apply(ctx context.Context, _ driver.Run, in *task.Inputs) (driver.Result, error) {
	d.out <- applyStamp{task: d.name, at: time.Now(), in: *in}
	if d.delay > 0 {
		select {
		case <-time.After(d.delay):
		case <-ctx.Done():
		}
	}
	return driver.Result{Changes: true}, nil
}

type pipeline struct {
	reg     *watch.Registry
	ctrl    *reconcile.Controller
	stamps  chan applyStamp
	conns   *connCounter
	stop    func()
	applied map[string]int
}

// taskWindow returns the services task k watches: width consecutive
// services starting at k, modulo the service count.
func taskWindow(k, width, services int) []string {
	var names []string
	for j := 0; j < min(width, services); j++ {
		names = append(names, serviceName((k+j)%services))
	}
	return names
}

func startPipeline(t testing.TB, addr string, tasks, width, services int, delay time.Duration) *pipeline {
	t.Helper()
	client, cnt := instrumentedClient(t, addr)
	p := &pipeline{stamps: make(chan applyStamp, 100000), conns: cnt}
	var specs []task.Spec
	for k := 0; k < tasks; k++ {
		specs = append(specs, task.Spec{Name: fmt.Sprintf("t%03d", k), Module: "./m", Enabled: true,
			BufferPeriod: &task.BufferPeriod{},
			Condition: task.Condition{Services: &task.ServicesCondition{
				ServicesSelector: task.ServicesSelector{Names: taskWindow(k, width, services)}, UseAsModuleInput: true}}})
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	p.reg = watch.NewRegistry(client, logger, func(s, k string) { p.ctrl.Notify(s, k) })
	p.ctrl = reconcile.New(reconcile.Options{Watcher: p.reg, Logger: logger, MaxParallel: 4, Store: store.NewMemory(0),
		NewDriver: func(s task.Spec) (driver.Driver, error) {
			return &simDriver{name: s.Name, out: p.stamps, delay: delay}, nil
		}}, specs)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = p.reg.Run(ctx) })
	wg.Go(func() { _ = p.ctrl.Run(ctx) })
	p.stop = func() { cancel(); wg.Wait() }
	// Wait for every task's first apply.
	seen := map[string]bool{}
	deadline := time.After(5 * time.Minute)
	for len(seen) < tasks {
		select {
		case s := <-p.stamps:
			seen[s.task] = true
		case <-deadline:
			t.Fatalf("only %d of %d tasks ran initially", len(seen), tasks)
		}
	}
	return p
}

// affected returns the tasks whose window includes service s.
func affected(tasks, width, services, s int) map[string]bool {
	out := map[string]bool{}
	for k := 0; k < tasks; k++ {
		if slices.Contains(taskWindow(k, width, services), serviceName(s)) {
			out[fmt.Sprintf("t%03d", k)] = true
		}
	}
	return out
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p)
	return s[i]
}

// ---- scenarios -------------------------------------------------------------

// TestScale runs every scenario and writes the report.
func TestScale(t *testing.T) {
	benchEnabled(t)
	skipShort(t)
	res := &results{}
	outDir := os.Getenv("CTSYNC_BENCH_OUT")
	if outDir == "" {
		outDir = filepath.Join(testutil.RepoRoot(), "docs", "bench")
	}
	changes := 200
	if v, err := strconv.Atoi(os.Getenv("CTSYNC_BENCH_CHANGES")); err == nil && v > 0 {
		changes = v
	}
	type shape struct{ services, per int }
	shapes := []shape{{1, 10}, {10, 100}, {100, 100}}
	var curves []reactionCurve
	for _, sh := range shapes {
		t.Run(fmt.Sprintf("reaction_%dx%d", sh.services, sh.per), func(t *testing.T) {
			c := testutil.StartConsul(t)
			loadCatalog(t, c, sh.services, sh.per)
			for _, tasks := range []int{1, 10, 100} {
				lat, load := reactionRun(t, c, sh.services, sh.per, tasks, changes)
				inst := sh.services * sh.per
				params := fmt.Sprintf("%d instances (%d×%d), %d tasks", inst, sh.services, sh.per, tasks)
				p50, p99 := percentile(lat, 0.5), percentile(lat, 0.99)
				target50, target99 := "", ""
				if inst == 10000 {
					target50, target99 = "< 50", "< 250"
				}
				res.add("reaction (change → all affected applies started)", params, "p50", ms(p50), "ms", target50)
				res.add("reaction (change → all affected applies started)", params, "p99", ms(p99), "ms", target99)
				res.add("consul load", params, "HTTP requests per change", load.reqPerChange, "", "")
				res.add("consul load", params, "blocking queries in flight", float64(load.views), "", "")
				res.add("consul load", params, "TCP connections to the agent", float64(load.conns), "", "< 200")
				curves = append(curves, reactionCurve{instances: inst, tasks: tasks, p50: ms(p50), p99: ms(p99)})
			}
		})
	}
	t.Run("startup", func(t *testing.T) { startupRun(t, res) })
	t.Run("memory_cpu", func(t *testing.T) { memoryRun(t, res) })
	t.Run("churn", func(t *testing.T) { churnRun(t, res) })
	t.Run("api", func(t *testing.T) { apiRun(t, res) })
	writeReport(t, outDir, res, curves)
}

type loadFigures struct {
	reqPerChange float64
	views        int
	conns        int64
}

// reactionRun measures, for each change to one service, the time until
// every task watching it has started its apply.
func reactionRun(t *testing.T, c *testutil.Consul, services, per, tasks, changes int) ([]time.Duration, loadFigures) {
	width := min(10, services)
	p := startPipeline(t, c.Addr, tasks, width, services, 0)
	defer p.stop()
	want := affected(tasks, width, services, 0)
	cat := &catalog{c: c, services: services, per: per}
	before := p.conns.requests.Load()
	lat := make([]time.Duration, 0, changes)
	for k := 0; k < changes; k++ {
		begin := time.Now()
		cat.change(t, 0, k)
		got := map[string]bool{}
		var last time.Time
		timeout := time.After(30 * time.Second)
		for len(got) < len(want) {
			select {
			case s := <-p.stamps:
				if want[s.task] && !got[s.task] {
					got[s.task] = true
					last = s.at
				}
			case <-timeout:
				t.Fatalf("change %d: %d of %d tasks applied", k, len(got), len(want))
			}
		}
		lat = append(lat, last.Sub(begin))
	}
	// Each change also costs the txn request from this harness; it does not
	// go through the counted client.
	reqs := float64(p.conns.requests.Load()-before) / float64(changes)
	return lat, loadFigures{reqPerChange: reqs, views: p.reg.Views(), conns: p.conns.open.Load()}
}

// startupRun: `start -once` and daemon start-up with 50 tasks of a module
// that uses only built-ins, real binary and real Terraform.
func startupRun(t *testing.T, res *results) {
	c := testutil.StartConsul(t)
	registerMany(t, c, "web", 10)
	mod := builtinModule(t)
	var tasks []taskSpec
	for i := 0; i < 50; i++ {
		tasks = append(tasks, taskSpec{name: fmt.Sprintf("t%02d", i), module: mod, services: `"web"`})
	}
	for _, mode := range []string{"once", "daemon"} {
		work := t.TempDir()
		cfg := filepath.Join(work, "config.hcl")
		text := strings.Replace(config(t, c.Addr, filepath.Join(work, "sync-tasks"), tasks...), "log_level = \"DEBUG\"", "log_level = \"INFO\"", 1)
		if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		if mode == "once" {
			p := startCtsync(t, work, "start", "-once", "-config-file", cfg)
			if code := p.wait(t, 10*time.Minute); code != 0 {
				t.Fatalf("-once exit %d", code)
			}
		} else {
			p := startCtsync(t, work, "start", "-config-file", cfg)
			testutil.Eventually(t, 10*time.Minute, "50 tasks applied", func() bool { return p.count("task completed") >= 50 })
		}
		res.add("start-up", "50 tasks, built-in module, max_parallel_runs default (the CPUs)", mode+": all tasks applied", time.Since(begin).Seconds(), "s", "< 20")
	}
}

func builtinModule(t testing.TB) string {
	t.Helper()
	mod := filepath.Join(t.TempDir(), "builtin")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	src := "variable \"services\" {\n  type = any\n}\n\nresource \"terraform_data\" \"s\" {\n  input = length(var.services)\n}\n"
	if err := os.WriteFile(filepath.Join(mod, "main.tf"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return mod
}

// memoryRun: the real daemon with 100 tasks over 10,000 instances, each
// task watching 10 services of 100 instances; RSS and CPU at steady state.
func memoryRun(t *testing.T, res *results) {
	c := testutil.StartConsul(t)
	loadCatalog(t, c, 100, 100)
	mod := builtinModule(t)
	var tasks []taskSpec
	for k := 0; k < 100; k++ {
		var quoted []string
		for _, n := range taskWindow(k, 10, 100) {
			quoted = append(quoted, strconv.Quote(n))
		}
		tasks = append(tasks, taskSpec{name: fmt.Sprintf("t%03d", k), module: mod, services: strings.Join(quoted, ", ")})
	}
	work := t.TempDir()
	cfg := filepath.Join(work, "config.hcl")
	text := strings.Replace(config(t, c.Addr, filepath.Join(work, "sync-tasks"), tasks...), "log_level = \"DEBUG\"", "log_level = \"INFO\"", 1)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startCtsync(t, work, "start", "-config-file", cfg)
	testutil.Eventually(t, 15*time.Minute, "100 tasks applied", func() bool { return p.count("task completed") >= 100 })
	pid := p.cmd.Process.Pid
	// Let the runs' garbage be collected, then sample an idle minute... or
	// a shorter window when asked.
	window := 30 * time.Second
	cpu0, _ := procCPU(pid)
	time.Sleep(window) // measuring idle CPU needs idle time to pass
	cpu1, _ := procCPU(pid)
	rss, _ := procRSS(pid)
	res.add("memory / CPU", "10,000 instances (100×100), 100 tasks × 10 services, daemon idle", "RSS", float64(rss)/(1<<20), "MiB", "< 150")
	res.add("memory / CPU", "10,000 instances (100×100), 100 tasks × 10 services, daemon idle", "CPU", 100*(cpu1-cpu0)/window.Seconds(), "% of a core", "< 1")
}

// procCPU returns user+system CPU seconds of a process.
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100, nil // USER_HZ is 100 on Linux
}

func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			kb, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS")
}

// churnRun: 100 changes per second for a minute against 10 tasks whose
// applies take 300 ms each (a stand-in for Terraform). Every change must be
// reflected: after the churn, each task's last apply equals the catalog.
func churnRun(t *testing.T, res *results) {
	c := testutil.StartConsul(t)
	cat := loadCatalog(t, c, 1, 100)
	const tasks = 10
	p := startPipeline(t, c.Addr, tasks, 1, 1, 300*time.Millisecond)
	defer p.stop()
	var mu sync.Mutex
	last := map[string]task.Inputs{}
	runs := 0
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-p.stamps:
				mu.Lock()
				last[s.task] = s.in
				runs++
				mu.Unlock()
			case <-done:
				return
			}
		}
	}()
	duration := time.Minute
	if v, err := time.ParseDuration(os.Getenv("CTSYNC_BENCH_CHURN")); err == nil {
		duration = v
	}
	tick := time.NewTicker(10 * time.Millisecond)
	// Each instance goes through its own cycle (down, up, deregistered,
	// registered), and changes rotate over instances.
	step := make([]int, cat.per)
	n := 0
	for end := time.Now().Add(duration); time.Now().Before(end); n++ {
		<-tick.C
		i := (n * 37) % cat.per
		cat.change(t, 0, instanceStep(i, step[i], cat.per))
		step[i]++
	}
	tick.Stop()
	// Converged: every task's last apply has the catalog's passing set.
	want := passingIDs(t, c)
	testutil.Eventually(t, time.Minute, "every task to apply the final catalog", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for k := 0; k < tasks; k++ {
			in, ok := last[fmt.Sprintf("t%03d", k)]
			if !ok || ids(in.Services) != want {
				return false
			}
		}
		return true
	})
	close(done)
	mu.Lock()
	defer mu.Unlock()
	params := fmt.Sprintf("%d changes in %s (%.0f/s), %d tasks, 300 ms applies", n, duration, float64(n)/duration.Seconds(), tasks)
	res.add("churn", params, "runs done", float64(runs), "", "")
	res.add("churn", params, "changes coalesced (changes × tasks − runs)", float64(n*tasks-runs), "", "")
	res.add("churn", params, "final state equals catalog", 1, "yes", "yes")
}

func passingIDs(t testing.TB, c *testutil.Consul) string {
	entries, _, err := c.Client.Health().Service(serviceName(0), "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]task.Service{}
	for _, e := range entries {
		m[e.Service.ID] = task.Service{ID: e.Service.ID}
	}
	return ids(m)
}

// ---- report ----------------------------------------------------------------

type reactionCurve struct {
	instances, tasks int
	p50, p99         float64
}

func writeReport(t *testing.T, dir string, res *results, curves []reactionCurve) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	var b strings.Builder
	fmt.Fprintf(&b, "# ctsync scale benchmark\n\nDate: %s · Machine: %s, %d CPUs, %s/%s · Terraform: %s\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), host, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, terraformVersion())
	b.WriteString("| scenario | parameters | metric | value | unit | target |\n|---|---|---|---|---|---|\n")
	for _, r := range res.rows {
		fmt.Fprintf(&b, "| %s |\n", strings.Join(r, " | "))
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "results.csv"))
	if err != nil {
		t.Fatal(err)
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"scenario", "parameters", "metric", "value", "unit", "target"})
	_ = w.WriteAll(res.rows)
	f.Close()
	if len(curves) > 0 {
		if err := plotReaction(filepath.Join(dir, "reaction.png"), curves); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("report written to %s:\n%s", dir, b.String())
}

func terraformVersion() string {
	out, err := execOutput("terraform", "version")
	if err != nil {
		return "unknown"
	}
	return strings.SplitN(out, "\n", 2)[0]
}
