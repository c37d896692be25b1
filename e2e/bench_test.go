package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	cfgpkg "github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/consul"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
	"github.com/ctsync/ctsync/internal/watch"
)

// BenchmarkReaction measures the time from a catalog change (a health flip
// of one instance among 1,000 watched ones) to the task's apply starting,
// with the buffer period off. It reports p50 and p99 in milliseconds.
func BenchmarkReaction(b *testing.B) {
	if testing.Short() {
		b.Skip("needs Consul")
	}
	const instances = 1000
	c := testutil.StartConsul(b)
	registerMany(b, c, "web", instances)

	stamps := make(chan applyStamp, 16)
	spec := task.Spec{Name: "bench", Module: "./m", Enabled: true, BufferPeriod: &task.BufferPeriod{},
		Condition: task.Condition{Services: &task.ServicesCondition{
			ServicesSelector: task.ServicesSelector{Names: []string{"web"}}, UseAsModuleInput: true}}}
	var ctrl *reconcile.Controller
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	client, err := consul.NewClient(cfgpkg.Consul{Address: c.Addr})
	if err != nil {
		b.Fatal(err)
	}
	reg := watch.NewRegistry(client, logger, func(s, k string) { ctrl.Notify(s, k) })
	ctrl = reconcile.New(reconcile.Options{Watcher: reg, Logger: logger,
		NewDriver: func(s task.Spec) (driver.Driver, error) { return &simDriver{name: s.Name, out: stamps}, nil }}, []task.Spec{spec})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = reg.Run(ctx) })
	wg.Go(func() { _ = ctrl.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	<-stamps // the initial run

	changes := max(b.N, 200)
	lat := make([]time.Duration, 0, changes)
	b.ResetTimer()
	for i := 0; i < changes; i++ {
		status := api.HealthCritical
		if i%2 == 1 {
			status = api.HealthPassing
		}
		begin := time.Now()
		c.SetCheck(b, "web-0", status, "")
		select {
		case st := <-stamps:
			lat = append(lat, st.at.Sub(begin))
		case <-time.After(30 * time.Second):
			b.Fatalf("change %d never reached the driver", i)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(float64(len(lat)), "changes")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// registerMany registers n passing instances of a service, each with a TTL
// check, through the agent API.
func registerMany(b testing.TB, c *testutil.Consul, name string, n int) {
	b.Helper()
	for i := 0; i < n; i++ {
		c.RegisterService(b, &api.AgentServiceRegistration{ID: fmt.Sprintf("%s-%d", name, i), Name: name,
			Address: "10.0.0.1", Port: 10000 + i, Tags: []string{"bench"}}, api.HealthPassing)
	}
}

// BenchmarkOnce20Tasks runs `ctsync start -once` with 20 tasks of a module
// that uses only Terraform built-ins, with the real binary and Terraform,
// from a clean working directory each iteration.
func BenchmarkOnce20Tasks(b *testing.B) {
	if testing.Short() {
		b.Skip("needs Consul and Terraform")
	}
	c := testutil.StartConsul(b)
	registerMany(b, c, "web", 10)
	mod := filepath.Join(b.TempDir(), "builtin")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "main.tf"), []byte(
		"variable \"services\" {\n  type = any\n}\n\nresource \"terraform_data\" \"s\" {\n  input = keys(var.services)\n}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	var tasks []taskSpec
	for i := 0; i < 20; i++ {
		tasks = append(tasks, taskSpec{name: fmt.Sprintf("t%02d", i), module: mod, services: `"web"`})
	}
	for i := 0; i < b.N; i++ {
		work := b.TempDir()
		cfg := filepath.Join(work, "config.hcl")
		text := config(b, c.Addr, filepath.Join(work, "sync-tasks"), tasks...)
		text = strings.Replace(text, "log_level = \"DEBUG\"", "log_level = \"WARN\"\nmax_parallel_runs = 4", 1)
		if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
			b.Fatal(err)
		}
		begin := time.Now()
		p := startCtsync(b, work, "start", "-once", "-config-file", cfg)
		if code := p.wait(b, 10*time.Minute); code != 0 {
			b.Fatalf("exit code %d:\n%s", code, p.out.String())
		}
		b.ReportMetric(time.Since(begin).Seconds(), "s/once-run")
	}
}
