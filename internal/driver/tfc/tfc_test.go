package tfc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	tfe "github.com/hashicorp/go-tfe"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/redact"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// Unit tests against fakeTFE: they run under -short, without OTF.

func fakeDriver(t *testing.T, f *fakeTFE, mutate func(*Options)) *Driver {
	t.Helper()
	mod, _ := filepath.Abs("testdata/ids")
	opts := Options{
		Spec:    task.Spec{Name: "web", Module: mod},
		WorkDir: t.TempDir(),
		Config: config.TFCDriver{Address: f.srv.URL, Organization: f.org, Token: f.token,
			WorkspacePrefix: "cts-", Tags: []string{"ctsync", "net"}},
		PollInterval: time.Millisecond,
	}
	if mutate != nil {
		mutate(&opts)
	}
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestFakeWorkspaceCreatedWithTags(t *testing.T) {
	f := newFakeTFE(t)
	d := fakeDriver(t, f, nil)
	if err := d.Init(context.Background()); err != nil {
		t.Fatalf("init: %v", err)
	}
	ws := f.workspaces["cts-web"]
	if ws == nil || ws.ExecutionMode != "remote" {
		t.Fatalf("workspace = %+v", ws)
	}
	if got := f.tags[ws.ID]; !slices.Equal(got, []string{"ctsync", "net"}) {
		t.Errorf("tags = %q", got)
	}
	// A second driver finds it and adds no tag twice.
	ws.TagNames = []string{"ctsync", "net"}
	if err := fakeDriver(t, f, nil).Init(context.Background()); err != nil {
		t.Fatalf("init of an existing workspace: %v", err)
	}
	if n := f.count("POST /api/v2/organizations/{org}/workspaces"); n != 1 {
		t.Errorf("%d workspace creations", n)
	}
	if n := f.count("POST /api/v2/workspaces/{id}/relationships/tags"); n != 1 {
		t.Errorf("%d tag requests", n)
	}
}

func TestFakeExistingWorkspaceOtherExecutionMode(t *testing.T) {
	for _, c := range []struct{ existing, configured, want string }{
		{"local", "", `workspace "cts-web": it exists with execution mode "local": ctsync runs tasks in the workspace`},
		{"remote", "agent", `workspace "cts-web": it exists with execution mode "remote", the task's terraform_cloud_workspace asks for "agent"`},
	} {
		f := newFakeTFE(t)
		f.addWorkspace("cts-web", c.existing)
		d := fakeDriver(t, f, func(o *Options) {
			if c.configured != "" {
				o.Spec.TFCWorkspace = &task.TFCWorkspace{ExecutionMode: c.configured, AgentPoolID: "apool-1"}
			}
		})
		err := d.Init(context.Background())
		if err == nil || !strings.Contains(err.Error(), c.want) || !driver.IsTerminal(err) {
			t.Errorf("existing %q, configured %q: %v (terminal %v)", c.existing, c.configured, err, driver.IsTerminal(err))
		}
	}
}

func TestFakeWrongTokenClearErrorWithoutToken(t *testing.T) {
	f := newFakeTFE(t)
	bad := "wrong-token-s3cr3t-value"
	d := fakeDriver(t, f, func(o *Options) { o.Config.Token = bad })
	_, err := d.Apply(context.Background(), driver.Run{ID: "r1"}, inputs("web-1"))
	if err == nil || !strings.Contains(err.Error(), "token was refused") || !driver.IsTerminal(err) {
		t.Fatalf("wrong token: %v", err)
	}
	if strings.Contains(err.Error(), bad) || strings.Contains(d.logText(t, "r1"), bad) {
		t.Fatalf("the token leaked: %v", err)
	}
	f2 := newFakeTFE(t)
	d = fakeDriver(t, f2, func(o *Options) { o.Config.Organization = "nope" })
	if err := d.Init(context.Background()); err == nil || !strings.Contains(err.Error(), `organization "nope" not found`) || !driver.IsTerminal(err) {
		t.Fatalf("unknown organization: %v", err)
	}
}

// logText is the run log of run id.
func (d *Driver) logText(t *testing.T, id string) string {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(d.opts.WorkDir, "runs", id+".log"))
	return string(b)
}

