package reconcile

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/policy"
)

// onceResult is how one task of RunOnce ended.
type onceResult struct {
	name string
	err  error
	dur  time.Duration // of its run (0: it did not run)
}

// printOnceSummary writes the table that ends -once and -inspect on
// standard output: one line per task (result, run time, its error in one
// line: Terraform's diagnostic summary where there is one) and the totals.
func printOnceSummary(w io.Writer, results []onceResult, inspect bool, total time.Duration) {
	ok, verb := "succeeded", "Run"
	if inspect {
		ok, verb = "planned", "Plan"
	}
	failed := 0
	for _, r := range results {
		if r.err != nil {
			failed++
		}
	}
	fmt.Fprintf(w, "\n==> %s summary: %d tasks, %d %s, %d failed, in %s\n", verb, len(results), len(results)-failed, ok, failed,
		total.Round(100*time.Millisecond))
	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "    TASK\tRESULT\tDURATION\tERROR")
	for _, r := range results {
		res, dur, msg := ok, "-", ""
		if r.dur > 0 {
			dur = r.dur.Round(100 * time.Millisecond).String()
		}
		if r.err != nil {
			// Terraform's diagnostic summary, not the detail that may
			// start with a provisioner's whole command line.
			res, msg = "failed", firstLine(driver.ErrorSummary(r.err), 160)
			if v := gateVerdict(r.err); v != "" {
				res = v
			}
		}
		fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\n", r.name, res, dur, msg)
	}
	_ = tw.Flush()
	for _, l := range strings.SplitAfter(table.String(), "\n") {
		fmt.Fprint(w, strings.TrimRight(l, " \n")+strings.Repeat("\n", strings.Count(l, "\n")))
	}
}

// gateVerdict is "held" or "denied" when err is a safety gate's verdict
// (gates.go), "" otherwise.
func gateVerdict(err error) string {
	var held *HeldError
	var denied *policy.DeniedError
	switch {
	case errors.As(err, &held):
		return "held"
	case errors.As(err, &denied):
		return "denied"
	}
	return ""
}

// firstLine is s's first non-empty line, cut to max bytes.
func firstLine(s string, max int) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > max {
				l = l[:max] + "..."
			}
			return l
		}
	}
	return ""
}

// OnceProgressEvery is how often -once and -inspect log which tasks they
// still wait for, on long work.
var OnceProgressEvery = 30 * time.Second

// progress logs, every OnceProgressEvery until stop is called, the tasks
// of run that have not ended yet and for how long -once has been running.
func (b *onceBatch) progress(run []*entry, begin time.Time) (stop func()) {
	c := b
	quit := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(OnceProgressEvery)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			var waiting []string
			c.mu.Lock()
			for _, e := range run {
				if _, ok := b.done[e.spec.Name]; !ok {
					waiting = append(waiting, e.spec.Name)
				}
			}
			c.mu.Unlock()
			c.log.Info("still running", "tasks_done", len(run)-len(waiting), "tasks", len(run),
				"waiting_for", strings.Join(waiting, ","), "elapsed", time.Since(begin).Round(time.Second))
		}
	}()
	return func() { close(quit); <-ended }
}
