package reconcile

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/driver/terraform/tftext"
	"github.com/ctsync/ctsync/internal/reconcile/reconciletest"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

func TestChangesBetweenRuns(t *testing.T) {
	svc := func(id, status, addr string) task.Service {
		return task.Service{ID: id, Name: "web", Status: status, Address: addr, Node: "n1"}
	}
	prev := &task.Inputs{
		Services: map[string]task.Service{"web-1.n1": svc("web-1", "passing", "10.0.0.1"), "web-2.n1": svc("web-2", "passing", "10.0.0.2")},
		ConsulKV: map[string]string{"cfg/a": "1", "cfg/b": "2"},
	}
	cur := &task.Inputs{
		Services: map[string]task.Service{"web-1.n1": svc("web-1", "critical", "10.0.0.9"), "web-3.n1": svc("web-3", "passing", "10.0.0.3")},
		ConsulKV: map[string]string{"cfg/a": "1", "cfg/b": "3", "cfg/c": "x"},
	}
	if c := changes(nil, digest(cur)); c != nil {
		t.Fatalf("no previous run: want nil, got %+v", c)
	}
	got := changes(digest(prev), digest(cur))
	want := &store.Changes{
		Services: &store.SetDiff{Added: []string{"web-3.n1"}, Removed: []string{"web-2.n1"},
			Changed: []string{"web-1.n1 (status passing → critical, address)"}, AddedCount: 1, RemovedCount: 1, ChangedCount: 1},
		ConsulKV: &store.SetDiff{Added: []string{"cfg/c"}, Changed: []string{"cfg/b"}, AddedCount: 1, ChangedCount: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if c := changes(digest(cur), digest(cur)); c.Services != nil || c.ConsulKV != nil {
		t.Fatalf("same data: %+v", c)
	}

	many := &task.Inputs{Services: map[string]task.Service{}}
	for i := range store.MaxChangeNames + 5 {
		many.Services[fmt.Sprint(i)] = svc(fmt.Sprint(i), "passing", "")
	}
	d := changes(digest(&task.Inputs{}), digest(many)).Services
	if d.AddedCount != store.MaxChangeNames+5 || len(d.Added) != store.MaxChangeNames {
		t.Fatalf("bounded list: count %d, %d names", d.AddedCount, len(d.Added))
	}
}

func TestErrorSummaryIsTheDiagnosticLine(t *testing.T) {
	stderr := "╷\n│ Error: local-exec provisioner error\n│\n│   with null_resource.x,\n│   on main.tf line 3:\n│\n│ Error running command '/usr/bin/configure-firewall --zone a --apply all rules': exit status 1. Output: 503 Service Unavailable\n╵\n"
	err := &driver.Error{Op: "apply", Summary: tftext.Summarize(stderr), Headline: tftext.Headline(stderr)}
	if got := driver.ErrorSummary(fmt.Errorf("wrapped: %w", err)); got != "Error: local-exec provisioner error: exit status 1. Output: 503 Service Unavailable" {
		t.Fatalf("summary %q", got)
	}
	if got := driver.ErrorSummary(errors.New("storing the in-flight marker: x\nmore")); got != "storing the in-flight marker: x" {
		t.Fatalf("plain error summary %q", got)
	}
}

func TestActorTravelsInTheContext(t *testing.T) {
	ctx := WithActor(context.Background(), "ops-token")
	if actorFrom(context.WithoutCancel(ctx)) != "ops-token" || actorFrom(context.Background()) != "" {
		t.Fatal("actor lost")
	}
}

// While a failed run waits for its retry, the task's state says which
// retry, when, and why; the events say what changed in Consul, when the
// change was seen, and the run's phases.
func TestRetryAndChangesAreVisible(t *testing.T) {
	clk := reconciletest.NewClock()
	d := newScripted()
	h := start(t, 2, nil, servicesTask("a", "web"), withDriver(d), func(o *Options) {
		o.Clock, o.RetryBase, o.RetryMax = clk, time.Second, 10*time.Second
	})
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	d.waitRun(t)
	idle(t, h, "a")
	if st, _ := h.ctrl.Task("a"); st.Retry != nil {
		t.Fatalf("retry shown after a success: %+v", st.Retry)
	}
	first := h.st.Events("a")[0]
	if first.Changes != nil {
		t.Errorf("first run since start: changes %+v, want none", first.Changes)
	}
	if first.DetectedAt == nil || first.DetectedAt.After(first.StartTime) {
		t.Errorf("detected_at %v, start %v", first.DetectedAt, first.StartTime)
	}
	if len(first.Phases) == 0 || first.Phases[len(first.Phases)-1].Name != "apply" {
		t.Errorf("phases %+v", first.Phases)
	}

	d.fail(&driver.Error{Op: "apply", Summary: "Error: boom: long detail", Headline: "Error: boom"})
	h.w.Set(healthKey("web"), []task.Service{inst("web-2", "web")})
	d.waitRun(t)
	for attempt := 1; attempt <= 2; attempt++ {
		if !waitRetry(clk) {
			t.Fatal("no retry scheduled")
		}
		idle(t, h, "a")
		st, _ := h.ctrl.Task("a")
		if st.Retry == nil || st.Retry.Attempt != attempt || st.Retry.LastError != "Error: boom" {
			t.Fatalf("attempt %d: retry %+v", attempt, st.Retry)
		}
		if want := clk.Now().Add(retries(clk)[0]); !st.Retry.NextAt.Equal(want) {
			t.Errorf("next_at %v, want %v", st.Retry.NextAt, want)
		}
		clk.Advance(retries(clk)[0])
		d.waitRun(t)
	}
	idle(t, h, "a")
	evs := h.st.Events("a")
	failed := evs[len(evs)-2] // the first failure
	if failed.ErrorSummary != "Error: boom" {
		t.Errorf("error_summary %q", failed.ErrorSummary)
	}
	c := failed.Changes
	if c == nil || c.Services == nil || c.Services.AddedCount != 1 || c.Services.RemovedCount != 1 {
		t.Fatalf("changes of the second run: %+v", c)
	}
}

// BenchmarkDigest10k: recording a run's Consul data for the next run's
// "what changed" costs this per run of a task with 10,000 instances.
func BenchmarkDigest10k(b *testing.B) {
	in := &task.Inputs{Services: map[string]task.Service{}}
	for i := range 10000 {
		s := task.Service{ID: fmt.Sprint("web-", i), Name: "web", Address: "10.0.0.1", Port: 8000 + i%1000, Node: "n1",
			Status: "passing", Tags: []string{"a", "b"}, Meta: map[string]string{"k": "v"}, NodeMeta: map[string]string{"zone": "a"}}
		in.Services[s.Key()] = s
	}
	b.ReportAllocs()
	for b.Loop() {
		prev := digest(in)
		_ = changes(prev, digest(in))
	}
}
