package task

import "encoding/json"

// Service is one entry of the module's `services` variable, with the fields
// and JSON names of the CTS "service definition protocol v0". The watch
// layer produces these (without CTSUserDefinedMeta, which comes from the
// task's configuration).
type Service struct {
	ID                  string            `json:"id"`
	Name                string            `json:"name"`
	Kind                string            `json:"kind"`
	Address             string            `json:"address"`
	Port                int               `json:"port"`
	Meta                map[string]string `json:"meta"`
	Tags                []string          `json:"tags"`
	Namespace           string            `json:"namespace"`
	Status              string            `json:"status"`
	Node                string            `json:"node"`
	NodeID              string            `json:"node_id"`
	NodeAddress         string            `json:"node_address"`
	NodeDatacenter      string            `json:"node_datacenter"`
	NodeTaggedAddresses map[string]string `json:"node_tagged_addresses"`
	NodeMeta            map[string]string `json:"node_meta"`
	CTSUserDefinedMeta  map[string]string `json:"cts_user_defined_meta"`
}

// Key is the CTS map key of a service instance in the `services` variable:
// the non-empty parts of ID, node, namespace and datacenter joined with ".".
func (s *Service) Key() string {
	key := ""
	for _, p := range []string{s.ID, s.Node, s.Namespace, s.NodeDatacenter} {
		if p == "" {
			continue
		}
		if key != "" {
			key += "."
		}
		key += p
	}
	return key
}

// Node is one entry of the module's `nodes` variable (a ctsync extension):
// a catalog node as /v1/catalog/nodes returns it.
type Node struct {
	ID              string            `json:"id"`
	Node            string            `json:"node"`
	Address         string            `json:"address"`
	Datacenter      string            `json:"datacenter"`
	TaggedAddresses map[string]string `json:"tagged_addresses"`
	Meta            map[string]string `json:"meta"`
}

// Intention is one entry of the module's `intentions` variable (a ctsync
// extension): one source of a service-intentions config entry, flattened
// with its destination. Action is "allow" or "deny", or "" when the source
// has L7 Permissions instead (then Permissions holds them as Consul's JSON
// array, else "[]").
type Intention struct {
	SourceName           string            `json:"source_name"`
	SourceNamespace      string            `json:"source_namespace"`
	SourcePartition      string            `json:"source_partition"`
	SourcePeer           string            `json:"source_peer"`
	SourceSamenessGroup  string            `json:"source_sameness_group"`
	SourceType           string            `json:"source_type"`
	DestinationName      string            `json:"destination_name"`
	DestinationNamespace string            `json:"destination_namespace"`
	DestinationPartition string            `json:"destination_partition"`
	Action               string            `json:"action"`
	Permissions          string            `json:"permissions"`
	Precedence           int               `json:"precedence"`
	Description          string            `json:"description"`
	Meta                 map[string]string `json:"meta"`
}

// Inputs is everything a task's module receives from Consul. Services is
// always set (possibly empty); the others are nil when the task does not
// render them, and then the variable is not declared at all.
type Inputs struct {
	Services        map[string]Service  `json:"services"`
	CatalogServices map[string][]string `json:"catalog_services,omitempty"`
	ConsulKV        map[string]string   `json:"consul_kv,omitempty"`
	Nodes           []Node              `json:"nodes,omitempty"`
	Intentions      []Intention         `json:"intentions,omitempty"`
	// TaskOutputs holds, for module_input "task-outputs", each named
	// task's outputs as a JSON object (name to value), as last recorded.
	TaskOutputs map[string]json.RawMessage `json:"task_outputs,omitempty"`
}
