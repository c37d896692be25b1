package gate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

func n(v int) *int { return &v }

func TestHold(t *testing.T) {
	cases := []struct {
		name string
		a    *task.Approval
		c    Counts
		want string
	}{
		{"no block", nil, Counts{Destroy: 9, InState: 9}, ""},
		{"no changes", &task.Approval{Required: true}, Counts{InState: 3}, ""},
		{"required", &task.Approval{Required: true}, Counts{Add: 1}, "approval required"},
		{"under max", &task.Approval{MaxDestroy: n(5)}, Counts{Destroy: 5, InState: 14}, ""},
		{"over max", &task.Approval{MaxDestroy: n(5)}, Counts{Destroy: 12, InState: 14}, "plan destroys 12 of 14 resources (max_destroy 5)"},
		{"zero max", &task.Approval{MaxDestroy: n(0)}, Counts{Destroy: 1, InState: 1}, "plan destroys 1 of 1 resources (max_destroy 0)"},
		{"at percent", &task.Approval{MaxDestroyPercent: n(50)}, Counts{Destroy: 7, InState: 14}, ""},
		{"over percent", &task.Approval{MaxDestroyPercent: n(50)}, Counts{Destroy: 8, InState: 14}, "plan destroys 8 of 14 resources (max_destroy_percent 50)"},
		{"percent, adds only", &task.Approval{MaxDestroyPercent: n(0)}, Counts{Add: 3}, ""},
		{"max before required", &task.Approval{Required: true, MaxDestroy: n(1)}, Counts{Destroy: 2, InState: 2}, "plan destroys 2 of 2 resources (max_destroy 1)"},

		// Replacements apart: max_destroy and max_destroy_percent count
		// pure destroys (Destroy - Replace); max_replace the replacements.
		{"replacements are not destroys", &task.Approval{MaxDestroy: n(1)}, Counts{Add: 2, Destroy: 2, Replace: 2, InState: 2}, ""},
		{"replacements are not destroyed percent", &task.Approval{MaxDestroyPercent: n(10)}, Counts{Add: 4, Destroy: 4, Replace: 4, InState: 4}, ""},
		{"destroys and replaces over max", &task.Approval{MaxDestroy: n(2)}, Counts{Add: 1, Destroy: 4, Replace: 1, InState: 14},
			"plan destroys 3 and replaces 1 of 14 resources (max_destroy 2)"},
		{"destroys and replaces over percent", &task.Approval{MaxDestroyPercent: n(20)}, Counts{Add: 1, Destroy: 4, Replace: 1, InState: 10},
			"plan destroys 3 and replaces 1 of 10 resources (max_destroy_percent 20)"},
		{"max_replace", &task.Approval{MaxReplace: n(2)}, Counts{Add: 3, Destroy: 3, Replace: 3, InState: 14}, "plan replaces 3 of 14 resources (max_replace 2)"},
		{"max_replace with destroys", &task.Approval{MaxDestroy: n(5), MaxReplace: n(0)}, Counts{Add: 1, Destroy: 2, Replace: 1, InState: 4},
			"plan destroys 1 and replaces 1 of 4 resources (max_replace 0)"},
		{"at max_replace", &task.Approval{MaxReplace: n(3)}, Counts{Add: 3, Destroy: 3, Replace: 3, InState: 14}, ""},
		{"destroy rule before max_replace", &task.Approval{MaxDestroy: n(0), MaxReplace: n(0)}, Counts{Add: 1, Destroy: 2, Replace: 1, InState: 4},
			"plan destroys 1 and replaces 1 of 4 resources (max_destroy 0)"},
		{"replace before required", &task.Approval{Required: true, MaxReplace: n(0)}, Counts{Add: 1, Destroy: 1, Replace: 1, InState: 1},
			"plan replaces 1 of 1 resources (max_replace 0)"},
		{"a driver that cannot tell: all destroys", &task.Approval{MaxDestroy: n(1)}, Counts{Add: 2, Destroy: 2, InState: 2},
			"plan destroys 2 of 2 resources (max_destroy 1)"},
	}
	for _, c := range cases {
		if got := Hold(c.a, c.c); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
		// Without destroys applied before it, Judge says the same.
		if got := Judge(c.a, c.c, store.DestroyWindow{}, time.Now()); got.Reason != c.want || got.Window {
			t.Errorf("%s: Judge %+v, want %q", c.name, got, c.want)
		}
	}
}

