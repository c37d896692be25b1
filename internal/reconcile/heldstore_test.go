package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/redact"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// heldSpec is the gated task fw of these tests: every plan is held.
func heldSpec(expire time.Duration) task.Spec {
	spec := servicesTask("fw", "web")
	spec.Approval = &task.Approval{Required: true, Expire: task.Duration(expire)}
	return spec
}

// holdThenStop runs a controller over st until it holds a plan of fw (two
// instances of web), then stops it, as a daemon that is stopped: the
// plan's record is in st.
func holdThenStop(t *testing.T, st *store.Memory, spec task.Spec) gate.Plan {
	t.Helper()
	g := startGatesWith(t, spec, func(o *Options) { o.Store = st })
	g.set(2)
	p := g.waitHeld(t, "")
	g.cancel()
	<-g.done
	if r, ok := st.HeldPlan("fw"); !ok || r.ID != p.ID || r.Fingerprint != p.Fingerprint || r.Digest == "" || r.Ref != "" {
		t.Fatalf("the held plan's record after the stop: %+v %v (plan %+v)", r, ok, p)
	}
	return p
}

// restartOn starts a new controller over st, fw's data as before.
func restartOn(t *testing.T, st *store.Memory, spec task.Spec, json string) *gateHarness {
	t.Helper()
	g := startGatesWith(t, spec, func(o *Options) { o.Store = st })
	g.mu.Lock()
	g.json = json
	g.mu.Unlock()
	g.set(2)
	return g
}

