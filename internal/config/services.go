package config

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"

	"github.com/ctsync/ctsync/internal/task"
)

// This file holds the deprecated CTS (< 0.5) way of selecting services:
// top-level `service` blocks, and a task's `services = [...]` list whose
// entries are service block IDs or plain service names. Both still work,
// with a warning, and map onto the one task model: the list becomes the
// task's services condition when it has no condition block, and its
// services module input otherwise; a service block's options become that
// name's entry in ServicesSelector.PerService.

// rawService is one top-level service block.
type rawService struct {
	id, name   string
	opts       task.ServiceOptions
	rng, idRng hcl.Range
}

var serviceKeys = []key{
	{name: "name"}, {name: "id"}, {name: "description"}, {name: "datacenter"},
	{name: "namespace"}, {name: "filter"}, {name: "cts_user_defined_meta", kind: kMap},
}

var serviceRejects = map[string]string{
	"tag": `was removed in CTS 0.4: use filter = "\"<tag>\" in Service.Tags"`,
}

const deprecatedServiceMsg = `is deprecated (CTS 0.5): use a task's condition "services" or module_input "services", ` +
	`which take datacenter, namespace, filter and cts_user_defined_meta`

// service decodes a service block; nil when it has errors.
func (d *decoder) service(b *hcl.Block) *rawService {
	const path = "service"
	errsBefore := len(d.errs)
	d.warnf(b.DefRange, path, "%s", deprecatedServiceMsg)
	c := d.content(b.Body, path, serviceKeys, serviceRejects)
	s := &rawService{rng: b.DefRange, idRng: b.DefRange}
	name := d.str(c, "name", path)
	if !name.Set || name.V == "" {
		d.errf(b.DefRange, join(path, "name"), "is required: the Consul service name")
	}
	s.name = name.V
	s.id = name.V
	if id := d.str(c, "id", path); id.Set && id.V != "" {
		s.id, s.idRng = id.V, id.Rng
	}
	d.str(c, "description", path) // accepted, unused (as in CTS)
	s.opts.Datacenter = d.str(c, "datacenter", path).V
	s.opts.Namespace = d.str(c, "namespace", path).V
	s.opts.Filter = d.str(c, "filter", path).V
	if m, _ := d.strMap(c, "cts_user_defined_meta", path); m.Set {
		s.opts.CTSUserDefinedMeta = m.V
	}
	if len(d.errs) > errsBefore {
		return nil
	}
	return s
}

// serviceBlocks indexes the service blocks by ID (the name when no id is
// set), reporting IDs used twice.
func (d *decoder) serviceBlocks(list []*rawService) map[string]*rawService {
	byID := make(map[string]*rawService, len(list))
	for _, s := range list {
		if prev, dup := byID[s.id]; dup {
			d.errf(s.idRng, "service", "service IDs must be unique: %q is also the ID of the service block at %s (the ID defaults to the name; set id to tell them apart)",
				s.id, posString(prev.rng))
			continue
		}
		byID[s.id] = s
	}
	return byID
}

// resolveServices turns a task's deprecated services list into its services
// condition (no condition block) or its services module input (another
// condition), resolving entries that are service block IDs.
func (d *decoder) resolveServices(t *rawTask, blocks map[string]*rawService) {
	if !t.services.Set || len(t.services.V) == 0 {
		return // an empty list is as good as none, as in CTS
	}
	field := join(t.disp, "services")
	rng := t.services.Rng
	d.warnf(rng, field, `is deprecated (CTS 0.5): use condition "services" { names = [...] }, or module_input "services" when the task has another condition`)
	if t.failed {
		return
	}
	switch {
	case t.spec.Condition.Services != nil:
		d.errf(rng, field, `cannot be used together with condition "services": both provide the services variable; move the names into the condition block`)
		t.failed = true
		return
	case t.spec.ModuleInput.Services != nil:
		d.errf(rng, field, `cannot be used together with module_input "services": both provide the services variable; move the names into the module_input block`)
		t.failed = true
		return
	}

	var sel task.ServicesSelector
	per := map[string]task.ServiceOptions{}
	fromBlock := false
	seen := map[string]bool{}
	for i, entry := range t.services.V {
		if entry == "" {
			er := rng
			if i < len(t.serviceElems) {
				er = t.serviceElems[i]
			}
			d.errf(er, fmt.Sprintf("%s[%d]", field, i), "cannot be empty")
			t.failed = true
			return
		}
		name, opts := entry, task.ServiceOptions{}
		if b := blocks[entry]; b != nil {
			name, opts, fromBlock = b.name, b.opts, true
		}
		if !seen[name] {
			seen[name] = true
			sel.Names = append(sel.Names, name)
		}
		// A later entry for the same service name wins, as in CTS.
		per[name] = opts
	}
	if fromBlock {
		sel.PerService = per
	}

	fk := "module_input.services"
	if t.spec.Condition.Type() == "" {
		fk = "condition.services"
		t.spec.Condition.Services = &task.ServicesCondition{ServicesSelector: sel, UseAsModuleInput: true}
	} else {
		t.spec.ModuleInput.Services = &sel
	}
	t.ranges[fk] = rng
	t.recordList(fk+".names", t.serviceElems)
}
