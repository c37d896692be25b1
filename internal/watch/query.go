// Package watch turns Consul blocking queries into change notifications.
//
// A Query is one distinct Consul read with a stable Key. The Registry runs
// one View goroutine per distinct key, shared by every subscriber (task)
// that needs it, keeps the view's latest normalised value, and calls the
// notify callback once per subscriber when that value really changes.
//
// Values are plain, sorted, comparable Go values:
//
//	HealthService     []task.Service       sorted by node, id, namespace, datacenter
//	CatalogServices   map[string][]string  tags sorted and de-duplicated
//	KV                map[string]string    key -> raw value bytes as a string
//	CatalogNodes      []task.Node          sorted by node name, then id
//	ServiceIntentions []task.Intention     sorted (see ServiceIntentions)
//
// Values handed out by Registry.Get are shared between all readers and must
// be treated as read-only.
package watch

import (
	"context"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/consul"
	"github.com/ctsync/ctsync/internal/task"
)

// Query is one distinct Consul read. Key() is stable and identical for
// equal queries (it is the dedup key).
type Query interface {
	Key() string
	// Fetch does one blocking read starting at waitIndex (0 = return at
	// once) and returns a normalised, sorted, comparable value.
	Fetch(ctx context.Context, c *consul.Client, waitIndex uint64) (value any, index uint64, err error)
}

// WaitTime is how long one blocking query may wait in Consul before it
// answers unchanged (Consul's own default, written out). Consul adds up to
// WaitTime/16 of jitter.
const WaitTime = 5 * time.Minute

func queryOptions(ctx context.Context, waitIndex uint64, dc, ns string) *api.QueryOptions {
	q := &api.QueryOptions{Datacenter: dc, Namespace: ns, WaitIndex: waitIndex}
	if waitIndex > 0 {
		q.WaitTime = WaitTime
	}
	return q.WithContext(ctx)
}

// ---- health.service ----------------------------------------------------

// ServiceOptions are the query options of a health.service query.
type ServiceOptions struct {
	Datacenter string
	Namespace  string
	Partition  string
	Peer       string
	// Filter is a Consul filter expression.
	Filter string
	// Status lists the aggregated health states wanted (task.Statuses).
	// nil is CTS's rule: passing instances only, unless the filter
	// mentions Checks.Status, and then the filter alone decides.
	Status []string
}

type healthService struct {
	name string
	o    ServiceOptions
	// passingOnly: Consul returns passing instances only (?passing).
	passingOnly bool
	// keep, when not nil, are the aggregated states kept of what Consul
	// returns (a set Consul's ?passing cannot express).
	keep map[string]bool
	key  string
}

// HealthService watches /v1/health/service/<name>: the instances of one
// service with their node and aggregated health. The value is a
// []task.Service (never nil).
//
// The status choice is applied by Consul when it is "passing" alone
// (?passing, as CTS does), else here, on each instance's aggregated status
// (the worst of its checks, maintenance above critical): Consul's ?passing
// drops an instance with any check that is not passing, and a filter on
// Checks.Status sees the checks one by one, so neither can select, say,
// "passing or warning" by the aggregated status. Equal choices give equal
// keys: the status list is sorted, and "passing" alone is the default when
// the filter does not mention Checks.Status.
func HealthService(name string, o ServiceOptions) Query {
	h := &healthService{name: name, o: o}
	statusFilter := strings.Contains(o.Filter, "Checks.Status")
	var status []string
	switch {
	case o.Status == nil:
		h.passingOnly = !statusFilter
	default:
		status = slices.Compact(slices.Sorted(slices.Values(o.Status)))
		if len(status) == 1 && status[0] == task.StatusPassing {
			h.passingOnly = true
			if !statusFilter {
				status = nil // the same query as the default
			}
		} else if len(status) < len(task.Statuses) {
			h.keep = map[string]bool{}
			for _, s := range status {
				h.keep[s] = true
			}
		}
	}
	h.o.Status = status
	k := keyBuilder{}
	k.path("health/service/", name, "/")
	k.param("dc", o.Datacenter)
	k.param("filter", o.Filter)
	k.param("ns", o.Namespace)
	k.param("partition", o.Partition)
	k.param("peer", o.Peer)
	k.param("status", strings.Join(status, ","))
	h.key = k.String()
	return h
}

func (h *healthService) Key() string { return h.key }

func (h *healthService) Fetch(ctx context.Context, c *consul.Client, waitIndex uint64) (any, uint64, error) {
	p := url.Values{}
	if waitIndex > 0 {
		p.Set("index", strconv.FormatUint(waitIndex, 10))
		p.Set("wait", strconv.FormatInt(WaitTime.Milliseconds(), 10)+"ms")
	}
	setNonEmpty(p, "dc", h.o.Datacenter)
	setNonEmpty(p, "ns", h.o.Namespace)
	setNonEmpty(p, "partition", h.o.Partition)
	setNonEmpty(p, "peer", h.o.Peer)
	setNonEmpty(p, "filter", h.o.Filter)
	if h.passingOnly {
		p.Set("passing", "1")
	}
	if c.UseCache {
		// The agent answers from its cache, kept current by the streaming
		// backend where the agent has it, instead of asking a server.
		p.Set("cached", "")
	}
	var entries []*healthEntry
	index, err := c.BlockingGet(ctx, "/v1/health/service/"+url.PathEscape(h.name), p, &entries)
	if err != nil {
		return nil, 0, err
	}
	out := normaliseHealth(entries)
	if h.keep != nil {
		out = slices.DeleteFunc(out, func(s task.Service) bool { return !h.keep[s.Status] })
	}
	return out, index, nil
}