// ran reports how many plans the harness's driver made (0: none made).
func (g *gateHarness) ran() int {
	g.mu.Lock()
	d := g.drv
	g.mu.Unlock()
	if d == nil {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.held
}

// A restart (a new controller on the same store) holds the same plan,
// same id and expiry, and plans nothing: the task's desired state did not
// change.
func TestHeldPlanSurvivesARestart(t *testing.T) {
	st := store.NewMemory(0)
	spec := heldSpec(time.Hour)
	p := holdThenStop(t, st, spec)

	g := restartOn(t, st, spec, "")
	got := g.waitHeld(t, "")
	g.noApply(t)
	if got.ID != p.ID || !got.Expires.Equal(p.Expires) || !got.Created.Equal(p.Created) || got.Reason != p.Reason || got.Text != p.Text {
		t.Fatalf("after the restart: %+v, want the plan %+v", got, p)
	}
	if n := g.ran(); n != 0 {
		t.Fatalf("the restarted controller made %d plans", n)
	}
	if a := g.actions(); len(a) != 0 {
		t.Fatalf("gate events after the restart: %v", a)
	}
	g.ctrl.mu.Lock()
	ph := g.ctrl.tasks["fw"].lc.phase
	g.ctrl.mu.Unlock()
	if ph != phaseHeld {
		t.Fatalf("the task's phase %v, want held", ph)
	}
}

// Approving the restored plan makes it again (its plan file is gone):
// the same changes are applied as the approved plan, named by its id.
func TestHeldPlanRestoredApproveSameChangesApplies(t *testing.T) {
	st := store.NewMemory(0)
	spec := heldSpec(0)
	p := holdThenStop(t, st, spec)

	g := restartOn(t, st, spec, "")
	g.waitHeld(t, "")
	if err := g.ctrl.Approve(WithActor(context.Background(), "ops"), "fw", p.ID, "ops"); err != nil {
		t.Fatal(err)
	}
	g.waitApplied(t, "fw")
	var evs []store.Event
	testutil.WaitFor(t, "the approved run recorded", func() bool { evs = runEvents(st.Events("fw")); return len(evs) == 1 })
	d := evs[0].Gate
	if !evs[0].Success || d == nil || d.Action != gate.ActionApproved || d.PlanID != p.ID || d.Note != ReplannedSame || d.By != "ops" {
		t.Fatalf("the approved run %+v, gate %+v", evs[0], d)
	}
	if got, _ := g.ctrl.HeldPlan("fw"); got.ID != p.ID || got.State != gate.Approved {
		t.Fatalf("the plan after the approval: %+v", got)
	}
	if a := g.actions(); len(a) != 1 || a[0] != gate.ActionApproved {
		t.Fatalf("gate events %v", a)
	}
	testutil.WaitFor(t, "the record removed", func() bool { _, ok := st.HeldPlan("fw"); return !ok })
	g.set(2) // applied: nothing to do
	g.noApply(t)
}

// Approving the restored plan when the plan made again has other changes
// applies nothing: the old plan is superseded by the new one (held, the
// rules require approval), and the approval says so.
func TestHeldPlanRestoredApproveOtherChangesSupersedes(t *testing.T) {
	st := store.NewMemory(0)
	spec := heldSpec(0)
	p := holdThenStop(t, st, spec)

	g := restartOn(t, st, spec, `{"resource_changes":[{"address":"x.y","change":{"actions":["create"],"after":{"v":1}}}]}`)
	g.waitHeld(t, "")
	err := g.ctrl.Approve(context.Background(), "fw", p.ID, "ops")
	var se *gate.SupersededError
	if !errors.As(err, &se) || se.ID != p.ID || se.Newer == "" || se.Newer == p.ID {
		t.Fatalf("approve: %v, want a *gate.SupersededError", err)
	}
	next := g.waitHeld(t, p.ID)
	if next.ID != se.Newer {
		t.Fatalf("the new plan %s, the error names %s", next.ID, se.Newer)
	}
	g.noApply(t)
	if evs := runEvents(st.Events("fw")); len(evs) != 0 {
		t.Fatalf("runs recorded: %+v", evs)
	}
	if a := g.actions(); len(a) != 2 || a[0] != gate.ActionSuperseded || a[1] != gate.ActionHeld {
		t.Fatalf("gate events %v", a)
	}
	testutil.WaitFor(t, "the new plan's record", func() bool { r, ok := st.HeldPlan("fw"); return ok && r.ID == next.ID })
}

// A plan that expired while the daemon was down expires at the restart,
// with its audit event; the task is not planned again.
func TestHeldPlanExpiredWhileDown(t *testing.T) {
	st := store.NewMemory(0)
	spec := heldSpec(time.Hour)
	p := holdThenStop(t, st, spec)
	rec, _ := st.HeldPlan("fw")
	rec.Expires = time.Now().Add(-time.Minute)
	if err := st.SaveHeldPlan(context.Background(), "fw", rec); err != nil {
		t.Fatal(err)
	}

	g := restartOn(t, st, spec, "")
	testutil.WaitFor(t, "the plan expired", func() bool { got, err := g.ctrl.HeldPlan("fw"); return err == nil && got.State == gate.Expired })
	g.noApply(t)
	if n := g.ran(); n != 0 {
		t.Fatalf("the restarted controller made %d plans", n)
	}
	var expired []store.Event
	for _, ev := range gateEvents(st.Events("fw")) {
		if ev.Gate.Action == gate.ActionExpired {
			expired = append(expired, ev)
		}
	}
	if len(expired) != 1 || expired[0].Gate.PlanID != p.ID {
		t.Fatalf("expired audit events %+v", expired)
	}
	testutil.WaitFor(t, "the record removed", func() bool { _, ok := st.HeldPlan("fw"); return !ok })
}

// Rejecting the restored plan needs no plan file: nothing is applied, the
// record goes, and the same desired state is not planned again.
func TestHeldPlanRestoredReject(t *testing.T) {
	st := store.NewMemory(0)
	spec := heldSpec(0)
	p := holdThenStop(t, st, spec)

	g := restartOn(t, st, spec, "")
	g.waitHeld(t, "")
	if err := g.ctrl.Reject(context.Background(), "fw", p.ID, "ops"); err != nil {
		t.Fatal(err)
	}
	g.noApply(t)
	if got, _ := g.ctrl.HeldPlan("fw"); got.ID != p.ID || got.State != gate.Rejected {
		t.Fatalf("after the rejection: %+v", got)
	}
	if n := g.ran(); n != 0 {
		t.Fatalf("the restarted controller made %d plans", n)
	}
	testutil.WaitFor(t, "the record removed", func() bool { _, ok := st.HeldPlan("fw"); return !ok })
	if a := g.actions(); len(a) != 1 || a[0] != gate.ActionRejected {
		t.Fatalf("gate events %v", a)
	}
}

// The record never holds the plan file's reference of a driver whose plan
// does not outlive the process, nor more than the API shows.
func TestHeldPlanRecordKeepsWhatTheOperatorSees(t *testing.T) {
	h := &heldRun{plan: gate.Plan{ID: "p", State: gate.Pending, Text: strings.Repeat("x\n", store.MaxPlanText), Fingerprint: "f"},
		run: &runRecord{trigger: "web"}, digest: "sha256:1"}
	h.drv.Ref = "/work/fw/held-p.tfplan"
	rec := heldRecord(h)
	if rec.Ref != "" || len(rec.Text) > store.MaxPlanText+100 || rec.Trigger != "web" || rec.Digest != "sha256:1" {
		t.Fatalf("record %+v", rec)
	}
	h.drv.Durable = true
	if rec := heldRecord(h); rec.Ref != h.drv.Ref {
		t.Fatalf("a durable plan's reference not kept: %+v", rec)
	}
}

// Reconcile(ctx, name) reads the task's snapshot itself: it refuses a task
// that does not exist, one no worker of this member took, and a context
// that ended, changing nothing; the snapshot it reads changes nothing
// either (read twice, the same plans to discard).
func TestReconcileByName(t *testing.T) {
	c := New(Options{Watcher: newFakeWatcher()}, []task.Spec{servicesTask("fw", "web")})
	ctx := context.Background()
	if _, err := c.rec.Reconcile(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no such task: %v", err)
	}
	if _, err := c.rec.Reconcile(ctx, "fw"); !errors.Is(err, errNotTaken) {
		t.Fatalf("a task no worker took: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.rec.Reconcile(cctx, "fw"); !errors.Is(err, context.Canceled) {
		t.Fatalf("an ended context: %v", err)
	}
	c.mu.Lock()
	e := c.tasks["fw"]
	c.gk.stateLocked(e).orphans = []driver.HeldPlan{{ID: "old"}}
	c.stepLocked(e, evQueue, wake{})
	j, ok := c.takeLocked(e)
	c.mu.Unlock()
	if !ok {
		t.Fatal("not taken")
	}
	for range 2 {
		s, err := c.w.snapshot("fw")
		if err != nil || s.Name != "fw" || s.Request != j.Request || len(s.orphans) != 1 || s.spec == nil || s.spec.Name != "fw" {
			t.Fatalf("snapshot %+v, %v", s, err)
		}
	}
	c.mu.Lock()
	c.commitLocked(e, j, Result{discarded: 1})
	c.endLocked(e, j, Result{})
	n := len(c.gk.stateLocked(e).orphans)
	c.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d plans left to discard after the job discarded them", n)
	}
	if _, err := c.rec.Reconcile(ctx, "fw"); !errors.Is(err, errNotTaken) {
		t.Fatalf("after the job ended: %v", err)
	}
}

// A deletion's destroy plan held before a restart is held again, the task
// kept disabled; approving it plans the destroy again, and with the same
// changes destroys and deletes the task.
func TestHeldDestroyPlanSurvivesARestart(t *testing.T) {
	st := store.NewMemory(0)
	pct := 50
	spec := servicesTask("fw", "web")
	spec.Approval = &task.Approval{MaxDestroyPercent: &pct}
	g := startGatesWith(t, spec, func(o *Options) { o.Store = st })
	g.set(3)
	g.waitApplied(t, "fw")
	g.waitIdle(t)
	var dh *DestroyHeldError
	if err := g.ctrl.Delete(context.Background(), "fw", true); !errors.As(err, &dh) {
		t.Fatalf("delete with destroy: %v, want DestroyHeldError", err)
	}
	g.cancel()
	<-g.done
	if r, ok := st.HeldPlan("fw"); !ok || r.ID != dh.Plan.ID || !r.DeletesTask || !r.Enabled {
		t.Fatalf("the destroy plan's record %+v %v", r, ok)
	}

	destroyed := make(chan string, 1)
	g2 := startGatesWith(t, spec, func(o *Options) {
		o.Store = st
		o.OnDestroyed = func(name string) { destroyed <- name }
	})
	g2.set(3)
	p := g2.waitHeld(t, "")
	g2.noApply(t)
	if p.ID != dh.Plan.ID || !p.DeletesTask {
		t.Fatalf("after the restart: %+v, want the destroy plan %s", p, dh.Plan.ID)
	}
	if ts, err := g2.ctrl.Task("fw"); err != nil || ts.Spec.Enabled {
		t.Fatalf("the task while its restored destroy is held: %+v %v; want kept, disabled", ts, err)
	}
	if err := g2.ctrl.Delete(context.Background(), "fw", true); !errors.As(err, &dh) || dh.Plan.ID != p.ID {
		t.Fatalf("delete with destroy again: %v, want the same held plan %s", err, p.ID)
	}
	if err := g2.ctrl.Approve(context.Background(), "fw", p.ID, "ops"); err != nil {
		t.Fatal(err)
	}
	select {
	case name := <-destroyed:
		if name != "fw" {
			t.Fatalf("OnDestroyed(%q)", name)
		}
	case <-time.After(testutil.Scale(30 * time.Second)):
		t.Fatal("the approved destroy did not delete the task")
	}
	testutil.WaitFor(t, "the record removed", func() bool { _, ok := st.HeldPlan("fw"); return !ok })
}

// flakyHeld is a memory store whose first held-plan writes fail.
type flakyHeld struct {
	*store.Memory
	mu    sync.Mutex
	fails int
}

func (s *flakyHeld) SaveHeldPlan(ctx context.Context, name string, rec store.HeldPlanRecord) error {
	s.mu.Lock()
	fail := s.fails > 0
	s.fails--
	s.mu.Unlock()
	if fail {
		return errors.New("disk full")
	}
	return s.Memory.SaveHeldPlan(ctx, name, rec)
}

// A record that cannot be written at first is written later; the plan is
// held in memory meanwhile.
func TestHeldPlanRecordWriteRetried(t *testing.T) {
	st := &flakyHeld{Memory: store.NewMemory(0), fails: 2}
	g := startGatesWith(t, heldSpec(0), func(o *Options) { o.Store = st })
	g.set(2)
	p := g.waitHeld(t, "")
	testutil.WaitFor(t, "the record written", func() bool { r, ok := st.HeldPlan("fw"); return ok && r.ID == p.ID })
	if got, err := g.ctrl.HeldPlan("fw"); err != nil || got.ID != p.ID || got.State != gate.Pending {
		t.Fatalf("the plan in memory %+v %v", got, err)
	}
}

// A plan whose driver's plan outlives the process (terraform-cloud's
// remote run) is restored with it: approving it after a restart applies
// that plan itself, without planning again, with a driver made for it.
func TestHeldDurablePlanAppliedAfterARestart(t *testing.T) {
	st := store.NewMemory(0)
	spec := heldSpec(0)
	remote := map[string]int{}
	g := startGatesWith(t, spec, func(o *Options) { o.Store = st })
	g.mu.Lock()
	g.remote = remote
	g.mu.Unlock()
	g.set(2)
	p := g.waitHeld(t, "")
	g.cancel()
	<-g.done
	if r, ok := st.HeldPlan("fw"); !ok || r.Ref != p.ID {
		t.Fatalf("the durable plan's record %+v %v: want its reference kept", r, ok)
	}

	g2 := startGatesWith(t, spec, func(o *Options) { o.Store = st })
	g2.mu.Lock()
	g2.remote = remote
	g2.mu.Unlock()
	g2.set(2)
	g2.waitHeld(t, "")
	if err := g2.ctrl.Approve(context.Background(), "fw", p.ID, "ops"); err != nil {
		t.Fatal(err)
	}
	g2.waitApplied(t, "fw")
	var evs []store.Event
	testutil.WaitFor(t, "the approved run recorded", func() bool { evs = runEvents(st.Events("fw")); return len(evs) == 1 })
	if d := evs[0].Gate; !evs[0].Success || d == nil || d.PlanID != p.ID || d.Note != "" {
		t.Fatalf("the approved run %+v (gate %+v)", evs[0], d)
	}
	if n := g2.ran(); n != 0 {
		t.Fatalf("the restarted controller planned %d times", n)
	}
	if got := st.Run("fw"); got.Applied != p.Fingerprint {
		t.Fatalf("applied fingerprint %q, want the plan's %q", got.Applied, p.Fingerprint)
	}
}

// The record of a held plan holds no secret: its text is the plan as the
// API shows it (redacted), and a secret in the plan's changes (a value
// Terraform marks sensitive, or one the task's redactor knows) does not
// reach it, nor its digest's input.
func TestHeldPlanRecordHoldsNoSecret(t *testing.T) {
	const secret = "s3cr3t-Pa55word"
	st := store.NewMemory(0)
	g := startGatesWith(t, heldSpec(0), func(o *Options) {
		o.Store = st
		o.Redactor = redact.NewRedactor([]string{secret})
	})
	g.mu.Lock()
	g.text = "\n  + password = \"" + secret + "\"\n"
	g.json = `{"resource_changes":[{"address":"x.y","change":{"actions":["create"],"after":{"a":"` + secret + `","b":"` + secret + `"},"after_sensitive":{"b":true}}}]}`
	g.mu.Unlock()
	g.set(2)
	p := g.waitHeld(t, "")
	var rec store.HeldPlanRecord
	testutil.WaitFor(t, "the record", func() bool { r, ok := st.HeldPlan("fw"); rec = r; return ok && r.ID == p.ID })
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), secret) || rec.Digest == "" || !strings.Contains(rec.Text, "password") {
		t.Fatalf("the held plan's record %s", b)
	}
	want, err := gate.ChangesDigest([]byte(strings.ReplaceAll(g.json, secret, "other")), func(v string) string {
		return strings.ReplaceAll(v, "other", redact.Redacted)
	})
	if err != nil || want != rec.Digest {
		t.Fatalf("the digest %s, want the one of the redacted changes %s (%v)", rec.Digest, want, err)
	}
}

