package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/ctsync/ctsync/internal/backoff"
	"github.com/ctsync/ctsync/internal/clock"
	"github.com/ctsync/ctsync/internal/driver"
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
	// backoff before the task waits for its desired state to change; 0 (the
	// default) retries until a run succeeds or the task is disabled, and a
	// negative value never retries. A run
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
	// Clock is the time source of buffer periods and retries (default: the
	// real clock).
	Clock Clock
	// Metrics receives run outcomes; nil for none.
	Metrics Metrics
	// OnEvent is called after every event is stored (runs, drift); it must
	// not block (notifications hand the event to their own queue).
	OnEvent func(ev store.Event)
	// Redact removes secrets from text recorded in events (log tails,
	// error messages) and logs; nil leaves text as it is.
	Redact func(string) string
	// ShutdownGrace is how long the runs in progress may take to finish
	// once Run's context ends; then they are interrupted (their context
	// ends: Terraform gets SIGINT) and Run returns ErrRunsInterrupted.
	// Zero lets them finish however long they take.
	ShutdownGrace time.Duration
	// Standby starts the controller as a follower: it watches and keeps
	// track of what is due, but starts no run until SetActive(true).
	Standby bool
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

// Controller runs tasks when their inputs change.
type Controller struct {
	opts Options
	log  *slog.Logger

	mu    sync.Mutex
	tasks map[string]*entry
	// inspecting holds throw-away tasks being planned, by subscriber id.
	inspecting map[string]*entry
	queue      []string // task names ready to run, FIFO
	notes      []note   // notifications from views, handled by the note loop
	// noted holds the notes in notes: a note already waiting is not queued
	// again (handling it reads the current data anyway), so the backlog is
	// bounded by tasks x queries, however fast views change.
	noted   map[note]struct{}
	started bool
	standby bool // a follower: nothing runs (high availability)

	owned *ownership // spread mode: the tasks this instance runs (owned.go); nil: all

	kick      chan struct{} // wakes a worker
	noteKick  chan struct{} // wakes the note loop
	driftKick chan struct{} // wakes the drift loop (task added or changed)
	cronKick  chan struct{} // wakes the schedule loop (task added or enabled)
	slots     chan struct{} // one token per Terraform run allowed at once

	scheduleWakes atomic.Int64 // iterations of the schedule loop (tests: a follower must not spin)
	driftWakes    atomic.Int64 // iterations of the drift loop (tests: it looked again)

	// Runs requested through the API (apiRun) end with runCtx, the
	// daemon's run context (shutdown grace), not with their request; Run
	// waits for them. closing refuses new ones once Run is stopping.
	runCtx  context.Context
	closing bool
	apiRuns sync.WaitGroup

	// changed is closed (and replaced) each time a task changes phase or
	// is marked for deletion: a waiter (Delete, the API, high
	// availability) looks again. Guarded by mu.
	changed chan struct{}
	// active is closed while the controller is active (not standby), and
	// replaced by an open one when it stands by: see WaitActive.
	active chan struct{}

	handling int // notes taken off c.notes and not yet handled (Settled)

	// Liveness (Live), guarded by mu: whether Run is running, and since
	// when the note backlog and the run queue have waited without the note
	// loop or a worker taking anything off them (zero: empty, or progress).
	running    bool
	notesSince time.Time
	queueSince time.Time
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
	case !c.notesSince.IsZero() && now.Sub(c.notesSince) >= WedgedAfter:
		return fmt.Errorf("the controller is stuck: %d notifications have waited %s", len(c.notes), now.Sub(c.notesSince).Round(time.Second))
	case !c.standby && !c.queueSince.IsZero() && len(c.slots) < cap(c.slots) && now.Sub(c.queueSince) >= WedgedAfter:
		return fmt.Errorf("the controller is stuck: %d tasks have waited %s to run with run slots free", len(c.queue), now.Sub(c.queueSince).Round(time.Second))
	}
	return nil
}

