package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/api/testcerts"
	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// fakeCtrl implements api.Controller and records the calls it gets.
type fakeCtrl struct {
	mu        sync.Mutex
	tasks     map[string]task.Spec
	events    map[string][]store.Event
	changes   bool
	calls     []string
	deleted   chan string
	nextRun   time.Time
	activeSet map[string]bool
	changed   chan struct{} // closed on a delete (StateChanged)
	runEvent  *store.Event  // recorded (newest first) by RunNow
	runErr    error         // returned by RunNow
}

func newFakeCtrl(specs ...task.Spec) *fakeCtrl {
	f := &fakeCtrl{tasks: map[string]task.Spec{}, events: map[string][]store.Event{}, changes: true,
		deleted: make(chan string, 10), activeSet: map[string]bool{}}
	for _, s := range specs {
		f.tasks[s.Name] = s
	}
	return f
}

func (f *fakeCtrl) record(format string, args ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeCtrl) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeCtrl) Tasks() []reconcile.TaskState {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []reconcile.TaskState
	for _, s := range f.tasks {
		out = append(out, reconcile.TaskState{Spec: s, Active: f.activeSet[s.Name], NextRun: f.nextRunOf(s)})
	}
	slices.SortFunc(out, func(a, b reconcile.TaskState) int { return strings.Compare(a.Spec.Name, b.Spec.Name) })
	return out
}

func (f *fakeCtrl) nextRunOf(s task.Spec) time.Time {
	if s.Condition.Schedule != nil {
		return f.nextRun
	}
	return time.Time{}
}

func (f *fakeCtrl) Task(name string) (reconcile.TaskState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.tasks[name]
	if !ok {
		return reconcile.TaskState{}, reconcile.ErrNotFound
	}
	return reconcile.TaskState{Spec: s, NextRun: f.nextRunOf(s)}, nil
}

func (f *fakeCtrl) Create(_ context.Context, spec task.Spec, runNow bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("create %s runNow=%v", spec.Name, runNow)
	f.tasks[spec.Name] = spec
	return nil
}

func (f *fakeCtrl) Inspect(_ context.Context, spec task.Spec) (reconcile.PlanResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("inspect %s", spec.Name)
	return f.plan(), nil
}

func (f *fakeCtrl) plan() reconcile.PlanResult {
	if !f.changes {
		return reconcile.PlanResult{Plan: "No changes."}
	}
	return reconcile.PlanResult{Plan: "Plan: 2 to add, 0 to change, 0 to destroy.", ChangesPresent: true}
}

func (f *fakeCtrl) SetEnabled(_ context.Context, name string, enabled bool, mode reconcile.EnableMode) (reconcile.PlanResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("set %s enabled=%v mode=%q", name, enabled, mode)
	s, ok := f.tasks[name]
	if !ok {
		return reconcile.PlanResult{}, reconcile.ErrNotFound
	}
	if mode == "inspect" {
		return f.plan(), nil
	}
	s.Enabled = enabled
	f.tasks[name] = s
	return reconcile.PlanResult{}, nil
}

func (f *fakeCtrl) RunNow(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("run %s", name)
	if f.runEvent != nil {
		ev := *f.runEvent
		ev.ID = reconcile.RunIDFrom(ctx) // the run the call started
		f.events[name] = append([]store.Event{ev}, f.events[name]...)
	}
	return f.runErr
}

func (f *fakeCtrl) Delete(_ context.Context, name string, destroy bool) error {
	f.mu.Lock()
	f.record("delete %s destroy=%v", name, destroy)
	delete(f.tasks, name)
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
	f.mu.Unlock()
	f.deleted <- name
	return nil
}

func (f *fakeCtrl) StateChanged() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.changed == nil {
		f.changed = make(chan struct{})
	}
	return f.changed
}

func (f *fakeCtrl) Events(name string) []store.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]store.Event(nil), f.events[name]...)
}

