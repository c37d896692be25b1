package terraform

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"
	"golang.org/x/text/unicode/norm"

	"github.com/ctsync/ctsync/internal/config"
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

// --- HCL files ---------------------------------------------------------------

// configPreamble opens every generated file written at initialisation.
var configPreamble = []string{
	"This file is generated by ctsync from the task configuration.",
	"Do not edit it: ctsync rewrites it whenever the task is initialised.",
}

// header writes the comment every generated file starts with: the
// preamble lines (configPreamble when none are given), then the task's name
// and description.
func (m *rootModule) header(body *hclwrite.Body, preamble ...string) {
	if len(preamble) == 0 {
		preamble = configPreamble
	}
	lines := append(append([]string(nil), preamble...),
		"",
		"Task: "+commentText(m.spec.Name),
		"Description: "+commentText(m.spec.Description),
	)
	for _, l := range lines {
		appendComment(body, l)
	}
	body.AppendNewline()
}

// appendComment appends one "# text" line comment.
func appendComment(body *hclwrite.Body, text string) {
	line := "#"
	if t := strings.TrimRight(text, " "); t != "" {
		line += " " + t
	}
	body.AppendUnstructuredTokens(hclwrite.Tokens{{Type: hclsyntax.TokenComment, Bytes: []byte(line + "\n")}})
}

// commentText makes text safe inside a one-line comment: every control or
// line/paragraph separator character becomes a space, so a description can
// never end the comment and start configuration.
func commentText(s string) string {
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || r == '\u0085' {
			return ' '
		}
		return r
	}, s))
}

func varRef(steps ...string) hcl.Traversal {
	t := hcl.Traversal{hcl.TraverseRoot{Name: "var"}}
	for _, s := range steps {
		t = append(t, hcl.TraverseAttr{Name: s})
	}
	return t
}

func formatFile(f *hclwrite.File) []byte { return hclwrite.Format(f.Bytes()) }

// mainTF renders main.tf: terraform settings, the provider blocks and the
// module call.
func (m *rootModule) mainTF() []byte {
	f := hclwrite.NewEmptyFile()
	root := f.Body()
	m.header(root)

	tf := root.AppendNewBlock("terraform", nil).Body()
	tf.SetAttributeValue("required_version", cty.StringVal(requiredVersion))
	var req []string
	for _, p := range m.providers {
		if _, ok := m.required[p.Name]; ok {
			req = append(req, p.Name)
		}
	}
	if len(req) > 0 {
		tf.AppendNewline()
		rp := tf.AppendNewBlock("required_providers", nil).Body()
		for _, name := range req {
			r := m.required[name]
			obj := map[string]cty.Value{}
			if r.Source != "" {
				obj["source"] = cty.StringVal(r.Source)
			}
			if r.Version != "" {
				obj["version"] = cty.StringVal(r.Version)
			}
			rp.SetAttributeValue(name, cty.ObjectVal(obj))
		}
	}
	tf.AppendNewline()
	be := tf.AppendNewBlock("backend", []string{m.backend.Type}).Body()
	for _, k := range sortedKeys(m.backend.Attrs) {
		be.SetAttributeValue(k, m.backend.Attrs[k])
	}

	for _, p := range m.providers {
		root.AppendNewline()
		pb := root.AppendNewBlock("provider", []string{p.Name}).Body()
		writeProviderRefs(pb, p.Args, varRef(p.Name))
	}

	root.AppendNewline()
	if d := commentText(m.spec.Description); d != "" {
		appendComment(root, d)
	}
	mod := root.AppendNewBlock("module", []string{m.spec.Name}).Body()
	mod.SetAttributeValue("source", cty.StringVal(m.spec.Module))
	if m.spec.Version != "" {
		mod.SetAttributeValue("version", cty.StringVal(m.spec.Version))
	}
	mod.AppendNewline()
	mod.SetAttributeTraversal("services", varRef("services"))
	if m.catalogServices {
		mod.SetAttributeTraversal("catalog_services", varRef("catalog_services"))
	}
	if m.consulKV {
		mod.SetAttributeTraversal("consul_kv", varRef("consul_kv"))
	}
	if m.nodes {
		mod.SetAttributeTraversal("nodes", varRef("nodes"))
	}
	if m.intentions {
		mod.SetAttributeTraversal("intentions", varRef("intentions"))
	}
	if m.taskOutputs {
		mod.SetAttributeTraversal("task_outputs", varRef("task_outputs"))
	}
	if len(m.varNames) > 0 {
		mod.AppendNewline()
		for _, name := range m.varNames {
			mod.SetAttributeTraversal(name, varRef(name))
		}
	}
	if m.exportOutputs {
		// Another task receives this module's outputs: the whole module
		// object is the root output ctsync reads after each apply.
		// Sensitive, because the module may have sensitive outputs.
		root.AppendNewline()
		out := root.AppendNewBlock("output", []string{ExportOutput}).Body()
		out.SetAttributeTraversal("value", hcl.Traversal{hcl.TraverseRoot{Name: "module"}, hcl.TraverseAttr{Name: m.spec.Name}})
		out.SetAttributeValue("sensitive", cty.True)
	}
	return formatFile(f)
}