// changedLocked wakes whoever waits for a task to change phase. c.mu is
// held.
func (c *Controller) changedLocked() {
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
// Controller.mu except drv, which only the worker running the task touches.
type entry struct {
	spec task.Spec
	drv  driver.Driver

	dyn       map[string]watch.Query // regexp-selected health queries
	lastNames []string               // catalog-services trigger state
	nameSeen  bool

	ranOnce bool   // a run has started with complete data (buffering applies after it)
	trigger string // what first marked the task dirty since its last run
	// phase is where the task is in its lifecycle (see transition): it
	// changes only through stepLocked.
	phase    phase
	rerun    bool      // running: became due during the run, runs again afterwards
	doomed   bool      // running: marked for deletion, deleted when the run ends
	deferred bool      // notified during the first run: settle when it ends
	force    bool      // next run applies even when the hash is unchanged
	deadline time.Time // buffer period hard deadline
	timer    Timer
	// timerPhase is what the armed timer waits for (phaseBuffering or
	// phaseRetryWait): the phase a task returns to when a run it did not
	// take from the queue ends.
	timerPhase phase
	gen        int // invalidates stale timers
	retries    int // consecutive failed runs of the current desired state
	failHash   string
	// lockWaits counts consecutive runs that failed on a locked state
	// (driver.ErrStateLocked); they are retried without a limit.
	lockWaits int
	nextCron  time.Time
	waiting   string // why the task cannot run yet (ErrWaiting), "" otherwise
	// drift detection state
	nextDrift      time.Time
	drifted        bool
	lastDriftCheck time.Time
	changed        chan struct{} // signalled on every notification (once mode)
	exports        bool          // drv was built with ExportOutputs (chain.go)
	// what the operator sees of runs (runinfo.go)
	seen         time.Time     // when the change behind trigger was seen
	runSeen      time.Time     // seen, taken by the worker for the run it starts
	prevInputs   *inputsDigest // the Consul data of the last recorded run
	timerAt      time.Time     // when the armed timer fires
	retryAttempt int           // the number of the retry that waits
	lastErr      string        // the one-line error of the run it retries
	// the init of the run in progress (only the worker running the task
	// touches them, as drv)
	initStart, initEnd time.Time
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
	c := &Controller{
		opts:       opts,
		log:        opts.Logger,
		tasks:      map[string]*entry{},
		inspecting: map[string]*entry{},
		noted:      map[note]struct{}{},
		kick:       make(chan struct{}, 1),
		noteKick:   make(chan struct{}, 1),
		driftKick:  make(chan struct{}, 1),
		cronKick:   make(chan struct{}, 1),
		slots:      make(chan struct{}, opts.MaxParallel),
		standby:    opts.Standby,
		runCtx:     context.Background(),
		changed:    make(chan struct{}),
		active:     make(chan struct{}),
	}
	if !opts.Standby {
		close(c.active)
	}
	for _, s := range specs {
		c.tasks[s.Name] = &entry{spec: s, changed: make(chan struct{}, 1)}
	}
	return c
}

// Notify is the watch registry's callback: the view for key changed and
// subscriber (a task name) uses it. It never blocks.
func (c *Controller) Notify(subscriber, key string) {
	n := note{subscriber, key}
	c.mu.Lock()
	if _, waiting := c.noted[n]; !waiting {
		c.noted[n] = struct{}{}
		c.notes = append(c.notes, n)
		if c.notesSince.IsZero() {
			c.notesSince = c.opts.Clock.Now()
		}
	}
	c.mu.Unlock()
	signal(c.noteKick)
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// subscribe registers every static query of a task with the watcher.
func (c *Controller) subscribe(name string, s *task.Spec) {
	for _, q := range StaticQueries(s) {
		c.opts.Watcher.Subscribe(name, q)
	}
}

// Digester is implemented by watchers that keep a digest of each value (the
// watch registry does); for others the controller computes it.
type Digester interface {
	Digest(key string) (watch.Digest, bool)
}

// digest returns the digest of a watched value.
func (c *Controller) digest(key string) (watch.Digest, bool) {
	if d, ok := c.opts.Watcher.(Digester); ok {
		return d.Digest(key)
	}
	v, _, ok := c.opts.Watcher.Get(key)
	if !ok {
		return watch.Digest{}, false
	}
	d, err := watch.DigestOf(v)
	return d, err == nil
}

// get adapts the watcher to a Getter.
func (c *Controller) get(key string) (any, bool) {
	v, _, ok := c.opts.Watcher.Get(key)
	return v, ok
}

// noteLoop handles view notifications in one goroutine: it keeps regexp
// selections subscribed to the services they match, applies the trigger
// rule of each condition, and marks tasks dirty.
func (c *Controller) noteLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.noteKick:
		}
		for {
			c.mu.Lock()
			if len(c.notes) == 0 {
				c.mu.Unlock()
				break
			}
			n := c.notes[0]
			c.notes = c.notes[1:]
			delete(c.noted, n)
			c.handling++ // until the note is handled (Settled)
			c.notesSince = time.Time{}
			if len(c.notes) > 0 {
				c.notesSince = c.opts.Clock.Now() // progress
			}
			e, throwaway := c.tasks[n.task], false
			if e == nil {
				e, throwaway = c.inspecting[n.task], true
			}
			var spec task.Spec
			if e != nil {
				spec = e.spec
			}
			c.mu.Unlock()
			c.handle(e, throwaway, n, &spec)
		}
	}
}

