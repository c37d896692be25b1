package cli

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/store"
)

var update = flag.Bool("update", false, "rewrite the testdata/*.golden files with the output the commands print now")

// golden compares got with testdata/name.golden (or writes it with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(got), 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to write it)", err, t.Name())
	}
	if string(want) != got {
		t.Errorf("output differs from %s (-want +got):\n%s", p, lineDiff(string(want), got))
	}
}

// lineDiff lists the lines that differ, with their numbers.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "%d:\n-%q\n+%q\n", i+1, wl, gl)
		}
	}
	return b.String()
}

var taskFileRe = regexp.MustCompile(`/[^ \n']*/task\.hcl`)

var uuidRe = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// TestGolden runs every subcommand as a CTS script would (against the API
// on a test server, answering its prompts) and compares what it prints,
// byte for byte, with testdata/*.golden: CTS's lines must stay as they are.
// Request ids, the server's address and temporary paths are replaced by
// placeholders.
func TestGolden(t *testing.T) {
	file := writeTaskFile(t)
	cases := []struct {
		name    string
		stdin   string
		changes bool
		args    []string
		setup   func(*fakeCtrl)
	}{
		{"help", "", true, []string{"-help"}, nil},
		{"no_command", "", true, nil, nil},
		{"task_help", "", true, []string{"task", "-help"}, nil},
		{"start_help", "", true, []string{"start", "-help"}, nil},
		{"start_no_config", "", true, []string{"start"}, nil},
		{"mistyped_command", "", true, []string{"strat"}, nil},
		{"start_mistyped_flag", "", true, []string{"start", "-onec", "-config-file=x.hcl"}, nil},
		{"task_mistyped_subcommand", "", true, []string{"task", "enabel", "a"}, nil},
		{"task_enable_mistyped_flag", "", true, []string{"task", "enable", "-auto-aprove", "a"}, nil},
		{"start_bad_log_format", "", true, []string{"start", "-config-file=x.hcl", "-log-format=xml"}, nil},
		{"start_stray_argument", "", true, []string{"start", "stray", "-config-file=x.hcl"}, nil},
		{"commandless_no_config", "", true, []string{"-once"}, nil},
		{"commandless_help", "", true, []string{"-once", "-help"}, nil},
		{"commandless_config_help", "", true, []string{"-config-file=x.hcl", "-h"}, nil},

		{"task_enable_help", "", true, []string{"task", "enable", "-help"}, nil},
		{"task_enable_yes", "yes\n", true, []string{"task", "enable", "a"}, nil},
		{"task_enable_no", "no\n", true, []string{"task", "enable", "a"}, nil},
		{"task_enable_auto_approve", "", true, []string{"task", "enable", "-auto-approve", "a"}, nil},
		{"task_enable_no_changes", "", false, []string{"task", "enable", "a"}, nil},
		{"task_enable_unknown", "", true, []string{"task", "enable", "nope"}, nil},
		{"task_enable_no_args", "", true, []string{"task", "enable"}, nil},
		{"task_enable_flag_after_name", "", true, []string{"task", "enable", "a", "-auto-approve"}, nil},
		{"task_enable_bad_flag", "", true, []string{"task", "enable", "-bogus", "a"}, nil},

		{"task_disable_help", "", true, []string{"task", "disable", "-help"}, nil},
		{"task_disable", "", true, []string{"task", "disable", "a"}, nil},
		{"task_disable_unknown", "", true, []string{"task", "disable", "nope"}, nil},
		{"task_disable_two_args", "", true, []string{"task", "disable", "a", "b"}, nil},

		{"task_create_help", "", true, []string{"task", "create", "-help"}, nil},
		{"task_create_yes", "yes\n", true, []string{"task", "create", "-task-file=" + file}, nil},
		{"task_create_no", "no\n", true, []string{"task", "create", "-task-file=" + file}, nil},
		{"task_create_no_task_file", "", true, []string{"task", "create"}, nil},
		{"task_create_stray_argument", "", true, []string{"task", "create", "-auto-approve", "-task-file=" + file, "stray"}, nil},
		{"task_create_exists", "", true, []string{"task", "create", "-task-file=" + writeTaskFileNamed(t, "a")}, nil},

		{"task_delete_help", "", true, []string{"task", "delete", "-help"}, nil},
		{"task_delete_yes", "yes\n", true, []string{"task", "delete", "a"}, nil},
		{"task_delete_no", "no\n", true, []string{"task", "delete", "a"}, nil},
		{"task_delete_auto_approve", "", true, []string{"task", "delete", "-auto-approve", "a"}, nil},
		{"task_delete_destroy", "yes\n", true, []string{"task", "delete", "-destroy", "a"}, nil},
		{"task_delete_unknown", "yes\n", true, []string{"task", "delete", "nope"}, nil},

		{"status_help", "", true, []string{"status", "-help"}, nil},

		{"task_logs_help", "", true, []string{"task", "logs", "-help"}, nil},
		{"task_logs_no_runs", "", true, []string{"task", "logs", "a"}, nil},
		{"task_logs_unknown_task", "", true, []string{"task", "logs", "nope"}, nil},
		{"task_logs_no_log_kept", "", true, []string{"task", "logs", "a"}, func(f *fakeCtrl) {
			f.events["a"] = []store.Event{{ID: "run-2", TaskName: "a", Kind: store.KindApply,
				StartTime: time.Date(2026, 11, 25, 21, 34, 47, 0, time.Local)}}
		}},
		{"task_run_help", "", true, []string{"task", "run", "-help"}, nil},
		{"task_run_yes", "yes\n", true, []string{"task", "run", "a"}, runEvent(true)},
		{"task_run_no", "no\n", true, []string{"task", "run", "a"}, runEvent(true)},
		{"task_run_auto_approve", "", true, []string{"task", "run", "-auto-approve", "a"}, runEvent(true)},
		{"task_run_no_changes", "", false, []string{"task", "run", "a"}, runEvent(true)},
		{"task_run_failed", "", true, []string{"task", "run", "-auto-approve", "a"}, runEvent(false)},
		{"task_run_held", "", true, []string{"task", "run", "-auto-approve", "a"}, func(f *fakeCtrl) {
			f.runErr = &reconcile.HeldError{Reason: "plan destroys 3 of 4 resources (max_destroy_percent 50)", Plan: "plan-8"}
		}},
		{"task_run_unknown", "", true, []string{"task", "run", "nope"}, nil},
		{"task_run_no_args", "", true, []string{"task", "run"}, nil},

		{"task_logs_unknown_run", "", true, []string{"task", "logs", "-run=run-9", "a"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeCtrl(specNamed("a"))
			f.changes = c.changes
			if c.setup != nil {
				c.setup(f)
			}
			ts := serve(t, f)
			code, out, errOut := run(t, c.stdin, c.args...)
			got := fmt.Sprintf("$ ctsync %s\nexit %d\n--- stdout\n%s--- stderr\n%s", strings.Join(c.args, " "), code, out, errOut)
			got = strings.ReplaceAll(got, ts.URL, "<address>")
			got = taskFileRe.ReplaceAllString(got, "<dir>/task.hcl")
			got = uuidRe.ReplaceAllString(got, "<request id>")
			golden(t, c.name, got)
		})
	}
}

// runEvent makes the fake controller's RunNow record an apply of task a
// that succeeded (with its plan) or failed (with its error).
func runEvent(success bool) func(*fakeCtrl) {
	return func(f *fakeCtrl) {
		start := time.Date(2026, 11, 25, 21, 34, 47, 0, time.UTC)
		ev := store.Event{ID: "run-7", TaskName: "a", Kind: store.KindApply, Trigger: "api", Success: success,
			StartTime: start, EndTime: start.Add(2340 * time.Millisecond), Plan: &store.PlanSummary{Add: 2}}
		if !success {
			ev.Error = &store.EventError{Message: "terraform apply: exit status 1"}
			ev.ErrorSummary = "Error: creating firewall rule: quota exceeded"
			f.runErr = errors.New("terraform apply: exit status 1")
		}
		f.runEvent = &ev
	}
}
