package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ctsync/ctsync/internal/task"
)

// RunOnce runs every enabled task once (only the named ones when names is
// not empty), waiting up to wait for each task's data. With inspect set it
// plans and writes each plan to out. It returns an error naming every task
// that failed.
//
// The runs go through the run queue and its workers, as the daemon's do
// (MaxParallel at once): RunOnce only decides when each task is due (once
// the tasks it depends on in this batch are done and its data is there),
// and waits for the outcome.
func (c *Controller) RunOnce(ctx context.Context, names []string, inspect bool, wait time.Duration, out io.Writer) error {
	c.mu.Lock()
	var run []*entry
	for _, n := range names {
		if c.tasks[n] == nil {
			c.mu.Unlock()
			return fmt.Errorf("task %q is not configured", n)
		}
	}
	for name, e := range c.tasks {
		if (len(names) == 0 && e.spec.Enabled) || slices.Contains(names, name) {
			run = append(run, e)
		}
	}
	c.mu.Unlock()
	slices.SortFunc(run, func(a, b *entry) int { return strings.Compare(a.spec.Name, b.spec.Name) })

	loopCtx, stopLoops := context.WithCancel(ctx)
	var loops sync.WaitGroup
	defer func() { stopLoops(); loops.Wait() }()
	loops.Go(func() { c.src.noteLoop(loopCtx) })
	c.w.start(&loops, loopCtx, ctx)
	for _, e := range run {
		c.subscribe(e.spec.Name, e.qs)
	}

	b := &onceBatch{taskTable: c.taskTable, runs: map[string]bool{}, done: map[string]onceResult{}}
	for _, e := range run {
		b.runs[e.spec.Name] = true
	}
	req := Request{Trigger: Due(TriggerOnce), Force: true}
	if inspect {
		req.Mode = ModePlan
	}
	var wg sync.WaitGroup
	var outMu sync.Mutex
	begin := time.Now()
	for _, e := range run {
		wg.Go(func() {
			s := e.spec
			err := b.waitUpstreams(ctx, &s)
			if err == nil {
				err = c.obs.waitReady(ctx, e.changed, &s, e.qs, wait)
			}
			var res Result
			if err == nil {
				req := req
				req.Name = s.Name
				res, err = b.run(ctx, e, req)
			}
			if err == nil {
				err = res.err
			}
			if inspect && (err == nil || gateVerdict(err) != "") { // a plan a gate holds or denies too
				outMu.Lock()
				fmt.Fprintf(out, "==> Plan for task %q\n%s\n", s.Name, strings.TrimRight(res.plan, "\n"))
				outMu.Unlock()
			}
			if err != nil {
				c.log.Error("task failed", "task_name", s.Name, "error", err)
			}
			c.mu.Lock()
			b.done[s.Name] = onceResult{name: s.Name, err: err, dur: res.dur}
			c.changedLocked() // the tasks that depend on it, and the log below, look again
			c.mu.Unlock()
		})
	}
	// The runs are parallel; their "task completed" lines (CTS's, which
	// scripts count and order) come in task order, each as soon as the
	// tasks before it are done.
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, e := range run {
			if c.awaitLocked(ctx, func() bool { _, ok := b.done[e.spec.Name]; return ok }) != nil {
				return
			}
			if b.done[e.spec.Name].err == nil && !inspect {
				c.log.Info("task completed", "task_name", e.spec.Name)
			}
		}
	}()
	stopProgress := b.progress(run, begin) // once_summary.go
	wg.Wait()
	stopProgress()
	<-logged
	results := make([]onceResult, len(run)) // the summary (once_summary.go)
	var failed []string
	for i, e := range run {
		results[i] = b.done[e.spec.Name]
		if err := results[i].err; err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", e.spec.Name, err))
		}
	}
	if out != nil {
		printOnceSummary(out, results, inspect, time.Since(begin))
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d tasks failed:\n  %s", len(failed), len(run), strings.Join(failed, "\n  "))
	}
	return nil
}

// onceBatch is what RunOnce runs: the tasks, and how each one ended once
// it has. done is guarded by c.mu; a change of it is announced as a change
// of state (changedLocked).
type onceBatch struct {
	*taskTable
	runs map[string]bool
	done map[string]onceResult
}

// run records the run req as the task's request, for the workers, and
// waits until it has ended (RunOnce: nothing else makes the task due
// meanwhile).
func (c *onceBatch) run(ctx context.Context, e *entry, req Request) (Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	gen, ok := c.requestLocked(e, intent{kind: intentRun, req: req})
	if !ok {
		return Result{}, fmt.Errorf("task %q is busy", e.spec.Name)
	}
	return c.awaitIntentLocked(ctx, e, gen)
}

// waitUpstreams waits, in RunOnce, for the tasks s depends on that run too;
// it fails when one of them failed.
func (c *onceBatch) waitUpstreams(ctx context.Context, s *task.Spec) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range s.Upstreams() {
		if !c.runs[name] {
			continue // not part of this run: its recorded outputs are used
		}
		if err := c.awaitLocked(ctx, func() bool { _, ok := c.done[name]; return ok }); err != nil {
			return err
		}
		if c.done[name].err != nil {
			return fmt.Errorf("not run: upstream task %q failed", name)
		}
	}
	return nil
}

// ErrRefused is wrapped by the error of a task one of whose queries Consul
// refuses for good (an unknown datacenter, a namespace on Consul CE): -once
// and task creation fail at once with Consul's answer, while the daemon
// keeps retrying the query.
var ErrRefused = errors.New("consul refused a query of the task")

// Refusals is implemented by watchers that know when Consul refused a query
// for good (the watch registry does).
type Refusals interface {
	RefusedError(key string) error
}
