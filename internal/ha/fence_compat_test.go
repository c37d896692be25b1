package ha

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// fakeFencer hands out run contexts tied to a term it can end.
type fakeFencer struct {
	mu     sync.Mutex
	leader bool
	term   context.Context
	end    context.CancelFunc
}

func (f *fakeFencer) lead() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leader = true
	f.term, f.end = context.WithCancel(context.Background())
}

func (f *fakeFencer) lose() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leader = false
	f.end()
}

func (f *fakeFencer) RunContext(ctx context.Context) (context.Context, context.CancelFunc, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.leader {
		return nil, nil, ErrNotLeader
	}
	rctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(f.term, cancel)
	return rctx, func() { stop(); cancel() }, nil
}

// blockingDriver applies until its context ends.
type blockingDriver struct {
	nullDriver
	started chan struct{}
}

func (b *blockingDriver) Apply(ctx context.Context, _ driver.Run, _ *task.Inputs) (driver.Result, error) {
	close(b.started)
	<-ctx.Done()
	return driver.Result{}, ctx.Err()
}

func TestFenceDriver(t *testing.T) {
	f := &fakeFencer{}
	inner := &blockingDriver{started: make(chan struct{})}
	d := FenceDriver(inner, f)
	if err := d.Init(context.Background()); err != nil {
		t.Fatalf("init is not fenced: %v", err)
	}
	if _, err := d.Apply(context.Background(), driver.Run{ID: "r"}, &task.Inputs{}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("apply on a follower: %v", err)
	}
	f.lead()
	done := make(chan error, 1)
	go func() {
		_, err := d.Apply(context.Background(), driver.Run{ID: "r"}, &task.Inputs{})
		done <- err
	}()
	<-inner.started
	f.lose()
	select {
	case err := <-done:
		var de *driver.Error
		if !errors.As(err, &de) || !strings.Contains(de.Summary, "stopped leading") {
			t.Fatalf("interrupted apply: %v", err)
		}
	case <-time.After(testutil.Scale(2 * time.Second)):
		t.Fatal("the run went on after the lead was lost")
	}
}

// finishingDriver's apply is interrupted while it saves its state, and
// finishes all the same (Terraform printed its closing summary).
type finishingDriver struct {
	nullDriver
	started chan struct{}
}

func (b *finishingDriver) Apply(ctx context.Context, _ driver.Run, _ *task.Inputs) (driver.Result, error) {
	close(b.started)
	<-ctx.Done()
	return driver.Result{Add: 1, Changes: true}, nil
}

// A run that succeeds although the lead was lost while it ran (the driver
// finished before the interrupt could stop it) has applied: it is reported
// so, not as interrupted.
func TestFenceDriverRunFinishedAfterLeadLost(t *testing.T) {
	f := &fakeFencer{}
	inner := &finishingDriver{started: make(chan struct{})}
	d := FenceDriver(inner, f)
	f.lead()
	done := make(chan error, 1)
	var res driver.Result
	go func() {
		var err error
		res, err = d.Apply(context.Background(), driver.Run{ID: "r"}, &task.Inputs{})
		done <- err
	}()
	<-inner.started
	f.lose()
	if err := <-done; err != nil {
		t.Fatalf("a run that finished is reported failed: %v", err)
	}
	if res.Add != 1 || !res.Changes {
		t.Fatalf("result: %+v", res)
	}
}

