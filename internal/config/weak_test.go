package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	hcl1 "github.com/hashicorp/hcl"
	"github.com/mitchellh/mapstructure"

	"github.com/ctsync/ctsync/internal/task"
)

// The weak-typing differential test. For each value written for a field of
// each kind (string, list of strings, bool, whole number), the CTS side is
// what CTS does with it: HCL 1 decodes the literal into Go values, then
// mapstructure, weakly typed, with the hook that unwraps a one-element
// list, decodes that into the field's Go type. ctsync loads the same value
// written in each configuration form — HCL read by HCL 1, HCL that only
// HCL 2's native syntax reads, JSON — and in a task file. Whether it loads,
// and what it loads, must agree with the CTS side in every form.

// ctsWeak decodes literal (HCL 1 syntax) into a value of out's type as CTS
// does; ok is false when CTS refuses it.
func ctsWeak(t *testing.T, literal string, out any) bool {
	t.Helper()
	var raw map[string]any
	if err := hcl1.Decode(&raw, "v = "+literal); err != nil {
		t.Fatalf("HCL 1 does not read %s: %v", literal, err)
	}
	unwrap := func(from, to reflect.Type, data any) (any, error) {
		if from.Kind() == reflect.Slice && to.Kind() != reflect.Slice && to.Kind() != reflect.Array {
			switch d := data.(type) {
			case []any:
				if len(d) == 1 {
					return d[0], nil
				}
			case []map[string]any:
				if len(d) == 1 {
					return d[0], nil
				}
			}
		}
		return data, nil
	}
	d, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{DecodeHook: unwrap, WeaklyTypedInput: true, Result: out})
	if err != nil {
		t.Fatal(err)
	}
	return d.Decode(raw["v"]) == nil
}

