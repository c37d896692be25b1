package terraform

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/depth"
	"github.com/ctsync/ctsync/internal/task"
)

// Names of the files the driver owns in a task's working directory.
const (
	fileMain          = "main.tf"
	fileVariables     = "variables.tf"
	fileModuleVars    = "variables.module.tf"
	fileInputs        = "terraform.tfvars"
	fileOldInputs     = "terraform.tfvars.json" // where earlier ctsync versions wrote the inputs
	fileProviders     = "providers.auto.tfvars.json"
	fileModuleVarVals = "variables.auto.tfvars.json"
)

// requiredVersion is written into every generated root module: MinVersion,
// and no upper bound.
const requiredVersion = ">= " + minVersion

// defaultKVPath is CTS's default consul.kv_path.
const defaultKVPath = "consul-terraform-sync/"

// servicesFields is the CTS "service definition protocol v0" object type of
// the services variable, in CTS's field order.
var servicesFields = []struct{ name, typ string }{
	{"id", "string"},
	{"name", "string"},
	{"kind", "string"},
	{"address", "string"},
	{"port", "number"},
	{"meta", "map(string)"},
	{"tags", "list(string)"},
	{"namespace", "string"},
	{"status", "string"},
	{"node", "string"},
	{"node_id", "string"},
	{"node_address", "string"},
	{"node_datacenter", "string"},
	{"node_tagged_addresses", "map(string)"},
	{"node_meta", "map(string)"},
	{"cts_user_defined_meta", "map(string)"},
}

// nodesFields and intentionsFields are the object types of the elements of
// the nodes and intentions variables (ctsync extensions), in the order the
// inputs file writes them.
var nodesFields = []struct{ name, typ string }{
	{"id", "string"},
	{"node", "string"},
	{"address", "string"},
	{"datacenter", "string"},
	{"tagged_addresses", "map(string)"},
	{"meta", "map(string)"},
}

var intentionsFields = []struct{ name, typ string }{
	{"source_name", "string"},
	{"source_namespace", "string"},
	{"source_partition", "string"},
	{"source_peer", "string"},
	{"source_sameness_group", "string"},
	{"source_type", "string"},
	{"destination_name", "string"},
	{"destination_namespace", "string"},
	{"destination_partition", "string"},
	{"action", "string"},
	{"permissions", "string"},
	{"precedence", "number"},
	{"description", "string"},
	{"meta", "map(string)"},
}

// rootModule is everything needed to render a task's root module. It is
// computed once from the Options; rendering is a pure function of it, so the
// same task always yields the same bytes.
type rootModule struct {
	spec            task.Spec
	providers       []config.Provider // sorted by name
	required        map[string]config.RequiredProvider
	backend         config.Backend
	catalogServices bool // render the catalog_services variable
	consulKV        bool // render the consul_kv variable
	nodes           bool // render the nodes variable
	intentions      bool // render the intentions variable
	taskOutputs     bool // render the task_outputs variable (chaining)
	exportOutputs   bool // expose the module's outputs as the root output ctsync_outputs
	varNames        []string
	varValues       map[string]json.RawMessage
}

