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
// not empty), in parallel up to MaxParallel, waiting up to wait for each
// task's data. With inspect set it plans and writes each plan to out. It
// returns an error naming every task that failed.
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

	loopCtx, stopLoop := context.WithCancel(ctx)
	defer stopLoop()
	go c.noteLoop(loopCtx)
	for _, e := range run {
		c.subscribe(e.spec.Name, &e.spec)
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []string
	var outMu sync.Mutex
	// Chained tasks run after the ones they depend on (of those that run).
	done := make(map[string]chan struct{}, len(run))
	var failedSet sync.Map
	for _, e := range run {
		done[e.spec.Name] = make(chan struct{})
	}
	begin := time.Now()
	results := make([]onceResult, len(run)) // the summary (once_summary.go)
	for i, e := range run {
		wg.Go(func() {
			s := e.spec
			defer close(done[s.Name])
			err := c.waitUpstreams(ctx, &s, done, &failedSet)
			if err == nil {
				err = c.waitReady(ctx, e, &s, wait)
			}
			var res outcome
			var release func()
			if err == nil {
				release, err = c.acquireSlot(ctx)
			}
			if err == nil {
				t0 := time.Now()
				req := Request{Name: s.Name, Trigger: Due(TriggerOnce), Force: true}
				if inspect {
					req.Mode = ModePlan
				}
				res = c.reconcile(ctx, e, &s, req)
				results[i].dur = time.Since(t0)
				release()
				err = res.err
			}
			results[i].name, results[i].err = s.Name, err
			if err != nil {
				failedSet.Store(s.Name, true)
			}
			if inspect && err == nil {
				outMu.Lock()
				fmt.Fprintf(out, "==> Plan for task %q\n%s\n", s.Name, strings.TrimRight(res.plan, "\n"))
				outMu.Unlock()
			}
			if err != nil {
				c.log.Error("task failed", "task_name", s.Name, "error", err)
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%s: %v", s.Name, err))
				mu.Unlock()
			}
		})
	}
	// The runs are parallel; their "task completed" lines (CTS's, which
	// scripts count and order) come in task order, each as soon as the
	// tasks before it are done.
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		for _, e := range run {
			<-done[e.spec.Name]
			if _, bad := failedSet.Load(e.spec.Name); !bad && !inspect {
				c.log.Info("task completed", "task_name", e.spec.Name)
			}
		}
	}()
	stopProgress := c.onceProgress(run, done, begin) // once_summary.go
	wg.Wait()
	stopProgress()
	<-logged
	if out != nil {
		printOnceSummary(out, results, inspect, time.Since(begin))
	}
	if len(failed) > 0 {
		slices.Sort(failed)
		return fmt.Errorf("%d of %d tasks failed:\n  %s", len(failed), len(run), strings.Join(failed, "\n  "))
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

// refused returns an error naming the task, the query and Consul's answer
// when Consul refuses one of the task's queries for good.
func (c *Controller) refused(s *task.Spec) error {
	r, ok := c.opts.Watcher.(Refusals)
	if !ok {
		return nil
	}
	for _, q := range append(StaticQueries(s), DynamicQueries(s, c.get)...) {
		if err := r.RefusedError(q.Key()); err != nil {
			return fmt.Errorf("%w %q: query %s: %w", ErrRefused, s.Name, q.Key(), err)
		}
	}
	return nil
}

// waitReady blocks until every query the task needs has a result. It fails
// at once when Consul refuses one of them for good.
func (c *Controller) waitReady(ctx context.Context, e *entry, s *task.Spec, wait time.Duration) error {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		if _, ready := Fingerprint(s, c.get, c.digest); ready {
			return nil
		}
		if err := c.refused(s); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return fmt.Errorf("timed out after %s waiting for data from Consul", wait)
		case <-e.changed:
		}
	}
}
