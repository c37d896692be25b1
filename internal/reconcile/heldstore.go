package reconcile

// Held plans in the store (docs/safety.md "Held plans over a restart"):
// the plan a safety gate holds is recorded in the store (a
// store.HeldPlanRecord, never the plan file), so that a restarted daemon,
// or the task's new leader or owner, holds the same plan again (same id,
// same expiry) instead of planning it anew; an approval of a plan whose
// driver's plan did not outlive the process makes the plan again and
// applies it only when its changes are the ones approved.

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/ctsync/ctsync/internal/backoff"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/store"
)

// ReplannedSame is the note on the run that applied an approved plan made
// again after a restart (store.GateDecision.Note).
const ReplannedSame = "re-planned after restart: same changes"

// heldStore writes the tasks' held-plan records to the store, outside the
// table's lock: the gate keeper records, under the lock, what each task's
// record is to become (pending), and a flush writes it, one flush at a
// time, so the store sees the records in the order they were decided.
type heldStore struct {
	st  store.HeldPlans // nil: the store keeps no held plans
	log *slog.Logger
	mu  *sync.Mutex // the table's lock: guards pending
	// pending is, by task, the write not done yet: the record to save
	// (rec), or the plan whose record is to go (drop; "": any).
	pending map[string]heldWrite
	kick    chan struct{} // wakes the flush loop
	wmu     sync.Mutex    // one flush at a time
}

type heldWrite struct {
	rec  *store.HeldPlanRecord
	drop string
}

func newHeldStore(st store.Store, log *slog.Logger, mu *sync.Mutex) *heldStore {
	hp, _ := st.(store.HeldPlans)
	return &heldStore{st: hp, log: log, mu: mu, pending: map[string]heldWrite{}, kick: make(chan struct{}, 1)}
}

// saveLocked records that the task's record is to be rec. c.mu is held.
func (s *heldStore) saveLocked(name string, rec store.HeldPlanRecord) {
	if s.st == nil {
		return
	}
	s.pending[name] = heldWrite{rec: &rec}
	signal(s.kick)
}

// dropLocked records that the task's record of plan id ("": any) is to
// go. c.mu is held.
func (s *heldStore) dropLocked(name, id string) {
	if s.st == nil {
		return
	}
	s.pending[name] = heldWrite{drop: id}
	signal(s.kick)
}

// keepLocked forgets what was to be written of the task's record: this
// member no longer runs the task, and the record stays for the one that
// does. c.mu is held.
func (s *heldStore) keepLocked(name string) { delete(s.pending, name) }

// loop flushes the pending writes until ctx ends.
func (s *heldStore) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
			s.flush(ctx)
		}
	}
}

// heldFlushGrace bounds the last flush of the records when the controller
// stops (Run): a store that cannot be written does not hold up the
// shutdown longer.
const heldFlushGrace = 10 * time.Second

// heldWriteAttempts bounds the attempts of one flush at a write; a write
// still failing is kept pending and tried again later.
const heldWriteAttempts = 5