func setNonEmpty(p url.Values, k, v string) {
	if v != "" {
		p.Set(k, v)
	}
}

// healthEntry is the part of a /v1/health/service entry that the services
// variable needs. Decoding only these fields, rather than the API client's
// full ServiceEntry (check definitions, output text, proxy and connect
// settings), is what keeps a 1,000-instance response cheap: the JSON decoder
// skips what a struct does not name without allocating for it, and the
// read goes through consul.Client.BlockingGet, which decodes with go-json.
type healthEntry struct {
	Node    *healthNode
	Service *healthInstance
	Checks  []healthCheck
}

type healthNode struct {
	ID              string
	Node            string
	Address         string
	Datacenter      string
	TaggedAddresses map[string]string
	Meta            map[string]string
}

type healthInstance struct {
	Kind      string
	ID        string
	Service   string
	Tags      []string
	Address   string
	Meta      map[string]string
	Port      int
	Namespace string
}

type healthCheck struct {
	CheckID string
	Status  string
}

// status aggregates the entry's checks with the API client's rule:
// maintenance > critical > warning > passing.
func (e *healthEntry) status() string {
	checks := make(api.HealthChecks, len(e.Checks))
	for i := range e.Checks {
		checks[i] = &api.HealthCheck{CheckID: e.Checks[i].CheckID, Status: e.Checks[i].Status}
	}
	return checks.AggregatedStatus()
}

// normaliseHealth converts Consul's entries into sorted task.Service values.
// It takes ownership of the entries (the slice is reordered and compacted,
// tags are sorted in place, maps are reused, not copied). Check output and
// any other check detail beyond the aggregated status are never decoded, so
// a check whose output text alone changed yields an equal value.
func normaliseHealth(entries []*healthEntry) []task.Service {
	// Sort the pointers, not the ~200-byte results: far fewer bytes moved
	// and no write barriers per swap. Entries without a service are dropped.
	valid := slices.DeleteFunc(entries, func(e *healthEntry) bool { return e == nil || e.Service == nil })
	for _, e := range valid {
		if e.Node == nil {
			e.Node = &healthNode{}
		}
	}
	slices.SortFunc(valid, func(a, b *healthEntry) int {
		if c := strings.Compare(a.Node.Node, b.Node.Node); c != 0 {
			return c
		}
		if c := strings.Compare(a.Service.ID, b.Service.ID); c != 0 {
			return c
		}
		if c := strings.Compare(a.Service.Namespace, b.Service.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Node.Datacenter, b.Node.Datacenter)
	})
	out := make([]task.Service, len(valid))
	for i, e := range valid {
		s, n := e.Service, e.Node
		addr := s.Address
		if addr == "" {
			addr = n.Address
		}
		tags := s.Tags
		if tags == nil {
			tags = []string{}
		} else {
			slices.Sort(tags)
		}
		out[i] = task.Service{
			ID:                  s.ID,
			Name:                s.Service,
			Kind:                s.Kind,
			Address:             addr,
			Port:                s.Port,
			Meta:                nonNil(s.Meta),
			Tags:                tags,
			Namespace:           s.Namespace,
			Status:              e.status(),
			Node:                n.Node,
			NodeID:              n.ID,
			NodeAddress:         n.Address,
			NodeDatacenter:      n.Datacenter,
			NodeTaggedAddresses: nonNil(n.TaggedAddresses),
			NodeMeta:            nonNil(n.Meta),
		}
	}
	return out
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// ---- catalog.services --------------------------------------------------

// CatalogOptions are the query options of a catalog.services query.
type CatalogOptions struct {
	Datacenter string
	Namespace  string
	Partition  string
	Peer       string
	NodeMeta   map[string]string
}

type catalogServices struct {
	o   CatalogOptions
	key string
}

// CatalogServices watches /v1/catalog/services: every service name with
// the union of its instances' tags. The value is a map[string][]string
// (never nil) with tags sorted, de-duplicated and never nil.
func CatalogServices(o CatalogOptions) Query {
	o.NodeMeta = maps.Clone(o.NodeMeta)
	k := keyBuilder{}
	k.raw("catalog/services")
	k.param("dc", o.Datacenter)
	k.nodeMeta(o.NodeMeta)
	k.param("ns", o.Namespace)
	k.param("partition", o.Partition)
	k.param("peer", o.Peer)
	return &catalogServices{o: o, key: k.String()}
}

func (c *catalogServices) Key() string { return c.key }

func (c *catalogServices) Fetch(ctx context.Context, cl *consul.Client, waitIndex uint64) (any, uint64, error) {
	q := queryOptions(ctx, waitIndex, c.o.Datacenter, c.o.Namespace)
	q.NodeMeta = c.o.NodeMeta
	q.Partition = c.o.Partition
	q.Peer = c.o.Peer
	svcs, meta, err := cl.Catalog().Services(q)
	if err != nil {
		return nil, 0, err
	}
	return normaliseCatalog(svcs), meta.LastIndex, nil
}

func normaliseCatalog(in map[string][]string) map[string][]string {
	out := make(map[string][]string, len(in))
	for name, tags := range in {
		if tags == nil {
			out[name] = []string{}
			continue
		}
		slices.Sort(tags)
		out[name] = slices.Compact(tags)
	}
	return out
}

// ---- kv ----------------------------------------------------------------

type kvQuery struct {
	path    string
	recurse bool
	dc, ns  string
	key     string
}

// KV watches one key (recurse=false) or every key under a prefix
// (recurse=true). The value is a map[string]string (never nil): for a
// single key {key: value} when it exists and {} when it does not; for a
// prefix one entry per key, folder keys included (value ""). Map keys are
// the full keys as Consul returns them (without a leading "/"). Values are
// the raw bytes, unaltered (not necessarily valid UTF-8).
func KV(path string, recurse bool, datacenter, namespace string) Query {
	path = strings.TrimLeft(path, "/") // the API client strips it too
	k := keyBuilder{}
	k.path("kv/", path, "")
	k.param("dc", datacenter)
	k.param("ns", namespace)
	if recurse {
		k.flag("recurse")
	}
	return &kvQuery{path: path, recurse: recurse, dc: datacenter, ns: namespace, key: k.String()}
}

func (k *kvQuery) Key() string { return k.key }

func (k *kvQuery) Fetch(ctx context.Context, c *consul.Client, waitIndex uint64) (any, uint64, error) {
	q := queryOptions(ctx, waitIndex, k.dc, k.ns)
	if !k.recurse {
		pair, meta, err := c.KV().Get(k.path, q)
		if err != nil {
			return nil, 0, err
		}
		out := map[string]string{}
		if pair != nil {
			out[pair.Key] = string(pair.Value)
		}
		return out, meta.LastIndex, nil
	}
	pairs, meta, err := c.KV().List(k.path, q)
	if err != nil {
		return nil, 0, err
	}
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		if p != nil {
			out[p.Key] = string(p.Value)
		}
	}
	return out, meta.LastIndex, nil
}