func newRootModule(o *Options) (*rootModule, error) {
	s := o.Spec
	if !hclsyntax.ValidIdentifier(s.Name) {
		return nil, fmt.Errorf("task name %q is not a valid identifier", s.Name)
	}
	if s.Module == "" {
		return nil, fmt.Errorf("task %q has no module", s.Name)
	}
	m := &rootModule{
		spec:     s,
		required: o.Driver.RequiredProviders,
	}
	if c := s.Condition.CatalogServices; c != nil && c.UseAsModuleInput {
		m.catalogServices = true
	}
	if c := s.Condition.ConsulKV; (c != nil && c.UseAsModuleInput) || s.ModuleInput.ConsulKV != nil {
		m.consulKV = true
	}
	m.nodes = (s.Condition.Nodes != nil && s.Condition.Nodes.UseAsModuleInput) || s.ModuleInput.Nodes != nil
	m.intentions = (s.Condition.Intentions != nil && s.Condition.Intentions.UseAsModuleInput) || s.ModuleInput.Intentions != nil
	// nodes and intentions are ordinary names for a task that does not
	// render them (CTS configurations may use them).
	m.taskOutputs = s.ModuleInput.TaskOutputs != nil
	m.exportOutputs = s.ExportOutputs
	extraInputs := map[string]bool{"nodes": m.nodes, "intentions": m.intentions, "task_outputs": m.taskOutputs}

	m.providers = append([]config.Provider(nil), o.Providers...)
	sort.SliceStable(m.providers, func(i, j int) bool { return m.providers[i].Name < m.providers[j].Name })
	seen := map[string]bool{}
	for _, p := range m.providers {
		if !hclsyntax.ValidIdentifier(p.Name) {
			return nil, fmt.Errorf("provider name %q is not a valid identifier", p.Name)
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("task %q uses provider %q more than once; a task can use only one instance of a provider", s.Name, p.Name)
		}
		if p.NeedsResolution() {
			return nil, fmt.Errorf("provider %s still holds {{ key }} templates: the configuration was not resolved (resolve.Providers)", p.Ref())
		}
		if p.Name == "services" || p.Name == "catalog_services" || p.Name == "consul_kv" || extraInputs[p.Name] {
			return nil, fmt.Errorf("provider name %q clashes with the module input variable of the same name", p.Name)
		}
		seen[p.Name] = true
		if err := checkProviderBody(p.Name, p.Args); err != nil {
			return nil, err
		}
	}

	for name := range s.Variables {
		if !hclsyntax.ValidIdentifier(name) {
			return nil, fmt.Errorf("task variable %q: not a valid variable name", name)
		}
		if task.ReservedVariable(name) || extraInputs[name] {
			return nil, fmt.Errorf("task variable %q: the name is reserved (module argument set by ctsync)", name)
		}
		if seen[name] {
			return nil, fmt.Errorf("task variable %q: the name clashes with the provider variable of the same name", name)
		}
		m.varNames = append(m.varNames, name)
	}
	sort.Strings(m.varNames)
	m.varValues = make(map[string]json.RawMessage, len(m.varNames))
	for _, name := range m.varNames {
		raw, err := evalVariable(name, s.Variables[name])
		if err != nil {
			return nil, err
		}
		m.varValues[name] = raw
	}

	b, err := resolveBackend(o.Driver.Backend, o.Consul)
	if err != nil {
		return nil, err
	}
	m.backend = b
	return m, nil
}

// evalVariable evaluates a task variable's HCL expression text with no
// variables or functions available (literals only) and returns it as JSON.
func evalVariable(name, src string) (json.RawMessage, error) {
	if err := depth.HCL([]byte(src), 0); err != nil { // before the parser recurses
		return nil, fmt.Errorf("task variable %q: the value %v", name, err)
	}
	expr, diags := hclsyntax.ParseExpression([]byte(src), "task variable "+name, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, fmt.Errorf("task variable %q: invalid expression: %s", name, diagText(diags))
	}
	v, diags := expr.Value(nil)
	if diags.HasErrors() {
		return nil, fmt.Errorf("task variable %q: the value must be a literal: %s", name, diagText(diags))
	}
	raw, err := ctyjson.SimpleJSONValue{Value: v}.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("task variable %q: %w", name, err)
	}
	return raw, nil
}

func diagText(diags hcl.Diagnostics) string {
	var parts []string
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		t := d.Summary
		if d.Detail != "" {
			t += ": " + d.Detail
		}
		parts = append(parts, t)
	}
	return strings.Join(parts, "; ")
}