// handle applies one note (see noteLoop), then counts it as handled.
func (c *Controller) handle(e *entry, throwaway bool, n note, spec *task.Spec) {
	defer func() {
		c.mu.Lock()
		c.handling--
		c.mu.Unlock()
	}()
	if e == nil {
		return
	}
	c.syncDynamic(n.task, e, spec)
	if throwaway {
		signal(e.changed)
		return
	}
	c.handleNote(e, spec, n.key)
}

// Settled reports whether the controller has nothing left to do for now:
// every notification handled, no task queued (on a leader), running or
// waiting on a buffer or retry timer. Tests use it as the positive signal that a change
// was considered (and, say, skipped), instead of waiting to see nothing
// happen.
func (c *Controller) Settled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.notes) > 0 || c.handling > 0 || (len(c.queue) > 0 && !c.standby) {
		return false
	}
	for _, e := range c.tasks {
		if e.phase == phaseRunning || e.phase == phaseDeleting || (e.phase == phaseQueued && !c.standby) || e.timer != nil {
			return false
		}
	}
	return true // a follower's queue waits for it to lead
}

// syncDynamic subscribes a regexp selector to the health of every service it
// matches now and drops the services it no longer matches.
func (c *Controller) syncDynamic(name string, e *entry, s *task.Spec) {
	want := map[string]watch.Query{}
	for _, q := range DynamicQueries(s, c.get) {
		want[q.Key()] = q
	}
	c.mu.Lock()
	old := e.dyn
	e.dyn = want
	c.mu.Unlock()
	static := map[string]bool{}
	for _, q := range StaticQueries(s) {
		static[q.Key()] = true
	}
	for k, q := range want {
		if _, had := old[k]; !had {
			c.opts.Watcher.Subscribe(name, q)
		}
	}
	for k := range old {
		if _, keep := want[k]; !keep && !static[k] {
			c.opts.Watcher.Unsubscribe(name, k)
		}
	}
}

// handleNote applies the condition's trigger rule and marks the task dirty;
// a change of module input data alone does not.
func (c *Controller) handleNote(e *entry, s *task.Spec, key string) {
	if s.Condition.CatalogServices != nil {
		// catalog-services fires only when the set of matching names
		// changes; other updates still reach the next run's inputs.
		names, ok := CatalogNames(s, c.get)
		c.mu.Lock()
		same := ok && e.nameSeen && slices.Equal(names, e.lastNames)
		if ok {
			e.lastNames, e.nameSeen = names, true
		}
		c.mu.Unlock()
		if same && key == conditionCatalog(s.Condition.CatalogServices).Key() {
			c.log.Debug("catalog-services: the set of names is the same; not triggering", "task_name", s.Name, "key", key)
			signal(e.changed)
			return
		}
	}
	if inputOnly(s, key, c.get) {
		// Module input data: read by the next run, which only the
		// condition (or another part of the desired state) triggers.
		// Until the task has run with complete data, every notification
		// counts (one may be the data it waited for).
		c.mu.Lock()
		ran := e.ranOnce
		if !ran {
			c.markDirtyLocked(e, key)
		}
		c.mu.Unlock()
		if ran {
			c.log.Debug("module input changed; not triggering", "task_name", s.Name, "key", key) // the next run reads it
		}
		signal(e.changed)
		return
	}
	c.mu.Lock()
	c.markDirtyLocked(e, key)
	c.mu.Unlock()
	signal(e.changed)
}

// markDirtyLocked records that a task's inputs may have changed and
// schedules its run through the buffer period. c.mu is held.
func (c *Controller) markDirtyLocked(e *entry, trigger string) {
	if !e.spec.Enabled || !c.started {
		return
	}
	if !e.spec.IsDynamic() {
		// Schedule tasks run on their cron ticks; data only matters for
		// their start-up run, which waits until the data is there.
		if !e.ranOnce {
			c.dueLocked(e, "start")
		}
		return
	}
	if e.trigger == "" {
		e.trigger = trigger
		e.seen = time.Now()
	}
	bp := e.spec.BufferPeriod
	buffered := bp != nil && bp.Enabled && bp.Min > 0
	if e.phase == phaseRunning && !e.ranOnce && buffered {
		// The task's first run is under way, and whether it has read its
		// data yet is not known here: decide when it ends (buffered if it
		// ran, at once if it found its data incomplete).
		e.deferred = true
		return
	}
	if !e.ranOnce || !buffered {
		c.stepLocked(e, evQueue, wake{})
		return
	}
	now := c.opts.Clock.Now()
	if e.deadline.IsZero() {
		e.deadline = now.Add(bp.Max.D())
	}
	d := bp.Min.D()
	if until := e.deadline.Sub(now); d > until {
		d = until
	}
	c.stepLocked(e, evBuffer, wake{d: d, before: func() { e.deadline = time.Time{} }})
}