// writeProviderRefs writes a provider (or nested block) body whose every
// argument refers to the matching place in the provider's variable: the
// values themselves are only ever in providers.auto.tfvars.json.
func writeProviderRefs(body *hclwrite.Body, pb config.ProviderBody, path hcl.Traversal) {
	for _, k := range sortedKeys(pb.Attrs) {
		body.SetAttributeTraversal(k, appendStep(path, hcl.TraverseAttr{Name: k}))
	}
	count := map[string]int{}
	for _, b := range pb.Blocks {
		count[b.Type]++
	}
	index := map[string]int{}
	for _, b := range pb.Blocks {
		p := appendStep(path, hcl.TraverseAttr{Name: b.Type})
		if count[b.Type] > 1 {
			p = appendStep(p, hcl.TraverseIndex{Key: cty.NumberIntVal(int64(index[b.Type]))})
			index[b.Type]++
		}
		nb := body.AppendNewBlock(b.Type, nil).Body()
		writeProviderRefs(nb, b.Body, p)
	}
}

func appendStep(t hcl.Traversal, step hcl.Traverser) hcl.Traversal {
	out := make(hcl.Traversal, 0, len(t)+1)
	out = append(out, t...)
	return append(out, step)
}

// variablesTF renders variables.tf: the module input variables and one
// variable per provider.
func (m *rootModule) variablesTF() []byte {
	f := hclwrite.NewEmptyFile()
	root := f.Body()
	m.header(root)

	svc := root.AppendNewBlock("variable", []string{"services"}).Body()
	svc.SetAttributeValue("description", cty.StringVal("Consul service instances that ctsync monitors for this task, keyed by instance (id.node[.namespace].datacenter)"))
	fields := make([]hclwrite.ObjectAttrTokens, 0, len(servicesFields))
	for _, fld := range servicesFields {
		fields = append(fields, hclwrite.ObjectAttrTokens{
			Name:  hclwrite.TokensForIdentifier(fld.name),
			Value: typeTokens(fld.typ),
		})
	}
	svc.SetAttributeRaw("type", hclwrite.TokensForFunctionCall("map",
		hclwrite.TokensForFunctionCall("object", hclwrite.TokensForObject(fields))))

	if m.catalogServices {
		root.AppendNewline()
		cs := root.AppendNewBlock("variable", []string{"catalog_services"}).Body()
		cs.SetAttributeValue("description", cty.StringVal("Consul catalog service names, each with the list of all tags known for that service"))
		cs.SetAttributeRaw("type", typeTokens("map(list(string))"))
	}
	if m.consulKV {
		root.AppendNewline()
		kv := root.AppendNewBlock("variable", []string{"consul_kv"}).Body()
		kv.SetAttributeValue("description", cty.StringVal("Consul KV pairs, keyed by their full key path"))
		kv.SetAttributeRaw("type", typeTokens("map(string)"))
	}
	if m.nodes {
		root.AppendNewline()
		v := root.AppendNewBlock("variable", []string{"nodes"}).Body()
		v.SetAttributeValue("description", cty.StringVal("Consul catalog nodes the task selects, sorted by node name"))
		v.SetAttributeRaw("type", objectListType(nodesFields))
	}
	if m.intentions {
		root.AppendNewline()
		v := root.AppendNewBlock("variable", []string{"intentions"}).Body()
		v.SetAttributeValue("description", cty.StringVal("Consul service intentions the task selects, one per source, highest precedence first"))
		v.SetAttributeRaw("type", objectListType(intentionsFields))
	}
	if m.taskOutputs {
		root.AppendNewline()
		v := root.AppendNewBlock("variable", []string{"task_outputs"}).Body()
		v.SetAttributeValue("description", cty.StringVal("The outputs of the tasks this task depends on: task name to an object of that task's module outputs"))
		v.SetAttributeRaw("type", typeTokens("any"))
	}
	for _, p := range m.providers {
		root.AppendNewline()
		v := root.AppendNewBlock("variable", []string{p.Name}).Body()
		v.SetAttributeValue("default", cty.NullVal(cty.DynamicPseudoType))
		v.SetAttributeValue("description", cty.StringVal(fmt.Sprintf("Arguments of the %s provider, from its terraform_provider block (values in %s)", p.Name, fileProviders)))
		v.SetAttributeValue("sensitive", cty.True)
	}
	return formatFile(f)
}