func specNamed(name string) task.Spec {
	return task.Spec{Name: name, Module: "org/m/x", Enabled: true, BufferPeriod: &task.BufferPeriod{},
		Condition: task.Condition{Services: &task.ServicesCondition{ServicesSelector: task.ServicesSelector{Names: []string{"web"}}}}}
}

// serve runs the API with the fake controller on an httptest server and
// points CTS_ADDRESS at it.
func serve(t *testing.T, f *fakeCtrl) *httptest.Server {
	t.Helper()
	return serveWith(t, api.Options{Controller: f})
}

// serveWith is serve with the API's options.
func serveWith(t *testing.T, opts api.Options) *httptest.Server {
	t.Helper()
	srv, err := api.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	t.Setenv("CTS_ADDRESS", ts.URL)
	return ts
}

// run runs the CLI with stdin as the answers.
func run(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	old := Stdin
	Stdin = strings.NewReader(stdin)
	t.Cleanup(func() { Stdin = old })
	var out, errb bytes.Buffer
	code = Run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func wantCalls(t *testing.T, f *fakeCtrl, want ...string) {
	t.Helper()
	if got := f.Calls(); !slices.Equal(got, want) {
		t.Errorf("calls:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// prompt is the start of the question; what cancelling leaves as it is
// follows (see the golden files).
const prompt = "    Only 'yes' will be accepted to approve; any other answer, or none, cancels: "

func TestTaskEnable(t *testing.T) {
	cases := []struct {
		name, stdin string
		args        []string
		changes     bool
		calls       []string
		out         []string
		noPrompt    bool
	}{
		{"yes", "yes\n", nil, true,
			[]string{`set a enabled=true mode="inspect"`, `set a enabled=true mode="now"`},
			[]string{"Plan: 2 to add", "    Do you want to perform these actions for 'a'?\n", prompt, "==> 'a' enable complete!"}, false},
		{"yes without newline", "yes", nil, true,
			[]string{`set a enabled=true mode="inspect"`, `set a enabled=true mode="now"`}, nil, false},
		{"no", "no\n", nil, true,
			[]string{`set a enabled=true mode="inspect"`}, []string{"Cancelled enabling task 'a'"}, false},
		{"blank", "\n", nil, true,
			[]string{`set a enabled=true mode="inspect"`}, []string{"Cancelled enabling task 'a'"}, false},
		{"eof", "", nil, true,
			[]string{`set a enabled=true mode="inspect"`}, []string{"Cancelled enabling task 'a'"}, false},
		{"Yes is not yes", "Yes\n", nil, true,
			[]string{`set a enabled=true mode="inspect"`}, []string{"Cancelled enabling task 'a'"}, false},
		{"auto-approve", "", []string{"-auto-approve"}, true,
			[]string{`set a enabled=true mode="inspect"`, `set a enabled=true mode="now"`}, nil, true},
		{"no changes", "", nil, false,
			[]string{`set a enabled=true mode="inspect"`, `set a enabled=true mode=""`}, []string{"    No changes.\n==> 'a' enable complete!\n"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeCtrl(specNamed("a"))
			f.changes = c.changes
			serve(t, f)
			args := append([]string{"task", "enable"}, c.args...)
			code, out, errOut := run(t, c.stdin, append(args, "a")...)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			wantCalls(t, f, c.calls...)
			for _, w := range c.out {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if c.noPrompt == strings.Contains(out, "Enter a value:") {
				t.Errorf("prompt shown=%v, want %v:\n%s", !c.noPrompt, !c.noPrompt, out)
			}
		})
	}
}

// TestTaskFlagAfterName: as CTS, flags come before the task name; a flag
// after it is a second argument, and nothing is sent.
func TestTaskFlagAfterName(t *testing.T) {
	f := newFakeCtrl(specNamed("a"))
	serve(t, f)
	code, _, errOut := run(t, "", "task", "enable", "a", "-auto-approve")
	if code != ExitRequiredFlags || !strings.Contains(errOut, "All flags are required to appear before positional arguments") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	wantCalls(t, f)
}

func TestTaskCommandErrors(t *testing.T) {
	f := newFakeCtrl(specNamed("a"))
	serve(t, f)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"task"}, ExitRequiredFlags, "Usage: ctsync task <subcommand> [-help]"},
		{[]string{"task", "frobnicate"}, ExitFlagParse, "unknown task subcommand"},
		{[]string{"task", "enable"}, ExitRequiredFlags, "==> Error: this command requires one argument: [options] <task name>\n    No arguments were passed to the command\n    For additional help try 'ctsync task enable --help'\n"},
		{[]string{"task", "enable", "a", "b"}, ExitRequiredFlags, "    2 arguments were passed to the command: 'a, b'\n"},
		{[]string{"task", "enable", "-bogus", "a"}, ExitFlagParse, "==> Error: unsupported arguments in flags '-bogus, a'\n    flag provided but not defined: -bogus\n"},
		{[]string{"task", "disable"}, ExitRequiredFlags, "requires one argument"},
		{[]string{"task", "delete"}, ExitRequiredFlags, "requires one argument"},
		{[]string{"task", "create"}, ExitRequiredFlags, "==> Error: unable to create request\n    no task file provided\n    For additional help try 'ctsync task create --help'\n"},
		{[]string{"task", "create", "-task-file=/does/not/exist.hcl", "extra"}, ExitError, "Warning: ignoring arguments after the flags: 'extra'"},
		{[]string{"task", "enable", "nope"}, ExitError, "==> Error: unable to generate plan for 'nope'\n    404 Not Found: a task with name 'nope' does not exist or has not been initialized yet"},
		{[]string{"task", "disable", "nope"}, ExitError, "a task with name 'nope' does not exist"},
		{[]string{"task", "delete", "-auto-approve", "nope"}, ExitError, "==> Error: unable to delete 'nope'\n    404 Not Found: a task with name 'nope' does not exist"},
		{[]string{"task", "create", "-task-file=/does/not/exist.hcl"}, ExitError, "cannot read task file"},
		{[]string{"status", "a", "b"}, ExitRequiredFlags, "at most one task name"},
		{[]string{"status", "-status=bogus"}, ExitError, "query parameter status"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, _, errOut := run(t, "", c.args...)
			if code != c.code || !strings.Contains(errOut, c.want) {
				t.Errorf("exit %d (want %d), stderr:\n%s\nwant %q", code, c.code, errOut, c.want)
			}
		})
	}
	for _, h := range [][]string{{"task", "-h"}, {"task", "enable", "-h"}, {"status", "-h"}} {
		if code, _, _ := run(t, "", h...); code != ExitOK {
			t.Errorf("%v: exit %d", h, code)
		}
	}
	wantCalls(t, f) // unknown tasks fail before reaching the controller
}

func TestTaskDisable(t *testing.T) {
	f := newFakeCtrl(specNamed("a"))
	serve(t, f)
	code, out, errOut := run(t, "", "task", "disable", "a")
	if code != ExitOK || !strings.Contains(out, "==> 'a' disable complete!") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	wantCalls(t, f, `set a enabled=false mode=""`)
	if strings.Contains(out, "Enter a value") {
		t.Error("disable prompted")
	}
}

func writeTaskFile(t *testing.T) string {
	t.Helper()
	return writeTaskFileNamed(t, "new")
}

// writeTaskFileNamed writes a task file (with a variable file) for a task
// of that name.
func writeTaskFileNamed(t *testing.T, name string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "vars.tfvars"), []byte("size = 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "task.hcl")
	src := fmt.Sprintf(`task {
  name           = %q
  module         = "org/m/x"
  variable_files = [%q]
  condition "services" {
    names = ["web"]
  }
}
`, name, filepath.Join(dir, "vars.tfvars"))
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTaskCreate(t *testing.T) {
	file := writeTaskFile(t)
	for _, c := range []struct {
		name, stdin string
		args        []string
		calls       []string
		out         string
	}{
		{"yes", "yes\n", nil, []string{"inspect new", "create new runNow=true"}, "==> Task 'new' created\n"},
		{"no", "no\n", nil, []string{"inspect new"}, "Cancelled creating task 'new'"},
		{"blank", "\n", nil, []string{"inspect new"}, "Cancelled creating task 'new'"},
		{"auto-approve", "", []string{"-auto-approve"}, []string{"inspect new", "create new runNow=true"}, "==> Task 'new' created\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeCtrl()
			serve(t, f)
			args := append([]string{"task", "create", "-task-file", file}, c.args...)
			code, out, errOut := run(t, c.stdin, args...)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			wantCalls(t, f, c.calls...)
			for _, w := range []string{c.out, "Request ID: ", "Plan: 2 to add", "Request Payload:"} {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if (c.stdin != "") != strings.Contains(out, prompt) {
				t.Errorf("prompt:\n%s", out)
			}
			if strings.Contains(c.out, "created") {
				got, _ := f.Task("new")
				if got.Spec.Variables["size"] != "3" || !got.Spec.Enabled {
					t.Errorf("created task %+v", got.Spec)
				}
			}
		})
	}
}

func TestTaskCreateInvalidFile(t *testing.T) {
	f := newFakeCtrl()
	serve(t, f)
	p := filepath.Join(t.TempDir(), "bad.hcl")
	if err := os.WriteFile(p, []byte("task {\n  name = \"x\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, "", "task", "create", "-task-file="+p)
	if code != ExitError || !strings.Contains(errOut, "bad.hcl") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	wantCalls(t, f)
}

func TestTaskDelete(t *testing.T) {
	for _, c := range []struct {
		name, stdin string
		args        []string
		deleted     bool
		notes       []string
	}{
		{"yes", "yes\n", nil, true, []string{"This action cannot be undone.", "will not destroy the infrastructure"}},
		{"no", "no\n", nil, false, nil},
		{"blank", "", nil, false, nil},
		{"destroy", "yes\n", []string{"-destroy"}, true, []string{"This action cannot be undone.", "will be destroyed (terraform destroy)"}},
		{"auto-approve", "", []string{"-auto-approve"}, true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeCtrl(specNamed("a"))
			serve(t, f)
			args := append([]string{"task", "delete"}, c.args...)
			code, out, errOut := run(t, c.stdin, append(args, "a")...)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, n := range c.notes {
				if !strings.Contains(out, n) {
					t.Errorf("prompt lacks %q:\n%s", n, out)
				}
			}
			if !c.deleted {
				if !strings.Contains(out, "Cancelled deleting task 'a'") {
					t.Errorf("output:\n%s", out)
				}
				wantCalls(t, f)
				return
			}
			select {
			case <-f.deleted:
			case <-time.After(testutil.Scale(10 * time.Second)):
				t.Fatal("not deleted")
			}
			wantCalls(t, f, fmt.Sprintf("delete a destroy=%v", slices.Contains(c.args, "-destroy")))
			if !strings.Contains(out, "==> Task 'a' has been marked for deletion and will be deleted when not running.\n") || !strings.Contains(out, "Request ID: ") {
				t.Errorf("output:\n%s", out)
			}
		})
	}
}

func TestStatusCommand(t *testing.T) {
	base := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	old := now
	now = func() time.Time { return base }
	t.Cleanup(func() { now = old })

	sched := specNamed("nightly")
	sched.Condition = task.Condition{Schedule: &task.ScheduleCondition{Cron: "0 3 * * *"}}
	off := specNamed("off")
	off.Enabled = false
	f := newFakeCtrl(specNamed("web"), sched, off, specNamed("busy"))
	f.nextRun = base.Add(15 * time.Hour)
	f.activeSet["busy"] = true
	f.events["web"] = []store.Event{
		{ID: "2", TaskName: "web", StartTime: base.Add(-3 * time.Minute), EndTime: base.Add(-2 * time.Minute),
			Error: &store.EventError{Message: "apply: Error: no provider\nmore"}, Trigger: "health/service/web"},
		{ID: "1", TaskName: "web", Success: true, EndTime: base.Add(-time.Hour)},
	}
	f.events["nightly"] = []store.Event{{ID: "3", TaskName: "nightly", Success: true, EndTime: base.Add(-9 * time.Hour), Trigger: "schedule"}}
	serve(t, f)

	code, out, errOut := run(t, "", "status")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	want := [][]string{
		{"TASK", "ENABLED", "STATUS", "LAST RUN", "TRIGGER", "NEXT RUN"},
		{"busy", "yes", "unknown", "never", "-", "running now"},
		{"nightly", "yes", "successful", "9h0m ago (succeeded)", "schedule", "in 15h0m"},
		{"off", "no", "unknown", "never", "-", "-"},
		{"web", "yes", "errored", "2m ago (failed)", "health/service/web", "on change"},
	}
	for i, w := range want {
		for _, cell := range w {
			if !strings.Contains(lines[i], cell) {
				t.Errorf("line %d %q lacks %q\n%s", i, lines[i], cell, out)
			}
		}
	}
	if !strings.Contains(out, "Latest errors:\n  web: apply: Error: no provider ...") {
		t.Errorf("errors section:\n%s", out)
	}

	code, out, _ = run(t, "", "status", "-status=SUCCESSFUL")
	if code != ExitOK || !strings.Contains(out, "nightly") || strings.Contains(out, "web") {
		t.Errorf("filtered:\n%s", out)
	}
	code, out, _ = run(t, "", "status", "web")
	if code != ExitOK || !strings.Contains(out, "web") || strings.Contains(out, "nightly") {
		t.Errorf("one task:\n%s", out)
	}
	code, _, errOut = run(t, "", "status", "nope")
	if code != ExitError || !strings.Contains(errOut, "does not exist") {
		t.Errorf("unknown task: %d %s", code, errOut)
	}
	f2 := newFakeCtrl()
	serve(t, f2)
	if code, out, _ := run(t, "", "status"); code != ExitOK || !strings.Contains(out, "No tasks.") {
		t.Errorf("empty: %d %s", code, out)
	}
}

func TestClientAddressFlagsAndEnv(t *testing.T) {
	f := newFakeCtrl(specNamed("a"))
	ts := serve(t, f)
	// -http-addr wins over CTS_ADDRESS.
	t.Setenv("CTS_ADDRESS", "http://127.0.0.1:1")
	if code, _, errOut := run(t, "", "task", "disable", "-http-addr", ts.URL, "a"); code != ExitOK {
		t.Fatalf("-http-addr: %d %s", code, errOut)
	}
	// Deprecated -port replaces the port only.
	port := ts.URL[strings.LastIndex(ts.URL, ":")+1:]
	if code, _, errOut := run(t, "", "task", "disable", "-port", port, "a"); code != ExitOK {
		t.Fatalf("-port: %d %s", code, errOut)
	}
	// Without a scheme, http is assumed.
	if code, _, errOut := run(t, "", "status", "-http-addr", strings.TrimPrefix(ts.URL, "http://")); code != ExitOK {
		t.Fatalf("no scheme: %d %s", code, errOut)
	}
	// Nothing listening: exit 11 with the address.
	if code, _, errOut := run(t, "", "status"); code != ExitError || !strings.Contains(errOut, "127.0.0.1:1") {
		t.Fatalf("unreachable: %d %s", code, errOut)
	}
	t.Setenv("CTS_SSL_VERIFY", "maybe")
	if code, _, errOut := run(t, "", "status"); code != ExitFlagParse || !strings.Contains(errOut, "CTS_SSL_VERIFY") {
		t.Fatalf("bad CTS_SSL_VERIFY: %d %s", code, errOut)
	}
}

// tlsServe runs the API over TLS (mutual TLS with verify) on httptest.
func tlsServe(t *testing.T, f *fakeCtrl, certs testcerts.Files, verify bool) *httptest.Server {
	t.Helper()
	srv, err := api.New(api.Options{Controller: f})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := api.TLSConfig(config.APITLS{Enabled: true, Cert: certs.ServerCert, Key: certs.ServerKey,
		VerifyIncoming: verify, CACert: certs.CACert})
	if err != nil {
		t.Fatal(err)
	}
	// httptest adds its own certificate unless one is set; the server's
	// comes from GetCertificate (reloadable).
	cert, err := tc.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	tc.Certificates = []tls.Certificate{*cert}
	ts := httptest.NewUnstartedServer(srv.Handler())
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	ts.TLS = tc
	ts.StartTLS()
	t.Cleanup(ts.Close)
	return ts
}

func TestClientTLS(t *testing.T) {
	certs := testcerts.Generate(t)
	f := newFakeCtrl(specNamed("a"))
	ts := tlsServe(t, f, certs, false)
	t.Setenv("CTS_ADDRESS", ts.URL)

	if code, _, errOut := run(t, "", "status", "-ca-cert", certs.CACert); code != ExitOK {
		t.Fatalf("-ca-cert: %d %s", code, errOut)
	}
	if code, _, errOut := run(t, "", "status", "-ca-path", certs.CADir); code != ExitOK {
		t.Fatalf("-ca-path: %d %s", code, errOut)
	}
	t.Setenv("CTS_CACERT", certs.CACert)
	if code, _, errOut := run(t, "", "status"); code != ExitOK {
		t.Fatalf("CTS_CACERT: %d %s", code, errOut)
	}
	t.Setenv("CTS_CACERT", "")
	if code, _, errOut := run(t, "", "status"); code != ExitError || !strings.Contains(errOut, "certificate") {
		t.Fatalf("unknown CA: %d %s", code, errOut)
	}
	if code, _, errOut := run(t, "", "status", "-ssl-verify=false"); code != ExitOK {
		t.Fatalf("-ssl-verify=false: %d %s", code, errOut)
	}
	t.Setenv("CTS_SSL_VERIFY", "false")
	if code, _, errOut := run(t, "", "status"); code != ExitOK {
		t.Fatalf("CTS_SSL_VERIFY=false: %d %s", code, errOut)
	}
	t.Setenv("CTS_SSL_VERIFY", "")

	// http:// against the TLS server: a hint.
	httpURL := "http://" + strings.TrimPrefix(ts.URL, "https://")
	code, _, errOut := run(t, "", "status", "-http-addr", httpURL)
	if code != ExitError || !strings.Contains(errOut, "hint: the ctsync API may be serving HTTPS") {
		t.Fatalf("http to https: %d %s", code, errOut)
	}
}

func TestClientMutualTLS(t *testing.T) {
	certs := testcerts.Generate(t)
	f := newFakeCtrl(specNamed("a"))
	ts := tlsServe(t, f, certs, true)
	t.Setenv("CTS_ADDRESS", ts.URL)
	t.Setenv("CTS_CACERT", certs.CACert)

	if code, _, _ := run(t, "", "status"); code != ExitError {
		t.Fatalf("no client certificate: exit %d", code)
	}
	if code, _, errOut := run(t, "", "status", "-client-cert", certs.ClientCert, "-client-key", certs.ClientKey); code != ExitOK {
		t.Fatalf("client cert flags: %d %s", code, errOut)
	}
	t.Setenv("CTS_CLIENT_CERT", certs.ClientCert)
	t.Setenv("CTS_CLIENT_KEY", certs.ClientKey)
	if code, _, errOut := run(t, "", "task", "disable", "a"); code != ExitOK {
		t.Fatalf("client cert env: %d %s", code, errOut)
	}
	t.Setenv("CTS_CLIENT_KEY", "")
	if code, _, errOut := run(t, "", "status"); code != ExitError || !strings.Contains(errOut, "-client-key must be given together") {
		t.Fatalf("cert without key: %d %s", code, errOut)
	}
}

// TestTaskHelpListsDefaults: each task command's -help (and status's and
// start's) lists its flags in CTS's layout, on stdout: "    -name
// [Default: value]" (no default part when the default is empty), the
// description on the next line indented by eight spaces, an empty line
// after each. CTS's own e2e suite looks for "-auto-approve [Default:
// false]" in enable, create and delete.
func TestTaskHelpListsDefaults(t *testing.T) {
	t.Setenv("CTS_ADDRESS", "")
	want := map[string][]string{
		"enable":  {"\n    -auto-approve [Default: false]\n        Skip interactive approval", "\n    -http-addr [Default: http://localhost:8558]\n", "\n    -ssl-verify [Default: true]\n"},
		"disable": {"\n    -http-addr [Default: http://localhost:8558]\n", "\n    -port [Default: 0]\n"},
		"create":  {"\n    -auto-approve [Default: false]\n", "\n    -task-file\n        [Required] A file"},
		"delete":  {"\n    -auto-approve [Default: false]\n", "\n    -destroy [Default: false]\n"},
		"run":     {"\n    -auto-approve [Default: false]\n"},
		"approve": {"\n    -http-addr [Default: http://localhost:8558]\n"},
		"reject":  {"\n    -http-addr [Default: http://localhost:8558]\n"},
		"logs":    {"\n    -http-addr [Default: http://localhost:8558]\n"},
	}
	entry := regexp.MustCompile(`^    -[a-z][a-z-]*( \[Default: [^\]\n]+\])?\n        \S[^\n]*\n(\n|\z)`)
	check := func(name, help string, wants []string) {
		t.Helper()
		for _, f := range wants {
			if !strings.Contains(help, f) {
				t.Errorf("%s -help lacks %q:\n%s", name, f, help)
			}
		}
		_, opts, ok := strings.Cut(help, "\nOptions:\n")
		if !ok || opts == "" {
			t.Fatalf("%s -help has no options:\n%s", name, help)
		}
		for n := 0; opts != ""; n++ {
			m := entry.FindString(opts)
			if m == "" {
				t.Fatalf("%s -help: option %d is not in CTS's layout:\n%q", name, n+1, opts)
			}
			opts = opts[len(m):]
		}
	}
	for cmd, flags := range want {
		code, out, errOut := run(t, "", "task", cmd, "-help")
		if code != ExitOK {
			t.Fatalf("%s: exit %d", cmd, code)
		}
		if errOut != "" {
			t.Errorf("task %s -help wrote to stderr: %s", cmd, errOut)
		}
		check("task "+cmd, out, flags)
	}
	code, out, _ := run(t, "", "status", "-help")
	if code != ExitOK {
		t.Fatalf("status: exit %d", code)
	}
	check("status", out, []string{"\n    -http-addr [Default: http://localhost:8558]\n"})
	code, out, _ = run(t, "", "start", "-help")
	if code != ExitOK {
		t.Fatalf("start: exit %d", code)
	}
	check("start", out, []string{"\n    -once [Default: false]\n        Run every task once", "\n    -config-file\n        A configuration file"})
}

// TestInvokedName: installed as consul-terraform-sync (the way to drop
// ctsync in), usage lines and -version name that binary and still say
// what it is.
func TestInvokedName(t *testing.T) {
	for in, want := range map[string]string{
		"/usr/local/bin/consul-terraform-sync": "consul-terraform-sync",
		"ctsync":                               "ctsync",
		"":                                     "ctsync",
	} {
		if got := programName([]string{in}); got != want {
			t.Errorf("programName(%q) = %q, want %q", in, got, want)
		}
	}

	old := Name
	Name = "consul-terraform-sync"
	t.Cleanup(func() { Name = old })

	_, out, _ := run(t, "", "-version")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], "consul-terraform-sync v"+Version+" ") {
		t.Errorf("first line %q", lines[0])
	}
	if !strings.HasPrefix(lines[1], "Compatible with Terraform >= ") || !strings.Contains(out, "ctsync") {
		t.Errorf("version output:\n%s", out)
	}

	_, out, _ = run(t, "", "-help")
	if !strings.HasPrefix(out, "Usage CLI: consul-terraform-sync <command> [-help] [options]\n") || !strings.Contains(out, "try 'consul-terraform-sync <command> --help'") {
		t.Errorf("usage:\n%s", out)
	}
	_, _, errOut := run(t, "", "task")
	if !strings.HasPrefix(errOut, "Usage: consul-terraform-sync task <subcommand> [-help] [options]") {
		t.Errorf("task usage:\n%s", errOut)
	}
	_, out, errOut = run(t, "", "task", "enable", "-h")
	if !strings.HasPrefix(out, "Usage: consul-terraform-sync task enable [-help] [options] <task name>\n") {
		t.Errorf("task enable usage:\n%s", out+errOut)
	}
}

// The deprecated -port replaces the address's port, with CTS's warning on
// standard error.
func TestTaskPortFlagWarns(t *testing.T) {
	f := newFakeCtrl(specNamed("a"))
	ts := serve(t, f)
	_, port, _ := strings.Cut(strings.TrimPrefix(ts.URL, "http://"), ":")
	t.Setenv("CTS_ADDRESS", "http://127.0.0.1:1")
	code, out, errOut := run(t, "", "task", "disable", "-port="+port, "a")
	if code != ExitOK || !strings.HasSuffix(out, "==> 'a' disable complete!\n") ||
		errOut != "==> Warning: 'port' option is deprecated and will be removed in a later version. It is preferred to use the 'http-addr' option instead.\n\n" {
		t.Fatalf("exit %d\n%s---\n%s", code, out, errOut)
	}
	// With -http-addr on the command line, -port changes nothing (CTS).
	if code, out, _ := run(t, "", "task", "disable", "-port=1", "-http-addr="+ts.URL, "a"); code != ExitOK {
		t.Fatalf("-port with -http-addr: exit %d\n%s", code, out)
	}
}

// As CTS, enable (and run) print their first lines before the client is
// made, so a client that cannot be made fails after them.
func TestTaskClientErrorAfterFirstLines(t *testing.T) {
	serve(t, newFakeCtrl(specNamed("a")))
	t.Setenv("CTS_CAPATH", filepath.Join(t.TempDir(), "missing"))
	for _, c := range []struct{ cmd, first string }{
		{"enable", "==> Inspecting changes to resource if enabling 'a'...\n\n    Generating plan that Consul-Terraform-Sync will use Terraform to execute\n\n"},
		{"run", "==> Inspecting changes to resource if running 'a'...\n\n    Generating plan that Consul-Terraform-Sync will use Terraform to execute\n\n"},
		{"disable", "==> Waiting to disable 'a'...\n\n"},
	} {
		code, out, errOut := run(t, "", "task", c.cmd, "a")
		if code != ExitError || out != c.first || !strings.HasPrefix(errOut, "==> Error: unable to create client for 'a'\n") {
			t.Errorf("task %s: exit %d\n%s---\n%s", c.cmd, code, out, errOut)
		}
	}
}

// A run applied without refresh says so; one that refreshed, or an event
// recorded before runs reported it, says nothing of it.
func TestRunLinesRefresh(t *testing.T) {
	ev := store.Event{ID: "r1", Kind: "apply", Success: true, Refresh: "skipped"}
	if got := strings.Join(runLines("web", ev), "\n"); !strings.Contains(got, "Refresh: skipped (-refresh=false") || strings.Contains(got, "Targeted") {
		t.Errorf("a run without refresh:\n%s", got)
	}
	ev.Targeted = "targeted 1 of 2,000 resource instances (1 changed instance of the services variable); full check: no further changes"
	if got := strings.Join(runLines("web", ev), "\n"); !strings.Contains(got, "\nTargeted: targeted 1 of 2,000 resource instances") {
		t.Errorf("a targeted run:\n%s", got)
	}
	ev.Targeted = ""
	for _, r := range []string{"full", ""} {
		ev.Refresh = r
		if got := strings.Join(runLines("web", ev), "\n"); strings.Contains(got, "Refresh") {
			t.Errorf("refresh %q:\n%s", r, got)
		}
	}
}