// readPlan reads a plan that `terraform show -json` printed (testdata;
// see testdata/README.md for how they were made) and counts it as the
// terraform driver does: CountPlan, and the managed resources of the
// prior state.
func readPlan(t *testing.T, name string) Counts {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var p tfjson.Plan
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	c := CountPlan(&p)
	if p.PriorState != nil && p.PriorState.Values != nil {
		for _, r := range p.PriorState.Values.RootModule.Resources {
			if r.Mode == tfjson.ManagedResourceMode {
				c.InState++
			}
		}
	}
	return c
}

// The bundled load-balancer example (examples/load-balancer) replaces its
// two resources on every change of the instances (+2 -2): with
// max_destroy = 1 a catalog change is not held, a real destroy is;
// max_replace bounds the replacements.
func TestRealLoadBalancerPlans(t *testing.T) {
	repl := readPlan(t, "load-balancer-replace.json")
	if want := (Counts{Add: 2, Destroy: 2, Replace: 2, InState: 2}); repl != want {
		t.Fatalf("replace plan counts %+v, want %+v", repl, want)
	}
	destroy := readPlan(t, "load-balancer-destroy.json")
	if want := (Counts{Destroy: 2, InState: 2}); destroy != want {
		t.Fatalf("destroy plan counts %+v, want %+v", destroy, want)
	}
	maxDestroy := &task.Approval{MaxDestroy: n(1)}
	if got := Hold(maxDestroy, repl); got != "" {
		t.Errorf("max_destroy 1 held the replacements: %q", got)
	}
	if got, want := Hold(maxDestroy, destroy), "plan destroys 2 of 2 resources (max_destroy 1)"; got != want {
		t.Errorf("max_destroy 1 on the destroy: %q, want %q", got, want)
	}
	if got, want := Hold(&task.Approval{MaxDestroyPercent: n(50), MaxReplace: n(1)}, repl), "plan replaces 2 of 2 resources (max_replace 1)"; got != want {
		t.Errorf("max_replace 1: %q, want %q", got, want)
	}
	// Replacements are not destroys for the window either: a hundred
	// catalog changes within the hour hold nothing.
	var w store.DestroyWindow
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 100 {
		at := now.Add(time.Duration(i) * 30 * time.Second)
		if v := Judge(maxDestroy, repl, w, at); v.Held() {
			t.Fatalf("change %d held: %s", i+1, v.Reason)
		}
		w = w.With(Applied(repl, at, false), maxDestroy.EffectiveWindow())
	}
}

