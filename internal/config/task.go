package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/ctsync/ctsync/internal/task"
)

// rawTask is a task as decoded from one block, before inheritance and
// validation.
type rawTask struct {
	spec   task.Spec
	rng    hcl.Range // the task block
	disp   string    // `task "name"`, the prefix of its field paths
	buffer rawBuffer
	// removalDelay is the task's own removal_delay (removal.go).
	removalDelay opt[time.Duration]
	// ranges maps a task.FieldError path ("condition.services.names[1]")
	// to where that field was written.
	ranges map[string]hcl.Range
	// failed is set when decoding reported an error, so that validation
	// does not pile follow-on errors on top.
	failed bool
	// services is the deprecated `services = [...]` list, resolved against
	// the service blocks once every file is read (see resolveServices).
	services     opt[[]string]
	serviceElems []hcl.Range
}

var taskKeys = []key{
	{name: "name"}, {name: "description"}, {name: "module"}, {name: "source"}, {name: "version"},
	{name: "providers"}, {name: "variable_files"}, {name: "enabled"}, {name: "working_dir"},
	{name: "services"},
	{name: "parallelism"}, {name: "refresh"},
	{name: "depends_on"}, // chaining: task.Spec.DependsOn
	{name: "variables", kind: kMap},
	{name: "buffer_period", kind: kBlock},
	{name: "removal_delay"}, // removal.go
	{name: "condition", kind: kBlock, labels: 1, label: "type"},
	{name: "module_input", kind: kBlock, labels: 1, label: "type"},
	{name: "source_input", kind: kBlock, labels: 1, label: "type"},
	{name: "drift_detection", kind: kBlock},
	{name: "terraform_version"}, {name: "terraform_cloud_workspace", kind: kBlock}, // tfc.go
	{name: "approval", kind: kBlock}, {name: "policy", kind: kBlock}, // gates.go
}

var taskRejects = map[string]string{}

// conditionTypes are the valid condition labels, in HCL spelling.
var conditionTypes = []string{"services", "catalog-services", "consul-kv", "schedule", "nodes", "intentions"}

// moduleInputTypes are the valid module_input labels.
var moduleInputTypes = []string{"services", "consul-kv", "nodes", "intentions", "task-outputs"}

// peekName reads a task's name before the rest, so that every error about
// the task can name it.
func peekName(body hcl.Body) string {
	var a *hcl.Attribute
	if hsb, ok := body.(*hclsyntax.Body); ok {
		if sa := hsb.Attributes["name"]; sa != nil {
			a = sa.AsHCLAttribute()
		}
	} else if body != nil {
		as, _ := body.JustAttributes()
		a = as["name"]
	}
	if a == nil {
		return ""
	}
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() || v.IsNull() || !v.IsKnown() || v.Type() != cty.String {
		return ""
	}
	return v.AsString()
}

// displayTaskField turns a task.FieldError path into the HCL spelling used
// in messages: `task "web".condition "catalog-services".regexp`.
func displayTaskField(taskDisp, field string) string {
	if field == "" {
		return taskDisp
	}
	parts := strings.Split(field, ".")
	out := make([]string, 0, len(parts))
	for i := 0; i < len(parts); i++ {
		p := parts[i]
		if (p == "condition" || p == "module_input") && i+1 < len(parts) {
			out = append(out, p+" "+strconv.Quote(strings.ReplaceAll(parts[i+1], "_", "-")))
			i++
			continue
		}
		out = append(out, p)
	}
	return taskDisp + "." + strings.Join(out, ".")
}

// taskKey turns an HCL condition/module_input type into the FieldError
// spelling ("catalog-services" -> "catalog_services").
func taskKey(typ string) string { return strings.ReplaceAll(typ, "-", "_") }

// recordAll remembers where each argument and block of c was written,
// under prefix (a FieldError path).
func (t *rawTask) recordAll(prefix string, c *content) {
	for n, a := range c.attrs {
		t.ranges[join(prefix, n)] = a.Expr.Range()
	}
	for n, bs := range c.blocks {
		if len(bs) > 0 {
			if _, ok := t.ranges[join(prefix, n)]; !ok {
				t.ranges[join(prefix, n)] = bs[0].DefRange
			}
		}
	}
}