// flush writes the pending records. A write that keeps failing is kept
// pending (unless a newer one replaced it) and tried again after a while;
// the plan in memory is not affected. A write refused because this member
// no longer leads or owns the task is dropped: the record is the new
// leader's or owner's.
func (s *heldStore) flush(ctx context.Context) {
	if s.st == nil {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	todo := s.pending
	s.pending = map[string]heldWrite{}
	s.mu.Unlock()
	failed := false
	for name, w := range todo {
		err := s.write(ctx, name, w)
		if err == nil || errors.Is(err, store.ErrNotLeader) {
			continue
		}
		failed = true
		s.mu.Lock()
		if _, newer := s.pending[name]; !newer {
			s.pending[name] = w
		}
		s.mu.Unlock()
	}
	if failed && ctx.Err() == nil {
		time.AfterFunc(finishRetryMax, func() { signal(s.kick) })
	}
}

// write does one write, retried with backoff.
func (s *heldStore) write(ctx context.Context, name string, w heldWrite) error {
	for attempt := 1; ; attempt++ {
		wctx, cancel := context.WithTimeout(ctx, gateWriteTimeout) // ended at shutdown: kept pending for the last flush
		var err error
		if w.rec != nil {
			err = s.st.SaveHeldPlan(wctx, name, *w.rec)
		} else {
			err = s.st.DeleteHeldPlan(wctx, name, w.drop)
		}
		cancel()
		if err == nil {
			return nil
		}
		if errors.Is(err, store.ErrNotLeader) {
			s.log.Warn("held plan record not written: this instance no longer leads or owns the task", "task_name", name, "error", err)
			return err
		}
		if attempt == heldWriteAttempts || ctx.Err() != nil {
			s.log.Error("held plan record not written to the store; kept in memory and tried again", "task_name", name, "attempts", attempt, "error", err)
			return err
		}
		delay := retryPolicy(finishRetryBase, finishRetryMax).Delay(attempt)
		s.log.Warn("writing the held plan record failed; retrying", "task_name", name, "attempt", attempt,
			"delay", delay.Round(time.Millisecond), "error", err)
		backoff.Sleep(ctx, delay)
	}
}

// heldRecord is the store's record of the held plan h: what the operator
// is shown (the plan text already redacted, clipped), never the plan file;
// the driver's reference only when it outlives the process.
func heldRecord(h *heldRun) store.HeldPlanRecord {
	p := h.plan
	rec := store.HeldPlanRecord{ID: p.ID, State: string(p.State), Created: p.Created, Expires: p.Expires, Reason: p.Reason,
		Rule: p.Rule, Add: p.Add, Change: p.Change, Destroy: p.Destroy, Replace: p.Replace, InState: p.InState,
		Text: store.ClipPlanText(p.Text), ConsulChanges: p.Changes, Fingerprint: p.Fingerprint,
		DeletesTask: h.destroy, Enabled: h.enabled, Digest: h.digest}
	if p.Window != nil {
		rec.Window, _ = json.Marshal(p.Window)
	}
	if h.run != nil {
		rec.Trigger = h.run.trigger
	}
	if h.drv.Durable {
		rec.Ref, rec.Changes = h.drv.Ref, h.drv.Changes
	}
	return rec
}

// heldFromRecord is the held plan of task name the record rec describes,
// as it is restored: the driver's plan is there only when its reference
// was kept (heldRun.restored, drv.Ref "" otherwise).
func heldFromRecord(name string, rec store.HeldPlanRecord) *heldRun {
	p := gate.Plan{ID: rec.ID, Task: name, Created: rec.Created, Expires: rec.Expires, State: gate.Pending,
		Reason: rec.Reason, Rule: rec.Rule, Add: rec.Add, Change: rec.Change, Destroy: rec.Destroy, Replace: rec.Replace,
		InState: rec.InState, Text: rec.Text, DeletesTask: rec.DeletesTask, Changes: rec.ConsulChanges, Fingerprint: rec.Fingerprint}
	if len(rec.Window) > 0 {
		var w gate.WindowNote
		if json.Unmarshal(rec.Window, &w) == nil {
			p.Window = &w
		}
	}
	h := &heldRun{plan: p, destroy: rec.DeletesTask, enabled: rec.Enabled, digest: rec.Digest, restored: true,
		run: &runRecord{id: rec.ID, trigger: rec.Trigger, kind: store.KindApply}}
	if rec.Ref != "" {
		h.drv = driver.HeldPlan{ID: rec.ID, Ref: rec.Ref, Durable: true, Changes: rec.Changes,
			Counts: gate.Counts{Add: rec.Add, Change: rec.Change, Destroy: rec.Destroy, Replace: rec.Replace, InState: rec.InState},
			Text:   rec.Text}
	}
	return h
}

// restoreHeldLocked makes the plan the store holds for the task its held
// plan again, before the task's first decision here (at start, or when
// this member becomes its leader or owner): same id, same expiry (a plan
// that expired meanwhile expires at once, as any expiry does), so that a
// task whose desired state did not change stays held. c.mu is held.
func (c *gateKeeper) restoreHeldLocked(e *entry) {
	name := e.spec.Name
	if c.hs.st == nil || e.lc.held != nil || e.throwaway != "" {
		return
	}
	if _, ok := c.hs.pending[name]; ok {
		return // this process decided about it since: memory is newer
	}
	rec, ok := c.hs.st.HeldPlan(name)
	if !ok || rec.State != string(gate.Pending) {
		return
	}
	h := heldFromRecord(name, rec)
	if !h.plan.Expires.IsZero() {
		// The expiry is wall-clock: the time left, on the controller's
		// clock (0 or less: it expires now).
		h.expireAt = c.opts.Clock.Now().Add(time.Until(h.plan.Expires))
	}
	if h.destroy {
		// The deletion with destroy left the task disabled until its plan
		// is decided (its flag is given back on a rejection or expiry):
		// nothing it was due for runs meanwhile.
		e.spec.Enabled = false
		c.stepLocked(e, evStop, wake{})
	}
	g := c.stateLocked(e)
	g.plan, g.settled = clonePlan(h.plan), ""
	c.restoreLocked(e, h) // lifecycle.go
	c.log.Info("held plan restored from the store: it waits for approval", "task_name", name, "plan", rec.ID,
		"expires", rec.Expires, "driver_plan_kept", rec.Ref != "")
}
