package gate

import (
	"context"
	"fmt"
	"strings"
	"time"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

// The rules of an approval block, as a Verdict names the one that held.
const (
	RuleMaxDestroy        = "max_destroy"
	RuleMaxDestroyPercent = "max_destroy_percent"
	RuleMaxReplace        = "max_replace"
	RuleRequired          = "required"
)

// Verdict is what the approval rules say about a plan.
type Verdict struct {
	// Reason is why the plan is held ("" lets it apply), as the task's
	// status, the API, the webhook and the event show it.
	Reason string
	// Rule is the rule that held it (Rule*); "" when it applies.
	Rule string
	// Window reports a hold by the destroys applied within
	// approval.window: the plan alone would have applied.
	Window bool
	// Prior is how many resources the applies within the window
	// destroyed (those before the last approved one not counted);
	// HighWater is the most resources the task managed within it, the
	// plan's state included. Both are set when the window was looked at.
	Prior, HighWater int
	// Span is the task's approval.window when the window was looked at.
	Span time.Duration
}

// WindowNote is, on a plan the window held, what the window held it with.
type WindowNote struct {
	// Window is the task's approval.window ("1h").
	Window string `json:"window"`
	// Destroyed is how many resources the applies within it destroyed
	// before this plan; HighWater the most resources the task managed
	// within it.
	Destroyed int `json:"destroyed"`
	HighWater int `json:"high_water"`
}

// Hold records the verdict on a plan the rules hold: its reason, the rule
// and, for a hold by the window, the window's counts.
func (v Verdict) Hold(p *Plan) {
	p.Reason, p.Rule, p.Window = v.Reason, v.Rule, nil
	if v.Window {
		p.Window = &WindowNote{Window: fmtWindow(v.Span), Destroyed: v.Prior, HighWater: v.HighWater}
	}
}

// Held reports whether the plan waits for an operator.
func (v Verdict) Held() bool { return v.Reason != "" }

// Judge applies a task's approval rules to a plan: first to the plan
// alone (Hold), then, for max_destroy and max_destroy_percent when the
// task's approval.window is not 0, to the destroys applied within the
// window plus the plan's, against the most resources the task managed
// within it (w, the task's store.DestroyWindow, as at now). Only a plan
// that destroys something (replacements aside) is held by the window: the
// destroys before it were each let through.
//
// The window counts the applies after the last one an operator approved
// (its destroys were seen in the held plan's reason); that apply's
// resulting count is where the high-water mark starts again.
func Judge(a *task.Approval, c Counts, w store.DestroyWindow, now time.Time) Verdict {
	v := judgePlan(a, c)
	if v.Held() || a == nil {
		return v
	}
	d := c.PureDestroy()
	win := a.EffectiveWindow()
	if win <= 0 || d == 0 || (a.MaxDestroy == nil && a.MaxDestroyPercent == nil) {
		return v
	}
	prior, high := windowCounts(w, now.Add(-win))
	high = max(high, c.InState)
	if prior == 0 {
		return v // the plan alone, judged above
	}
	total := d + prior
	span := fmtWindow(win)
	if a.MaxDestroy != nil && total > *a.MaxDestroy {
		return Verdict{Rule: RuleMaxDestroy, Window: true, Prior: prior, HighWater: high, Span: win,
			Reason: fmt.Sprintf("plan %s of %d resources; with the %d destroyed within the window (%s): %d (max_destroy %d)",
				what(d, c.Replace), c.InState, prior, span, total, *a.MaxDestroy)}
	}
	if a.MaxDestroyPercent != nil {
		of := max(high, total)
		if total*100 > *a.MaxDestroyPercent*of {
			return Verdict{Rule: RuleMaxDestroyPercent, Window: true, Prior: prior, HighWater: high, Span: win,
				Reason: fmt.Sprintf("plan %s of %d resources; with the %d destroyed within the window (%s): %d of %d (max_destroy_percent %d)",
					what(d, c.Replace), c.InState, prior, span, total, of, *a.MaxDestroyPercent)}
		}
	}
	v.Prior, v.HighWater, v.Span = prior, high, win
	return v
}

// windowCounts sums the destroys of the applies at or after from that
// follow the last approved one, and returns the most resources managed
// around them (for the approved apply: after it).
func windowCounts(w store.DestroyWindow, from time.Time) (destroyed, high int) {
	es := w.Since(from)
	for i := len(es) - 1; i >= 0; i-- {
		if es[i].Approved {
			high = es[i].After
			es = es[i+1:]
			break
		}
	}
	for _, e := range es {
		destroyed += e.Destroyed
		high = max(high, e.Before, e.After)
	}
	return destroyed, high
}

// fmtWindow writes a window as configured: "1h", "30m", "1h30m".
func fmtWindow(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Applied is the store.WindowEntry of an apply of a plan with counts c at
// at: its pure destroys, and the resources before (c.InState) and after
// it. approved marks the apply of a plan an operator approved.
func Applied(c Counts, at time.Time, approved bool) store.WindowEntry {
	return store.WindowEntry{At: at.UTC(), Destroyed: c.PureDestroy(), Before: c.InState,
		After: max(0, c.InState+c.Add-c.Destroy), Approved: approved}
}

// CountPlan counts a plan's resource changes from its JSON form
// (`terraform show -json`, resource_changes): adds, changes, destroys as
// Terraform's summary counts them, and replacements apart. InState is
// left to the caller (the prior state's managed resources).
func CountPlan(p *tfjson.Plan) Counts {
	var c Counts
	if p == nil {
		return c
	}
	for _, rc := range p.ResourceChanges {
		if rc == nil || rc.Change == nil {
			continue
		}
		a := rc.Change.Actions
		switch {
		case a.Replace():
			c.Add++
			c.Destroy++
			c.Replace++
		case a.Create():
			c.Add++
		case a.Update():
			c.Change++
		case a.Delete():
			c.Destroy++
		}
	}
	return c
}

// WindowOf returns the task's destroy window from st, the controller's
// store; empty when st keeps none (store.DestroyWindows) or the task has
// no window.
func WindowOf(st any, s *task.Spec) store.DestroyWindow {
	ws, ok := st.(store.DestroyWindows)
	if !ok || s.Approval.EffectiveWindow() <= 0 {
		return store.DestroyWindow{}
	}
	return ws.DestroyWindow(s.Name)
}

// RecordApply records in st an apply of a plan with counts c at at
// (approved: the plan an operator approved), for the window of the task's
// next plans. It does nothing when st keeps no windows or the task has
// none.
func RecordApply(ctx context.Context, st any, s *task.Spec, c Counts, at time.Time, approved bool) error {
	ws, ok := st.(store.DestroyWindows)
	win := s.Approval.EffectiveWindow()
	if !ok || win <= 0 {
		return nil
	}
	return ws.RecordApply(ctx, s.Name, Applied(c, at, approved), win)
}