// dueLocked makes an enabled task run as soon as its data is there, as at
// start-up: a dynamic task through markDirtyLocked (unbuffered before its
// first run), a schedule task directly — CTS also runs schedule tasks in
// its start-up pass. The inputs hash still skips a task already up to date.
func (c *Controller) dueLocked(e *entry, trigger string) {
	if !e.spec.Enabled {
		return
	}
	if e.spec.IsDynamic() {
		c.markDirtyLocked(e, trigger)
		return
	}
	if e.trigger == "" {
		e.trigger = trigger
	}
	c.enqueueLocked(e)
}

// enqueueLocked makes the task due now: it is queued, or, when it is
// running, runs again once the run ends. c.mu is held.
func (c *Controller) enqueueLocked(e *entry) {
	c.stepLocked(e, evQueue, wake{})
}

// unqueueLocked takes a task off the run queue (it was disabled or is being
// deleted). c.mu is held.
func (c *Controller) unqueueLocked(name string) {
	c.queue = slices.DeleteFunc(c.queue, func(n string) bool { return n == name })
	if len(c.queue) == 0 {
		c.queueSince = time.Time{}
	}
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
		c.dueLocked(e, "start")
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { c.noteLoop(ctx) })
	for _, name := range names {
		c.mu.Lock()
		e := c.tasks[name]
		var s task.Spec
		if e != nil {
			s = e.spec
		}
		c.mu.Unlock()
		if e == nil { // deleted meanwhile (through the API, or a new leader's sync)
			continue
		}
		c.subscribe(name, &s)
	}
	for i := 0; i < c.opts.MaxParallel; i++ {
		wg.Go(func() { c.worker(ctx, runCtx) })
	}
	wg.Go(func() { c.scheduleLoop(ctx) })
	wg.Go(func() { c.driftLoop(ctx, runCtx) })
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
	c.mu.Lock()
	for _, e := range c.tasks {
		if e.timer != nil {
			e.timer.Stop()
		}
	}
	c.mu.Unlock()
	if interrupted.Load() {
		return ErrRunsInterrupted
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
		return
	}
	close(c.active)
	c.log.Info("active: reconciling every task")
	for _, e := range c.tasks {
		if e.doomed || e.phase == phaseDeleting {
			continue
		}
		if c.opts.Store.Run(e.spec.Name).InFlight != "" {
			e.force = true
			e.trigger = "failover"
		}
		e.ranOnce = false // the first run as leader is not buffered
		c.dueLocked(e, "leader")
	}
	signal(c.kick)
	signal(c.driftKick)
}

// apiRun gives a run requested through the API its context: the run does
// not end when the caller disconnects (an apply it started goes on), only
// with the daemon's runs (runCtx: the shutdown grace) — and, through the
// driver's fence, when this instance stops leading. Run waits for it.
func (c *Controller) apiRun(ctx context.Context) (context.Context, func(), error) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return nil, nil, errors.New("ctsync is shutting down: no new runs")
	}
	c.apiRuns.Add(1)
	base := c.runCtx
	c.mu.Unlock()
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(base, cancel)
	return rctx, func() { stop(); cancel(); c.apiRuns.Done() }, nil
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