// objectListType renders list(object({ ... })) of the fields.
func objectListType(fields []struct{ name, typ string }) hclwrite.Tokens {
	attrs := make([]hclwrite.ObjectAttrTokens, 0, len(fields))
	for _, fld := range fields {
		attrs = append(attrs, hclwrite.ObjectAttrTokens{Name: hclwrite.TokensForIdentifier(fld.name), Value: typeTokens(fld.typ)})
	}
	return hclwrite.TokensForFunctionCall("list", hclwrite.TokensForFunctionCall("object", hclwrite.TokensForObject(attrs)))
}

// typeTokens renders a type expression such as "map(list(string))". Only
// the fixed type names used in this file are accepted.
func typeTokens(t string) hclwrite.Tokens {
	if open := strings.IndexByte(t, '('); open > 0 && strings.HasSuffix(t, ")") {
		return hclwrite.TokensForFunctionCall(t[:open], typeTokens(t[open+1:len(t)-1]))
	}
	return hclwrite.TokensForIdentifier(t)
}

// variablesModuleTF renders variables.module.tf, or nil when the task has no
// variables.
func (m *rootModule) variablesModuleTF() []byte {
	if len(m.varNames) == 0 {
		return nil
	}
	f := hclwrite.NewEmptyFile()
	root := f.Body()
	m.header(root)
	for i, name := range m.varNames {
		if i > 0 {
			root.AppendNewline()
		}
		v := root.AppendNewBlock("variable", []string{name}).Body()
		v.SetAttributeValue("default", cty.NullVal(cty.DynamicPseudoType))
	}
	return formatFile(f)
}

// --- JSON values --------------------------------------------------------------

// encodeJSON writes v as indented JSON with sorted object keys and a final
// newline. HTML characters are not escaped (Terraform does not need it).
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// providersJSON renders providers.auto.tfvars.json, or nil when the task
// uses no provider.
func (m *rootModule) providersJSON() ([]byte, error) {
	if len(m.providers) == 0 {
		return nil, nil
	}
	out := make(map[string]json.RawMessage, len(m.providers))
	for _, p := range m.providers {
		raw, err := ctyjson.SimpleJSONValue{Value: providerValue(p.Args)}.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("provider %s: %w", p.Name, err)
		}
		out[p.Name] = raw
	}
	return encodeJSON(out)
}