func TestFakeApplyUploadsAndPollsUntilApplied(t *testing.T) {
	for _, relative := range []bool{true, false} {
		f := newFakeTFE(t)
		f.relativeUpload = relative
		d := fakeDriver(t, f, nil)
		res, err := d.Apply(context.Background(), driver.Run{ID: "r1"}, inputs("web-1"))
		if err != nil {
			t.Fatalf("relative upload-url %v: %v", relative, err)
		}
		ids := f.runIDs()
		if len(ids) != 1 || len(f.uploads) != 1 {
			t.Fatalf("runs %v, uploads %v", ids, f.uploads)
		}
		if st, reads := f.status(ids[0]); st != tfe.RunApplied || reads < 3 {
			t.Errorf("run %s after %d reads", st, reads)
		}
		if !res.Changes || res.Add != 1 || !strings.HasSuffix(res.RunURL, "/app/acme/workspaces/cts-web/runs/"+ids[0]) ||
			!strings.Contains(res.Output, "Apply complete!") || res.Refresh != driver.RefreshFull {
			t.Errorf("result = %+v", res)
		}
	}
}

func TestFakeConfirmsWhenAutoApplyIgnored(t *testing.T) {
	f := newFakeTFE(t)
	f.ignoreAutoApply = true
	d := fakeDriver(t, f, nil)
	if _, err := d.Apply(context.Background(), driver.Run{ID: "r1"}, inputs("web-1")); err != nil {
		t.Fatal(err)
	}
	if n := f.count("POST /api/v2/runs/{id}/actions/apply"); n != 1 {
		t.Fatalf("%d confirmations", n)
	}
}

func TestFakeErroredRun(t *testing.T) {
	f := newFakeTFE(t)
	f.outcome, f.planError = tfe.RunErrored, "Unsupported argument"
	d := fakeDriver(t, f, nil)
	res, err := d.Apply(context.Background(), driver.Run{ID: "r1"}, inputs("web-1"))
	if err == nil || !strings.Contains(err.Error(), "errored: Error: Unsupported argument: The module says no.") ||
		!strings.Contains(err.Error(), res.RunURL) || !driver.IsTerminal(err) {
		t.Fatalf("errored run: %v (result %+v)", err, res)
	}
	// The next attempt of the same configuration does not wait for the
	// errored run: it queues a new one.
	f.outcome = tfe.RunApplied
	if _, err := d.Apply(context.Background(), driver.Run{ID: "r2"}, inputs("web-1")); err != nil {
		t.Fatal(err)
	}
	if n := len(f.runIDs()); n != 2 {
		t.Fatalf("%d runs", n)
	}
}

// A 5xx ends the verb with a readable, non-terminal error (the task's
// retry runs it again); the retry finds the run the failed attempt queued
// through the run record and waits for it instead of queuing another.
func TestFakeServerErrorRetryWaitsForQueuedRun(t *testing.T) {
	f := newFakeTFE(t)
	st := store.NewMemory(0)
	d := fakeDriver(t, f, func(o *Options) { o.Runs = st })

	f.failNext("POST /api/v2/organizations/{org}/workspaces", 503)
	err := d.Init(context.Background())
	if err == nil || driver.IsTerminal(err) || !strings.Contains(err.Error(), `creating workspace "cts-web"`) {
		t.Fatalf("init on a 503: %v", err)
	}
	if err := d.Init(context.Background()); err != nil {
		t.Fatal(err)
	}

	f.failNext("GET /api/v2/runs/{id}", 502)
	_, err = d.Apply(context.Background(), driver.Run{ID: "r1"}, inputs("web-1"))
	if err == nil || driver.IsTerminal(err) || !strings.Contains(err.Error(), "reading run run-") {
		t.Fatalf("apply on a 502: %v", err)
	}
	rec, ok := st.RemoteRun("web")
	if !ok || rec.ID == "" || rec.Op != "apply" || rec.Run != "r1" {
		t.Fatalf("record = %+v, %v", rec, ok)
	}
	res, err := d.Apply(context.Background(), driver.Run{ID: "r2"}, inputs("web-1"))
	if err != nil {
		t.Fatal(err)
	}
	if ids := f.runIDs(); len(ids) != 1 || !strings.HasSuffix(res.RunURL, ids[0]) {
		t.Fatalf("runs %v, result %s", ids, res.RunURL)
	}
}

