package reconcile

import (
	"context"
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

// Retry is a task's pending retry: its last run failed and it runs again
// at NextAt.
type Retry struct {
	// Attempt is the number of the retry that is waiting (1 for the first).
	Attempt int
	// NextAt is when it runs.
	NextAt time.Time
	// LastError is the one-line summary of the failure it retries.
	LastError string
}

type actorKey struct{}

// WithActor returns ctx carrying the name of who asks for a run (an API
// token's name); the run's event records it.
func WithActor(ctx context.Context, name string) context.Context {
	if name == "" {
		return ctx
	}
	return context.WithValue(ctx, actorKey{}, name)
}

type runIDKey struct{}

// WithRunID gives the run an API call starts the id id: the run's event
// (and, when a safety gate holds its plan, the plan) has that id, so that
// the call answers with the run it caused and no other.
func WithRunID(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, runIDKey{}, id)
}

// RunIDFrom is the id WithRunID gave ("": none).
func RunIDFrom(ctx context.Context) string {
	s, _ := ctx.Value(runIDKey{}).(string)
	return s
}

func actorFrom(ctx context.Context) string {
	s, _ := ctx.Value(actorKey{}).(string)
	return s
}

// inputsDigest is a compact record of a run's Consul data, enough to tell
// what the next run changed: per service instance, KV key, catalog service
// and node, a hash of its value (and an instance's health status, to say
// "passing → critical").
type inputsDigest struct {
	services map[string]digestEntry
	kv       map[string]digestEntry
	catalog  map[string]digestEntry
	nodes    map[string]digestEntry
}

type digestEntry struct {
	sum    uint64
	status string
	fields [len(serviceFields)]uint64 // per field of a service instance
}

// serviceFields name the parts of a service instance whose change is told.
var serviceFields = [...]string{"address", "tags", "meta", "node"}

// The digest's hashes are compared within this process only: maphash
// with one seed, no allocation (a run of a task with 10,000 instances pays
// a few milliseconds for them).
var digestSeed = maphash.MakeSeed()

// hashStrings hashes a sequence of strings (each ended, so that ("ab",
// "c") and ("a", "bc") differ).
func hashStrings(ss ...string) uint64 {
	var h maphash.Hash
	h.SetSeed(digestSeed)
	for _, s := range ss {
		h.WriteString(s)
		h.WriteByte(0)
	}
	return h.Sum64()
}

// hashList hashes a list in order.
func hashList(ss []string) uint64 { return hashStrings(ss...) ^ uint64(len(ss))<<56 }

// hashMap hashes a map whatever its iteration order.
func hashMap(m map[string]string) uint64 {
	var sum uint64
	for k, v := range m {
		sum += hashStrings(k, v)
	}
	return sum ^ uint64(len(m))
}

func mix(hs ...uint64) uint64 {
	var x uint64 = 1469598103934665603
	for _, h := range hs {
		x = (x ^ h) * 1099511628211
	}
	return x
}

// digest records in's Consul data.
func digest(in *task.Inputs) *inputsDigest {
	d := &inputsDigest{services: make(map[string]digestEntry, len(in.Services))}
	for k, s := range in.Services {
		e := digestEntry{status: s.Status, fields: [...]uint64{
			hashStrings(s.Address, strconv.Itoa(s.Port)), hashList(s.Tags), hashMap(s.Meta),
			mix(hashStrings(s.Node, s.NodeID, s.NodeAddress, s.NodeDatacenter), hashMap(s.NodeMeta), hashMap(s.NodeTaggedAddresses)),
		}}
		e.sum = mix(e.fields[0], e.fields[1], e.fields[2], e.fields[3],
			hashStrings(s.ID, s.Name, s.Kind, s.Namespace, s.Status), hashMap(s.CTSUserDefinedMeta))
		d.services[k] = e
	}
	if in.ConsulKV != nil {
		d.kv = make(map[string]digestEntry, len(in.ConsulKV))
		for k, v := range in.ConsulKV {
			d.kv[k] = digestEntry{sum: hashStrings(v)}
		}
	}
	if in.CatalogServices != nil {
		d.catalog = make(map[string]digestEntry, len(in.CatalogServices))
		for k, v := range in.CatalogServices {
			d.catalog[k] = digestEntry{sum: hashList(v)}
		}
	}
	if in.Nodes != nil {
		d.nodes = make(map[string]digestEntry, len(in.Nodes))
		for _, n := range in.Nodes {
			d.nodes[n.Node+"."+n.Datacenter] = digestEntry{sum: mix(hashStrings(n.ID, n.Address), hashMap(n.TaggedAddresses), hashMap(n.Meta))}
		}
	}
	return d
}

// changes tells what changed from prev (nil: no previous run) to cur.
func changes(prev, cur *inputsDigest) *store.Changes {
	if prev == nil || cur == nil {
		return nil
	}
	return &store.Changes{
		Services:        diffSet(prev.services, cur.services, describeService),
		ConsulKV:        diffSet(prev.kv, cur.kv, nil),
		CatalogServices: diffSet(prev.catalog, cur.catalog, nil),
		Nodes:           diffSet(prev.nodes, cur.nodes, nil),
	}
}

// describeService says what changed in a service instance.
func describeService(key string, a, b digestEntry) string {
	var parts []string
	if a.status != b.status {
		parts = append(parts, fmt.Sprintf("status %s → %s", a.status, b.status))
	}
	for i, f := range serviceFields {
		if a.fields[i] != b.fields[i] {
			parts = append(parts, f)
		}
	}
	if len(parts) == 0 {
		return key
	}
	return key + " (" + strings.Join(parts, ", ") + ")"
}

// diffSet compares two digests of one kind; nil when nothing changed.
func diffSet(a, b map[string]digestEntry, describe func(string, digestEntry, digestEntry) string) *store.SetDiff {
	d := &store.SetDiff{}
	add := func(list *[]string, n *int, s string) {
		*n++
		if len(*list) < store.MaxChangeNames {
			*list = append(*list, s)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(b)) {
		old, ok := a[k]
		switch {
		case !ok:
			add(&d.Added, &d.AddedCount, k)
		case old.sum != b[k].sum:
			s := k
			if describe != nil {
				s = describe(k, old, b[k])
			}
			add(&d.Changed, &d.ChangedCount, s)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if _, ok := b[k]; !ok {
			add(&d.Removed, &d.RemovedCount, k)
		}
	}
	if d.AddedCount+d.RemovedCount+d.ChangedCount == 0 {
		return nil
	}
	return d
}

// eventPhases is the phases of a run: the init the controller timed
// (zero: no init in this run), then the driver's; without those, the run's
// whole time as one phase named kind.
func eventPhases(initStart, initEnd time.Time, phases []driver.Phase, kind string, start, end time.Time) []store.Phase {
	var out []store.Phase
	if !initStart.IsZero() {
		out = append(out, store.Phase{Name: "init", StartTime: initStart, EndTime: initEnd})
		start = initEnd
	}
	if len(phases) == 0 {
		return append(out, store.Phase{Name: kind, StartTime: start, EndTime: end})
	}
	for _, p := range phases {
		out = append(out, store.Phase{Name: p.Name, StartTime: p.Start, EndTime: p.End})
	}
	return out
}
