package reconcile

import (
	"context"
	"errors"
	"fmt"
	"github.com/ctsync/ctsync/internal/holddown"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctsync/ctsync/internal/clock"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/redact"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/watch"
)

// Watcher is what the controller needs from the watch registry.
type Watcher interface {
	Subscribe(subscriber string, q watch.Query)
	Unsubscribe(subscriber, key string)
	UnsubscribeAll(subscriber string)
	Get(key string) (value any, index uint64, ok bool)
}

// DriverFactory builds the driver of one task.
type DriverFactory func(spec task.Spec) (driver.Driver, error)

// Options configure a Controller.
type Options struct {
	Watcher   Watcher
	NewDriver DriverFactory
	Store     store.Store
	Logger    *slog.Logger
	// MaxParallel bounds how many tasks run Terraform at once (default: the
	// CPUs, as max_parallel_runs).
	MaxParallel int
	// MaxRetries bounds how many times a failed run is retried with
	// backoff before the task waits for its desired state to change:
	// RetryForever (0, the default) retries until a run succeeds or the
	// task is disabled, and RetryNever (any negative value) never retries. A run
	// that failed with a terminal error (driver.ErrTerminal) is not retried:
	// running the same desired state again would fail the same way. A run
	// that failed because the state is locked is retried until the lock is
	// free (see LockRetryCap).
	MaxRetries int
	// RetryBase is the first retry delay; it doubles each retry (default
	// DefaultRetryBase) up to RetryMax (default DefaultRetryMax).
	RetryBase, RetryMax time.Duration
	// Desired gives the parts of a task's desired state that lie outside
	// the task and Consul (module code, provider configuration, backend,
	// binary); nil for none.
	Desired DesiredFunc
	// Prepared reports whether the place a task runs in still holds what
	// its runs left there (the terraform driver: the task's working
	// directory is initialised). It is asked at start for each task the
	// store records as applied: a task whose working directory was removed
	// while the daemon was stopped runs even when its desired state did not
	// change. nil: not asked (high availability, where another member's
	// directory is never this one's, and drivers that keep nothing locally).
	Prepared func(spec task.Spec) bool
	// Clock is the time source of buffer periods and retries (default: the
	// real clock).
	Clock Clock
	// Metrics receives run outcomes; nil for none.
	Metrics Metrics
	// OnEvent is called after every event is stored (runs, drift); it must
	// not block (notifications hand the event to their own queue).
	OnEvent func(ev store.Event)
	// OnGate is called with what a safety gate did (a plan held,
	// approved, rejected, expired, superseded; a run the policy denied);
	// it must not block. nil: not told.
	OnGate func(gate.Event)
	// OnRemoval is called with the steps of a task's removal hold-down
	// since the last call (pending, cancelled, applied) and how many
	// removals it keeps now; it must not block. nil: not told.
	OnRemoval func(task string, changes []holddown.Change, pending int)
	// OnDestroyed is called with the name of a task deleted once the
	// destroy plan of its deletion was approved (not during Delete, which
	// returned a *DestroyHeldError): a cluster records the deletion done.
	OnDestroyed func(name string)
	// Redactor removes secrets from text recorded in events (log tails,
	// error messages), held plans and logs: a task's own text through its
	// view (ForTask). The controller sets the protected strings of every
	// task created through Create (the API, task records in Consul KV)
	// before it runs, and drops them when the task is removed
	// (redact.Redactor.Protect, docs/security.md). nil leaves text as it is.
	Redactor *redact.Redactor
	// ShutdownGrace is how long the runs in progress may take to finish
	// once Run's context ends; then they are interrupted (their context
	// ends: Terraform gets SIGINT) and Run returns ErrRunsInterrupted.
	// Zero lets them finish however long they take.
	ShutdownGrace time.Duration
	// Standby starts the controller as a follower: it watches and keeps
	// track of what is due, but starts no run until SetActive(true).
	Standby bool
}

// The two special values of Options.MaxRetries.
const (
	RetryForever = 0
	RetryNever   = -1
)

