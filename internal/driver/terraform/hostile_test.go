package terraform

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/terraform-exec/tfexec"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"github.com/ctsync/ctsync/internal/task"
)

// hostile are strings that would break or inject into HCL if they were ever
// written into a .tf or .tfvars file unescaped: quotes, interpolation and
// template directives, a function call, heredoc markers, backslashes, line
// breaks, control characters, unicode, and keywords that change the meaning
// of a bare object key ("for" starts a for expression).
var hostile = []string{
	`plain`,
	`quote " inside`,
	`${var.secret}`,
	`${file("/etc/passwd")}`,
	`$${already_escaped}`,
	`%{ if true }directive%{ endif }`,
	`back\slash \\ and \n as text`,
	"new\nline\r\nand\ttab",
	"\"}\nresource \"terraform_data\" \"pwned\" {\n  input = \"x\"\n}\n#",
	"<<EOT\nheredoc\nEOT",
	"ünïcödé 日本語 🚀 \u2028 \u2029 \u00a0",
	"control \x01\x1f chars",
	`<script>&amp;</script>`,
	`for`,
	`null`,
	``,
}

func hostileInputs() *task.Inputs {
	in := &task.Inputs{Services: map[string]task.Service{}, ConsulKV: map[string]string{}}
	for i, h := range hostile {
		s := task.Service{
			ID: "id-" + h, Name: h, Kind: h, Address: h, Port: 1000 + i,
			Meta:                map[string]string{h: h, "k": h},
			Tags:                []string{h, h + "2"},
			Namespace:           h,
			Status:              "passing",
			Node:                h,
			NodeID:              h,
			NodeAddress:         h,
			NodeDatacenter:      h,
			NodeTaggedAddresses: map[string]string{"lan": h},
			NodeMeta:            map[string]string{h: "v"},
			CTSUserDefinedMeta:  map[string]string{"m": h},
		}
		in.Services["key "+h] = s
		in.ConsulKV["path/"+h] = h
	}
	return in
}

// hostileOptions is a task whose every configurable string is hostile too.
func hostileOptions(t *testing.T, dir, bin string) Options {
	o := localTask(t, dir, "hostile", bin)
	o.Spec.Description = hostile[8] + hostile[7] // resource injection, line breaks
	o.Spec.Variables = map[string]string{"note": `"quote \" $${x} %%{y} back\\slash\nnewline ünï"`}
	o.Spec.ModuleInput.ConsulKV = nil
	o.Spec.Condition.ConsulKV = nil
	return o
}

const hostileModule = `
variable "services" {
  type = any
}

variable "consul_kv" {
  type = map(string)
}

variable "note" {
  type = string
}

resource "terraform_data" "all" {
  input = {
    services  = var.services
    consul_kv = var.consul_kv
    note      = var.note
  }
}

output "all_json" {
  value = jsonencode({ services = var.services, consul_kv = var.consul_kv, note = var.note })
}
`

