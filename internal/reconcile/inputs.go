// Package reconcile decides what to run and when. It is level-based: a
// change marks a task dirty, the buffer period holds it, and a worker then
// reads the current results of all the task's queries, builds the module
// inputs with a pure function, and skips the run when their hash equals the
// one last applied.
package reconcile

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"sort"

	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/watch"
)

// Getter returns the latest value of a watched query; ok is false until the
// query's first successful fetch.
type Getter func(key string) (value any, ok bool)

// servicesSource is the task's one source of the `services` variable: its
// services condition or its services module_input.
func servicesSource(s *task.Spec) (sel *task.ServicesSelector, renders bool) {
	if c := s.Condition.Services; c != nil {
		return &c.ServicesSelector, c.UseAsModuleInput
	}
	if m := s.ModuleInput.Services; m != nil {
		return m, true
	}
	return nil, false
}

// kvSource is the task's one source of the `consul_kv` variable.
func kvSource(s *task.Spec) (sel *task.ConsulKVSelector, renders bool) {
	if c := s.Condition.ConsulKV; c != nil {
		return &c.ConsulKVSelector, c.UseAsModuleInput
	}
	if m := s.ModuleInput.ConsulKV; m != nil {
		return m, true
	}
	return nil, false
}

// healthQuery is the health query of one service name of a selector, with
// the options that apply to that name (see ServicesSelector.Options).
func healthQuery(sel *task.ServicesSelector, name string) watch.Query {
	o := sel.Options(name)
	return watch.HealthService(name, watch.ServiceOptions{Datacenter: o.Datacenter, Namespace: o.Namespace, Filter: o.Filter})
}

func selectorCatalog(sel *task.ServicesSelector) watch.Query {
	return watch.CatalogServices(watch.CatalogOptions{Datacenter: sel.Datacenter, Namespace: sel.Namespace})
}

func conditionCatalog(c *task.CatalogServicesCondition) watch.Query {
	return watch.CatalogServices(watch.CatalogOptions{Datacenter: c.Datacenter, Namespace: c.Namespace, NodeMeta: c.NodeMeta})
}

func kvQuery(sel *task.ConsulKVSelector) watch.Query {
	return watch.KV(sel.Path, sel.Recurse, sel.Datacenter, sel.Namespace)
}

// StaticQueries are the queries a task always watches. A services selector
// with a regexp adds, on top, one health query per matching service name
// (see DynamicQueries); those follow the catalog.
func StaticQueries(s *task.Spec) []watch.Query {
	var qs []watch.Query
	if sel, _ := servicesSource(s); sel != nil {
		if sel.Regexp != nil {
			qs = append(qs, selectorCatalog(sel))
		} else {
			for _, n := range sel.Names {
				qs = append(qs, healthQuery(sel, n))
			}
		}
	}
	if c := s.Condition.CatalogServices; c != nil {
		qs = append(qs, conditionCatalog(c))
	}
	if sel, _ := kvSource(s); sel != nil {
		qs = append(qs, kvQuery(sel))
	}
	return dedupe(qs)
}

// DynamicQueries returns the health queries of the services a regexp
// selector currently matches, according to the catalog's latest value.
// It returns nil when the task has no regexp selector or the catalog is
// not known yet.
func DynamicQueries(s *task.Spec, get Getter) []watch.Query {
	sel, _ := servicesSource(s)
	if sel == nil || sel.Regexp == nil {
		return nil
	}
	names, ok := matchingServices(sel, get)
	if !ok {
		return nil
	}
	qs := make([]watch.Query, 0, len(names))
	for _, n := range names {
		qs = append(qs, healthQuery(sel, n))
	}
	return qs
}

