package notify

import (
	"fmt"
	"strings"
	"time"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/holddown"
)

// RemovalNote is the removal part of a webhook's payload: one step
// (holddown.Action*) of the removals a task's removal_delay holds down,
// for every removal that took it at once.
type RemovalNote struct {
	// Action is "pending" (left; kept in the module's input until
	// applies_at), "cancelled" (came back within the delay: nothing
	// runs) or "applied" (gone for the delay: the task runs without it).
	Action string `json:"action"`
	// Removals are the instances, catalog services or nodes, at most
	// MaxRemovalsListed; Count is how many there are.
	Removals []holddown.Removal `json:"removals"`
	Count    int                `json:"count"`
}

// MaxRemovalsListed bounds the removals one notification lists.
const MaxRemovalsListed = 100

// OnRemoval takes the steps of a task's removals (holddown.Tracker.Drain)
// and queues one notification per action, in the order pending,
// cancelled, applied, for every notifier whose events list "removal". It
// never blocks.
func (d *Dispatcher) OnRemoval(task string, changes []holddown.Change) {
	if len(changes) == 0 {
		return
	}
	now := time.Now().UTC()
	for _, action := range []string{holddown.ActionPending, holddown.ActionCancelled, holddown.ActionApplied} {
		n := RemovalNote{Action: action}
		for _, c := range changes {
			if c.Action != action {
				continue
			}
			n.Count++
			if len(n.Removals) < MaxRemovalsListed {
				n.Removals = append(n.Removals, c.Removal)
			}
		}
		if n.Count == 0 {
			continue
		}
		p := Payload{Type: config.NotifyRemoval, Task: task, Time: now, Removal: &n, Text: removalText(task, n)}
		for _, s := range d.senders {
			if s.n.Wants(config.NotifyRemoval) {
				s.push(item{payload: &p})
			}
		}
	}
}

// removalText is a removal notification's one-line summary.
func removalText(task string, n RemovalNote) string {
	ids := make([]string, 0, min(len(n.Removals), 5))
	for _, r := range n.Removals[:min(len(n.Removals), 5)] {
		ids = append(ids, r.ID)
	}
	list := strings.Join(ids, ", ")
	if n.Count > len(ids) {
		list += fmt.Sprintf(" and %d more", n.Count-len(ids))
	}
	switch n.Action {
	case holddown.ActionPending:
		return fmt.Sprintf("ctsync: task %q keeps %d that left (%s) until %s (removal_delay)", task, n.Count, list,
			n.Removals[0].At.UTC().Format(time.RFC3339))
	case holddown.ActionCancelled:
		return fmt.Sprintf("ctsync: task %q: %d came back within removal_delay (%s): nothing runs for them", task, n.Count, list)
	}
	return fmt.Sprintf("ctsync: task %q: %d gone for removal_delay (%s): the task runs without them", task, n.Count, list)
}
