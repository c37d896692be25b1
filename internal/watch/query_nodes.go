package watch

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/ctsync/ctsync/internal/consul"
	"github.com/ctsync/ctsync/internal/task"
)

// blockingParams are the index and wait parameters of a blocking read.
func blockingParams(waitIndex uint64) url.Values {
	p := url.Values{}
	if waitIndex > 0 {
		p.Set("index", strconv.FormatUint(waitIndex, 10))
		p.Set("wait", strconv.FormatInt(WaitTime.Milliseconds(), 10)+"ms")
	}
	return p
}

// ---- catalog.nodes -----------------------------------------------------

// NodesOptions are the query options of a catalog.nodes query.
type NodesOptions struct {
	Datacenter string
	Filter     string
	NodeMeta   map[string]string
}

type catalogNodes struct {
	o   NodesOptions
	key string
}

// CatalogNodes watches /v1/catalog/nodes: every node of the datacenter that
// the node_meta pairs and the filter select. The value is a []task.Node
// (never nil) sorted by node name, then ID, with maps never nil.
func CatalogNodes(o NodesOptions) Query {
	o.NodeMeta = maps.Clone(o.NodeMeta)
	k := keyBuilder{}
	k.raw("catalog/nodes")
	k.param("dc", o.Datacenter)
	k.param("filter", o.Filter)
	k.nodeMeta(o.NodeMeta)
	return &catalogNodes{o: o, key: k.String()}
}

func (n *catalogNodes) Key() string { return n.key }

// catalogNode is the part of a /v1/catalog/nodes entry the nodes variable
// needs.
type catalogNode struct {
	ID              string
	Node            string
	Address         string
	Datacenter      string
	TaggedAddresses map[string]string
	Meta            map[string]string
}

func (n *catalogNodes) Fetch(ctx context.Context, c *consul.Client, waitIndex uint64) (any, uint64, error) {
	p := blockingParams(waitIndex)
	setNonEmpty(p, "dc", n.o.Datacenter)
	setNonEmpty(p, "filter", n.o.Filter)
	for _, mk := range slices.Sorted(maps.Keys(n.o.NodeMeta)) {
		p.Add("node-meta", mk+":"+n.o.NodeMeta[mk])
	}
	var nodes []*catalogNode
	index, err := c.BlockingGet(ctx, "/v1/catalog/nodes", p, &nodes)
	if err != nil {
		return nil, 0, err
	}
	return normaliseNodes(nodes), index, nil
}

func normaliseNodes(in []*catalogNode) []task.Node {
	out := make([]task.Node, 0, len(in))
	for _, n := range in {
		if n == nil {
			continue
		}
		out = append(out, task.Node{ID: n.ID, Node: n.Node, Address: n.Address, Datacenter: n.Datacenter,
			TaggedAddresses: nonNil(n.TaggedAddresses), Meta: nonNil(n.Meta)})
	}
	slices.SortFunc(out, func(a, b task.Node) int {
		return cmp.Or(strings.Compare(a.Node, b.Node), strings.Compare(a.ID, b.ID))
	})
	return out
}

// ---- config.service-intentions -----------------------------------------

// IntentionsOptions are the query options of a service-intentions query.
type IntentionsOptions struct {
	Datacenter string
	Namespace  string
	Partition  string
}

type serviceIntentions struct {
	o   IntentionsOptions
	key string
}

// ServiceIntentions watches /v1/config/service-intentions: every config
// entry of kind service-intentions, flattened to one task.Intention per
// source. Tasks pick the ones they want by name (reconcile), so all of them
// share one blocking query. The value is a []task.Intention (never nil) in
// the order Consul evaluates intentions: highest precedence first, then by
// destination and source (partition, namespace, name).
func ServiceIntentions(o IntentionsOptions) Query {
	k := keyBuilder{}
	k.raw("config/service-intentions")
	k.param("dc", o.Datacenter)
	k.param("ns", o.Namespace)
	k.param("partition", o.Partition)
	return &serviceIntentions{o: o, key: k.String()}
}

func (s *serviceIntentions) Key() string { return s.key }

// intentionsEntry is the part of a service-intentions config entry the
// intentions variable needs.
type intentionsEntry struct {
	Name      string
	Namespace string
	Partition string
	Meta      map[string]string
	Sources   []*struct {
		Name          string
		Peer          string
		Partition     string
		Namespace     string
		SamenessGroup string
		Action        string
		Permissions   any
		Precedence    int
		Type          string
		Description   string
	}
}

func (s *serviceIntentions) Fetch(ctx context.Context, c *consul.Client, waitIndex uint64) (any, uint64, error) {
	p := blockingParams(waitIndex)
	setNonEmpty(p, "dc", s.o.Datacenter)
	setNonEmpty(p, "ns", s.o.Namespace)
	setNonEmpty(p, "partition", s.o.Partition)
	var entries []*intentionsEntry
	index, err := c.BlockingGet(ctx, "/v1/config/service-intentions", p, &entries)
	if err != nil {
		return nil, 0, err
	}
	out, err := normaliseIntentions(entries)
	if err != nil {
		return nil, 0, err
	}
	return out, index, nil
}

func normaliseIntentions(entries []*intentionsEntry) ([]task.Intention, error) {
	out := []task.Intention{}
	for _, e := range entries {
		if e == nil {
			continue
		}
		for _, src := range e.Sources {
			if src == nil {
				continue
			}
			perms := "[]"
			if src.Permissions != nil {
				// encoding/json writes object keys sorted: equal
				// permissions give equal text.
				b, err := json.Marshal(src.Permissions)
				if err != nil {
					return nil, fmt.Errorf("intention %s -> %s: permissions: %w", src.Name, e.Name, err)
				}
				perms = string(b)
			}
			out = append(out, task.Intention{
				SourceName:           src.Name,
				SourceNamespace:      src.Namespace,
				SourcePartition:      src.Partition,
				SourcePeer:           src.Peer,
				SourceSamenessGroup:  src.SamenessGroup,
				SourceType:           src.Type,
				DestinationName:      e.Name,
				DestinationNamespace: e.Namespace,
				DestinationPartition: e.Partition,
				Action:               src.Action,
				Permissions:          perms,
				Precedence:           src.Precedence,
				Description:          src.Description,
				Meta:                 nonNil(e.Meta),
			})
		}
	}
	slices.SortFunc(out, compareIntentions)
	return out, nil
}

func compareIntentions(a, b task.Intention) int {
	return cmp.Or(
		cmp.Compare(b.Precedence, a.Precedence), // highest first
		strings.Compare(a.DestinationPartition, b.DestinationPartition),
		strings.Compare(a.DestinationNamespace, b.DestinationNamespace),
		strings.Compare(a.DestinationName, b.DestinationName),
		strings.Compare(a.SourcePeer, b.SourcePeer),
		strings.Compare(a.SourceSamenessGroup, b.SourceSamenessGroup),
		strings.Compare(a.SourcePartition, b.SourcePartition),
		strings.Compare(a.SourceNamespace, b.SourceNamespace),
		strings.Compare(a.SourceName, b.SourceName),
	)
}