// The trickle of issue 37: ten instances leave one at a time, each plan
// applied before the next one leaves, with max_destroy_percent = 50 and
// the default window (1h). Judged alone, each plan destroys 1 of 10, 1 of
// 9, ... 1 of 2: none is over 50 % but the last. With the window, the
// k-th plan is judged as k destroys of the 10 the task managed within the
// hour: the 6th (6 of 10 > 50 %) is held, not the 10th.
func TestWindowTrickle(t *testing.T) {
	a := &task.Approval{MaxDestroyPercent: n(50)}
	var w store.DestroyWindow
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	heldAt := 0
	for k := 1; k <= 10; k++ {
		now := t0.Add(time.Duration(k) * 2 * time.Minute)
		c := Counts{Destroy: 1, InState: 11 - k}
		if alone := Hold(a, c); alone != "" && k < 10 {
			t.Fatalf("plan %d alone held: %s", k, alone)
		}
		v := Judge(a, c, w, now)
		if v.Held() {
			heldAt = k
			want := "plan destroys 1 of 5 resources; with the 5 destroyed within the window (1h): 6 of 10 (max_destroy_percent 50)"
			if v.Reason != want || !v.Window || v.Rule != RuleMaxDestroyPercent || v.Prior != 5 || v.HighWater != 10 {
				t.Fatalf("verdict %+v, want reason %q", v, want)
			}
			break
		}
		w = w.With(Applied(c, now, false), a.EffectiveWindow())
	}
	if heldAt != 6 {
		t.Fatalf("held at plan %d, want 6", heldAt)
	}

	// The same with max_destroy = 3: the 4th single destroy is held.
	b := &task.Approval{MaxDestroy: n(3)}
	w = store.DestroyWindow{}
	for k := 1; k <= 4; k++ {
		now := t0.Add(time.Duration(k) * time.Minute)
		c := Counts{Destroy: 1, InState: 11 - k}
		v := Judge(b, c, w, now)
		if k < 4 && v.Held() {
			t.Fatalf("plan %d held: %s", k, v.Reason)
		}
		if k == 4 {
			want := "plan destroys 1 of 7 resources; with the 3 destroyed within the window (1h): 4 (max_destroy 3)"
			if v.Reason != want || v.Rule != RuleMaxDestroy {
				t.Fatalf("4th: %+v, want %q", v, want)
			}
		}
		w = w.With(Applied(c, now, false), b.EffectiveWindow())
	}
}

// What the window keeps and forgets: destroys older than the window do
// not count; window = "0s" judges each plan alone; a plan without pure
// destroys is never held by the window; after an approved apply only
// what follows counts, against what remained.
func TestWindowRules(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	a := &task.Approval{MaxDestroyPercent: n(50)}
	var w store.DestroyWindow
	// Four destroys of one, 10 minutes apart: 4 of 10 within the hour.
	for k := range 4 {
		w = w.With(Applied(Counts{Destroy: 1, InState: 10 - k}, t0.Add(time.Duration(k)*10*time.Minute), false), time.Hour)
	}
	two := Counts{Destroy: 2, InState: 6}
	if v := Judge(a, two, w, t0.Add(35*time.Minute)); !v.Held() || !v.Window {
		t.Fatalf("6 of 10 within the hour: %+v", v)
	}
	// 75 minutes after the first: the first two left the window (2 + 2
	// of 8 is 50 %).
	if v := Judge(a, two, w, t0.Add(75*time.Minute)); v.Held() || v.Prior != 2 || v.HighWater != 8 {
		t.Fatalf("after the first left the window: %+v", v)
	}
	// window = "0s": each plan alone.
	zero := task.Duration(0)
	if v := Judge(&task.Approval{MaxDestroyPercent: n(50), Window: &zero}, two, w, t0.Add(35*time.Minute)); v.Held() {
		t.Fatalf("window 0s: %+v", v)
	}
	// A plan that only adds, changes or replaces is not held by the window.
	for _, c := range []Counts{{Add: 1, InState: 6}, {Change: 3, InState: 6}, {Add: 1, Destroy: 1, Replace: 1, InState: 6}} {
		if v := Judge(a, c, w, t0.Add(35*time.Minute)); v.Held() {
			t.Fatalf("%+v held: %+v", c, v)
		}
	}
	// Only approval.required or max_replace set: the window has nothing
	// to judge.
	if v := Judge(&task.Approval{MaxReplace: n(5)}, two, w, t0.Add(35*time.Minute)); v.Held() {
		t.Fatalf("no destroy rule: %+v", v)
	}
	// An operator approves the held plan (2 of 6 applied: 4 remain);
	// then destroys count again from there, against the 4.
	w = w.With(Applied(two, t0.Add(36*time.Minute), true), time.Hour)
	one := Counts{Destroy: 1, InState: 4}
	if v := Judge(a, one, w, t0.Add(40*time.Minute)); v.Held() || v.Prior != 0 {
		t.Fatalf("first destroy after the approval: %+v", v)
	}
	w = w.With(Applied(one, t0.Add(40*time.Minute), false), time.Hour)
	w = w.With(Applied(Counts{Destroy: 1, InState: 3}, t0.Add(41*time.Minute), false), time.Hour)
	v := Judge(a, Counts{Destroy: 1, InState: 2}, w, t0.Add(42*time.Minute))
	want := "plan destroys 1 of 2 resources; with the 2 destroyed within the window (1h): 3 of 4 (max_destroy_percent 50)"
	if v.Reason != want || v.HighWater != 4 {
		t.Fatalf("after the approval: %+v, want %q", v, want)
	}
	// Adds grow the high-water mark: 20 managed, 6 destroyed one by one
	// is 30 %.
	w = store.DestroyWindow{}
	w = w.With(Applied(Counts{Add: 10, InState: 10}, t0, false), time.Hour)
	for k := range 5 {
		w = w.With(Applied(Counts{Destroy: 1, InState: 20 - k}, t0.Add(time.Duration(k+1)*time.Minute), false), time.Hour)
	}
	if v := Judge(a, Counts{Destroy: 1, InState: 15}, w, t0.Add(10*time.Minute)); v.Held() || v.HighWater != 20 || v.Prior != 5 {
		t.Fatalf("after a scale-up: %+v", v)
	}
}

