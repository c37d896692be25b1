package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/api/client"
	"github.com/ctsync/ctsync/internal/store"
)

// now is the clock of the status command (tests fix it).
var now = time.Now

// runStatus handles `ctsync status [options] [task name]`: a table of the
// tasks with their status, last run and next scheduled run.
func runStatus(args []string, stdout, stderr io.Writer) int {
	c := newClientCmd("status", "[options] [task name]", `  Status shows every task of a running daemon (or the named one): whether
  it is enabled, its status (from its latest runs), its last run and what
  triggered it, and its next scheduled run. A task whose plan a safety gate
  holds for approval is waiting; its plan's id, counts and reason follow
  the table ('ctsync task approve' and 'task reject' decide on it).
`, stdout, stderr)
	filter := c.fs.String("status", "", "Only tasks with this status: successful, errored, critical, unknown or waiting (a plan held for approval).")
	pos, code := c.parse(args)
	if code >= 0 {
		return code
	}
	if len(pos) > 1 {
		return c.ui.failCode(ExitRequiredFlags, "Error: status takes at most one task name",
			fmt.Sprintf("%d arguments were passed to the command: '%s'", len(pos), strings.Join(pos, ", ")), moreHelp(c.name))
	}
	name := ""
	if len(pos) == 1 {
		name = pos[0]
	}
	cl, err := c.client()
	if err != nil {
		return c.ui.fail("Error: unable to create client", err.Error())
	}
	ctx, cancel := commandContext()
	defer cancel()
	tasks, err := cl.TaskStatuses(ctx, name, client.StatusQuery{IncludeEvents: true, Status: *filter})
	if err != nil {
		return c.ui.fail("Error: unable to get the status from "+cl.Address(), clientError(cl, err))
	}
	printStatus(stdout, tasks, now())
	return ExitOK
}

func printStatus(w io.Writer, tasks map[string]api.TaskStatus, t time.Time) {
	if len(tasks) == 0 {
		fmt.Fprintln(w, "No tasks.")
		return
	}
	names := make([]string, 0, len(tasks))
	for n := range tasks {
		names = append(names, n)
	}
	slices.Sort(names)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tENABLED\tSTATUS\tLAST RUN\tTRIGGER\tNEXT RUN")
	var failures, held []string
	for _, n := range names {
		ts := tasks[n]
		last, trigger := "never", "-"
		if len(ts.Events) > 0 {
			ev := ts.Events[0]
			at := ev.EndTime
			if at.IsZero() {
				at = ev.StartTime
			}
			result := "succeeded"
			if !ev.Success {
				result = "failed"
				if f := failureLine(ev); f != "" {
					failures = append(failures, n+": "+f)
				}
			}
			last = fmt.Sprintf("%s ago (%s)", ago(t.Sub(at)), result)
			if ev.Trigger != "" {
				trigger = ev.Trigger
			}
		}
		if h := ts.Held; h != nil {
			held = append(held, heldLine(n, h, t))
		}
		enabled := "yes"
		if !ts.Enabled {
			enabled = "no"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n, enabled, ts.Status, last, trigger, nextRun(ts, t))
	}
	_ = tw.Flush()
	if len(held) > 0 {
		fmt.Fprintln(w, "\nWaiting for approval:")
		for _, h := range held {
			fmt.Fprintf(w, "  %s\n", h)
		}
	}
	var removals []string
	for _, n := range names {
		for _, r := range tasks[n].PendingRemovals {
			removals = append(removals, fmt.Sprintf("%s: %s %s gone since %s; removed in %s (%s) unless it returns",
				n, r.Kind, r.ID, r.Since.Local().Format("15:04:05"), ago(r.At.Sub(t)), r.At.Local().Format("15:04:05")))
		}
	}
	if len(removals) > 0 {
		fmt.Fprintln(w, "\nPending removals (removal_delay):")
		for _, r := range removals {
			fmt.Fprintf(w, "  %s\n", r)
		}
	}
	if len(failures) > 0 {
		fmt.Fprintln(w, "\nLatest errors:")
		for _, f := range failures {
			fmt.Fprintf(w, "  %s\n", f)
		}
	}
}

// heldLine describes a held plan: its id, counts and reason, when it
// expires and the commands that decide on it.
func heldLine(name string, h *api.HeldStatus, t time.Time) string {
	line := fmt.Sprintf("%s: plan %s (+%d ~%d -%d): %s", name, h.ID, h.Add, h.Change, h.Destroy, h.Reason)
	if h.Expires != nil {
		line += fmt.Sprintf("; expires in %s", ago(h.Expires.Sub(t)))
	}
	return line + fmt.Sprintf("\n    %[1]s task approve %[2]s | %[1]s task reject %[2]s", Name, name)
}

// nextRun describes when the task runs next.
func nextRun(ts api.TaskStatus, t time.Time) string {
	switch {
	case ts.Active:
		return "running now"
	case ts.Held != nil:
		return "after approval"
	case !ts.Enabled:
		return "-"
	case ts.Retry != nil && ts.Retry.NextAt.Sub(t) < time.Second:
		return fmt.Sprintf("retry %d due now", ts.Retry.Attempt) // as the dashboard says it
	case ts.Retry != nil:
		return fmt.Sprintf("retry %d in %s (%s)", ts.Retry.Attempt, ago(ts.Retry.NextAt.Sub(t)), ts.Retry.NextAt.Local().Format("15:04:05"))
	case ts.NextRun != nil:
		return fmt.Sprintf("in %s (%s)", ago(ts.NextRun.Sub(t)), ts.NextRun.Local().Format("2006-01-02 15:04:05"))
	}
	return "on change"
}

// failureLine is a failed run's error in one line: Terraform's
// diagnostic summary when known, and whether the failure is terminal.
func failureLine(ev store.Event) string {
	msg := ev.ErrorSummary
	if msg == "" && ev.Error != nil {
		msg = oneLine(ev.Error.Message)
	}
	if msg != "" && ev.Terminal {
		msg += " [terminal: not retried until the task's desired state changes]"
	}
	return msg
}

// ago renders a duration coarsely: 45s, 12m, 3h5m, 2d4h.
func ago(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " ..."
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