// providerValue turns a provider body into one object: arguments as they
// are, a nested block type that occurs once as an object, a repeated one as
// a list of objects (in source order).
func providerValue(pb config.ProviderBody) cty.Value {
	attrs := make(map[string]cty.Value, len(pb.Attrs)+len(pb.Blocks))
	for k, v := range pb.Attrs {
		attrs[k] = v
	}
	var order []string
	byType := map[string][]cty.Value{}
	for _, b := range pb.Blocks {
		if _, ok := byType[b.Type]; !ok {
			order = append(order, b.Type)
		}
		byType[b.Type] = append(byType[b.Type], providerValue(b.Body))
	}
	for _, t := range order {
		if vs := byType[t]; len(vs) == 1 {
			attrs[t] = vs[0]
		} else {
			attrs[t] = cty.TupleVal(vs)
		}
	}
	return cty.ObjectVal(attrs)
}

// variablesJSON renders variables.auto.tfvars.json, or nil when the task has
// no variables.
func (m *rootModule) variablesJSON() ([]byte, error) {
	if len(m.varNames) == 0 {
		return nil, nil
	}
	return encodeJSON(m.varValues)
}

// Lines that open the generated inputs file. The first identifies the file
// as ctsync's (see inputsFileOwner); the file is rewritten before every run.
var inputsPreamble = []string{
	"This file is generated by ctsync from the Consul data the task watches.",
	"Do not edit it: ctsync rewrites it before every run.",
}

// inputsTFVars renders terraform.tfvars, the task's Consul data, in the
// layout CTS uses: the preamble comment, then one variable per paragraph
// (services, catalog_services, consul_kv in the order described by
// inputOrder), each a map with one entry per line, keys quoted. services is
// always present; catalog_services and consul_kv exactly when the root
// module declares them. Absent collections are written empty, never null.
//
// Every key and string value is written by hclwrite from a cty value:
// quotes, backslashes, control characters, "${" and "%{" are escaped by the
// library, so nothing from Consul can become an HCL expression or a
// template. Keys are always quoted: hclwrite writes a key that is a valid
// identifier bare, and a bare "for" as the first key of an object starts a
// for expression, which would make the file unreadable.
//
// The file is laid out as hclwrite.Format would lay it out (equal signs of
// consecutive one-line entries aligned), but without running the formatter
// over it: the formatter measures every token of a large file again and
// again, and takes seconds for a thousand instances.
func (m *rootModule) inputsTFVars(in *task.Inputs) ([]byte, error) {
	if in == nil {
		in = &task.Inputs{}
	}
	if err := checkKeys(in); err != nil {
		return nil, err
	}
	f := hclwrite.NewEmptyFile()
	m.header(f.Body(), inputsPreamble...)
	var buf bytes.Buffer
	buf.Grow(512 + 700*len(in.Services) + 40*(len(in.CatalogServices)+len(in.ConsulKV)))
	buf.Write(formatFile(f))
	enc := newTextCache()
	for i, name := range m.inputOrder() {
		if i > 0 {
			buf.WriteByte('\n')
		}
		var entries []objEntry
		switch name {
		case "services":
			entries = make([]objEntry, 0, len(in.Services))
			for _, k := range sortedKeys(in.Services) {
				s := in.Services[k]
				entries = append(entries, enc.key(k).withBlock(enc.serviceEntries(&s)))
			}
		case "catalog_services":
			entries = make([]objEntry, 0, len(in.CatalogServices))
			for _, k := range sortedKeys(in.CatalogServices) {
				entries = append(entries, enc.key(k).with(enc.list(in.CatalogServices[k])))
			}
		case "consul_kv":
			entries = make([]objEntry, 0, len(in.ConsulKV))
			for _, k := range sortedKeys(in.ConsulKV) {
				entries = append(entries, enc.key(k).with(enc.str(in.ConsulKV[k])))
			}
		case "nodes":
			writeObjectList(&buf, name, len(in.Nodes), func(i int) []objEntry { return enc.nodeEntries(&in.Nodes[i]) })
			continue
		case "intentions":
			writeObjectList(&buf, name, len(in.Intentions), func(i int) []objEntry { return enc.intentionEntries(&in.Intentions[i]) })
			continue
		case "task_outputs":
			text, err := taskOutputsText(m.spec.OutputTasks(), in.TaskOutputs)
			if err != nil {
				return nil, err
			}
			buf.WriteString(name + " = ")
			buf.Write(text)
			buf.WriteByte('\n')
			continue
		}
		// An empty map is written over two lines, "{" and "}", as CTS does.
		buf.WriteString(name + " = {\n")
		writeEntries(&buf, 2, entries)
		buf.WriteString("}\n")
	}
	return buf.Bytes(), nil
}

