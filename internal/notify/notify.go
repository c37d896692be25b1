// Package notify sends notifications about task runs to webhooks: a run
// that failed, a successful run after a failed one (recovered), drift
// found by a drift check, and what the safety gates did: a plan held for
// approval, approved, rejected, expired or superseded (approval), a run
// denied by policy (policy).
//
// The controller hands every event to Dispatcher.OnEvent, and every gate
// decision to Dispatcher.OnGate (gate.go); neither ever blocks: each notifier has a bounded queue and its own goroutine, so a
// webhook that hangs or fails delays nothing but its own later
// notifications. When a queue is full the oldest notification is dropped
// (logged and counted). Delivery retries with exponential backoff; each
// attempt is bounded by the notifier's timeout.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	expbackoff "github.com/ctsync/ctsync/internal/backoff"
	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/store"
)

// Defaults of Options.
const (
	DefaultQueueSize = 100
	DefaultRetryBase = time.Second
	// maxBackoff caps the delay between two attempts.
	maxBackoff = time.Minute
	// maxResponse is how much of a response body is read (and discarded)
	// so the connection can be reused.
	maxResponse = 64 << 10
)

// Metrics counts what the notifiers do; *metrics.Metrics implements it.
type Metrics interface {
	NotificationDelivered(notifier string)
	NotificationFailed(notifier string)
	NotificationDropped(notifier string)
}

// Options configure a Dispatcher.
type Options struct {
	// Notifications are the notification blocks of the configuration.
	Notifications []config.Notification
	// Store holds the run history; it tells whether a successful run
	// follows a failed one.
	Store store.Store
	// Redact hides secrets in the event's log tail and error message.
	Redact  func(string) string
	Logger  *slog.Logger
	Metrics Metrics
	// QueueSize bounds each notifier's queue (default 100).
	QueueSize int
	// RetryBase is the delay before the first retry; it doubles on each
	// retry, with ±20% jitter, up to a minute (default 1s).
	RetryBase time.Duration
}

// Payload is the JSON body POSTed to a webhook.
type Payload struct {
	// Type is "failed", "recovered", "drift", "approval" or "policy".
	Type string `json:"type"`
	Task string `json:"task"`
	// Time is when the notification was made.
	Time time.Time `json:"time"`
	// Text is a one-line summary, so that chat webhooks that show a "text"
	// field (Slack, Mattermost) need no adapter.
	Text string `json:"text"`
	// Event is the run (or drift check) as the API shows it; absent for
	// approval and policy.
	Event store.Event `json:"event,omitzero"`
	// Approval is set for type approval (gate.go).
	Approval *ApprovalNote `json:"approval,omitempty"`
	// Policy is set for type policy (gate.go).
	Policy *PolicyNote `json:"policy,omitempty"`
	// Removal is set for type removal (removal.go).
	Removal *RemovalNote `json:"removal,omitempty"`
}

// Dispatcher routes events to the notifiers that want them.
type Dispatcher struct {
	opts Options

	mu      sync.RWMutex
	senders []*sender
	// runCtx and wg are Run's: SetNotifications starts the notifiers it
	// adds there (nil before Run).
	runCtx context.Context
	wg     sync.WaitGroup
}

// New builds a Dispatcher; Run delivers.
func New(opts Options) *Dispatcher {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if opts.RetryBase <= 0 {
		opts.RetryBase = DefaultRetryBase
	}
	if opts.Redact == nil {
		opts.Redact = func(s string) string { return s }
	}
	d := &Dispatcher{opts: opts}
	for _, n := range opts.Notifications {
		d.senders = append(d.senders, d.newSender(n))
	}
	return d
}

// newSender builds the sender of a notification block (not running).
func (d *Dispatcher) newSender(n config.Notification) *sender {
	host := ""
	if u, err := url.Parse(n.URL); err == nil {
		host = u.Host
	}
	return &sender{
		d: d, n: n, q: newQueue(d.opts.QueueSize),
		log:    d.opts.Logger.With("notifier", n.Name, "host", host),
		client: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()},
	}
}

// list returns the notifiers in force.
func (d *Dispatcher) list() []*sender {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.senders
}

// start runs s until Run's context ends or s is stopped. d.mu is held.
func (d *Dispatcher) startLocked(s *sender) {
	ctx, stop := context.WithCancel(d.runCtx)
	s.stop = stop
	d.wg.Go(func() {
		defer stop()
		s.run(ctx)
	})
}

// SetNotifications puts the notification blocks ns in force (a reload of
// the configuration): a notifier whose block is unchanged keeps its queue;
// one removed or changed stops, and the notifications still queued for it
// are dropped (logged); a new or changed one starts.
func (d *Dispatcher) SetNotifications(ns []config.Notification) {
	d.mu.Lock()
	defer d.mu.Unlock()
	old := map[string]*sender{}
	for _, s := range d.senders {
		old[s.n.Name] = s
	}
	next := make([]*sender, 0, len(ns))
	for _, n := range ns {
		if s, ok := old[n.Name]; ok && reflect.DeepEqual(s.n, n) {
			next = append(next, s)
			delete(old, n.Name)
			continue
		}
		s := d.newSender(n)
		if d.runCtx != nil {
			d.startLocked(s)
		}
		next = append(next, s)
	}
	for _, s := range old {
		if s.stop != nil {
			s.stop()
		}
		if n := s.q.size(); n > 0 {
			s.log.Warn("notifier removed or changed by a reload: its queued notifications are dropped", "dropped", n)
		}
	}
	d.senders = next
}