// mayRetry reports whether a failed run may be retried after done
// consecutive retries of the same desired state.
func (o *Options) mayRetry(done int) bool {
	switch {
	case o.MaxRetries == RetryForever:
		return true
	case o.MaxRetries <= RetryNever:
		return false
	}
	return done < o.MaxRetries
}

// Metrics is notified of what the controller does.
type Metrics interface {
	RunStarted(taskName string)
	RunFinished(taskName string, kind string, success bool, d time.Duration)
	RunSkipped(taskName string)
	QueueDepth(n int)
	Drift(taskName string, drifted bool)
}

// LockRetryCap bounds the delay between the retries of a task whose
// Terraform state is locked by another process. The worst case it has to
// cover is a holder that died: with the consul backend its session (TTL 15s)
// is invalidated within 2 x TTL, and the lock delay (5s) follows, so the
// lock frees up at most ~35s after the death; retries at 2, 4, 8, 10, 10 ...
// seconds catch that within ~45s.
const LockRetryCap = 10 * time.Second

// Controller runs tasks when their inputs change. It is the package's
// face: its methods are what the API, high availability and the CLI call,
// and each is carried out by the part that owns what it changes:
//
//   - the task table (taskTable, table.go and lifecycle.go): the one lock,
//     the tasks, their lifecycle (phase, what is due, the timer, the held
//     plan, the requests), the queue of names; and the one applier of
//     what a job did (commitLocked);
//   - the workers (workers, queue.go): take names off the queue (the one
//     place high availability's ownership is asked) and have the
//     reconciler do each task's job;
//   - the reconciler (reconciler.go): decides and drives one job, from a
//     snapshot, with no way back;
//   - the gate keeper (gateKeeper, gates.go): held plans, approvals,
//     rejections, expiry;
//   - the sources (sources, notes.go, drift.go, schedule.go): Consul's
//     notifications, drift checks, cron ticks; they only make tasks due
//     or record requests.
type Controller struct {
	opts Options
	log  *slog.Logger
	*taskTable
	rec *reconciler
	obs *observer
	src *sources
	gk  *gateKeeper
	w   *workers
}

// taskTable is the one lock and the state it guards: the tasks (each
// with its lifecycle, lifecycle.go), the throw-away tasks being inspected,
// the queue of names, and whether the controller runs and leads.
type taskTable struct {
	opts *Options
	log  *slog.Logger
	obs  *observer
	gk   *gateKeeper

	mu    sync.Mutex
	tasks map[string]*entry
	// inspecting holds throw-away tasks being planned, by subscriber id.
	inspecting map[string]*entry
	// q is the work queue: the names of the tasks due to run, and the run
	// slots (queue.go).
	q       workQueue
	started bool
	standby bool // a follower: nothing runs (high availability)

	owned *ownership // spread mode: the tasks this instance runs (owned.go); nil: all

	driftKick chan struct{} // wakes the drift loop (task added or changed)
	cronKick  chan struct{} // wakes the schedule loop (task added or enabled)

	// Runs requested through the API (apiRun) end with runCtx, the
	// daemon's run context (shutdown grace), not with their request; Run
	// waits for them. closing refuses new ones once Run is stopping.
	runCtx  context.Context
	closing bool
	apiRuns sync.WaitGroup
	apiOpen int // the API runs not over yet: the workers wait for them at shutdown

	// changed is closed (and replaced) each time a task changes phase or
	// is marked for deletion: a waiter (Delete, the API, high
	// availability) looks again. Guarded by mu.
	changed chan struct{}
	// active is closed while the controller is active (not standby), and
	// replaced by an open one when it stands by: see WaitActive.
	active chan struct{}

	// running: Run is running (Live).
	running bool
}

// sources make tasks due and record requests, and nothing else: the note
// loop (Consul's notifications through the trigger rules), the drift loop
// and the schedule loop. Their own state is the note backlog; a task's
// next tick and next drift check are kept with the task.
type sources struct {
	*taskTable
	notes []note // notifications from views, handled by the note loop
	// noted holds the notes in notes: a note already waiting is not queued
	// again (handling it reads the current data anyway), so the backlog is
	// bounded by tasks x queries, however fast views change.
	noted    map[note]struct{}
	noteKick chan struct{} // wakes the note loop
	handling int           // notes taken off notes and not yet handled (Settled)
	// since when the note backlog has waited without the note loop taking
	// anything off it (zero: empty, or progress): Live.
	notesSince time.Time

	scheduleWakes atomic.Int64 // iterations of the schedule loop (tests: a follower must not spin)
	driftWakes    atomic.Int64 // iterations of the drift loop (tests: it looked again)
}