// inputOrder is the order of the variables in terraform.tfvars, CTS's: the
// condition's variable first when the condition is used as module input,
// then the module_input variables, then services if nothing wrote it yet
// (it is always set, possibly empty).
func (m *rootModule) inputOrder() []string {
	var order []string
	seen := map[string]bool{}
	add := func(name string, ok bool) {
		if ok && !seen[name] {
			seen[name] = true
			order = append(order, name)
		}
	}
	c, mi := m.spec.Condition, m.spec.ModuleInput
	add("services", c.Services != nil && c.Services.UseAsModuleInput)
	add("catalog_services", m.catalogServices)
	add("consul_kv", c.ConsulKV != nil && c.ConsulKV.UseAsModuleInput)
	add("nodes", c.Nodes != nil && c.Nodes.UseAsModuleInput)
	add("intentions", c.Intentions != nil && c.Intentions.UseAsModuleInput)
	add("services", mi.Services != nil)
	add("consul_kv", m.consulKV)
	add("nodes", m.nodes)
	add("intentions", m.intentions)
	add("task_outputs", m.taskOutputs)
	add("services", true)
	return order
}

// objEntry is one "key = value" line of an object, or one key whose value
// is an object written over several lines.
type objEntry struct {
	key   []byte     // the key as written
	width int        // its width in columns, as hclwrite counts them
	value []byte     // a value written on the key's line
	block []objEntry // or the entries of a non-empty object value
}

func (e objEntry) with(value []byte) objEntry      { e.value = value; return e }
func (e objEntry) withBlock(b []objEntry) objEntry { e.block = b; return e }
func identKey(name string) objEntry                { return objEntry{key: []byte(name), width: len(name)} }

// textCache writes strings and keys for one inputs file, each distinct one
// once: instances repeat most of their strings (datacenter, status, node
// addresses, meta keys), and hclwrite's escaping is the costly part.
type textCache struct {
	strs map[string][]byte
	keys map[string]objEntry
}

func newTextCache() *textCache {
	return &textCache{strs: map[string][]byte{}, keys: map[string]objEntry{}}
}

// str is s as a quoted HCL string, escaped by hclwrite.
func (c *textCache) str(s string) []byte {
	b, ok := c.strs[s]
	if !ok {
		b = hclwrite.TokensForValue(cty.StringVal(s)).Bytes()
		c.strs[s] = b
	}
	return b
}

// key is k as a quoted string key, escaped by hclwrite.
func (c *textCache) key(k string) objEntry {
	if e, ok := c.keys[k]; ok {
		return e
	}
	toks := hclwrite.TokensForValue(cty.StringVal(k))
	b := toks.Bytes()
	w := len(b)
	for _, ch := range b {
		if ch >= utf8.RuneSelf {
			w = toks.Columns() // grapheme clusters, as the formatter counts
			break
		}
	}
	e := objEntry{key: b, width: w}
	c.keys[k] = e
	return e
}

