package reconcile

import (
	"context"
	"slices"
	"time"

	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/watch"
)

// Notify is the watch registry's callback: the view for key changed and
// subscriber (a task name) uses it. It never blocks.
func (c *Controller) Notify(subscriber, key string) { c.src.notify(subscriber, key) }

// notify records a notification for the note loop.
func (c *sources) notify(subscriber, key string) {
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

// noteLoop handles view notifications in one goroutine: it keeps regexp
// selections subscribed to the services they match, applies the trigger
// rule of each condition, and marks tasks dirty.
func (c *sources) noteLoop(ctx context.Context) {
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
			var qs *querySet
			if e != nil {
				spec, qs = e.spec, e.qs
			}
			c.mu.Unlock()
			c.handle(e, throwaway, n, &spec, qs)
		}
	}
}

// handle applies one note (see noteLoop), then counts it as handled.
func (c *sources) handle(e *entry, throwaway bool, n note, spec *task.Spec, qs *querySet) {
	defer func() {
		c.mu.Lock()
		c.handling--
		c.mu.Unlock()
	}()
	if e == nil {
		return
	}
	c.syncDynamic(n.task, e, qs)
	if throwaway {
		signal(e.changed)
		return
	}
	c.handleNote(e, spec, qs, n.key)
}

// Settled reports whether the controller has nothing left to do for now:
// every notification handled, no task queued (on a leader), running or
// waiting on a buffer or retry timer. Tests use it as the positive signal that a change
// was considered (and, say, skipped), instead of waiting to see nothing
// happen.
func (c *Controller) Settled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.src.notes) > 0 || c.src.handling > 0 || (c.q.len() > 0 && !c.standby) {
		return false
	}
	for _, e := range c.tasks {
		if e.lc.phase == phaseRunning || e.lc.phase == phaseDeleting || (e.lc.phase == phaseQueued && !c.standby) || e.lc.timerSet {
			return false
		}
	}
	return true // a follower's queue waits for it to lead
}

// syncDynamic subscribes a regexp selector to the health of every service it
// matches now and drops the services it no longer matches.
func (c *sources) syncDynamic(name string, e *entry, qs *querySet) {
	want := map[string]watch.Query{}
	for _, q := range qs.dynamic(c.obs.get) {
		want[q.Key()] = q
	}
	c.mu.Lock()
	old := e.dyn
	e.dyn = want
	c.mu.Unlock()
	for k, q := range want {
		if _, had := old[k]; !had {
			c.opts.Watcher.Subscribe(name, q)
		}
	}
	for k := range old {
		if _, keep := want[k]; !keep && !qs.staticKeys[k] {
			c.opts.Watcher.Unsubscribe(name, k)
		}
	}
}

// handleNote applies the condition's trigger rule and marks the task dirty;
// a change of module input data alone does not.
func (c *sources) handleNote(e *entry, s *task.Spec, qs *querySet, key string) {
	if cs := s.Condition.CatalogServices; cs != nil && key == conditionCatalog(cs).Key() {
		// catalog-services fires only when the set of matching names
		// changes; other updates still reach the next run's inputs. The
		// names are compared from one note of the condition's query to
		// the next only: a note of another query (a module input) may be
		// handled after the catalog changed but before its own note, and
		// must not take that change for itself.
		names, ok := CatalogNames(s, c.obs.get)
		c.mu.Lock()
		same := ok && e.nameSeen && slices.Equal(names, e.lastNames)
		if ok {
			e.lastNames, e.nameSeen = names, true
		}
		c.mu.Unlock()
		if same {
			c.log.Debug("catalog-services: the set of names is the same; not triggering", "task_name", s.Name, "key", key)
			signal(e.changed)
			return
		}
	}
	if qs.inputOnly(key, c.obs.get) {
		// Module input data: read by the next run, which only the
		// condition (or another part of the desired state) triggers.
		// Until the task has run with complete data, every notification
		// counts (one may be the data it waited for).
		c.mu.Lock()
		ran := e.lc.ranOnce
		if !ran {
			c.markDirtyLocked(e, Trigger{Kind: TriggerChange, Detail: key})
		}
		c.mu.Unlock()
		if ran {
			c.log.Debug("module input changed; not triggering", "task_name", s.Name, "key", key) // the next run reads it
		}
		signal(e.changed)
		return
	}
	c.mu.Lock()
	c.markDirtyLocked(e, Trigger{Kind: TriggerChange, Detail: key})
	c.mu.Unlock()
	signal(e.changed)
}