// worker takes task names off the queue and runs them, one at a time.
func (c *Controller) worker(ctx, runCtx context.Context) {
	for {
		c.mu.Lock()
		if c.standby || !c.runnableLocked() { // runnableLocked: owned.go
			c.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-c.kick:
			}
			continue
		}
		if ctx.Err() != nil {
			c.mu.Unlock()
			return
		}
		name := c.queue[0]
		c.queue = c.queue[1:]
		c.queueSince = time.Time{}
		if len(c.queue) > 0 {
			c.queueSince = c.opts.Clock.Now() // progress
		}
		if len(c.queue) > 0 {
			signal(c.kick) // more work: wake another worker
		}
		if c.opts.Metrics != nil {
			c.opts.Metrics.QueueDepth(len(c.queue))
		}
		e := c.tasks[name]
		if e == nil || !c.stepLocked(e, evTake, wake{}) {
			c.mu.Unlock()
			continue
		}
		trigger := e.trigger
		e.trigger = ""
		e.runSeen, e.seen = e.seen, time.Time{}
		force := e.force
		e.force = false
		spec := e.spec
		c.mu.Unlock()

		c.slots <- struct{}{}
		res := c.reconcile(runCtx, e, &spec, trigger, force, false)
		<-c.slots

		c.mu.Lock()
		locked := res.failed && errors.Is(res.err, driver.ErrStateLocked)
		if !locked {
			e.lockWaits = 0
		}
		switch {
		case locked && e.spec.Enabled:
			// Someone else holds the task's state lock. Unlike other
			// failures this is retried until the run gets the lock: a lock
			// always ends (see driver.ErrStateLocked), and giving up would
			// leave the task behind the catalog until its next change.
			// The delay doubles up to LockRetryCap.
			e.lockWaits++
			delay := backoff.Exp(c.opts.RetryBase, LockRetryCap, e.lockWaits-1)
			delay += time.Duration(rand.Int64N(int64(delay)/4 + 1))
			c.log.Info("retrying task: its Terraform state is locked by another process", "task_name", name,
				"attempt", e.lockWaits, "delay", delay.Round(time.Millisecond))
			e.trigger = "retry"
			e.rerun = false // a change does not free the lock: the retry reads it
			e.retryAttempt, e.lastErr = e.lockWaits, c.redact(driver.ErrorSummary(res.err))
			c.stepLocked(e, evRetry, wake{d: delay})
		case res.failed && res.terminal:
			c.log.Warn("task failed with a terminal error: it runs again when its desired state changes",
				"task_name", name, "error", res.err)
			c.stepLocked(e, evDone, wake{}) // a change that came during the run runs now
		case res.failed && e.spec.Enabled && !e.doomed && (c.opts.MaxRetries == 0 || e.retries < c.opts.MaxRetries) && c.opts.MaxRetries >= 0:
			e.retries++
			delay := retryDelay(e.retries, c.opts.RetryBase, c.opts.RetryMax, jitterNow())
			if !res.waiting {
				c.log.Info("retrying task after failure", "task_name", name, "attempt", e.retries, "delay", delay.Round(time.Millisecond))
			}
			e.retryAttempt, e.lastErr = e.retries, c.redact(driver.ErrorSummary(res.err))
			// A change that came during the run runs now.
			c.stepLocked(e, evRetry, wake{d: delay, before: func() {
				if e.trigger == "" {
					e.trigger = "retry"
				}
			}})
		default:
			c.stepLocked(e, evDone, wake{})
		}
		c.undeferLocked(e)
		c.mu.Unlock()
	}
}

// undeferLocked settles a notification deferred while the task's first
// run was under way (see markDirtyLocked).
func (c *Controller) undeferLocked(e *entry) {
	if e.deferred {
		e.deferred = false
		c.markDirtyLocked(e, "change")
	}
}

// outcome is what one reconcile did.
type outcome struct {
	failed   bool
	waiting  bool // not run: it waits (ErrWaiting); retried, not recorded
	terminal bool // the failure is terminal (driver.ErrTerminal)
	err      error
	plan     string
	held     string // not run: an upstream task has something left to do (chain.go)
}

// triggerOnce is the trigger of RunOnce's runs, which order chained tasks
// themselves.
const triggerOnce = "once"

// unreadable is recorded as the failed fingerprint when a task's desired
// state could not be read: the task stays dirty, and no fingerprint can
// match it.
const unreadable = "unreadable"