// workers take task names off the queue and have the reconciler do each
// task's job (queue.go).
type workers struct {
	*taskTable
	rec *reconciler
}

// gateKeeper keeps the tasks' held plans: what a gate held, approvals,
// rejections, expiry, supersession (gates.go).
type gateKeeper struct {
	*taskTable
	// plans is what the gate keeper keeps of each task's plans (the plan
	// pending now is the task's lifecycle's: lifecycle.held). Guarded by
	// the table's lock.
	plans map[*entry]*gateState
	// hs writes the held plans' records to the store (heldstore.go).
	hs *heldStore
}

// WedgedAfter is how long notifications or queued runs may wait with no
// progress at all before Live reports the controller as stuck.
const WedgedAfter = time.Minute

// Live reports whether the controller works: the note loop takes
// notifications, and (when this instance leads) a worker takes queued tasks
// while a run slot is free. A follower is live, and so is a controller that
// has not started yet (the daemon waits for Consul); one whose Run has
// returned is not.
func (c *Controller) Live() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.opts.Clock.Now()
	switch {
	case c.started && !c.running:
		return errors.New("the controller has stopped")
	case !c.src.notesSince.IsZero() && now.Sub(c.src.notesSince) >= WedgedAfter:
		return fmt.Errorf("the controller is stuck: %d notifications have waited %s", len(c.src.notes), now.Sub(c.src.notesSince).Round(time.Second))
	case !c.standby && c.q.stuck(now) >= WedgedAfter:
		return fmt.Errorf("the controller is stuck: %d tasks have waited %s to run with run slots free", c.q.len(), c.q.stuck(now).Round(time.Second))
	}
	return nil
}

// changedLocked wakes whoever waits for a task to change phase. c.mu is
// held.
func (c *taskTable) changedLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// StateChanged returns a channel closed at the next change of any task's
// phase (queued, running, deleting ...). Take it before looking at the
// state, then wait on it: no change is missed in between.
func (c *Controller) StateChanged() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

type note struct{ task, key string }

// entry is the controller's state for one task. Fields are guarded by
// the task table's lock (taskTable.mu) except run, which only the job
// holding the task touches.
type entry struct {
	spec task.Spec
	// qs is what the task watches, derived from spec when the task was
	// defined (queryset.go); hd is its removal hold-down (nil: the task
	// has no removal_delay). qs is replaced with the spec, never changed
	// in place; hd is kept by an update that keeps a delay (SetDelay:
	// what is pending stays) and dropped by one that takes it away.
	qs  *querySet
	hd  *holddown.Tracker
	run driverSlot
	// throwaway is the subscriber id of a task being inspected (Inspect),
	// not one of the controller's tasks; "" for a task.
	throwaway string

	dyn       map[string]watch.Query // regexp-selected health queries
	lastNames []string               // catalog-services trigger state
	nameSeen  bool

	// lc is where the task is in its lifecycle and everything that decides
	// what happens to it next (lifecycle.go); only lifecycle.go writes it.
	lc       lifecycle
	nextCron time.Time
	// drift detection state
	nextDrift      time.Time
	drifted        bool
	lastDriftCheck time.Time
	changed        chan struct{} // signalled on every notification (once mode)
	// what the operator sees of runs (runinfo.go)
	prevInputs *inputsDigest // the Consul data of the last recorded run
}

// newEntry returns the entry of a task defined with spec (a throw-away
// task's when throwaway is its subscriber id): its query set is derived
// here, once.
func newEntry(spec task.Spec, throwaway string) *entry {
	e := &entry{spec: spec, throwaway: throwaway, qs: newQuerySet(&spec), changed: make(chan struct{}, 1)}
	if d := spec.Removal(); d > 0 {
		e.hd = holddown.New(d)
	}
	return e
}