// jsonOf writes an HCL 1 literal as JSON (the same value).
func jsonOf(t *testing.T, literal string) string {
	t.Helper()
	var raw map[string]any
	if err := hcl1.Decode(&raw, "v = "+literal); err != nil {
		t.Fatal(err)
	}
	v := raw["v"]
	if m, ok := v.([]map[string]any); ok && len(m) == 1 { // HCL 1's object
		v = m[0]
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// weakField is one field: where it is written and how its value is read
// back from a task.
type weakField struct {
	name string
	// cond and attr place the value: condition "<cond>" { <attr> = v }.
	cond, attr string
	// other is the rest of the condition block (HCL).
	other, otherJSON string
	get              func(task.Spec) any
	zero             func() any // a pointer to the Go type CTS decodes into
	// invalid lists values that decode but that a rule of the field
	// refuses (an empty regexp or names list, a negative number): not a
	// matter of typing.
	invalid []string
}

var weakFields = []weakField{
	{name: "string", cond: "catalog-services", attr: "regexp",
		get:  func(s task.Spec) any { return s.Condition.CatalogServices.Regexp },
		zero: func() any { return new(string) }, invalid: []string{`""`}},
	{name: "list", cond: "services", attr: "names",
		get:  func(s task.Spec) any { return s.Condition.Services.Names },
		zero: func() any { return new([]string) }, invalid: []string{`""`, `[]`}},
	{name: "bool", cond: "catalog-services", attr: "use_as_module_input", other: `regexp = "web"`, otherJSON: `"regexp": "web",`,
		get:  func(s task.Spec) any { return s.Condition.CatalogServices.UseAsModuleInput },
		zero: func() any { return new(bool) }},
	{name: "number", cond: "", attr: "parallelism",
		get:  func(s task.Spec) any { return s.Parallelism },
		zero: func() any { return new(int) }, invalid: []string{`-3`}},
}

var weakValues = []string{
	`"web"`, `["web"]`, `["web", "api"]`, `[]`, `5`, `0`, `1`, `-3`, `true`, `false`, `"true"`, `"1"`, `"0"`,
	`"t"`, `"yes"`, `""`, `"0x10"`, `"12"`, `[5]`, `[true]`, `[["web"]]`, `{ a = "b" }`, `[{ a = "b" }]`,
}

// forms renders a task with the field's value in every configuration form.
func (f weakField) forms(t *testing.T, literal string) map[string]string {
	hclBody := func(v string) string {
		if f.cond == "" {
			return fmt.Sprintf("  %s = %s\n  condition \"services\" {\n    names = [\"web\"]\n  }\n", f.attr, v)
		}
		return fmt.Sprintf("  condition %q {\n    %s\n    %s = %s\n  }\n", f.cond, f.other, f.attr, v)
	}
	js := jsonOf(t, literal)
	jsonBody := fmt.Sprintf(`"condition": {%q: {%s %q: %s}}`, f.cond, f.otherJSON, f.attr, js)
	if f.cond == "" {
		jsonBody = fmt.Sprintf(`%q: %s, "condition": {"services": {"names": ["web"]}}`, f.attr, js)
	}
	return map[string]string{
		"hcl1.hcl": "task {\n  name = \"t\"\n  module = \"m\"\n" + hclBody(literal) + "}\n",
		// HCL 1 does not read a conditional: this file is read with HCL
		// 2's native syntax.
		"hcl2.hcl":  "task {\n  name = \"t\"\n  module = \"m\"\n  description = true ? \"native\" : \"\"\n" + hclBody(literal) + "}\n",
		"json.json": `{"task": {"name": "t", "module": "m", ` + jsonBody + `}}`,
	}
}

func TestWeakTypingMatchesCTS(t *testing.T) {
	clearConsulEnv(t)
	for _, f := range weakFields {
		for _, lit := range weakValues {
			if slices.Contains(f.invalid, lit) {
				continue
			}
			want := f.zero()
			ctsOK := ctsWeak(t, lit, want)
			for file, src := range f.forms(t, lit) {
				t.Run(f.name+"/"+lit+"/"+file, func(t *testing.T) {
					dir := t.TempDir()
					cfg, err := Load([]string{writeFile(t, dir, file, src)})
					if file == "hcl2.hcl" && err == nil && cfg.Tasks[0].Description != "native" {
						t.Fatalf("not read with HCL 2's native syntax")
					}
					switch {
					case ctsOK && err != nil:
						t.Fatalf("CTS loads it, ctsync refuses it: %v\n%s", err, src)
					case !ctsOK && err == nil:
						t.Fatalf("CTS refuses it, ctsync loads it (%#v)\n%s", f.get(cfg.Tasks[0]), src)
					case err != nil:
						// Refused: the error names the file, line and field.
						if !strings.Contains(err.Error(), file+":") || !strings.Contains(err.Error(), f.attr) {
							t.Fatalf("error does not name the file, line and field: %v", err)
						}
						return
					}
					got := f.get(cfg.Tasks[0])
					if p, ok := got.(*string); ok {
						got = *p
					}
					if w := reflect.ValueOf(want).Elem().Interface(); !reflect.DeepEqual(got, w) {
						t.Fatalf("ctsync loaded %#v, CTS %#v", got, w)
					}

					// The same task in a task file (task create -task-file).
					spec, err := LoadTaskFile(writeFile(t, dir, "task-"+file, src))
					if err != nil {
						t.Fatalf("task file: %v", err)
					}
					if g := f.get(spec); !reflect.DeepEqual(g, f.get(cfg.Tasks[0])) {
						t.Fatalf("task file loaded %#v, config file %#v", g, f.get(cfg.Tasks[0]))
					}
				})
			}
		}
	}
}

// CTS's module input scenario writes the catalog-services regexp as a
// one-element list; it loads, in a configuration file and in a task file.
func TestRegexpAsOneElementList(t *testing.T) {
	clearConsulEnv(t)
	src := "task {\n  name = \"t\"\n  module = \"m\"\n  condition \"catalog-services\" {\n    regexp = [\"web\"]\n    use_as_module_input = false\n  }\n}\n"
	dir := t.TempDir()
	cfg := mustLoad(t, writeFile(t, dir, "c.hcl", src))
	if c := cfg.Tasks[0].Condition.CatalogServices; c == nil || c.Regexp != "web" || c.UseAsModuleInput {
		t.Fatalf("condition %+v", c)
	}
	spec, err := LoadTaskFile(writeFile(t, dir, "task.hcl", src))
	if err != nil || spec.Condition.CatalogServices.Regexp != "web" {
		t.Fatalf("task file: %+v %v", spec.Condition.CatalogServices, err)
	}
}