// reconcile runs one task once: compute its desired state, decide whether
// it must run, drive Terraform, and record the outcome. A task runs when
// its desired state differs from the one last applied successfully, or
// when its last run failed (unless that failure was terminal and the
// desired state is still the same), or when force is set. With inspect set
// it plans instead of applying and records nothing.
func (c *Controller) reconcile(ctx context.Context, e *entry, s *task.Spec, trigger string, force, inspect bool) outcome {
	log := c.log.With("task_name", s.Name)
	// The desired state is taken before the inputs are built: if the data
	// changes in between, the inputs are newer than the fingerprint stored
	// as applied, and the next notification runs the task once more. The
	// other order could store a newer fingerprint than what was applied
	// and lose that change.
	want, ready, derr := c.desired(ctx, s)
	if !ready {
		log.Debug("waiting for watched data before running")
		return outcome{}
	}
	// From here on the task has run as far as buffering is concerned: a
	// change that arrives during this run waits out the buffer period.
	c.mu.Lock()
	e.ranOnce = true
	c.mu.Unlock()
	if derr != nil && errors.Is(derr, ErrWaiting) && !inspect {
		c.mu.Lock()
		first := e.waiting == ""
		e.waiting = derr.Error()
		c.mu.Unlock()
		if first {
			log.Warn("task waits before it can run", "reason", derr.Error())
		}
		return outcome{failed: true, waiting: true, err: derr}
	}
	c.mu.Lock()
	e.waiting = ""
	c.mu.Unlock()
	if derr != nil {
		return c.unreadableState(ctx, s, trigger, derr, inspect)
	}
	st := c.opts.Store.Run(s.Name)
	if !inspect && !force {
		var run bool
		if trigger, run = c.mustRun(log, s.Name, st, want, trigger); !run {
			return outcome{}
		}
	}
	in, ready := c.inputs(s)
	if !ready { // a view went away in between (a regexp match left)
		return outcome{}
	}
	// Chained tasks: the upstream tasks are looked at after the inputs are
	// read, so that an upstream found up to date has applied data at least
	// as new as the inputs (chain.go).
	if !inspect && trigger != triggerOnce {
		if why := c.upstreamHold(ctx, s); why != "" {
			c.mu.Lock()
			first := e.waiting != why
			e.waiting = why
			c.mu.Unlock()
			if first {
				log.Info("task held: it runs after the tasks it depends on", "reason", why)
			}
			return outcome{held: why}
		}
	}
	c.mu.Lock()
	if e.failHash != want.Fingerprint {
		e.retries = 0
		e.failHash = want.Fingerprint
	}
	c.mu.Unlock()

	r := &runRecord{id: uuid.NewString(), trigger: trigger, kind: store.KindApply, want: want, before: st,
		actor: actorFrom(ctx), inputs: digest(&in)}
	c.mu.Lock()
	r.seen, e.runSeen = e.runSeen, time.Time{}
	r.prev = e.prevInputs
	c.mu.Unlock()
	if inspect {
		r.kind = store.KindPlan
	} else if err := c.opts.Store.StartRun(s.Name, r.id); err != nil {
		// The marker is in the store before Terraform starts: if this
		// instance dies or loses the lead during the run, the next
		// leader runs the task again.
		log.Error("not running task: its in-flight marker could not be stored", "error", err)
		return outcome{failed: true, err: fmt.Errorf("storing the in-flight marker: %w", err)}
	}
	if c.opts.Metrics != nil {
		c.opts.Metrics.RunStarted(s.Name)
	}
	log.Info("executing task", "run_id", r.id, "trigger", trigger, "mode", r.kind, "instances", len(in.Services))
	r.start = time.Now()
	r.res, r.err = c.drive(ctx, e, s, driver.Run{ID: r.id}, &in, inspect)
	r.end = time.Now()
	r.phases = eventPhases(e.initStart, e.initEnd, r.res.Phases, r.kind, r.start, r.end)
	e.initStart, e.initEnd = time.Time{}, time.Time{}
	if inspect {
		if c.opts.Metrics != nil {
			c.opts.Metrics.RunFinished(s.Name, r.kind, r.err == nil, r.end.Sub(r.start))
		}
		return outcome{failed: r.err != nil, err: r.err, plan: r.res.Output}
	}
	return c.recordRun(ctx, log, e, s, r)
}

// mustRun decides whether a task runs, from its desired state and the run
// state in the store, and returns the run's trigger: what changed since
// its last success (the watched key, or the parts of the desired state).
func (c *Controller) mustRun(log *slog.Logger, name string, st store.RunState, want Desired, trigger string) (string, bool) {
	switch {
	case st.Dirty() && st.Terminal && st.Failed == want.Fingerprint:
		log.Debug("last run failed with a terminal error and the desired state has not changed since: not running")
		c.skipped(name)
		return trigger, false
	case st.Dirty():
		if trigger != "retry" {
			trigger = changeTrigger(trigger, changedParts(st.Parts, want.Parts))
			if trigger == "start" || trigger == "leader" {
				trigger = "previous run failed"
			}
		}
	case want.Fingerprint == st.Applied:
		log.Debug("desired state unchanged since last apply, skipping run", "fingerprint", short(want.Fingerprint))
		c.skipped(name)
		return trigger, false
	default:
		trigger = changeTrigger(trigger, changedParts(st.Parts, want.Parts))
	}
	return trigger, true
}