// resolveBackend returns the backend to write: the configured one, with the
// consul defaults merged in for a consul backend, or the default consul
// backend when none is configured.
func resolveBackend(b *config.Backend, c config.Consul) (config.Backend, error) {
	out := config.Backend{Type: "consul", Attrs: map[string]cty.Value{}}
	if b != nil {
		if b.Type == "" {
			return out, fmt.Errorf("terraform backend has no type")
		}
		if !hclsyntax.ValidIdentifier(b.Type) {
			return out, fmt.Errorf("terraform backend type %q is not a valid identifier", b.Type)
		}
		out.Type = b.Type
		for k, v := range b.Attrs {
			if !hclsyntax.ValidIdentifier(k) {
				return out, fmt.Errorf("backend %q: argument name %q is not a valid identifier", b.Type, k)
			}
			if !v.IsWhollyKnown() {
				return out, fmt.Errorf("backend %q: argument %q has no known value", b.Type, k)
			}
			out.Attrs[k] = v
		}
	}
	if out.Type != "consul" {
		return out, nil
	}
	for k, v := range consulBackendDefaults(c) {
		if _, ok := out.Attrs[k]; !ok {
			out.Attrs[k] = v
		}
	}
	return out, nil
}

// consulBackendDefaults is the CTS default consul backend for a Consul
// connection. The token is never part of it: Terraform gets it from the
// environment (CONSUL_HTTP_TOKEN).
func consulBackendDefaults(c config.Consul) map[string]cty.Value {
	addr, https := splitScheme(c.Address)
	if addr == "" {
		addr = "localhost:8500"
	}
	attrs := map[string]cty.Value{
		"address": cty.StringVal(addr),
		"path":    cty.StringVal(stateKVPath(c.KVPath)),
		"gzip":    cty.True,
	}
	if c.TLS.Enabled || https {
		attrs["scheme"] = cty.StringVal("https")
		if c.TLS.CACert != "" {
			attrs["ca_file"] = cty.StringVal(c.TLS.CACert)
		}
		if c.TLS.Cert != "" {
			attrs["cert_file"] = cty.StringVal(c.TLS.Cert)
		}
		if c.TLS.Key != "" {
			attrs["key_file"] = cty.StringVal(c.TLS.Key)
		}
	}
	return attrs
}

// splitScheme removes an http:// or https:// prefix from a Consul address
// and reports whether it was https.
func splitScheme(addr string) (string, bool) {
	lower := strings.ToLower(addr)
	switch {
	case strings.HasPrefix(lower, "https://"):
		return strings.TrimRight(addr[len("https://"):], "/"), true
	case strings.HasPrefix(lower, "http://"):
		return strings.TrimRight(addr[len("http://"):], "/"), false
	}
	return addr, false
}

// stateKVPath is the consul backend path for a kv_path: "<kv_path>/terraform",
// without doubling a trailing "terraform" element.
func stateKVPath(kvPath string) string {
	if kvPath == "" {
		kvPath = defaultKVPath
	}
	p := strings.TrimRight(kvPath, "/")
	if p == "terraform" || strings.HasSuffix(p, "/terraform") {
		return p
	}
	if p == "" {
		return "terraform"
	}
	return p + "/terraform"
}

// checkProviderBody rejects what cannot be written: names that are not
// identifiers, an argument and a block of the same name, unknown values.
func checkProviderBody(where string, body config.ProviderBody) error {
	for k, v := range body.Attrs {
		if !hclsyntax.ValidIdentifier(k) {
			return fmt.Errorf("provider %s: argument name %q is not a valid identifier", where, k)
		}
		if !v.IsWhollyKnown() {
			return fmt.Errorf("provider %s: argument %q has no known value", where, k)
		}
	}
	for _, b := range body.Blocks {
		if !hclsyntax.ValidIdentifier(b.Type) {
			return fmt.Errorf("provider %s: block type %q is not a valid identifier", where, b.Type)
		}
		if len(b.Labels) > 0 {
			return fmt.Errorf("provider %s: block %q has labels %q; nested blocks of a provider configuration take no labels", where, b.Type, b.Labels)
		}
		if _, ok := body.Attrs[b.Type]; ok {
			return fmt.Errorf("provider %s: %q is both an argument and a block", where, b.Type)
		}
		if err := checkProviderBody(where+"."+b.Type, b.Body); err != nil {
			return err
		}
	}
	return nil
}