// The inputs file, read as Terraform reads a .tfvars file (HCL native
// syntax, no evaluation context: a template or function call would be an
// error), holds exactly the inputs given, and the generated .tf files never
// depend on the inputs.
func TestHostileInputsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	o := hostileOptions(t, dir, "/nonexistent/terraform")
	o.Spec.ModuleInput.ConsulKV = &task.ConsulKVSelector{Path: "path/", Recurse: true}
	d := mustNew(t, o)
	if _, err := d.writeRootModule(); err != nil {
		t.Fatal(err)
	}
	before := readTF(t, d.WorkDir())
	in := hostileInputs()
	if err := d.writeInputs(in); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(d.WorkDir(), fileInputs))
	if err != nil {
		t.Fatal(err)
	}
	file, diags := hclsyntax.ParseConfig(b, fileInputs, hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatalf("%s\n%s", diags, b)
	}
	attrs, diags := file.Body.JustAttributes()
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	obj := map[string]json.RawMessage{}
	for name, attr := range attrs {
		v, diags := attr.Expr.Value(nil)
		if diags.HasErrors() {
			t.Fatalf("%s: %s", name, diags)
		}
		raw, err := ctyjson.SimpleJSONValue{Value: v}.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		obj[name] = raw
	}
	if !reflect.DeepEqual(sortedKeys(obj), []string{"consul_kv", "services"}) {
		t.Fatalf("variables %v, want consul_kv and services", sortedKeys(obj))
	}
	asJSON, _ := json.Marshal(obj)
	var got task.Inputs
	dec := json.NewDecoder(bytes.NewReader(asJSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, in) {
		t.Fatalf("inputs do not round-trip:\n got %#v\nwant %#v", got, *in)
	}
	if after := readTF(t, d.WorkDir()); !reflect.DeepEqual(before, after) {
		t.Fatal("writing inputs changed a .tf file")
	}

	// The hostile description stays a comment: main.tf holds exactly the
	// terraform block and the module call.
	src, _ := os.ReadFile(filepath.Join(d.WorkDir(), fileMain))
	f, diags := hclsyntax.ParseConfig(src, fileMain, hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	var blocks []string
	for _, blk := range f.Body.(*hclsyntax.Body).Blocks {
		blocks = append(blocks, blk.Type)
	}
	if !reflect.DeepEqual(blocks, []string{"terraform", "module"}) {
		t.Fatalf("main.tf blocks = %v\n%s", blocks, src)
	}
}

func readTF(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.tf"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m[filepath.Base(f)] = string(b)
	}
	return m
}

// Real Terraform receives every hostile value byte for byte, and nothing
// hostile is ever evaluated.
func TestHostileInputsReachModuleVerbatim(t *testing.T) {
	bin := needTerraform(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	o := hostileOptions(t, dir, bin)
	o.Spec.Module = writeModule(t, dir, "mod-hostile", map[string]string{"main.tf": hostileModule})
	o.Spec.ModuleInput.ConsulKV = &task.ConsulKVSelector{Path: "path/", Recurse: true}
	d := mustNew(t, o)
	// A root output (test only) exposes the module's output to `terraform output`.
	if err := os.WriteFile(filepath.Join(d.WorkDir(), "zz_test_outputs.tf"),
		[]byte("output \"all_json\" {\n  value = module.hostile.all_json\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	in := hostileInputs()
	res, err := d.Apply(ctx, run("hostile"), in)
	if err != nil {
		t.Fatal(err)
	}
	if res.Add != 1 {
		t.Fatalf("exactly one resource must be created (nothing injected): %+v", res)
	}

	tf, err := tfexec.NewTerraform(d.WorkDir(), bin)
	if err != nil {
		t.Fatal(err)
	}
	outs, err := tf.Output(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var encoded string
	if err := json.Unmarshal(outs["all_json"].Value, &encoded); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Services map[string]task.Service `json:"services"`
		ConsulKV map[string]string       `json:"consul_kv"`
		Note     string                  `json:"note"`
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(encoded)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("%v in %s", err, encoded)
	}
	if !reflect.DeepEqual(got.Services, in.Services) {
		for k, want := range in.Services {
			if !reflect.DeepEqual(got.Services[k], want) {
				t.Errorf("service %q:\n got %#v\nwant %#v", k, got.Services[k], want)
			}
		}
		t.Fatalf("services differ (got %d, want %d)", len(got.Services), len(in.Services))
	}
	if !reflect.DeepEqual(got.ConsulKV, in.ConsulKV) {
		t.Fatalf("consul_kv differs:\n got %#v\nwant %#v", got.ConsulKV, in.ConsulKV)
	}
	if want := "quote \" ${x} %{y} back\\slash\nnewline ünï"; got.Note != want {
		t.Fatalf("note = %q, want %q", got.Note, want)
	}
}
