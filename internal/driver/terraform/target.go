package terraform

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/terraform-exec/tfexec"
	"github.com/zclconf/go-cty/cty"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/task"
)

// A targeted run (refresh policy "auto"): a change of a few instances of
// the services variable is applied with `terraform apply -refresh=false
// -target=...` of the resource instances of those instances (and of every
// resource that is not one per instance); then a full plan without refresh
// applies what else it finds: in the same run, or, when the caller defers
// it (driver.Run.DeferCheck), in a run of its own (driver.Run.Check), so
// that a following change does not wait for it. Terraform evaluates
// every resource instance of a plan, and its cost per instance grows with
// the number of instances (measured: 4 times the instances, 11 to 15
// times the CPU; docs/performance.md): the targeted plan visits only the
// changed instances' objects, so the change reaches the device in a time that hardly depends
// on how many objects the task manages. The full check leaves the state a
// full run would (a module whose objects depend on every instance, such as
// length(var.services), gets the rest there).

// maxTargetShare is the largest share of the state's resource instances a
// targeted plan may cover: above it, a targeted plan saves little and the
// run is a plain one.
const maxTargetShare = 4 // at most a quarter

// targetState is what the driver keeps to target a change: what its last
// successful apply applied and the state it left. It lives as long as the
// Driver (the first run after a start is never targeted) and is dropped by
// any run that leaves something else (a failure, a held plan's apply, a
// destroy).
type targetState struct {
	// services is, per key of the services variable, the digest of the
	// instance the last successful apply applied; nil: none known.
	services map[string][sha256.Size]byte
	// rest is the digest of every other input of that apply.
	rest [sha256.Size]byte
	// index is the resource instances of the state it left.
	index *stateIndex
}

// stateIndex is the managed resource instances of a state, grouped by
// what a -target can name: a resource, or the call of a module.
type stateIndex struct {
	total      int
	containers []*container
}

// container is a resource, or a module call with instances (for_each or
// count), with the keys of its instances: of the resource's own instances,
// or of the module call's outermost keyed step.
type container struct {
	addr string // as a -target names it: module.a.type.name, module.b
	// keys counts the resource instances under each string key.
	keys map[string]int
	// other counts the instances with no key or a number key.
	other int
}

// inputDigests are the digests of a run's inputs: each instance of the
// services variable, and the rest.
func inputDigests(in *task.Inputs) (map[string][sha256.Size]byte, [sha256.Size]byte, error) {
	svcs := make(map[string][sha256.Size]byte, len(in.Services))
	for k, s := range in.Services {
		b, err := json.Marshal(s)
		if err != nil {
			return nil, [sha256.Size]byte{}, err
		}
		svcs[k] = sha256.Sum256(b)
	}
	rest := *in
	rest.Services = nil
	b, err := json.Marshal(rest)
	if err != nil {
		return nil, [sha256.Size]byte{}, err
	}
	return svcs, sha256.Sum256(b), nil
}

