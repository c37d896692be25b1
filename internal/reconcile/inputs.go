package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
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

// nodesSource is the task's one source of the `nodes` variable.
func nodesSource(s *task.Spec) (sel *task.NodesSelector, renders bool) {
	if c := s.Condition.Nodes; c != nil {
		return &c.NodesSelector, c.UseAsModuleInput
	}
	if m := s.ModuleInput.Nodes; m != nil {
		return m, true
	}
	return nil, false
}

// intentionsSource is the task's one source of the `intentions` variable.
func intentionsSource(s *task.Spec) (sel *task.IntentionsSelector, renders bool) {
	if c := s.Condition.Intentions; c != nil {
		return &c.IntentionsSelector, c.UseAsModuleInput
	}
	if m := s.ModuleInput.Intentions; m != nil {
		return m, true
	}
	return nil, false
}

// healthQuery is the health query of one service name of a selector, with
// the options that apply to that name (see ServicesSelector.Options).
func healthQuery(sel *task.ServicesSelector, name string) watch.Query {
	o := sel.Options(name)
	return watch.HealthService(name, watch.ServiceOptions{Datacenter: o.Datacenter, Namespace: o.Namespace,
		Partition: o.Partition, Peer: o.Peer, Filter: o.Filter, Status: o.Status})
}

func selectorCatalog(sel *task.ServicesSelector) watch.Query {
	return watch.CatalogServices(watch.CatalogOptions{Datacenter: sel.Datacenter, Namespace: sel.Namespace,
		Partition: sel.Partition, Peer: sel.Peer})
}

func nodesQuery(sel *task.NodesSelector) watch.Query {
	return watch.CatalogNodes(watch.NodesOptions{Datacenter: sel.Datacenter, Filter: sel.Filter, NodeMeta: sel.NodeMeta})
}

func intentionsQuery(sel *task.IntentionsSelector) watch.Query {
	return watch.ServiceIntentions(watch.IntentionsOptions{Datacenter: sel.Datacenter, Namespace: sel.Namespace, Partition: sel.Partition})
}

func conditionCatalog(c *task.CatalogServicesCondition) watch.Query {
	return watch.CatalogServices(watch.CatalogOptions{Datacenter: c.Datacenter, Namespace: c.Namespace, NodeMeta: c.NodeMeta})
}

func kvQuery(sel *task.ConsulKVSelector) watch.Query {
	return watch.KV(sel.Path, sel.Recurse, sel.Datacenter, sel.Namespace)
}

// StaticQueries are the queries a task always watches. A services selector
// with a regexp adds, on top, one health query per matching service name
// (see DynamicQueries); those follow the catalog. A task's own readers use
// its query set (querySet), built once when it is defined.
func StaticQueries(s *task.Spec) []watch.Query { return newQuerySet(s).static }

func staticQueries(s *task.Spec) []watch.Query {
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
	if sel, _ := nodesSource(s); sel != nil {
		qs = append(qs, nodesQuery(sel))
	}
	if sel, _ := intentionsSource(s); sel != nil {
		qs = append(qs, intentionsQuery(sel))
	}
	return dedupe(qs)
}

// DynamicQueries returns the health queries of the services a regexp
// selector currently matches, according to the catalog's latest value.
// It returns nil when the task has no regexp selector or the catalog is
// not known yet.
func DynamicQueries(s *task.Spec, get Getter) []watch.Query {
	return newQuerySet(s).dynamic(get)
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
	cat, ok := catalogMatches(c, get)
	if !ok {
		return nil, false
	}
	return slices.Sorted(maps.Keys(cat)), true
}

// BuildInputs computes the module inputs of a task from the current query
// results. ready is false while any query the task needs has no result yet.
// It is a pure function of its arguments. The inputs share maps with the
// watched values and the spec: treat them as read-only. A condition with
// use_as_module_input = false renders nothing (but Fingerprint covers it, so
// a change to it still runs the task, as in CTS).
func BuildInputs(s *task.Spec, get Getter) (in task.Inputs, ready bool) {
	in.Services = map[string]task.Service{}
	if sel, renders := servicesSource(s); sel != nil {
		names, ok := selectedNames(sel, get)
		if !ok {
			return in, false
		}
		for _, n := range names {
			v, ok := get(healthQuery(sel, n).Key())
			if !ok {
				return in, false
			}
			if !renders {
				continue
			}
			// One map shared by every instance of the service: inputs are
			// read-only from here on (the driver only encodes them).
			meta := sel.Options(n).CTSUserDefinedMeta
			if meta == nil {
				meta = map[string]string{}
			}
			insts, _ := v.([]task.Service)
			for _, svc := range insts {
				svc.CTSUserDefinedMeta = meta
				in.Services[svc.Key()] = svc
			}
		}
	}
	if c := s.Condition.CatalogServices; c != nil {
		cat, ok := catalogMatches(c, get)
		if !ok {
			return in, false
		}
		if c.UseAsModuleInput {
			in.CatalogServices = cat
		}
	}
	if sel, renders := kvSource(s); sel != nil {
		v, ok := get(kvQuery(sel).Key())
		if !ok {
			return in, false
		}
		if renders {
			kv, _ := v.(map[string]string)
			in.ConsulKV = maps.Clone(kv)
			if in.ConsulKV == nil {
				in.ConsulKV = map[string]string{}
			}
		}
	}
	if sel, renders := nodesSource(s); sel != nil {
		v, ok := get(nodesQuery(sel).Key())
		if !ok {
			return in, false
		}
		if renders {
			in.Nodes, _ = v.([]task.Node)
			if in.Nodes == nil {
				in.Nodes = []task.Node{}
			}
		}
	}
	if sel, renders := intentionsSource(s); sel != nil {
		matched, ok := matchingIntentions(sel, get)
		if !ok {
			return in, false
		}
		if renders {
			in.Intentions = matched
		}
	}
	return in, true
}