// strMap is a map of strings as an object value: "{}" when empty, else one
// entry per key in sorted order.
func (c *textCache) strMap(e objEntry, m map[string]string) objEntry {
	if len(m) == 0 {
		return e.with([]byte("{}"))
	}
	block := make([]objEntry, 0, len(m))
	for _, k := range sortedKeys(m) {
		block = append(block, c.key(k).with(c.str(m[k])))
	}
	return e.withBlock(block)
}

// list is a list of strings on one line; a nil list is written empty.
func (c *textCache) list(l []string) []byte {
	n := 2
	for _, v := range l {
		n += len(c.str(v)) + 2
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, v := range l {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, c.str(v)...)
	}
	return append(b, ']')
}

// writeEntries writes an object's entries at the given indentation. A run
// of one-line entries is one alignment group: its equal signs line up one
// column after its longest key. An entry with an object value ends the run.
func writeEntries(buf *bytes.Buffer, indent int, entries []objEntry) {
	pad := func(n int) {
		for ; n > 0; n-- {
			buf.WriteByte(' ')
		}
	}
	for i := 0; i < len(entries); {
		j, w := i, 0
		for ; j < len(entries) && entries[j].block == nil; j++ {
			w = max(w, entries[j].width)
		}
		for _, e := range entries[i:j] {
			pad(indent)
			buf.Write(e.key)
			pad(w - e.width + 1)
			buf.WriteString("= ")
			buf.Write(e.value)
			buf.WriteByte('\n')
		}
		if j < len(entries) {
			e := entries[j]
			pad(indent)
			buf.Write(e.key)
			buf.WriteString(" = {\n")
			writeEntries(buf, indent+2, e.block)
			pad(indent)
			buf.WriteString("}\n")
			j++
		}
		i = j
	}
}

// serviceEntries is one services entry: the object of the CTS service
// definition protocol, fields in servicesFields order.
func (c *textCache) serviceEntries(s *task.Service) []objEntry {
	return []objEntry{
		identKey("id").with(c.str(s.ID)),
		identKey("name").with(c.str(s.Name)),
		identKey("kind").with(c.str(s.Kind)),
		identKey("address").with(c.str(s.Address)),
		identKey("port").with(strconv.AppendInt(nil, int64(s.Port), 10)),
		c.strMap(identKey("meta"), s.Meta),
		identKey("tags").with(c.list(s.Tags)),
		identKey("namespace").with(c.str(s.Namespace)),
		identKey("status").with(c.str(s.Status)),
		identKey("node").with(c.str(s.Node)),
		identKey("node_id").with(c.str(s.NodeID)),
		identKey("node_address").with(c.str(s.NodeAddress)),
		identKey("node_datacenter").with(c.str(s.NodeDatacenter)),
		c.strMap(identKey("node_tagged_addresses"), s.NodeTaggedAddresses),
		c.strMap(identKey("node_meta"), s.NodeMeta),
		c.strMap(identKey("cts_user_defined_meta"), s.CTSUserDefinedMeta),
	}
}

// writeObjectList writes `name = [ { ... }, ... ]`, one object per element
// (entries(i) are the fields of element i); an empty list is "[]".
func writeObjectList(buf *bytes.Buffer, name string, n int, entries func(i int) []objEntry) {
	if n == 0 {
		buf.WriteString(name + " = []\n")
		return
	}
	buf.WriteString(name + " = [\n")
	for i := 0; i < n; i++ {
		buf.WriteString("  {\n")
		writeEntries(buf, 4, entries(i))
		buf.WriteString("  },\n")
	}
	buf.WriteString("]\n")
}