// Failover: the leader queued a run and died; the new leader's driver (a
// new Driver on the same store) waits for that run, and then does not run
// the same configuration again until its outcome is recorded as a success.
func TestFakeNewLeaderAdoptsRecordedRun(t *testing.T) {
	f := newFakeTFE(t)
	st := store.NewMemory(0)
	old := fakeDriver(t, f, func(o *Options) { o.Runs = st })
	ctx, kill := context.WithCancel(context.Background())
	release := f.holdRuns()
	done := make(chan error, 1)
	go func() {
		_, err := old.Apply(ctx, driver.Run{ID: "r1"}, inputs("web-1"))
		done <- err
	}()
	testutil.Eventually(t, 10*time.Second, "the old leader's run applying", func() bool {
		ids := f.runIDs()
		if len(ids) == 0 {
			return false
		}
		s, _ := f.status(ids[0])
		return s == tfe.RunApplying
	})
	kill()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("old leader: %v", err)
	}

	next := fakeDriver(t, f, func(o *Options) { o.Runs = st })
	type result struct {
		res driver.Result
		err error
	}
	got := make(chan result, 1)
	go func() {
		res, err := next.Apply(context.Background(), driver.Run{ID: "r2"}, inputs("web-1"))
		got <- result{res, err}
	}()
	id := f.runIDs()[0]
	_, before := f.status(id)
	testutil.Eventually(t, 10*time.Second, "the new leader polling the old run", func() bool {
		_, reads := f.status(id)
		return reads > before+2
	})
	release()
	r := <-got
	if r.err != nil || !strings.HasSuffix(r.res.RunURL, "/runs/"+id) || r.res.Add != 1 {
		t.Fatalf("new leader: %+v %v", r.res, r.err)
	}
	if ids := f.runIDs(); len(ids) != 1 {
		t.Fatalf("runs %v: a duplicate was queued", ids)
	}

	// Not recorded yet (the new leader died too): a third driver takes
	// the applied run's result without a new run.
	third := fakeDriver(t, f, func(o *Options) { o.Runs = st })
	if _, err := third.Apply(context.Background(), driver.Run{ID: "r3"}, inputs("web-1")); err != nil {
		t.Fatal(err)
	}
	if ids := f.runIDs(); len(ids) != 1 {
		t.Fatalf("runs %v after an unrecorded applied run", ids)
	}
	// Recorded as a success: the same configuration runs again when asked
	// (a schedule tick, a drift remediation).
	_ = st.AddEvent(context.Background(), store.Event{ID: "r3", TaskName: "web", Success: true, TFCRunURL: r.res.RunURL})
	if _, err := third.Apply(context.Background(), driver.Run{ID: "r4"}, inputs("web-1")); err != nil {
		t.Fatal(err)
	}
	if ids := f.runIDs(); len(ids) != 2 {
		t.Fatalf("runs %v after a recorded run", ids)
	}
}