// inputs builds what the task's module receives: its Consul data and the
// outputs of the tasks it receives them from.
func (c *Controller) inputs(s *task.Spec) (task.Inputs, bool) {
	in, ready := BuildInputs(s, c.get)
	if !ready {
		return in, false
	}
	if outs, _ := c.upstreamOutputs(s); outs != nil {
		in.TaskOutputs = make(map[string]json.RawMessage, len(outs))
		for k, v := range outs {
			in.TaskOutputs[k] = v
		}
	}
	return in, true
}

// runRecord is one run of a task (not a plan), from its start to its
// record in the store.
type runRecord struct {
	id, trigger string
	kind        string
	want        Desired
	before      store.RunState // the run state when it started
	start, end  time.Time
	res         driver.Result
	err         error
	// what the operator sees of it (runinfo.go)
	actor        string
	seen         time.Time
	inputs, prev *inputsDigest
	phases       []store.Phase
}

// recordRun records a run's outcome: its event and the task's next run
// state, in one write (finish); a run is not a success until recorded.
func (c *Controller) recordRun(ctx context.Context, log *slog.Logger, e *entry, s *task.Spec, r *runRecord) outcome {
	res, err, st := r.res, r.err, r.before
	terminal := driver.IsTerminal(err)
	ev := store.Event{ID: r.id, TaskName: s.Name, Success: err == nil, StartTime: r.start, EndTime: r.end,
		Kind: r.kind, Trigger: r.trigger, InputsHash: r.want.Used, Config: eventConfig(s), LogPath: res.LogPath,
		LogTail: c.redact(tail(res.LogPath, 4096)), Terminal: terminal, TFCRunURL: res.RunURL,
		ErrorSummary: c.redact(driver.ErrorSummary(err)), Actor: r.actor, Phases: r.phases, Changes: changes(r.prev, r.inputs)}
	if !r.seen.IsZero() {
		ev.DetectedAt = &r.seen
	}
	if res.Add+res.Change+res.Destroy > 0 || err == nil {
		ev.Plan = &store.PlanSummary{Add: res.Add, Change: res.Change, Destroy: res.Destroy}
	}
	next := store.RunState{Applied: r.want.Fingerprint, Parts: r.want.Parts, Outputs: st.Outputs}
	if err == nil && e.drv != nil && e.exports {
		next.Outputs = res.Outputs
		if next.Outputs == nil {
			log.Warn("the driver reported no outputs: tasks that receive this task's outputs get an empty object")
			next.Outputs = json.RawMessage("{}")
		}
	}
	if err != nil {
		ev.Error = &store.EventError{Message: c.redact(err.Error())}
		// The last success stays recorded (what changed is told against
		// it); the failure makes the task dirty until a run succeeds.
		next = store.RunState{Applied: st.Applied, Parts: st.Parts, Failed: r.want.Fingerprint, Terminal: terminal, Outputs: st.Outputs}
		log.Error("error applying task", "run_id", r.id, "error", c.redact(err.Error()), "terminal", terminal, "log", res.LogPath)
	}
	recErr := c.finish(ctx, s.Name, next, &ev)
	if recErr == nil {
		c.mu.Lock()
		e.prevInputs = r.inputs
		c.mu.Unlock()
	}
	if recErr != nil && err == nil {
		// Applied but not recorded: not reported as a success. The task
		// stays dirty here, and the in-flight marker (still set in the
		// store) makes the next leader run it again.
		err = fmt.Errorf("the run succeeded but could not be recorded: %w", recErr)
	}
	if c.opts.Metrics != nil {
		c.opts.Metrics.RunFinished(s.Name, r.kind, err == nil, r.end.Sub(r.start))
	}
	if err != nil {
		return outcome{failed: true, terminal: terminal, err: err}
	}
	if r.trigger != triggerOnce { // -once logs its tasks in order (RunOnce)
		log.Info("task completed", "run_id", r.id, "added", res.Add, "changed", res.Change,
			"destroyed", res.Destroy, "duration", r.end.Sub(r.start).Round(time.Millisecond))
	}
	c.mu.Lock()
	e.drifted = false // just applied: matches the configuration again
	e.retries = 0
	c.mu.Unlock()
	return outcome{}
}