// matchingIntentions returns the intentions (in the watched order) whose
// source and destination names the selector matches; never nil when ok.
// Names are compared as written, so a wildcard intention ("*") matches
// names = ["*"] or a regexp that matches "*", not every name.
func matchingIntentions(sel *task.IntentionsSelector, get Getter) ([]task.Intention, bool) {
	v, ok := get(intentionsQuery(sel).Key())
	if !ok {
		return nil, false
	}
	src, err1 := newNameMatcher(sel.Source)
	dst, err2 := newNameMatcher(sel.Destination)
	if err1 != nil || err2 != nil { // validated at decode
		return nil, false
	}
	all, _ := v.([]task.Intention)
	out := []task.Intention{}
	for _, in := range all {
		if src(in.SourceName) && dst(in.DestinationName) {
			out = append(out, in)
		}
	}
	return out, true
}

// newNameMatcher compiles a NameMatch; nil matches every name.
func newNameMatcher(m *task.NameMatch) (func(string) bool, error) {
	switch {
	case m == nil:
		return func(string) bool { return true }, nil
	case m.Regexp != nil:
		re, err := regexp.Compile(*m.Regexp)
		if err != nil {
			return nil, err
		}
		return re.MatchString, nil
	}
	names := map[string]bool{}
	for _, n := range m.Names {
		names[n] = true
	}
	return func(n string) bool { return names[n] }, nil
}

// selectedNames lists the service names a selector watches: its names, or
// what its regexp matches in the catalog now.
func selectedNames(sel *task.ServicesSelector, get Getter) ([]string, bool) {
	if sel.Regexp != nil {
		return matchingServices(sel, get)
	}
	return sel.Names, true
}

// catalogMatches returns the catalog entries (name -> tags) a
// catalog-services condition matches.
func catalogMatches(c *task.CatalogServicesCondition, get Getter) (map[string][]string, bool) {
	v, ok := get(conditionCatalog(c).Key())
	if !ok {
		return nil, false
	}
	re, err := regexp.Compile(c.Regexp)
	if err != nil { // validated at decode
		return nil, false
	}
	cat, _ := v.(map[string][]string)
	out := map[string][]string{}
	for n, tags := range cat {
		if re.MatchString(n) {
			out[n] = tags
		}
	}
	return out, true
}

// DigestGetter returns the digest of a watched query's latest value.
type DigestGetter func(key string) (watch.Digest, bool)

// fingerprint is the part of a spec that decides what Terraform is asked to
// do; a change to it makes the task run again even if its data did not.
type fingerprint struct {
	Module      string            `json:"module"`
	Version     string            `json:"version"`
	Providers   []string          `json:"providers"`
	Variables   map[string]string `json:"variables"`
	Condition   task.Condition    `json:"condition"`
	ModuleInput task.ModuleInputs `json:"module_input"`
}

// Fingerprint identifies what triggers a task: the spec fields that reach
// Terraform (SpecDigest) and the data of its condition (ConditionDigest).
// Two calls with the same spec and the same watched data give the same
// string; ready is false while any query the task needs (its module inputs
// included) has no value yet. The whole desired state adds what lies
// outside the task (see Desired).
func Fingerprint(s *task.Spec, get Getter, digest DigestGetter) (fp string, ready bool) {
	data, ready := ConditionDigest(s, get, digest)
	if !ready {
		return "", false
	}
	h := sha256.Sum256([]byte(SpecDigest(s) + "\x00" + data))
	return hex.EncodeToString(h[:]), true
}