func TestApplied(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("x", 3600))
	got := Applied(Counts{Add: 3, Change: 1, Destroy: 5, Replace: 2, InState: 10}, at, true)
	want := store.WindowEntry{At: at.UTC(), Destroyed: 3, Before: 10, After: 8, Approved: true}
	if got != want {
		t.Fatalf("%+v, want %+v", got, want)
	}
}

func TestFmtWindow(t *testing.T) {
	for d, want := range map[time.Duration]string{time.Hour: "1h", 30 * time.Minute: "30m", 90 * time.Minute: "1h30m",
		45 * time.Second: "45s", 168 * time.Hour: "168h", 61 * time.Second: "1m1s"} {
		if got := fmtWindow(d); got != want {
			t.Errorf("%s: %q, want %q", d, got, want)
		}
	}
}

// What the reconciler calls: WindowOf before judging a plan, RecordApply
// after applying one, over the store it has (one that keeps no windows,
// or a task without a window, does nothing).
func TestWindowOfAndRecordApply(t *testing.T) {
	ctx := t.Context()
	st := store.NewMemory(0)
	a := &task.Approval{MaxDestroyPercent: n(50)}
	s := &task.Spec{Name: "fw", Approval: a}
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for k := 1; k <= 6; k++ {
		now := t0.Add(time.Duration(k) * time.Minute)
		c := Counts{Destroy: 1, InState: 11 - k}
		v := Judge(a, c, WindowOf(st, s), now)
		if v.Held() != (k == 6) {
			t.Fatalf("plan %d: %+v", k, v)
		}
		if !v.Held() {
			if err := RecordApply(ctx, st, s, c, now, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	if w := st.DestroyWindow("fw"); len(w.Entries) != 5 {
		t.Fatalf("window %+v", w)
	}
	// No approval block, window "0s", a store without windows: nothing.
	zero := task.Duration(0)
	for _, s := range []*task.Spec{{Name: "plain"}, {Name: "alone", Approval: &task.Approval{Window: &zero}}} {
		if err := RecordApply(ctx, st, s, Counts{Destroy: 1}, t0, false); err != nil {
			t.Fatal(err)
		}
		if w := st.DestroyWindow(s.Name); len(w.Entries) != 0 {
			t.Errorf("%s: recorded %+v", s.Name, w)
		}
	}
	if err := RecordApply(ctx, struct{}{}, s, Counts{Destroy: 1}, t0, false); err != nil {
		t.Fatal(err)
	}
	if w := WindowOf(struct{}{}, s); len(w.Entries) != 0 {
		t.Fatal("a window from a store that keeps none")
	}
}