func TestCompatChecks(t *testing.T) {
	c := startConsul(t)
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.Mkdir(filepath.Join(dir, "present"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The leader publishes its record.
	leader := NewCompat(CompatOptions{Client: c.Client, Prefix: "p/c", Self: Instance{ID: "lead", TerraformVersion: "1.8.5"}})
	if fails := leader.Check(context.Background()); len(fails) != 0 {
		t.Fatalf("leader: %v", fails)
	}
	kv, _, _ := c.Client.KV().Get("p/c/members/lead", nil)
	var in Instance
	if kv == nil || json.Unmarshal(kv.Value, &in) != nil || in.TerraformVersion != "1.8.5" {
		t.Fatalf("published record: %+v", kv)
	}

	var got []int
	m := metricsFunc(func(n int) { got = append(got, n) })
	var logs logBuf
	follower := func(ver string, tofu bool, modules ...Module) *Compat {
		return NewCompat(CompatOptions{Client: c.Client, Prefix: "p/c", Self: Instance{ID: "f", TerraformVersion: ver, OpenTofu: tofu},
			Leader:  func() (string, string) { return "lead", "" },
			Modules: func() []Module { return modules },
			Logger:  newTextLogger(&logs), Metrics: m})
	}
	ok := follower("1.5.7", false, Module{"t1", "./present"}, Module{"t2", "hashicorp/x/y"})
	if fails := ok.Check(context.Background()); len(fails) != 0 {
		t.Fatalf("same major version, module present: %v", fails)
	}
	bad := follower("2.0.0", false, Module{"t1", "./missing"}, Module{"t2", "../also-missing"})
	fails := bad.Check(context.Background())
	if len(fails) != 3 {
		t.Fatalf("want 3 failures (two modules, the version), got %v", fails)
	}
	if !strings.Contains(fails[0].Error(), "compatibility check failure: task \"t1\": stat ./missing: no such file or directory") {
		t.Fatalf("module failure: %v", fails[0])
	}
	if !strings.Contains(fails[2].Error(), "runs Terraform 2.0.0, the leader \"lead\" runs Terraform 1.8.5") {
		t.Fatalf("version failure: %v", fails[2])
	}
	if fails := follower("1.8.5", true).Check(context.Background()); len(fails) != 1 || !strings.Contains(fails[0].Error(), "OpenTofu") {
		t.Fatalf("product mismatch: %v", fails)
	}
	if len(got) != 3 || got[0] != 0 || got[1] != 3 || got[2] != 1 {
		t.Fatalf("CompatFailures calls = %v", got)
	}
	if !strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("failures not logged as errors:\n%s", logs.String())
	}
}

func TestMembers(t *testing.T) {
	c := startConsul(t)
	for _, id := range []string{"cts-b", "cts-a", "other"} {
		reg := &api.AgentServiceRegistration{ID: id, Name: "consul-terraform-sync", Tags: []string{"cts", ClusterTag("prod")},
			Check: &api.AgentServiceCheck{CheckID: id + "-health", TTL: "1m", Status: api.HealthPassing}}
		if id == "other" {
			reg.Tags = []string{"cts", ClusterTag("dev")}
		}
		if id == "cts-b" {
			reg.Check.Status = api.HealthCritical
		}
		if err := c.Client.Agent().ServiceRegister(reg); err != nil {
			t.Fatal(err)
		}
	}
	el, err := New(Options{Client: c.Client, Prefix: "p/prod", ID: "cts-a", Address: "10.0.0.1:8558", Timing: fastTiming})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	defer func() { cancel(); el.Resign(); <-done }()
	testutil.WaitFor(t, "the condition", el.IsLeader)
	ms, err := el.Members(context.Background(), "prod", "consul-terraform-sync")
	if err != nil {
		t.Fatal(err)
	}
	want := []Member{
		{ID: "cts-a", ServiceName: "consul-terraform-sync", Healthy: true, Leader: true, Address: "10.0.0.1:8558"},
		{ID: "cts-b", ServiceName: "consul-terraform-sync", Healthy: false},
	}
	if len(ms) != len(want) || ms[0] != want[0] || ms[1] != want[1] {
		t.Fatalf("members = %+v, want %+v", ms, want)
	}
}

type metricsFunc func(int)

func (metricsFunc) SetLeader(bool)         {}
func (f metricsFunc) CompatFailures(n int) { f(n) }