// changedKeys are the keys of the services variable added, removed or
// changed since the digests prev.
func changedKeys(prev, cur map[string][sha256.Size]byte) []string {
	var out []string
	for k, d := range cur {
		if p, ok := prev[k]; !ok || p != d {
			out = append(out, k)
		}
	}
	for k := range prev {
		if _, ok := cur[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// targets returns the -target addresses of a run whose services variable
// changed at the keys changed (from the services the state was made
// with, applied), and how many of the state's instances they cover; none,
// with the reason, when a targeted plan does not fit.
func (x *stateIndex) targets(applied map[string][sha256.Size]byte, changed []string) ([]string, int, string) {
	if x == nil || x.total == 0 {
		return nil, 0, "the state has no resource instances"
	}
	for _, k := range changed {
		if _, ok := quoteKey(k); !ok {
			return nil, 0, fmt.Sprintf("the key %q cannot be written in a target address", k)
		}
	}
	var out []string
	covered, perInstance := 0, 0
	for _, c := range x.containers {
		if !c.perInstance(applied) {
			out = append(out, c.addr)
			covered += c.other
			for _, n := range c.keys {
				covered += n
			}
			continue
		}
		perInstance++
		for _, k := range changed {
			q, _ := quoteKey(k)
			out = append(out, c.addr+"["+q+"]")
			covered += max(c.keys[k], 1)
		}
	}
	switch {
	case perInstance == 0:
		return nil, 0, "no resource or module call of the module has one instance per instance of the services variable"
	case covered*maxTargetShare > x.total:
		return nil, 0, fmt.Sprintf("the targets would cover %d of the state's %d resource instances (more than 1/%d)", covered, x.total, maxTargetShare)
	}
	slices.Sort(out)
	return out, covered, ""
}

// perInstance reports whether the container's instances are keyed by keys
// of the services variable (of the services its instances were made
// from): then a change of one instance is its instance of that key.
func (c *container) perInstance(services map[string][sha256.Size]byte) bool {
	if c.other > 0 || len(c.keys) == 0 {
		return false
	}
	for k := range c.keys {
		if _, ok := services[k]; !ok {
			return false
		}
	}
	return true
}

// quoteKey writes an instance key as an address does (["key"]'s inside),
// refusing keys an address cannot carry plainly: quotes, backslashes,
// template sequences, control characters, invalid UTF-8.
func quoteKey(k string) (string, bool) {
	if !utf8.ValidString(k) || strings.ContainsAny(k, `"\`) || strings.Contains(k, "${") || strings.Contains(k, "%{") {
		return "", false
	}
	for _, r := range k {
		if unicode.IsControl(r) {
			return "", false
		}
	}
	return `"` + k + `"`, true
}

// rawState is the part of Terraform's state file (format version 4) the
// index reads.
type rawState struct {
	Version   int `json:"version"`
	Resources []struct {
		Module    string `json:"module"`
		Mode      string `json:"mode"`
		Type      string `json:"type"`
		Name      string `json:"name"`
		Instances []struct {
			IndexKey json.RawMessage `json:"index_key"`
		} `json:"instances"`
	} `json:"resources"`
}

// indexState reads the resource instances of a state file's text (as
// `terraform state pull` prints it).
func indexState(text []byte) (*stateIndex, error) {
	x := &stateIndex{}
	if len(strings.TrimSpace(string(text))) == 0 {
		return x, nil // no state yet
	}
	var st rawState
	if err := json.Unmarshal(text, &st); err != nil {
		return nil, fmt.Errorf("reading the state: %w", err)
	}
	if st.Version != 4 {
		return nil, fmt.Errorf("state format version %d is not known (4 is)", st.Version)
	}
	byAddr := map[string]*container{}
	get := func(addr string) *container {
		c := byAddr[addr]
		if c == nil {
			c = &container{addr: addr, keys: map[string]int{}}
			byAddr[addr] = c
			x.containers = append(x.containers, c)
		}
		return c
	}
	for _, r := range st.Resources {
		if r.Mode != "managed" {
			continue
		}
		prefix, modKey, keyed, err := moduleStep(r.Module)
		if err != nil {
			return nil, fmt.Errorf("resource %s.%s: %w", r.Type, r.Name, err)
		}
		for _, inst := range r.Instances {
			x.total++
			if keyed {
				// The module call's instance is what a target of this
				// resource's key names: the call is the container.
				c := get(prefix)
				addKey(c, modKey)
				continue
			}
			c := get(joinAddr(prefix, r.Type+"."+r.Name))
			var k any
			if len(inst.IndexKey) > 0 {
				if err := json.Unmarshal(inst.IndexKey, &k); err != nil {
					return nil, fmt.Errorf("resource %s.%s: index key %s: %w", r.Type, r.Name, inst.IndexKey, err)
				}
			}
			addKey(c, k)
		}
	}
	return x, nil
}

func addKey(c *container, k any) {
	if s, ok := k.(string); ok {
		c.keys[s]++
	} else {
		c.other++
	}
}

func joinAddr(prefix, rest string) string {
	if prefix == "" {
		return rest
	}
	return prefix + "." + rest
}

// moduleStep reads a module instance address (module.a["x"].module.b) up
// to its first step with an instance key: the address of that module call
// (module.a) and the key ("x", or a number), keyed true. Without a keyed
// step it returns the whole address, keyed false.
func moduleStep(addr string) (call string, key any, keyed bool, err error) {
	if addr == "" {
		return "", nil, false, nil
	}
	trav, diags := hclsyntax.ParseTraversalAbs([]byte(addr), "", hcl.InitialPos)
	if diags.HasErrors() {
		return "", nil, false, fmt.Errorf("module address %q: %s", addr, diags.Error())
	}
	var b strings.Builder
	for i := 0; i < len(trav); i++ {
		var name string
		switch s := trav[i].(type) {
		case hcl.TraverseRoot:
			name = s.Name
		case hcl.TraverseAttr:
			name = s.Name
		default:
			return "", nil, false, fmt.Errorf("module address %q is not one Terraform writes", addr)
		}
		if name != "module" || i+1 >= len(trav) {
			return "", nil, false, fmt.Errorf("module address %q is not one Terraform writes", addr)
		}
		call, ok := trav[i+1].(hcl.TraverseAttr)
		if !ok {
			return "", nil, false, fmt.Errorf("module address %q is not one Terraform writes", addr)
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString("module." + call.Name)
		i++
		if i+1 < len(trav) {
			if idx, ok := trav[i+1].(hcl.TraverseIndex); ok {
				switch {
				case idx.Key.Type() == cty.String:
					return b.String(), idx.Key.AsString(), true, nil
				case idx.Key.Type() == cty.Number:
					f, _ := idx.Key.AsBigFloat().Int64()
					return b.String(), f, true, nil
				}
				return "", nil, false, fmt.Errorf("module address %q is not one Terraform writes", addr)
			}
		}
	}
	return b.String(), nil, false, nil
}

// indexNow reads the state of the task's workspace (`terraform state
// pull`) into an index.
func (d *Driver) indexNow(ctx context.Context) (*stateIndex, error) {
	stdout := d.sink.writer("stdout")
	defer d.tf.SetStdout(stdout)
	d.sink.begin("state pull (the index of the state's resource instances)", true)
	text, err := d.tf.StatePull(ctx)
	if err != nil {
		return nil, err
	}
	return indexState([]byte(text))
}

// targetPlan is the decision of an apply without refresh: the targets of
// a targeted plan, or none with the reason.
type targetPlan struct {
	targets []string
	covered int // the state's resource instances the targets cover
	total   int
	changed int // keys of the services variable changed
	why     string
}

// planTargets decides whether an apply without refresh of in is
// targeted: only its services variable changed since the last successful
// apply, whose state the driver indexed.
func (d *Driver) planTargets(in *task.Inputs) targetPlan {
	ts := &d.target
	if ts.services == nil || ts.index == nil {
		return targetPlan{why: "not targeted: no successful apply of this driver to start from"}
	}
	if in == nil {
		return targetPlan{why: "not targeted: the run has no inputs"}
	}
	if due := d.checkDue; !due.IsZero() && time.Since(due) >= MaxCheckDelay {
		return targetPlan{why: fmt.Sprintf("not targeted: a full check has been due for %s (at most %s): this run, of everything, is the check",
			time.Since(due).Round(time.Second), MaxCheckDelay)}
	}
	svcs, rest, err := inputDigests(in)
	if err != nil {
		return targetPlan{why: fmt.Sprintf("not targeted: %v", err)}
	}
	if rest != ts.rest {
		return targetPlan{why: "not targeted: inputs other than the services variable changed"}
	}
	changed := changedKeys(ts.services, svcs)
	if len(changed) == 0 {
		return targetPlan{why: "not targeted: the services variable did not change"}
	}
	targets, covered, why := ts.index.targets(ts.services, changed)
	if targets == nil {
		return targetPlan{why: "not targeted: " + why}
	}
	return targetPlan{targets: targets, covered: covered, total: ts.index.total, changed: len(changed)}
}

// recordApplied keeps what a successful apply of in applied and indexes
// the state it left, for the next run's targets; on any error the driver
// keeps nothing (the next run is not targeted).
func (d *Driver) recordApplied(ctx context.Context, in *task.Inputs) {
	d.target = targetState{}
	if in == nil || d.refreshPolicy() == task.RefreshAlways {
		return
	}
	svcs, rest, err := inputDigests(in)
	if err != nil {
		return
	}
	x, err := d.indexNow(ctx)
	if err != nil {
		d.sink.note("cannot index the state for targeted runs (%v): the next run is not targeted", err)
		return
	}
	d.target = targetState{services: svcs, rest: rest, index: x}
}

// targetNote is the run log's and Result.Targeted's line of a targeted
// run.
func (p targetPlan) note(check string) string {
	return fmt.Sprintf("targeted %s of %s resource instances (%d changed instance%s of the services variable); full check: %s",
		thousands(p.covered), thousands(p.total), p.changed, map[bool]string{true: "s"}[p.changed != 1], check)
}

// thousands writes n with a comma between thousands: 2,000.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// targetedRun is what a targeted run did: the counts of its applies, its
// note and its phases, and whether its full check is left to a later run.
type targetedRun struct {
	add, change, destroy int
	note                 string
	phases               []driver.Phase
	checkDue             bool
}

// MaxCheckDelay bounds how long the full check a targeted run left due
// (driver.Run.DeferCheck) may wait: while one has been due for longer, a
// data change is not targeted; its run is a full apply without refresh,
// which is itself the check. The reconciler runs the check as soon as no
// newer change is pending, so the bound matters only for a task whose data
// keeps changing faster than a full plan takes: at most five minutes
// behind what an untargeted run would have left.
const MaxCheckDelay = 5 * time.Minute

// runTargeted runs a targeted apply without refresh: one `terraform apply
// -refresh=false -target=...` of the changed instances' resource
// instances (it plans and applies them, as the ungated full path does
// everything); then, unless the full check is deferred (left due for a
// later run with driver.Run.Check), the full check: `terraform apply
// -refresh=false` of everything, which applies what it finds.
func (d *Driver) runTargeted(ctx context.Context, tp targetPlan, began time.Time, deferCheck bool) (targetedRun, error) {
	var tr targetedRun
	shown := tp.targets
	if len(shown) > 10 {
		shown = shown[:10]
	}
	more := ""
	if len(tp.targets) > len(shown) {
		more = fmt.Sprintf(" and %d more", len(tp.targets)-len(shown))
	}
	then := "then a full check without refresh"
	if deferCheck {
		then = "the full check without refresh follows in a run of its own"
	}
	d.sink.note("targeted: applying %d of the state's %d resource instances first (%s%s); %s",
		tp.covered, tp.total, strings.Join(shown, ", "), more, then)
	if err := d.applyTargeted(ctx, tp.targets); err != nil {
		return tr, err
	}
	tr.add, tr.change, tr.destroy = d.counts("apply", false)
	applied := time.Now()
	tr.phases = applyPhases(began, d.sink.plannedAt(), applied)
	if deferCheck {
		tr.checkDue = true
		tr.note = tp.note("pending")
		d.sink.note("%s", tr.note)
		return tr, nil
	}
	if err := d.runChange(ctx, "apply", "", true); err != nil {
		return tr, err
	}
	a, c, x := d.counts("apply", false)
	tr.add, tr.change, tr.destroy = tr.add+a, tr.change+c, tr.destroy+x
	tr.note = tp.note(checkFound(a + c + x))
	d.sink.note("%s", tr.note)
	tr.phases = append(tr.phases, driver.Phase{Name: "check", Start: applied, End: time.Now()})
	return tr, nil
}

// checkFound is what a full check found, for the run's note: "no further
// changes", "applied 3 further changes".
func checkFound(n int) string {
	if n == 0 {
		return "no further changes"
	}
	return fmt.Sprintf("applied %d further change%s", n, map[bool]string{true: "s"}[n != 1])
}

// applyTargeted runs `terraform apply -refresh=false -target=...` of the
// targets.
func (d *Driver) applyTargeted(ctx context.Context, targets []string) error {
	stdout := d.sink.writer("stdout")
	defer d.tf.SetStdout(stdout) // the -json commands of terraform-exec replace it
	opts := append(parallelism[tfexec.ApplyOption](d.opts.Spec.Parallelism), tfexec.Refresh(false))
	for _, t := range targets {
		opts = append(opts, tfexec.Target(t))
	}
	label := fmt.Sprintf("apply -refresh=false -target (%d address%s)", len(targets), map[bool]string{true: "es"}[len(targets) != 1])
	if d.ui {
		d.sink.beginUI(label)
		return d.tf.ApplyJSON(ctx, stdout, opts...)
	}
	d.sink.begin(label, false)
	return d.tf.Apply(ctx, opts...)
}