// SpecDigest is the digest of the spec fields that decide what Terraform is
// asked to do; a change to them makes the task run again even if its data
// did not.
func SpecDigest(s *task.Spec) string {
	b, err := json.Marshal(fingerprint{s.Module, s.Version, s.Providers, s.Variables, s.Condition, s.ModuleInput})
	if err != nil {
		panic(fmt.Sprintf("fingerprint spec: %v", err)) // plain data; cannot fail
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// dataRole says which of a task's data a digest covers: what triggers the
// task (its condition's data) or what its runs only read (module inputs).
type dataRole int

const (
	roleCondition dataRole = iota
	roleModuleInput
)

// ConditionDigest is the digest of the data of the task's condition, the
// data that triggers it, rendered or not (a condition with
// use_as_module_input = false still triggers runs, as in CTS): the
// instances of a services condition (the task's deprecated `services` list
// when it has no condition block is one), the set of service names a
// catalog-services condition matches (not their tags), the keys of a
// consul-kv condition, the nodes or intentions of those conditions. A
// schedule condition has none. It is built from the digests the watch
// layer computes once per change, so its cost does not grow with the
// number of instances; ready is false while any query the task needs, its
// module inputs' included, has no value yet.
func ConditionDigest(s *task.Spec, get Getter, digest DigestGetter) (string, bool) {
	return dataDigest(s, get, digest, roleCondition)
}

// ModuleInputDigest is the digest of the data the task's runs read but that
// does not trigger it: its module inputs (services, consul-kv, nodes,
// intentions) and the tags of the services its catalog-services condition
// matches when it renders them. It is "" for a task without such data.
// ready is as for ConditionDigest.
func ModuleInputDigest(s *task.Spec, get Getter, digest DigestGetter) (string, bool) {
	return dataDigest(s, get, digest, roleModuleInput)
}

// dataDigest hashes the data of the sources of one role; it checks that
// every source, of either role, has its data. With roleCondition the
// written form is the one ctsync has always hashed a task's data with, so
// a task without module inputs keeps its recorded fingerprint.
func dataDigest(s *task.Spec, get Getter, digest DigestGetter, role dataRole) (fp string, ready bool) {
	h := sha256.New()
	enc := json.NewEncoder(h)
	wrote := false
	write := func(r dataRole, parts ...string) {
		if r != role {
			return
		}
		wrote = true
		for _, p := range parts {
			fmt.Fprintf(h, "%d:%s", len(p), p)
		}
	}
	encode := func(r dataRole, v any) {
		if r != role {
			return
		}
		if err := enc.Encode(v); err != nil {
			panic(fmt.Sprintf("fingerprint: %v", err)) // plain data; cannot fail
		}
	}
	of := func(fromCondition bool) dataRole {
		if fromCondition {
			return roleCondition
		}
		return roleModuleInput
	}
	if sel, _ := servicesSource(s); sel != nil {
		r := of(s.Condition.Services != nil)
		names, ok := selectedNames(sel, get)
		if !ok {
			return "", false
		}
		write(r, "services")
		for _, n := range names {
			key := healthQuery(sel, n).Key()
			d, ok := digest(key)
			if !ok {
				return "", false
			}
			write(r, key, string(d[:]))
			encode(r, sel.Options(n).CTSUserDefinedMeta)
		}
	}
	if c := s.Condition.CatalogServices; c != nil {
		cat, ok := catalogMatches(c, get)
		if !ok {
			return "", false
		}
		// Only the set of names triggers this condition; the tags it
		// renders are data the run reads.
		write(roleCondition, "catalog-services")
		write(roleCondition, slices.Sorted(maps.Keys(cat))...)
		if c.UseAsModuleInput {
			write(roleModuleInput, "catalog-services")
			encode(roleModuleInput, cat)
		}
	}
	if sel, _ := kvSource(s); sel != nil {
		key := kvQuery(sel).Key()
		d, ok := digest(key)
		if !ok {
			return "", false
		}
		write(of(s.Condition.ConsulKV != nil), "consul-kv", key, string(d[:]))
	}
	if sel, _ := nodesSource(s); sel != nil {
		key := nodesQuery(sel).Key()
		d, ok := digest(key)
		if !ok {
			return "", false
		}
		write(of(s.Condition.Nodes != nil), "nodes", key, string(d[:]))
	}
	if sel, _ := intentionsSource(s); sel != nil {
		// All intentions of the datacenter share one query: only the ones
		// the task selects count, so a change to another service's
		// intentions does not run it.
		matched, ok := matchingIntentions(sel, get)
		if !ok {
			return "", false
		}
		d, err := watch.DigestOf(matched)
		if err != nil {
			panic(fmt.Sprintf("fingerprint intentions: %v", err)) // a known type
		}
		write(of(s.Condition.Intentions != nil), "intentions", intentionsQuery(sel).Key(), string(d[:]))
	}
	if role == roleModuleInput && !wrote {
		return "", true
	}
	return hex.EncodeToString(h.Sum(nil)), true
}

// ConditionKeys returns the keys of the queries whose data triggers the
// task (see ConditionDigest): its condition's static queries and, for a
// services condition with a regexp, the health queries of the services it
// matches now. A change of any other query the task watches only feeds
// its next run.
func ConditionKeys(s *task.Spec, get Getter) map[string]bool {
	return newQuerySet(s).conditionKeys(get)
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

// Refresher is implemented by watchers that can read values again at once
// (the watch registry does): see catchUpInputs.
type Refresher interface {
	// Refresh reads again, without waiting, the values of keys whose
	// latest answer is older than Consul's index at, and tells their
	// subscribers when one changed; it returns how many it read.
	Refresh(ctx context.Context, keys []string, at uint64) int
}