func (t *rawTask) recordList(field string, elems []hcl.Range) {
	for i, r := range elems {
		t.ranges[fmt.Sprintf("%s[%d]", field, i)] = r
	}
}

// lookup finds the best known range for a FieldError path: the field, else
// its closest recorded parent, else the task block.
func (t *rawTask) lookup(field string) hcl.Range {
	for f := field; f != ""; {
		if r, ok := t.ranges[f]; ok {
			return r
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return t.rng
}

// task decodes one task block.
func (d *decoder) task(b *hcl.Block) *rawTask {
	errsBefore := len(d.errs)
	t := &rawTask{rng: b.DefRange, disp: "task", ranges: map[string]hcl.Range{}}
	if name := peekName(b.Body); name != "" {
		t.disp = "task " + strconv.Quote(name)
	}
	p := t.disp
	c := d.content(b.Body, p, taskKeys, taskRejects)
	t.recordAll("", c)
	s := &t.spec

	s.Name = d.str(c, "name", p).V
	s.Description = d.str(c, "description", p).V
	mod := d.str(c, "module", p)
	if src := d.str(c, "source", p); src.Set {
		if mod.Set {
			// CTS keeps module and only warns.
			d.warnf(src.Rng, join(p, "source"), `is deprecated and ignored: "module" is also set, and wins`)
		} else {
			d.warnf(src.Rng, join(p, "source"), `is deprecated: use "module"`)
			mod = src
			t.ranges["module"] = src.Rng
		}
	}
	s.Module = mod.V
	s.Version = d.str(c, "version", p).V
	s.WorkingDir = d.str(c, "working_dir", p).V
	s.Enabled = d.boolean(c, "enabled", p).or(true)
	s.Parallelism = d.integer(c, "parallelism", p).V
	s.Refresh = d.str(c, "refresh", p).V // checked by Validate

	providers, elems := d.strList(c, "providers", p)
	s.Providers = providers.V
	t.recordList("providers", elems)

	t.services, t.serviceElems = d.strList(c, "services", p)

	deps, elems := d.strList(c, "depends_on", p)
	s.DependsOn = deps.V
	t.recordList("depends_on", elems)

	files, elems := d.strList(c, "variable_files", p)
	t.recordList("variable_files", elems)
	vars := map[string]string{}
	for i, f := range files.V {
		rng := files.Rng
		if i < len(elems) {
			rng = elems[i]
		}
		d.readVarFile(fmt.Sprintf("%s.variable_files[%d]", p, i), f, rng, vars)
	}
	if len(files.V) > 0 {
		s.VariableFiles = files.V
	}
	d.inlineVariables(c, p, vars, t)
	if len(vars) > 0 {
		s.Variables = vars
	}

	if bb := d.onlyOne(c, "buffer_period", p); bb != nil {
		d.bufferBlock(bb, join(p, "buffer_period"), &t.buffer)
		bc := map[string]opt[time.Duration]{"buffer_period.min": t.buffer.min, "buffer_period.max": t.buffer.max}
		for k, o := range bc {
			if o.Set {
				t.ranges[k] = o.Rng
			}
		}
		if t.buffer.enabled.Set {
			t.ranges["buffer_period.enabled"] = t.buffer.enabled.Rng
		}
	}

	conds := c.blocks["condition"]
	for _, cb := range conds[min(1, len(conds)):] {
		d.errf(cb.DefRange, join(p, "condition"), "only one condition can be configured per task")
	}
	if len(conds) > 0 {
		d.condition(conds[0], t)
	}

	seenInput := map[string]hcl.Range{}
	inputs := append(append([]*hcl.Block(nil), c.blocks["module_input"]...), c.blocks["source_input"]...)
	sortRanges(inputs, func(b *hcl.Block) hcl.Range { return b.DefRange })
	for _, ib := range inputs {
		if ib.Type == "source_input" {
			d.warnf(ib.DefRange, join(p, "source_input"), `is deprecated: use "module_input"`)
		}
		typ := ib.Labels[0]
		if prev, dup := seenInput[typ]; dup {
			d.errf(ib.DefRange, blockPath(p, ib), "only one module_input %q can be configured per task (the first is at %s)", typ, posString(prev))
			continue
		}
		seenInput[typ] = ib.DefRange
		d.moduleInput(ib, t)
	}
	d.driftDetection(c, p, t)
	d.tfcWorkspace(c, p, t) // tfc.go
	d.gates(c, p, t)        // gates.go
	t.removalDelay = d.removalDelay(c, p)

	t.failed = len(d.errs) > errsBefore
	return t
}

// inlineVariables reads the task's `variables` map. Values are kept as HCL
// expression text (see exprText); they override values from variable_files.
func (d *decoder) inlineVariables(c *content, p string, vars map[string]string, t *rawTask) {
	entries, rng, ok := d.mapEntries(c, "variables", p)
	if !ok {
		return
	}
	t.ranges["variables"] = rng
	for _, e := range entries {
		f := join(p, "variables."+e.key)
		expr := asHCL2(e.expr) // values are HCL expression text
		v, diags := expr.Value(nil)
		if diags.HasErrors() {
			d.errf(expr.Range(), f, "must be a literal value (no variables or function calls)")
			continue
		}
		if !d.checkNoTemplate(v, expr.Range(), f) {
			continue
		}
		vars[e.key] = d.exprText(expr, v)
		t.ranges["variables."+e.key] = expr.Range()
	}
}

// readVarFile reads one .tfvars (or .tfvars.json) file into vars. A
// relative path is relative to the process's working directory, as in CTS.
func (d *decoder) readVarFile(field, name string, rng hcl.Range, vars map[string]string) {
	fi, err := os.Stat(name)
	if err == nil && !fi.Mode().IsRegular() {
		d.errf(rng, field, "variable file %q is not a regular file", name)
		return
	}
	src, err := os.ReadFile(name)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		d.errf(rng, field, "cannot read variable file %q: %v", name, err)
		return
	}
	if !d.checkDepth(name, src, field) {
		return
	}
	p := hclparse.NewParser()
	var f *hcl.File
	var diags hcl.Diagnostics
	if strings.HasSuffix(strings.ToLower(name), ".json") {
		f, diags = p.ParseJSON(src, name)
	} else {
		f, diags = p.ParseHCL(src, name)
	}
	if diags.HasErrors() || f == nil {
		d.addDiags(diags, field)
		return
	}
	d.src[name] = src
	as, diags := f.Body.JustAttributes()
	if diags.HasErrors() {
		d.errf(rng, field, "variable file %q must hold only variable assignments", name)
		d.addDiags(diags, field)
		return
	}
	list := make([]*hcl.Attribute, 0, len(as))
	for _, a := range as {
		list = append(list, a)
	}
	sortRanges(list, func(a *hcl.Attribute) hcl.Range { return a.Range })
	for _, a := range list {
		v, diags := a.Expr.Value(nil)
		if diags.HasErrors() {
			d.errf(a.Expr.Range(), field, "variable %q in %q must be a literal value (no variables or function calls)", a.Name, name)
			continue
		}
		vars[a.Name] = d.exprText(a.Expr, v)
	}
}

// ---- conditions and module inputs ----

func servicesKeys(cond bool) []key {
	ks := []key{{name: "names"}, {name: "regexp"}, {name: "datacenter"}, {name: "namespace"},
		{name: "filter"}, {name: "cts_user_defined_meta", kind: kMap},
		{name: "status"}, {name: "peer"}, {name: "partition"}} // ctsync extensions
	if cond {
		ks = append(ks, key{name: "use_as_module_input"}, key{name: "source_includes_var"})
	}
	return ks
}

// nodesKeys and intentionsKeys are the fields of the nodes and intentions
// conditions and module inputs (ctsync extensions).
func nodesKeys(cond bool) []key {
	ks := []key{{name: "datacenter"}, {name: "filter"}, {name: "node_meta", kind: kMap}}
	if cond {
		ks = append(ks, key{name: "use_as_module_input"})
	}
	return ks
}

func intentionsKeys(cond bool) []key {
	ks := []key{{name: "datacenter"}, {name: "namespace"}, {name: "partition"},
		{name: "source_services", kind: kBlock}, {name: "destination_services", kind: kBlock}}
	if cond {
		ks = append(ks, key{name: "use_as_module_input"})
	}
	return ks
}

func kvKeys(cond bool) []key {
	ks := attrs("path", "recurse", "datacenter", "namespace")
	if cond {
		ks = append(ks, key{name: "use_as_module_input"}, key{name: "source_includes_var"})
	}
	return ks
}

func (d *decoder) condition(b *hcl.Block, t *rawTask) {
	typ := b.Labels[0]
	path := blockPath(t.disp, b)
	fk := "condition." + taskKey(typ) // FieldError spelling
	t.ranges["condition"] = b.DefRange
	t.ranges[fk] = b.DefRange
	cond := &t.spec.Condition
	switch typ {
	case "services":
		c := d.content(b.Body, path, servicesKeys(true), nil)
		t.recordAll(fk, c)
		sel := d.servicesSelector(c, path, fk, t)
		cond.Services = &task.ServicesCondition{ServicesSelector: sel, UseAsModuleInput: d.useAsModuleInput(c, path)}
	case "catalog-services":
		c := d.content(b.Body, path, []key{{name: "regexp"}, {name: "datacenter"}, {name: "namespace"},
			{name: "node_meta", kind: kMap}, {name: "use_as_module_input"}, {name: "source_includes_var"}}, nil)
		t.recordAll(fk, c)
		cs := &task.CatalogServicesCondition{
			Regexp:     d.str(c, "regexp", path).V,
			Datacenter: d.str(c, "datacenter", path).V,
			Namespace:  d.str(c, "namespace", path).V,
		}
		if m, _ := d.strMap(c, "node_meta", path); m.Set {
			cs.NodeMeta = m.V
		}
		cs.UseAsModuleInput = d.useAsModuleInput(c, path)
		cond.CatalogServices = cs
	case "consul-kv":
		c := d.content(b.Body, path, kvKeys(true), nil)
		t.recordAll(fk, c)
		cond.ConsulKV = &task.ConsulKVCondition{ConsulKVSelector: d.kvSelector(c, path), UseAsModuleInput: d.useAsModuleInput(c, path)}
	case "schedule":
		c := d.content(b.Body, path, attrs("cron"), nil)
		t.recordAll(fk, c)
		cron := d.str(c, "cron", path)
		if cron.Set {
			d.checkCron(cron, join(path, "cron"))
		}
		cond.Schedule = &task.ScheduleCondition{Cron: cron.V}
	case "nodes":
		c := d.content(b.Body, path, nodesKeys(true), nil)
		t.recordAll(fk, c)
		cond.Nodes = &task.NodesCondition{NodesSelector: d.nodesSelector(c, path), UseAsModuleInput: d.useAsModuleInput(c, path)}
	case "intentions":
		c := d.content(b.Body, path, intentionsKeys(true), nil)
		t.recordAll(fk, c)
		cond.Intentions = &task.IntentionsCondition{IntentionsSelector: d.intentionsSelector(c, path, fk, t),
			UseAsModuleInput: d.useAsModuleInput(c, path)}
	default:
		d.errf(labelRange(b, 0), join(t.disp, "condition"), "unknown condition type %q; valid types are %s",
			typ, quoteList(conditionTypes))
	}
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// checkCron reports a cron expression that task.CheckCron refuses, where
// it was written.
func (d *decoder) checkCron(cron opt[string], field string) {
	if err := task.CheckCron(cron.V); err != nil {
		d.errf(cron.Rng, field, "%q %v", cron.V, err)
	}
}

func (d *decoder) moduleInput(b *hcl.Block, t *rawTask) {
	typ := b.Labels[0]
	path := blockPath(t.disp, b)
	fk := "module_input." + taskKey(typ)
	t.ranges[fk] = b.DefRange
	switch typ {
	case "services":
		c := d.content(b.Body, path, servicesKeys(false), nil)
		t.recordAll(fk, c)
		sel := d.servicesSelector(c, path, fk, t)
		t.spec.ModuleInput.Services = &sel
	case "consul-kv":
		c := d.content(b.Body, path, kvKeys(false), nil)
		t.recordAll(fk, c)
		sel := d.kvSelector(c, path)
		t.spec.ModuleInput.ConsulKV = &sel
	case "nodes":
		c := d.content(b.Body, path, nodesKeys(false), nil)
		t.recordAll(fk, c)
		sel := d.nodesSelector(c, path)
		t.spec.ModuleInput.Nodes = &sel
	case "intentions":
		c := d.content(b.Body, path, intentionsKeys(false), nil)
		t.recordAll(fk, c)
		sel := d.intentionsSelector(c, path, fk, t)
		t.spec.ModuleInput.Intentions = &sel
	case "task-outputs":
		c := d.content(b.Body, path, attrs("tasks"), nil)
		t.recordAll(fk, c)
		tasks, elems := d.strList(c, "tasks", path)
		t.recordList(fk+".tasks", elems)
		t.spec.ModuleInput.TaskOutputs = &task.TaskOutputsSelector{Tasks: tasks.V}
	default:
		d.errf(labelRange(b, 0), join(t.disp, b.Type), "unknown module_input type %q; valid types are %s", typ, quoteList(moduleInputTypes))
	}
}

func (d *decoder) servicesSelector(c *content, path, fk string, t *rawTask) task.ServicesSelector {
	var sel task.ServicesSelector
	names, elems := d.strList(c, "names", path)
	sel.Names = names.V
	t.recordList(fk+".names", elems)
	if re := d.str(c, "regexp", path); re.Set {
		sel.Regexp = &re.V
	}
	sel.Datacenter = d.str(c, "datacenter", path).V
	sel.Namespace = d.str(c, "namespace", path).V
	sel.Filter = d.str(c, "filter", path).V
	if m, _ := d.strMap(c, "cts_user_defined_meta", path); m.Set {
		sel.CTSUserDefinedMeta = m.V
	}
	// Values are checked by task.Spec.Validate, which names status[i].
	status, elems := d.strList(c, "status", path)
	if status.Set {
		sel.Status = status.V
		t.recordList(fk+".status", elems)
	}
	sel.Peer = d.str(c, "peer", path).V
	sel.Partition = d.str(c, "partition", path).V
	return sel
}

func (d *decoder) nodesSelector(c *content, path string) task.NodesSelector {
	sel := task.NodesSelector{
		Datacenter: d.str(c, "datacenter", path).V,
		Filter:     d.str(c, "filter", path).V,
	}
	if m, _ := d.strMap(c, "node_meta", path); m.Set {
		sel.NodeMeta = m.V
	}
	return sel
}

func (d *decoder) intentionsSelector(c *content, path, fk string, t *rawTask) task.IntentionsSelector {
	sel := task.IntentionsSelector{
		Datacenter: d.str(c, "datacenter", path).V,
		Namespace:  d.str(c, "namespace", path).V,
		Partition:  d.str(c, "partition", path).V,
	}
	for _, side := range []struct {
		name string
		dst  **task.NameMatch
	}{{"source_services", &sel.Source}, {"destination_services", &sel.Destination}} {
		b := d.onlyOne(c, side.name, path)
		if b == nil {
			continue
		}
		p, f := join(path, side.name), fk+"."+side.name
		bc := d.content(b.Body, p, attrs("names", "regexp"), nil)
		t.recordAll(f, bc)
		m := &task.NameMatch{}
		names, elems := d.strList(bc, "names", p)
		m.Names = names.V
		t.recordList(f+".names", elems)
		if re := d.str(bc, "regexp", p); re.Set {
			m.Regexp = &re.V
		}
		*side.dst = m
	}
	return sel
}

func (d *decoder) kvSelector(c *content, path string) task.ConsulKVSelector {
	return task.ConsulKVSelector{
		Path:       d.str(c, "path", path).V,
		Recurse:    d.boolean(c, "recurse", path).V,
		Datacenter: d.str(c, "datacenter", path).V,
		Namespace:  d.str(c, "namespace", path).V,
	}
}

// useAsModuleInput reads use_as_module_input (default true) and its
// deprecated alias source_includes_var; the new name wins when both are set.
func (d *decoder) useAsModuleInput(c *content, path string) bool {
	u := d.boolean(c, "use_as_module_input", path)
	s := d.boolean(c, "source_includes_var", path)
	if s.Set {
		d.warnf(s.Rng, join(path, "source_includes_var"), `is deprecated: use "use_as_module_input"`)
	}
	switch {
	case u.Set:
		return u.V
	case s.Set:
		return s.V
	}
	return true
}

// ---- finishing a task ----

// resolveBuffer applies the CTS inheritance rules of buffer_period
// (task.InheritBufferPeriod).
func resolveBuffer(r rawBuffer, parent task.BufferPeriod) task.BufferPeriod {
	return task.InheritBufferPeriod(r.setting(), parent)
}

// setting is the block as task.BufferSetting.
func (b *rawBuffer) setting() task.BufferSetting {
	var out task.BufferSetting
	if b.enabled.Set {
		out.Enabled = &b.enabled.V
	}
	if b.min.Set {
		d := task.Duration(b.min.V)
		out.Min = &d
	}
	if b.max.Set {
		d := task.Duration(b.max.V)
		out.Max = &d
	}
	return out
}

// finishTask applies inheritance (the global buffer_period and
// removal_delay) and runs task validation.
func (d *decoder) finishTask(t *rawTask, global task.BufferPeriod, removalDelay time.Duration) {
	if ignored := t.spec.SetBufferPeriod(t.buffer.setting(), global); ignored {
		d.warnf(t.buffer.rng, join(t.disp, "buffer_period"), "is ignored for schedule tasks")
	}
	var own *time.Duration
	if t.removalDelay.Set {
		own = &t.removalDelay.V
	}
	t.spec.SetRemovalDelay(own, removalDelay)
	if t.failed {
		return
	}
	if err := t.spec.Validate(); err != nil {
		var fe *task.FieldError
		if errors.As(err, &fe) {
			d.errf(t.lookup(fe.Field), displayTaskField(t.disp, fe.Field), "%s", fe.Msg)
		} else {
			d.errf(t.rng, t.disp, "%v", err)
		}
		t.failed = true
	}
}

// checkTaskRefs reports duplicate task names and references to provider
// aliases that are not declared.
func (d *decoder) checkTaskRefs(tasks []*rawTask, providers map[string]bool) {
	seen := map[string]*rawTask{}
	for _, t := range tasks {
		if t.spec.Name == "" {
			continue
		}
		if prev, dup := seen[t.spec.Name]; dup {
			d.errf(t.lookup("name"), join(t.disp, "name"), "duplicate task name %q: also declared at %s", t.spec.Name, posString(prev.rng))
			t.failed = true
			continue
		}
		seen[t.spec.Name] = t
	}
	declared := make([]string, 0, len(providers))
	for p := range providers {
		declared = append(declared, p)
	}
	sort.Strings(declared)
	d.checkChains(tasks)
	for _, t := range tasks {
		if t.failed {
			continue
		}
		for i, p := range t.spec.Providers {
			if providers[p] || !strings.Contains(p, ".") {
				// A provider without a terraform_provider block is
				// used with its default configuration (as in CTS); an
				// alias only exists through its block.
				continue
			}
			field := fmt.Sprintf("providers[%d]", i)
			hint := "no terraform_provider blocks are declared"
			if len(declared) > 0 {
				hint = "declared: " + quoteList(declared)
			}
			d.errf(t.lookup(field), displayTaskField(t.disp, field),
				"provider %q is not declared by any terraform_provider block (%s)", p, hint)
		}
	}
}

// checkChains reports a dependency on a task that is not configured, or a
// cycle of dependencies, at the entry that names the other task.
func (d *decoder) checkChains(tasks []*rawTask) {
	specs := make([]task.Spec, 0, len(tasks))
	byName := map[string]*rawTask{}
	for _, t := range tasks {
		if t.failed || t.spec.Name == "" {
			continue
		}
		specs = append(specs, t.spec)
		byName[t.spec.Name] = t
	}
	var ce *task.ChainError
	if err := task.CheckChains(specs); !errors.As(err, &ce) {
		return
	}
	t := byName[ce.Task]
	msg := fmt.Sprintf("task %q does not exist", ce.Dep)
	if ce.Cycle != nil {
		msg = fmt.Sprintf("task %q (%s) depends on task %q: a cycle, %s", ce.Dep, posString(byName[ce.Dep].rng),
			ce.Task, strings.Join(ce.Cycle, " -> "))
	}
	d.errf(t.lookup(ce.Field), displayTaskField(t.disp, ce.Field), "%s", msg)
	t.failed = true
}
