package terraform

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"github.com/ctsync/ctsync/internal/task"
)

// FuzzInputsTFVars writes arbitrary Consul data as terraform.tfvars and
// reads it back the way Terraform reads a .tfvars file (HCL native syntax,
// attributes evaluated without an evaluation context, so a template or a
// function call would be an error, never evaluated). Properties:
//   - nothing panics and the file always parses, with exactly the
//     variables the module declares and nothing else;
//   - Terraform's reading equals a plain JSON encoding of the same inputs:
//     no "${...}", "%{...}", "{{ }}", "for", keyword, backslash or quote in
//     any string or key is interpreted. The one difference: Terraform (cty)
//     normalises every string, keys included, to Unicode normal form C, so
//     text in another form (e.g. "e" + U+0301) reaches a module composed;
//   - every string reaches Terraform exactly when it is valid UTF-8, and
//     as U+FFFD replacements otherwise (as JSON would write it);
//   - two keys of one map that Terraform would see as one (equal once
//     invalid UTF-8 becomes U+FFFD and text is in normal form C) are
//     refused by the driver with an error naming both, never written.
func FuzzInputsTFVars(f *testing.F) {
	f.Add("web-1", "web", "tag", "k", "v", "cfg/key", "value", 8080)
	f.Add(`${file("/etc/passwd")}`, "%{ if true }x%{ endif }", `{{ key "x" }}`, "${k}", `"\`, "$${x}", "\x00\xff", -1)
	f.Add("", "", "", "", "", "", "", 0)
	f.Add("\u2028\u2029", "<script>", "&amp;", "\ufeff", "\r\n", "\\u0041", strings.Repeat("€", 1000), 1<<53+1)
	f.Add("for", "null", "true", "for", "if", "for x in y", "$$${x}", 1)
	m := &rootModule{catalogServices: true, consulKV: true}
	f.Fuzz(func(t *testing.T, id, name, tag, key, val, kvKey, kvVal string, port int) {
		in := &task.Inputs{
			Services: map[string]task.Service{
				id + "." + name: {ID: id, Name: name, Address: val, Port: port, Tags: []string{tag, val},
					Meta: map[string]string{key: val}, NodeMeta: map[string]string{val: key},
					CTSUserDefinedMeta: map[string]string{key: kvVal}, Status: "passing", Node: name},
				"nil-maps": {ID: kvKey},
			},
			CatalogServices: map[string][]string{name: {tag}, kvKey: nil},
			ConsulKV:        map[string]string{kvKey: kvVal, key: val},
		}
		data, err := m.inputsTFVars(in)
		if err != nil {
			// Refused: two keys of one map would reach Terraform as one.
			// That must really be the case, in some map of the inputs.
			if !strings.Contains(err.Error(), "are the same key once written for Terraform") || !inputsCollide(in) {
				t.Fatalf("inputsTFVars: %v", err)
			}
			return
		}
		plain := plainInputs(t, in)
		if formatted := hclwrite.Format(data); !bytes.Equal(formatted, data) {
			t.Fatalf("the file is not laid out as hclwrite.Format lays it out:\n--- written ---\n%s\n--- formatted ---\n%s", data, formatted)
		}

		// Terraform's reading of the file.
		file, diags := hclsyntax.ParseConfig(data, fileInputs, hcl.InitialPos)
		if diags.HasErrors() {
			t.Fatalf("HCL parser rejects the file: %s\n%s", diags.Error(), data)
		}
		attrs, diags := file.Body.JustAttributes()
		if diags.HasErrors() {
			t.Fatalf("attributes: %s\n%s", diags.Error(), data)
		}
		for name, attr := range attrs {
			v, diags := attr.Expr.Value(nil)
			if diags.HasErrors() {
				t.Fatalf("evaluating %s: %s\n%s", name, diags.Error(), data)
			}
			b, err := ctyjson.SimpleJSONValue{Value: v}.MarshalJSON()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var tf any
			if err := json.Unmarshal(b, &tf); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			// Every string and key arrives as written (invalid UTF-8 as
			// U+FFFD), nil collections as empty ones; Terraform (cty) keeps
			// every string in Unicode normal form C: the one change it makes.
			if !reflect.DeepEqual(tf, nfcAll(plain[name])) {
				t.Fatalf("Terraform reads %s differently from the inputs:\n terraform %v\n inputs    %v\n%s", name, tf, plain[name], data)
			}
		}
		if len(attrs) != 3 {
			t.Fatalf("%d variables, want services, catalog_services, consul_kv", len(attrs))
		}
	})
}

// plainInputs is the inputs as a plain JSON encoding reads them: nil maps
// and lists are empty, invalid UTF-8 is U+FFFD.
func plainInputs(t *testing.T, in *task.Inputs) map[string]any {
	t.Helper()
	services := map[string]task.Service{}
	for k, s := range in.Services {
		s.Meta = nonNilMap(s.Meta)
		s.NodeTaggedAddresses = nonNilMap(s.NodeTaggedAddresses)
		s.NodeMeta = nonNilMap(s.NodeMeta)
		s.CTSUserDefinedMeta = nonNilMap(s.CTSUserDefinedMeta)
		if s.Tags == nil {
			s.Tags = []string{}
		}
		services[k] = s
	}
	cs := map[string][]string{}
	for k, tags := range in.CatalogServices {
		if tags == nil {
			tags = []string{}
		}
		cs[k] = tags
	}
	b, err := json.Marshal(map[string]any{"services": services, "catalog_services": cs, "consul_kv": nonNilMap(in.ConsulKV)})
	if err != nil {
		t.Fatal(err)
	}
	var plain map[string]any
	if err := json.Unmarshal(b, &plain); err != nil {
		t.Fatal(err)
	}
	return plain
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// jsonText is what JSON makes of a string: invalid UTF-8 bytes become
// U+FFFD, one per byte.
func jsonText(s string) string {
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

// nfcAll returns v (decoded JSON) with every string and object key in
// Unicode normal form C.
func nfcAll(v any) any {
	switch x := v.(type) {
	case string:
		return norm.NFC.String(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = nfcAll(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[norm.NFC.String(k)] = nfcAll(e)
		}
		return out
	}
	return v
}

// inputsCollide reports whether two keys of one map in the inputs are
// equal once written as JSON and normalised to NFC.
func inputsCollide(in *task.Inputs) bool {
	collide := func(keys []string) bool {
		seen := map[string]bool{}
		for _, k := range keys {
			n := norm.NFC.String(jsonText(k))
			if seen[n] {
				return true
			}
			seen[n] = true
		}
		return false
	}
	keysOf := func(m map[string]string) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		return ks
	}
	var svcKeys, catKeys []string
	for k, s := range in.Services {
		svcKeys = append(svcKeys, k)
		for _, m := range []map[string]string{s.Meta, s.NodeMeta, s.NodeTaggedAddresses, s.CTSUserDefinedMeta} {
			if collide(keysOf(m)) {
				return true
			}
		}
	}
	for k := range in.CatalogServices {
		catKeys = append(catKeys, k)
	}
	return collide(svcKeys) || collide(catKeys) || collide(keysOf(in.ConsulKV))
}