// OnEvent takes a stored event (the controller's event hook). It never
// blocks: the event is queued for every notifier that may want it.
func (d *Dispatcher) OnEvent(ev store.Event) {
	for _, s := range d.list() {
		if !s.mayWant(ev) {
			continue
		}
		s.push(item{ev: ev})
	}
}

// push queues a notification, dropping the oldest when the queue is full.
func (s *sender) push(it item) {
	if dropped, ok := s.q.push(it); ok {
		task, id := dropped.ev.TaskName, dropped.ev.ID
		if g := dropped.gate; g != nil {
			task, id = g.Task, g.Plan.ID
		}
		if p := dropped.payload; p != nil {
			task, id = p.Task, p.Type
		}
		s.log.Warn("notification queue full: dropped the oldest notification",
			"task_name", task, "event_id", id, "queue_size", s.d.opts.QueueSize)
		if s.d.opts.Metrics != nil {
			s.d.opts.Metrics.NotificationDropped(s.n.Name)
		}
	}
}

// Run delivers notifications until ctx is done; notifications still
// queued then are not sent.
func (d *Dispatcher) Run(ctx context.Context) error {
	d.mu.Lock()
	d.runCtx = ctx
	for _, s := range d.senders {
		d.startLocked(s)
	}
	d.mu.Unlock()
	<-ctx.Done()
	d.wg.Wait()
	return nil
}

// Classify returns the notification kind of an event, or "" for none:
// drift for a drift event, failed for a failed run, recovered for a
// successful run whose previous run (in evs, the task's history, newest
// first; drift checks are not runs) failed.
func Classify(ev store.Event, evs []store.Event) string {
	if k := candidate(ev); k != config.NotifyRecovered {
		return k
	}
	for _, prev := range evs {
		if prev.ID == ev.ID || prev.Kind == store.KindDrift || !prev.StartTime.Before(ev.StartTime) {
			continue
		}
		if !prev.Success {
			return config.NotifyRecovered
		}
		return ""
	}
	return ""
}

// sender delivers the notifications of one notification block.
type sender struct {
	d      *Dispatcher
	n      config.Notification
	q      *queue
	log    *slog.Logger
	client *http.Client
	busy   atomic.Bool // a notification taken off the queue is being handled
	// hdr, when set, replaces n.Headers (SetHeader, headers.go).
	hdr   atomic.Pointer[map[string]string]
	hdrMu sync.Mutex
	// stop ends its goroutine (SetNotifications); nil before Run.
	stop context.CancelFunc
}

// candidate is what an event may be notified as, before the task's
// history is read: a success is a recovery only after a failure.
func candidate(ev store.Event) string {
	switch {
	case ev.Kind == store.KindDrift:
		return config.NotifyDrift
	case !ev.Success:
		return config.NotifyFailed
	}
	return config.NotifyRecovered
}

// mayWant filters events before they are queued, without the store.
func (s *sender) mayWant(ev store.Event) bool { return s.n.Wants(candidate(ev)) }

func (s *sender) run(ctx context.Context) {
	for ctx.Err() == nil {
		it, ok := s.q.pop(ctx, &s.busy)
		if !ok {
			return
		}
		switch {
		case it.gate != nil:
			s.deliver(ctx, s.gatePayload(*it.gate)) // gate.go
		case it.payload != nil:
			s.deliver(ctx, *it.payload) // removal.go
		default:
			s.handle(ctx, it.ev)
		}
		s.busy.Store(false)
	}
}

// handle classifies one event and delivers its notification, if any.
func (s *sender) handle(ctx context.Context, ev store.Event) {
	var history []store.Event
	if candidate(ev) == config.NotifyRecovered && s.d.opts.Store != nil {
		history = s.d.opts.Store.Events(ev.TaskName)
	}
	kind := Classify(ev, history)
	if kind == "" || !s.n.Wants(kind) {
		return
	}
	s.deliver(ctx, s.payload(kind, ev))
}

func (s *sender) payload(kind string, ev store.Event) Payload {
	ev = ev.Redacted(s.d.opts.Redact)
	text := ""
	switch kind {
	case config.NotifyFailed:
		text = fmt.Sprintf("ctsync: task %q failed", ev.TaskName)
		if msg := oneLineError(ev); msg != "" {
			text += ": " + msg
		}
	case config.NotifyRecovered:
		text = fmt.Sprintf("ctsync: task %q recovered: its run succeeded after a failure", ev.TaskName)
	case config.NotifyDrift:
		text = fmt.Sprintf("ctsync: task %q drifted: its infrastructure was changed outside Terraform", ev.TaskName)
		if p := ev.Plan; p != nil {
			text += fmt.Sprintf(" (%d to add, %d to change, %d to destroy)", p.Add, p.Change, p.Destroy)
		}
	}
	return Payload{Type: kind, Task: ev.TaskName, Time: time.Now().UTC(), Text: text, Event: ev}
}