// key is the task's name on the queue (a throw-away task's: its
// subscriber id).
func (e *entry) key() string {
	if e.throwaway != "" {
		return e.throwaway
	}
	return e.spec.Name
}

// New returns a Controller for the given tasks.
func New(opts Options, specs []task.Spec) *Controller {
	if opts.MaxParallel <= 0 {
		opts.MaxParallel = runtime.GOMAXPROCS(0)
	}
	if opts.RetryBase <= 0 {
		opts.RetryBase = DefaultRetryBase
	}
	if opts.RetryMax <= 0 {
		opts.RetryMax = DefaultRetryMax
	}
	opts.RetryMax = max(opts.RetryMax, opts.RetryBase)
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Store == nil {
		opts.Store = store.NewMemory(0)
	}
	c := &Controller{opts: opts, log: opts.Logger}
	c.obs = &observer{opts: &c.opts, log: c.log}
	c.obs.entries = func(name string) (*querySet, *holddown.Tracker, bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if e := c.tasks[name]; e != nil {
			return e.qs, e.hd, true
		}
		return nil, nil, false
	}
	c.rec = &reconciler{opts: &c.opts, log: c.log, obs: c.obs}
	c.taskTable = &taskTable{
		opts:       &c.opts,
		log:        c.log,
		obs:        c.obs,
		tasks:      map[string]*entry{},
		inspecting: map[string]*entry{},
		driftKick:  make(chan struct{}, 1),
		cronKick:   make(chan struct{}, 1),
		standby:    opts.Standby,
		runCtx:     context.Background(),
		changed:    make(chan struct{}),
		active:     make(chan struct{}),
	}
	c.gk = &gateKeeper{taskTable: c.taskTable, plans: map[*entry]*gateState{}, hs: newHeldStore(opts.Store, c.log, &c.taskTable.mu)}
	c.taskTable.gk = c.gk
	c.src = &sources{taskTable: c.taskTable, noted: map[note]struct{}{}, noteKick: make(chan struct{}, 1)}
	c.w = &workers{taskTable: c.taskTable, rec: c.rec}
	c.rec.snap = c.w.snapshot
	var depth func(int)
	if opts.Metrics != nil {
		depth = opts.Metrics.QueueDepth
	}
	c.q = newWorkQueue(opts.MaxParallel, opts.Clock, depth)
	if !opts.Standby {
		close(c.active)
	}
	for _, s := range specs {
		c.tasks[s.Name] = newEntry(s, "")
	}
	return c
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// subscribe registers every static query of a task (its query set qs)
// with the watcher.
func (c *Controller) subscribe(name string, qs *querySet) {
	for _, q := range qs.static {
		c.opts.Watcher.Subscribe(name, q)
	}
}

// Digester is implemented by watchers that keep a digest of each value (the
// watch registry does); for others the controller computes it.
type Digester interface {
	Digest(key string) (watch.Digest, bool)
}

// ErrRunsInterrupted is returned by Run when runs in progress had to be
// interrupted because they outlasted the shutdown grace.
var ErrRunsInterrupted = errors.New("runs in progress did not finish within the shutdown grace and were interrupted")

// Run is the daemon: it subscribes every task, runs each enabled task once
// its data is there, then runs tasks whenever their inputs change or their
// schedule fires. When ctx is cancelled it stops taking new work and
// returns after the runs in progress (API-started ones included) finish,
// interrupting them after Options.ShutdownGrace: that is the one rule of a
// run's lifetime at shutdown.
func (c *Controller) Run(ctx context.Context) error {
	runCtx, cancelRuns := context.WithCancel(context.Background())
	defer cancelRuns()
	c.mu.Lock()
	c.started = true
	c.running = true
	c.runCtx = runCtx
	var names []string
	for name, e := range c.tasks {
		names = append(names, name)
		c.startLocked(e)
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { c.src.noteLoop(ctx) })
	wg.Go(func() { c.gk.hs.loop(ctx) })
	for _, name := range names {
		c.mu.Lock()
		e := c.tasks[name]
		var qs *querySet
		if e != nil {
			qs = e.qs
		}
		c.mu.Unlock()
		if e == nil { // deleted meanwhile (through the API, or a new leader's sync)
			continue
		}
		c.subscribe(name, qs)
	}
	c.w.start(&wg, ctx, runCtx)
	wg.Go(func() { c.src.scheduleLoop(ctx) })
	wg.Go(func() { c.src.driftLoop(ctx) })
	<-ctx.Done()
	c.mu.Lock()
	c.closing = true
	c.running = false
	c.mu.Unlock()
	var interrupted atomic.Bool
	if g := c.opts.ShutdownGrace; g > 0 {
		grace := time.AfterFunc(g, func() {
			interrupted.Store(true)
			c.log.Warn("runs did not finish in time; interrupting them", "grace", g)
			cancelRuns()
		})
		defer grace.Stop()
	}
	wg.Wait()
	c.apiRuns.Wait() // a graceful hand-over waits for these too
	fctx, cancelFlush := context.WithTimeout(context.Background(), heldFlushGrace)
	c.gk.hs.flush(fctx) // the held plans' records decided since the loop stopped
	cancelFlush()
	c.mu.Lock()
	for _, e := range c.tasks {
		e.lc.halt()
	}
	c.mu.Unlock()
	if interrupted.Load() {
		return ErrRunsInterrupted
	}
	return nil
}

// start starts the MaxParallel workers of the run queue: they take tasks
// until ctx ends, and run them with runCtx.
func (c *workers) start(wg *sync.WaitGroup, ctx, runCtx context.Context) {
	for range c.opts.MaxParallel {
		wg.Go(func() { c.worker(ctx, runCtx) })
	}
}

// awaitLocked waits until cond, checked under c.mu at every change of
// state (changedLocked), holds, or ctx ends. c.mu is held on entry and on
// return.
func (c *taskTable) awaitLocked(ctx context.Context, cond func() bool) error {
	for !cond() {
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			c.mu.Lock()
			return ctx.Err()
		case <-changed:
		}
		c.mu.Lock()
	}
	return nil
}