// unreadableState records that a task's desired state could not be read (a
// module directory or file that vanished): an error event naming what, and
// the task stays dirty, retried with backoff like a failed run.
func (c *Controller) unreadableState(ctx context.Context, s *task.Spec, trigger string, derr error, inspect bool) outcome {
	err := fmt.Errorf("reading the task's desired state: %w", derr)
	if inspect {
		return outcome{failed: true, err: err}
	}
	c.log.Error("task not run: its desired state cannot be read", "task_name", s.Name, "error", err)
	st := c.opts.Store.Run(s.Name)
	now := time.Now()
	ev := store.Event{ID: uuid.NewString(), TaskName: s.Name, StartTime: now, EndTime: now, Kind: store.KindApply,
		Trigger: trigger, Config: eventConfig(s), Error: &store.EventError{Message: c.redact(err.Error())}}
	next := store.RunState{Applied: st.Applied, Parts: st.Parts, Failed: unreadable}
	_ = c.finish(ctx, s.Name, next, &ev) // logged there; the task is retried either way
	return outcome{failed: true, err: err}
}

func (c *Controller) skipped(name string) {
	if c.opts.Metrics != nil {
		c.opts.Metrics.RunSkipped(name)
	}
}

// redact removes secrets from text that reaches events and logs.
func (c *Controller) redact(text string) string {
	if c.opts.Redact == nil {
		return text
	}
	return c.opts.Redact(text)
}

// Recording a run's outcome is retried: the run is not over until the
// store has it.
const (
	finishAttempts  = 8
	finishRetryBase = 250 * time.Millisecond
	finishRetryMax  = 5 * time.Second
)

// finish records a run's outcome (run state and event, one write) and hands
// the event to the event hook. A failed write is retried with backoff; a
// write refused because this instance no longer leads is not (the new
// leader runs the task again, its in-flight marker still being set).
func (c *Controller) finish(ctx context.Context, name string, st store.RunState, ev *store.Event) error {
	for attempt := 1; ; attempt++ {
		err := c.opts.Store.FinishRun(name, st, ev)
		if err == nil {
			if ev != nil && c.opts.OnEvent != nil {
				c.opts.OnEvent(*ev)
			}
			return nil
		}
		if errors.Is(err, store.ErrNotLeader) {
			c.log.Warn("run outcome not recorded: this instance no longer leads or owns the task; the new leader or owner runs the task again",
				"task_name", name, "error", err)
			return err
		}
		if attempt == finishAttempts || ctx.Err() != nil {
			c.log.Error("run outcome not recorded in the store", "task_name", name, "attempts", attempt, "error", err)
			return err
		}
		delay := retryDelay(attempt, finishRetryBase, finishRetryMax, jitterNow())
		c.log.Warn("recording the run outcome failed; retrying", "task_name", name, "attempt", attempt,
			"delay", delay.Round(time.Millisecond), "error", err)
		backoff.Sleep(ctx, delay)
	}
}

// drive creates and initialises the task's driver when needed, then plans
// or applies.
func (c *Controller) drive(ctx context.Context, e *entry, s *task.Spec, run driver.Run, in *task.Inputs, inspect bool) (driver.Result, error) {
	if e.drv == nil {
		spec := *s
		c.mu.Lock()
		spec.ExportOutputs = c.exportsOutputsLocked(s.Name)
		c.mu.Unlock()
		d, err := c.opts.NewDriver(spec)
		if err != nil {
			// The task's configuration cannot make a driver (a name
			// Terraform refuses, a provider that is not configured):
			// the same desired state would fail the same way.
			return driver.Result{}, &driver.Error{Op: "prepare", Summary: err.Error(), Err: err, Terminal: true}
		}
		e.initStart = time.Now()
		err = d.Init(ctx)
		e.initEnd = time.Now()
		if err != nil {
			return driver.Result{}, err
		}
		e.drv, e.exports = d, spec.ExportOutputs
	}
	if inspect {
		return e.drv.Plan(ctx, run, in)
	}
	return e.drv.Apply(ctx, run, in)
}

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
			if err == nil {
				c.slots <- struct{}{}
				t0 := time.Now()
				res = c.reconcile(ctx, e, &s, triggerOnce, true, inspect)
				results[i].dur = time.Since(t0)
				<-c.slots
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

func eventConfig(s *task.Spec) *store.EventConfig {
	cfg := &store.EventConfig{Providers: append([]string{}, s.Providers...), Services: []string{}, Source: s.Module}
	if sel, _ := servicesSource(s); sel != nil {
		cfg.Services = append(cfg.Services, sel.Names...)
	}
	return cfg
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// tail returns at most n bytes from the end of a file, starting at a line.
func tail(path string, n int64) string {
	if path == "" {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	if off > 0 {
		if i := strings.IndexByte(string(b), '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}