// The crash window: the record names a configuration version but no run id
// (the leader died while creating the run). The next leader finds the run
// among the workspace's runs by its configuration version.
func TestFakeRecordWithoutRunIDFoundByConfigurationVersion(t *testing.T) {
	f := newFakeTFE(t)
	st := store.NewMemory(0)
	d := fakeDriver(t, f, func(o *Options) { o.Runs = st })
	if _, err := d.Apply(context.Background(), driver.Run{ID: "r1"}, inputs("web-1")); err != nil {
		t.Fatal(err)
	}
	rec, _ := st.RemoteRun("web")
	rec.ID = ""
	_ = st.SetRemoteRun(context.Background(), "web", rec)
	next := fakeDriver(t, f, func(o *Options) { o.Runs = st })
	res, err := next.Apply(context.Background(), driver.Run{ID: "r2"}, inputs("web-1"))
	if err != nil {
		t.Fatal(err)
	}
	if ids := f.runIDs(); len(ids) != 1 || !strings.HasSuffix(res.RunURL, ids[0]) {
		t.Fatalf("runs %v, result %s", ids, res.RunURL)
	}
	// A record of a configuration version no run uses (the leader died
	// before creating the run): a run is queued.
	_ = st.SetRemoteRun(context.Background(), "web", store.RemoteRun{Op: "apply", Digest: rec.Digest, ConfigurationVersion: "cv-none"})
	if _, err := next.Apply(context.Background(), driver.Run{ID: "r3"}, inputs("web-1")); err != nil {
		t.Fatal(err)
	}
	if ids := f.runIDs(); len(ids) != 2 {
		t.Fatalf("runs %v", ids)
	}
}

// A run of an older configuration whose outcome nobody recorded and that
// waits for a confirmation is discarded: it would hold the workspace's
// queue.
func TestFakeStaleRecordedRunDiscarded(t *testing.T) {
	f := newFakeTFE(t)
	st := store.NewMemory(0)
	d := fakeDriver(t, f, func(o *Options) { o.Runs = st })
	if err := d.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	stale := f.addPlannedRun()
	_ = st.SetRemoteRun(context.Background(), "web", store.RemoteRun{Op: "apply", Digest: "older", ConfigurationVersion: "cv-0", ID: stale})
	if _, err := d.Apply(context.Background(), driver.Run{ID: "r1"}, inputs("web-1")); err != nil {
		t.Fatal(err)
	}
	if s, _ := f.status(stale); s != tfe.RunDiscarded {
		t.Fatalf("stale run %s", s)
	}
	if ids := f.runIDs(); len(ids) != 2 {
		t.Fatalf("runs %v", ids)
	}
}

func TestFakePlanIsSpeculativeAndNotRecorded(t *testing.T) {
	f := newFakeTFE(t)
	st := store.NewMemory(0)
	d := fakeDriver(t, f, func(o *Options) { o.Runs = st })
	res, err := d.Plan(context.Background(), driver.Run{ID: "p1"}, inputs("web-1"))
	if err != nil || !res.Changes || !strings.Contains(res.Output, "terraform_data.ids will be created") {
		t.Fatalf("plan: %+v %v", res, err)
	}
	for _, cv := range f.cvs {
		if !cv.Speculative {
			t.Errorf("plan uploaded a non-speculative configuration version %s", cv.ID)
		}
	}
	if _, ok := st.RemoteRun("web"); ok {
		t.Error("a plan was recorded")
	}
}

// The remote logs copied into the task's folder are redacted before they
// are written: a secret a remote run printed (here in its error) is not on
// disk.
func TestFakeRunLogRedactedOnDisk(t *testing.T) {
	const secret = "s3cret-printed-by-the-remote-run"
	f := newFakeTFE(t)
	f.outcome, f.planError = tfe.RunErrored, "token "+secret
	d := fakeDriver(t, f, func(o *Options) { o.Redactor = redact.NewRedactor([]string{secret}) })
	res, err := d.Apply(context.Background(), driver.Run{ID: "r1"}, inputs("web-1"))
	if err == nil {
		t.Fatal("the errored run succeeded")
	}
	b, rerr := os.ReadFile(res.LogPath)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if strings.Contains(string(b), secret) || !strings.Contains(string(b), "token [redacted]") {
		t.Errorf("run log:\n%s", b)
	}
}