// oneLineError is the failure of ev in one line: its error_summary (the
// cause, as status and the dashboard show it), else the first line of its
// error. A webhook's text is one line; the whole error is in its event.
func oneLineError(ev store.Event) string {
	if ev.ErrorSummary != "" {
		return ev.ErrorSummary
	}
	if ev.Error == nil {
		return ""
	}
	msg, _, _ := strings.Cut(strings.TrimSpace(ev.Error.Message), "\n")
	return strings.TrimSpace(msg)
}

// deliver POSTs the payload, retrying transient failures.
func (s *sender) deliver(ctx context.Context, p Payload) {
	body, err := json.Marshal(p)
	if err != nil { // cannot happen: plain data
		s.log.Error("encoding notification", "error", err)
		return
	}
	id := p.Event.ID
	if p.Approval != nil {
		id = p.Approval.Plan.ID
	}
	log := s.log.With("type", p.Type, "task_name", p.Task, "event_id", id)
	attempts := 1 + s.n.Retries
	for i := 1; ; i++ {
		retry, err := s.attempt(ctx, body)
		if err == nil {
			log.Debug("notification delivered", "attempt", i)
			if s.d.opts.Metrics != nil {
				s.d.opts.Metrics.NotificationDelivered(s.n.Name)
			}
			return
		}
		if ctx.Err() != nil {
			return // shutting down
		}
		if !retry || i >= attempts {
			log.Warn("notification failed", "attempts", i, "error", err)
			if s.d.opts.Metrics != nil {
				s.d.opts.Metrics.NotificationFailed(s.n.Name)
			}
			return
		}
		delay := backoff(s.d.opts.RetryBase, i)
		log.Debug("notification attempt failed; retrying", "attempt", i, "delay", delay.Round(time.Millisecond), "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// attempt makes one POST. retry tells whether a failure is worth retrying:
// no answer, a timeout, 408, 429 or 5xx.
func (s *sender) attempt(ctx context.Context, body []byte) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.n.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.n.URL, bytes.NewReader(body))
	if err != nil {
		return false, errors.New("building the request failed") // the URL is a secret
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "ctsync")
	for k, v := range s.headers() {
		req.Header.Set(k, v)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return true, scrub(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponse))
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return false, nil
	case c == http.StatusRequestTimeout || c == http.StatusTooManyRequests || c >= 500:
		return true, fmt.Errorf("webhook answered %s", resp.Status)
	default:
		return false, fmt.Errorf("webhook answered %s", resp.Status)
	}
}

// scrub drops the URL (which may hold a token) from a client error.
func scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return fmt.Errorf("%s: timed out", ue.Op)
		}
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// backoff is the delay after the attempt-th failed attempt: the
// exponential step, ±20% jitter.
func backoff(base time.Duration, attempt int) time.Duration {
	return expbackoff.Policy{Base: base, Max: maxBackoff, Jitter: expbackoff.Around20}.Delay(attempt)
}

// item is one queued notification: a stored event, what a gate did, or a
// payload made when it was queued (removal.go).
type item struct {
	ev      store.Event
	gate    *gate.Event
	payload *Payload
}

// queue is a bounded FIFO that drops its oldest item when full.
type queue struct {
	mu    sync.Mutex
	items []item
	max   int
	wake  chan struct{}
}

func newQueue(n int) *queue { return &queue{max: n, wake: make(chan struct{}, 1)} }

// push appends it; when the queue was full it returns the dropped oldest
// item and true.
func (q *queue) push(it item) (dropped item, ok bool) {
	q.mu.Lock()
	if len(q.items) >= q.max {
		dropped, ok = q.items[0], true
		q.items = q.items[1:]
	}
	q.items = append(q.items, it)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return dropped, ok
}

// pop waits for an item; false when ctx is done. busy is set under the
// queue's lock when an item is taken, so that an empty queue with busy
// unset means nothing is pending.
func (q *queue) pop(ctx context.Context, busy *atomic.Bool) (item, bool) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			busy.Store(true)
			it := q.items[0]
			q.items[0] = item{}
			q.items = q.items[1:]
			q.mu.Unlock()
			return it, true
		}
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return item{}, false
		case <-q.wake:
		}
	}
}

// size is how many items wait.
func (q *queue) size() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// Len returns how many notifications wait, for all notifiers together.
func (d *Dispatcher) Len() int {
	n := 0
	for _, s := range d.list() {
		s.q.mu.Lock()
		n += len(s.q.items)
		s.q.mu.Unlock()
	}
	return n
}

// Flush waits until every queued notification has been handled (delivered
// or given up), or ctx is done. Run must be running.
func (d *Dispatcher) Flush(ctx context.Context) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		idle := true
		for _, s := range d.list() {
			s.q.mu.Lock()
			idle = idle && len(s.q.items) == 0 && !s.busy.Load()
			s.q.mu.Unlock()
		}
		if idle {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