// ---- keys --------------------------------------------------------------

// Keys look like URLs so they read well in logs and metrics:
//
//	health/service/<name>[?dc=<dc>][&filter=<filter>][&ns=<ns>][&partition=<p>][&peer=<p>][&status=<s>,...]
//	catalog/services[?dc=<dc>][&node-meta=<k>:<v>...][&ns=<ns>][&partition=<p>][&peer=<p>]
//	kv/<path>[?dc=<dc>][&ns=<ns>][&recurse]
//	catalog/nodes[?dc=<dc>][&filter=<filter>][&node-meta=<k>:<v>...]
//	config/service-intentions[?dc=<dc>][&ns=<ns>][&partition=<p>]
//
// Parameters come in this fixed order and are left out when empty;
// node-meta pairs are sorted by key. Each part is escaped so the encoding
// is injective: '%' and control bytes always become %XX, and so do the
// delimiters of the part's position ('?' '#' in paths, plus '/' in a
// service name; '&' '=' '#' in parameter values; ':' in node-meta keys).
type keyBuilder struct {
	b   strings.Builder
	sep byte
}

func (k *keyBuilder) raw(s string) { k.b.WriteString(s) }

func (k *keyBuilder) path(prefix, p, extra string) {
	k.b.WriteString(prefix)
	k.b.WriteString(escape(p, "?#&"+extra))
}

func (k *keyBuilder) param(name, value string) {
	if value == "" {
		return
	}
	k.flag(name)
	k.b.WriteByte('=')
	k.b.WriteString(escape(value, "&=#"))
}

func (k *keyBuilder) flag(name string) {
	if k.sep == 0 {
		k.sep = '?'
	} else {
		k.sep = '&'
	}
	k.b.WriteByte(k.sep)
	k.b.WriteString(name)
}

// nodeMeta adds one node-meta=key:value parameter per pair, in key order.
func (k *keyBuilder) nodeMeta(m map[string]string) {
	for _, mk := range slices.Sorted(maps.Keys(m)) {
		k.param("node-meta", escape(mk, ":")+":"+m[mk])
	}
}

func (k *keyBuilder) String() string { return k.b.String() }

func escape(s, special string) string {
	need := false
	for i := 0; i < len(s); i++ {
		if mustEscape(s[i], special) {
			need = true
			break
		}
	}
	if !need {
		return s
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if mustEscape(c, special) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func mustEscape(c byte, special string) bool {
	return c < 0x20 || c == 0x7f || c == '%' || strings.IndexByte(special, c) >= 0
}
