package terraform

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	hcljson "github.com/hashicorp/hcl/v2/json"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"github.com/ctsync/ctsync/internal/task"
)

// FuzzInputsJSON writes arbitrary Consul data as terraform.tfvars.json and
// reads it back the way Terraform reads a .tfvars.json file (HCL's JSON
// syntax, attributes evaluated without an evaluation context, so strings
// are literals, never templates). Properties:
//   - nothing panics and the file is always valid JSON;
//   - Terraform's reading equals a plain JSON reading: no "${...}",
//     "%{...}", "{{ }}", backslash or quote in any string or key is
//     interpreted. The one difference: Terraform (cty) normalises every
//     string, keys included, to Unicode normal form C, so text in another
//     form (e.g. "e" + U+0301) reaches a module composed ("é");
//   - every string reaches Terraform exactly when it is valid UTF-8, and
//     as JSON's U+FFFD replacement otherwise;
//   - two keys of one map that Terraform would see as one (equal once
//     invalid UTF-8 becomes U+FFFD and text is in normal form C) are
//     refused by the driver with an error naming both, never written.
func FuzzInputsJSON(f *testing.F) {
	f.Add("web-1", "web", "tag", "k", "v", "cfg/key", "value", 8080)
	f.Add(`${file("/etc/passwd")}`, "%{ if true }x%{ endif }", `{{ key "x" }}`, "${k}", `"\`, "$${x}", "\x00\xff", -1)
	f.Add("", "", "", "", "", "", "", 0)
	f.Add("\u2028\u2029", "<script>", "&amp;", "\ufeff", "\r\n", "\\u0041", strings.Repeat("€", 1000), 1<<53+1)
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
		data, err := m.inputsJSON(in)
		if err != nil {
			// Refused: two keys of one map would reach Terraform as one.
			// That must really be the case, in some map of the inputs.
			if !strings.Contains(err.Error(), "are the same key once written for Terraform") || !inputsCollide(in) {
				t.Fatalf("inputsJSON: %v", err)
			}
			return
		}
		var plain map[string]any
		if err := json.Unmarshal(data, &plain); err != nil {
			t.Fatalf("not valid JSON: %v\n%s", err, data)
		}

		// Terraform's reading of the file.
		file, diags := hcljson.Parse(data, fileInputs)
		if diags.HasErrors() {
			t.Fatalf("HCL JSON parser rejects the file: %s\n%s", diags.Error(), data)
		}
		attrs, diags := file.Body.JustAttributes()
		if diags.HasErrors() {
			t.Fatalf("attributes: %s", diags.Error())
		}
		for name, attr := range attrs {
			v, diags := attr.Expr.Value(nil)
			if diags.HasErrors() {
				// Colliding keys are refused before Terraform sees them.
				t.Fatalf("evaluating %s: %s", name, diags.Error())
			}
			b, err := ctyjson.SimpleJSONValue{Value: v}.MarshalJSON()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var tf any
			if err := json.Unmarshal(b, &tf); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			// Terraform (cty) keeps every string in Unicode normal form C:
			// the one change it makes.
			if !reflect.DeepEqual(tf, nfcAll(plain[name])) {
				t.Fatalf("Terraform reads %s differently from JSON:\n terraform %v\n json      %v", name, tf, plain[name])
			}
		}
		if len(attrs) != 3 {
			t.Fatalf("%d variables, want services, catalog_services, consul_kv", len(attrs))
		}

		// Every string arrives as written (or as JSON's replacement).
		kv, _ := plain["consul_kv"].(map[string]any)
		if key != kvKey && jsonText(key) != jsonText(kvKey) {
			if got := kv[jsonText(kvKey)]; got != jsonText(kvVal) {
				t.Fatalf("consul_kv[%q] = %q, want %q", kvKey, got, jsonText(kvVal))
			}
			if got := kv[jsonText(key)]; got != jsonText(val) {
				t.Fatalf("consul_kv[%q] = %q, want %q", key, got, jsonText(val))
			}
		}
		svcs, _ := plain["services"].(map[string]any)
		s, _ := svcs[jsonText(id+"."+name)].(map[string]any)
		if id+"."+name != "nil-maps" && jsonText(id+"."+name) != "nil-maps" {
			if s == nil || s["id"] != jsonText(id) || s["name"] != jsonText(name) || s["address"] != jsonText(val) {
				t.Fatalf("service entry changed: %v", s)
			}
			if meta, _ := s["meta"].(map[string]any); meta[jsonText(key)] != jsonText(val) {
				t.Fatalf("meta changed: %v", meta)
			}
		}
		nilMaps, _ := svcs["nil-maps"].(map[string]any)
		for _, f := range []string{"meta", "tags", "node_meta", "node_tagged_addresses", "cts_user_defined_meta"} {
			if nilMaps[f] == nil && jsonText(id+"."+name) != "nil-maps" {
				t.Fatalf("%s written as null, not empty", f)
			}
		}
	})
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