// matchingServices lists the service names a regexp selector matches in the
// catalog, sorted.
func matchingServices(sel *task.ServicesSelector, get Getter) ([]string, bool) {
	v, ok := get(selectorCatalog(sel).Key())
	if !ok {
		return nil, false
	}
	re, err := regexp.Compile(*sel.Regexp)
	if err != nil { // validated at decode; keep the reconciler total anyway
		return nil, false
	}
	cat, _ := v.(map[string][]string)
	var names []string
	for n := range cat {
		if re.MatchString(n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, true
}

// CatalogNames returns the service names the task's catalog-services
// condition matches (sorted), used for its trigger rule: it fires only when
// this set changes.
func CatalogNames(s *task.Spec, get Getter) ([]string, bool) {
	c := s.Condition.CatalogServices
	if c == nil {
		return nil, false
	}
	v, ok := get(conditionCatalog(c).Key())
	if !ok {
		return nil, false
	}
	re, err := regexp.Compile(c.Regexp)
	if err != nil {
		return nil, false
	}
	cat, _ := v.(map[string][]string)
	names := []string{}
	for n := range cat {
		if re.MatchString(n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, true
}

// BuildInputs computes the module inputs of a task from the current query
// results. ready is false while any query the task needs has no result yet.
// It is a pure function of its arguments.
//
// A source with use_as_module_input = false is not passed to the module,
// but its data still goes into in.Unrendered (as a digest), so that a change
// to it changes the inputs hash and the task runs, as in CTS.
func BuildInputs(s *task.Spec, get Getter) (in task.Inputs, ready bool) {
	in.Services = map[string]task.Service{}
	var hidden unrendered
	if sel, renders := servicesSource(s); sel != nil {
		services := in.Services
		if !renders {
			services = map[string]task.Service{}
			hidden.Services = services
		}
		var names []string
		if sel.Regexp != nil {
			var ok bool
			if names, ok = matchingServices(sel, get); !ok {
				return in, false
			}
		} else {
			names = sel.Names
		}
		for _, n := range names {
			v, ok := get(healthQuery(sel, n).Key())
			if !ok {
				return in, false
			}
			meta := sel.Options(n).CTSUserDefinedMeta
			insts, _ := v.([]task.Service)
			for _, svc := range insts {
				svc.CTSUserDefinedMeta = maps.Clone(meta)
				if svc.CTSUserDefinedMeta == nil {
					svc.CTSUserDefinedMeta = map[string]string{}
				}
				services[svc.Key()] = svc
			}
		}
	}
	if c := s.Condition.CatalogServices; c != nil {
		v, ok := get(conditionCatalog(c).Key())
		if !ok {
			return in, false
		}
		re, err := regexp.Compile(c.Regexp)
		if err != nil {
			return in, false
		}
		cat, _ := v.(map[string][]string)
		if c.UseAsModuleInput {
			in.CatalogServices = map[string][]string{}
			for n, tags := range cat {
				if re.MatchString(n) {
					in.CatalogServices[n] = tags
				}
			}
		} else {
			// Only the set of names triggers this condition; its tags
			// would not, so they stay out of the digest.
			hidden.CatalogNames = []string{}
			for n := range cat {
				if re.MatchString(n) {
					hidden.CatalogNames = append(hidden.CatalogNames, n)
				}
			}
			sort.Strings(hidden.CatalogNames)
		}
	}
	if sel, renders := kvSource(s); sel != nil {
		v, ok := get(kvQuery(sel).Key())
		if !ok {
			return in, false
		}
		kv, _ := v.(map[string]string)
		if renders {
			in.ConsulKV = maps.Clone(kv)
			if in.ConsulKV == nil {
				in.ConsulKV = map[string]string{}
			}
		} else {
			hidden.ConsulKV = kv
			if hidden.ConsulKV == nil {
				hidden.ConsulKV = map[string]string{}
			}
		}
	}
	in.Unrendered = hidden.digest()
	return in, true
}

// unrendered is the data of the sources a task watches without passing it
// to its module; nil fields are sources the task does not have (or renders).
type unrendered struct {
	Services     map[string]task.Service `json:"services,omitempty"`
	CatalogNames []string                `json:"catalog_names,omitempty"`
	ConsulKV     map[string]string       `json:"consul_kv,omitempty"`
}

// digest returns a hash of the data, or "" when there is none.
func (u *unrendered) digest() string {
	if u.Services == nil && u.CatalogNames == nil && u.ConsulKV == nil {
		return ""
	}
	h := sha256.New()
	if err := json.NewEncoder(h).Encode(u); err != nil {
		panic(fmt.Sprintf("hash unrendered inputs: %v", err)) // plain data; cannot fail
	}
	return hex.EncodeToString(h.Sum(nil))
}

// fingerprint is the part of a spec that changes what Terraform is asked to
// do; a change to it makes the task run again even if its inputs did not.
type fingerprint struct {
	Module    string            `json:"module"`
	Version   string            `json:"version"`
	Providers []string          `json:"providers"`
	Variables map[string]string `json:"variables"`
}

// Hash identifies a task's desired state: its inputs and the spec fields
// that reach Terraform. encoding/json sorts map keys, so equal inputs always
// hash equal.
func Hash(s *task.Spec, in *task.Inputs) string {
	h := sha256.New()
	enc := json.NewEncoder(h)
	if err := enc.Encode(fingerprint{s.Module, s.Version, s.Providers, s.Variables}); err != nil {
		panic(fmt.Sprintf("hash spec: %v", err)) // plain data; cannot fail
	}
	if err := enc.Encode(in); err != nil {
		panic(fmt.Sprintf("hash inputs: %v", err))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func dedupe(qs []watch.Query) []watch.Query {
	seen := map[string]bool{}
	out := qs[:0]
	for _, q := range qs {
		if !seen[q.Key()] {
			seen[q.Key()] = true
			out = append(out, q)
		}
	}
	return out
}