// Spread mode: a member that stops owning the task drops the plan from
// memory, not its record; owning it again, it holds the same plan.
func TestHeldPlanKeptOverOwnership(t *testing.T) {
	g := startGates(t, &task.Approval{Required: true})
	g.set(2)
	p := g.waitHeld(t, "")
	testutil.WaitFor(t, "the record", func() bool { r, ok := g.st.HeldPlan("fw"); return ok && r.ID == p.ID })
	g.ctrl.SetOwned(func(string) bool { return false })
	if _, err := g.ctrl.HeldPlan("fw"); !errors.Is(err, gate.ErrNoPlan) {
		t.Fatalf("a member that does not own the task shows a held plan: %v", err)
	}
	g.noApply(t)
	if r, ok := g.st.HeldPlan("fw"); !ok || r.ID != p.ID {
		t.Fatalf("the record after the ownership ended: %+v %v", r, ok)
	}
	g.ctrl.SetOwned(func(string) bool { return true })
	if got := g.waitHeld(t, ""); got.ID != p.ID {
		t.Fatalf("owning the task again: plan %s, want %s", got.ID, p.ID)
	}
	g.noApply(t)
	if a := g.actions(); len(a) != 1 || a[0] != gate.ActionHeld {
		t.Fatalf("gate events %v", a)
	}
}