// SetActive switches the controller between leader (active) and follower
// (standby). On becoming active every enabled task is reconciled at once:
// the ones whose inputs match the hash last applied (kept in the store,
// which is shared in high availability) are skipped, the others run, and a
// task whose run was in flight when the previous leader stopped runs again
// even if its hash matches. A follower finishes the runs it has started but
// starts no new ones.
func (c *Controller) SetActive(active bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.standby == !active {
		return
	}
	c.standby = !active
	if !active {
		c.active = make(chan struct{})
		c.log.Info("standing by: no new runs")
		for _, e := range c.tasks {
			c.gk.forgetHeldLocked(e) // gates.go
		}
		return
	}
	close(c.active)
	c.log.Info("active: reconciling every task")
	for _, e := range c.tasks {
		if e.deletingLocked() {
			continue
		}
		// The first run as leader is not buffered.
		c.adoptLocked(e, Due(TriggerLeader), c.opts.Store.Run(e.spec.Name).InFlight != "")
	}
	c.q.wake()
	signal(c.driftKick)
}

// apiRun gives a run requested through the API its context: the run does
// not end when the caller disconnects (an apply it started goes on), only
// with the daemon's runs (runCtx: the shutdown grace) — and, through the
// driver's fence, when this instance stops leading. Run waits for it.
func (c *taskTable) apiRun(ctx context.Context) (context.Context, func(), error) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return nil, nil, errors.New("ctsync is shutting down: no new runs")
	}
	c.apiRuns.Add(1)
	c.apiOpen++
	base := c.runCtx
	c.mu.Unlock()
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(base, cancel)
	return rctx, func() {
		stop()
		cancel()
		c.mu.Lock()
		c.apiOpen--
		c.mu.Unlock()
		c.q.wake() // a worker waiting for the API runs to end looks again
		c.apiRuns.Done()
	}, nil
}

// WaitActive blocks until the controller is active (it leads, or high
// availability is off) or ctx ends.
func (c *Controller) WaitActive(ctx context.Context) error {
	c.mu.Lock()
	ch := c.active
	c.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Active reports whether the controller runs tasks (it is the leader, or
// high availability is off).
func (c *Controller) Active() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.standby
}