// nodeEntries is one nodes element, fields in nodesFields order.
func (c *textCache) nodeEntries(n *task.Node) []objEntry {
	return []objEntry{
		identKey("id").with(c.str(n.ID)),
		identKey("node").with(c.str(n.Node)),
		identKey("address").with(c.str(n.Address)),
		identKey("datacenter").with(c.str(n.Datacenter)),
		c.strMap(identKey("tagged_addresses"), n.TaggedAddresses),
		c.strMap(identKey("meta"), n.Meta),
	}
}

// intentionEntries is one intentions element, fields in intentionsFields
// order.
func (c *textCache) intentionEntries(in *task.Intention) []objEntry {
	return []objEntry{
		identKey("source_name").with(c.str(in.SourceName)),
		identKey("source_namespace").with(c.str(in.SourceNamespace)),
		identKey("source_partition").with(c.str(in.SourcePartition)),
		identKey("source_peer").with(c.str(in.SourcePeer)),
		identKey("source_sameness_group").with(c.str(in.SourceSamenessGroup)),
		identKey("source_type").with(c.str(in.SourceType)),
		identKey("destination_name").with(c.str(in.DestinationName)),
		identKey("destination_namespace").with(c.str(in.DestinationNamespace)),
		identKey("destination_partition").with(c.str(in.DestinationPartition)),
		identKey("action").with(c.str(in.Action)),
		identKey("permissions").with(c.str(in.Permissions)),
		identKey("precedence").with(strconv.AppendInt(nil, int64(in.Precedence), 10)),
		identKey("description").with(c.str(in.Description)),
		c.strMap(identKey("meta"), in.Meta),
	}
}

// checkKeys refuses inputs with two map keys that Terraform would see as
// one: the encoder writes each invalid UTF-8 byte as U+FFFD, and Terraform
// normalises text to Unicode normal form C, so "\xe2" and "\xe3", or "é"
// written composed and decomposed, become the same key, and Terraform would
// silently keep only the last of the two entries. Failing here names both
// keys instead.
func checkKeys(in *task.Inputs) error {
	if err := distinctKeys("services", in.Services); err != nil {
		return err
	}
	for _, k := range sortedKeys(in.Services) {
		s := in.Services[k]
		for field, m := range map[string]map[string]string{"meta": s.Meta, "node_meta": s.NodeMeta,
			"node_tagged_addresses": s.NodeTaggedAddresses, "cts_user_defined_meta": s.CTSUserDefinedMeta} {
			if err := distinctKeys(fmt.Sprintf("services[%q].%s", k, field), m); err != nil {
				return err
			}
		}
	}
	if err := distinctKeys("catalog_services", in.CatalogServices); err != nil {
		return err
	}
	for i, n := range in.Nodes {
		for field, m := range map[string]map[string]string{"meta": n.Meta, "tagged_addresses": n.TaggedAddresses} {
			if err := distinctKeys(fmt.Sprintf("nodes[%d].%s", i, field), m); err != nil {
				return err
			}
		}
	}
	for i, in := range in.Intentions {
		if err := distinctKeys(fmt.Sprintf("intentions[%d].meta", i), in.Meta); err != nil {
			return err
		}
	}
	return distinctKeys("consul_kv", in.ConsulKV)
}

// asWrittenText is s as the inputs encoder (hclwrite, like encoding/json)
// writes it: each byte that is not part of valid UTF-8 becomes U+FFFD.
func asWrittenText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func distinctKeys[V any](where string, m map[string]V) error {
	if len(m) < 2 {
		return nil
	}
	seen := make(map[string]string, len(m))
	for _, k := range sortedKeys(m) {
		n := norm.NFC.String(asWrittenText(k))
		if other, dup := seen[n]; dup {
			return fmt.Errorf("%s: the keys %+q and %+q are the same key once written for Terraform "+
				"(invalid UTF-8 becomes U+FFFD and text is normalised to Unicode NFC); Terraform cannot receive both", where, other, k)
		}
		seen[n] = k
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
