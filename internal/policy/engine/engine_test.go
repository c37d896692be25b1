package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/policy"
	"github.com/ctsync/ctsync/internal/task"
)

// example is the policy docs/safety.md shows.
var example = filepath.Join("..", "..", "..", "examples", "policies", "no-open-cidr.rego")

func write(t *testing.T, name, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func readPlan(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestExampleDeniesOpenCIDR(t *testing.T) {
	set, err := Load(context.Background(), []string{example})
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Task: policy.TaskInput(task.Spec{Name: "firewall", Module: "./modules/fw"}), Trigger: "health/service/web"}
	got, err := set.Eval(context.Background(), readPlan(t, "open-plan.json"), in)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"aws_security_group.lb opens ::/0 to everyone (task firewall)",
		"aws_security_group_rule.web_ingress opens 0.0.0.0/0 to everyone (task firewall)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("deny = %q, want %q", got, want)
	}
	// A rule only deleted, or only private ranges: nothing to deny.
	got, err = set.Eval(context.Background(), readPlan(t, "closed-plan.json"), in)
	if err != nil || len(got) != 0 {
		t.Errorf("closed plan: deny = %q, %v; want none", got, err)
	}
}

func TestInputDocument(t *testing.T) {
	p := write(t, "in.rego", `package ctsync
deny contains sprintf("%s|%s|%s|%s|%s|%s", [input.task.name, input.task.module, input.task.condition,
	input.task.variables.port, concat(",", input.task.providers), input.trigger]) if input.plan.format_version == "1.2"
`)
	set, err := Load(context.Background(), []string{p})
	if err != nil {
		t.Fatal(err)
	}
	spec := task.Spec{Name: "fw", Module: "./fw", Providers: []string{"aws", "aws.eu"}, Variables: map[string]string{"port": "443"}}
	spec.Condition.ConsulKV = &task.ConsulKVCondition{}
	got, err := set.Eval(context.Background(), []byte(`{"format_version":"1.2"}`), Input{Task: policy.TaskInput(spec), Trigger: "schedule"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"fw|./fw|consul-kv|443|aws,aws.eu|schedule"}; !slices.Equal(got, want) {
		t.Errorf("deny = %q, want %q", got, want)
	}
	b, _ := json.Marshal(policy.TaskInput(task.Spec{Name: "x"}))
	if want := `{"name":"x","description":"","module":"","version":"","providers":[],"variables":{},"condition":""}`; string(b) != want {
		t.Errorf("input.task = %s, want %s", b, want)
	}
}

func TestDenyArrayAndSeveralFiles(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.rego")
	b := filepath.Join(dir, "b.rego")
	os.WriteFile(a, []byte("package ctsync\n\ndeny contains \"from a\" if true\n"), 0o600)
	os.WriteFile(b, []byte("package ctsync\n\ndeny contains \"from b\" if input.trigger == \"x\"\n"), 0o600)
	set, err := Load(context.Background(), []string{a, b})
	if err != nil {
		t.Fatal(err)
	}
	got, err := set.Eval(context.Background(), []byte(`{}`), Input{Trigger: "x"})
	if err != nil || !slices.Equal(got, []string{"from a", "from b"}) {
		t.Errorf("deny = %q, %v", got, err)
	}
	arr := write(t, "arr.rego", "package ctsync\n\ndeny := [\"b\", \"a\", \"b\"] if input.plan.x\n")
	set, err = Load(context.Background(), []string{arr})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := set.Eval(context.Background(), []byte(`{"x":true}`), Input{}); err != nil || !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("array deny = %q, %v", got, err)
	}
	// The complete rule left undefined: no verdict, an error (issue 35:
	// every gate fails closed).
	if got, err := set.Eval(context.Background(), []byte(`{"x":false}`), Input{}); err == nil || !strings.Contains(err.Error(), "undefined") {
		t.Errorf("undefined deny = %q, %v", got, err)
	}
}

func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name, src string
		want      string // substring of the error, after the file name
	}{
		{"syntax.rego", "package ctsync\n\ndeny contains msg if {\n\tmsg := \n}\n", ":5:1: unexpected } token"},
		{"v0.rego", "package ctsync\n\ndeny[msg] {\n\tmsg := \"x\"\n}\n", ":3:"},
		{"unsafe.rego", "package ctsync\n\ndeny contains msg if {\n\tx == 1\n}\n", ":3:"},
		{"unknownfn.rego", "package ctsync\n\ndeny contains msg if {\n\tmsg := nosuch(1)\n}\n", ":4:"},
		{"http.rego", "package ctsync\n\ndeny contains msg if {\n\tr := http.send({\"method\": \"get\", \"url\": \"http://x\"})\n\tmsg := r.body\n}\n", ":4:"},
		{"runtime.rego", "package ctsync\n\ndeny contains msg if {\n\tmsg := opa.runtime().env.HOME\n}\n", ":4:"},
		{"otherpkg.rego", "package firewall\n\ndeny contains \"x\" if true\n", "no rule defines data.ctsync.deny"},
		{"empty.rego", "# nothing\n", "empty module"},
	}
	for _, c := range cases {
		p := write(t, c.name, c.src)
		_, err := Load(context.Background(), []string{p})
		var es Errors
		if !errors.As(err, &es) || len(es) == 0 {
			t.Errorf("%s: error %v, want Errors", c.name, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), p) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q, want it to start with the file and hold %q", c.name, err, c.want)
		}
		if c.want[0] == ':' && es[0].Line == 0 {
			t.Errorf("%s: no line in %#v", c.name, es[0])
		}
	}
	missing := filepath.Join(t.TempDir(), "missing.rego")
	if err := Check([]string{missing}); err == nil || !strings.Contains(err.Error(), missing+": cannot read policy file") {
		t.Errorf("missing file: %v", err)
	}
	if err := Check(nil); err == nil {
		t.Error("no files: no error")
	}
	if err := Check([]string{example, example}); err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Errorf("twice: %v", err)
	}
}

func TestEvalErrors(t *testing.T) {
	p := write(t, "num.rego", "package ctsync\n\ndeny contains 1 if true\n\ndeny contains \"ok\" if true\n")
	set, err := Load(context.Background(), []string{p})
	if err != nil {
		t.Fatal(err)
	}
	_, err = set.Eval(context.Background(), []byte(`{}`), Input{})
	if err == nil || !strings.Contains(err.Error(), p+":3") || !strings.Contains(err.Error(), "must be a string") {
		t.Errorf("number entry: %v", err)
	}
	// A value of a type known only at evaluation.
	obj := write(t, "obj.rego", "package ctsync\n\ndeny := input.plan.d\n")
	set, err = Load(context.Background(), []string{obj})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set.Eval(context.Background(), []byte(`{"d":{"a":1}}`), Input{}); err == nil || !strings.Contains(err.Error(), obj+":3") ||
		!strings.Contains(err.Error(), "is an object") {
		t.Errorf("object deny: %v", err)
	}
	if _, err := set.Eval(context.Background(), []byte(`{"d":["a",false]}`), Input{}); err == nil || !strings.Contains(err.Error(), "holds a boolean") {
		t.Errorf("boolean entry: %v", err)
	}
	// A type the compiler knows is wrong is refused at load.
	for src, want := range map[string]string{
		"deny contains 1 if true\n":  "data.ctsync.deny holds number values",
		"deny := {\"a\": 1}\n":       "data.ctsync.deny is object",
		"deny := \"no\"\n":           "data.ctsync.deny is string",
		"deny := [1, 2]\n":           "data.ctsync.deny holds number values",
		"deny contains {\"m\": 1}\n": "data.ctsync.deny holds object",
	} {
		p := write(t, "typed.rego", "package ctsync\n\n"+src)
		if err := Check([]string{p}); err == nil || !strings.HasPrefix(err.Error(), p+":3: ") || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %s:3: ...%s", src, err, p, want)
		}
	}
	if _, err := set.Eval(context.Background(), []byte(`{not json`), Input{}); err == nil {
		t.Error("invalid plan JSON: no error")
	}
	// A runtime error (a conflict between complete rules) is an error, not
	// an empty verdict.
	conflict := write(t, "conflict.rego", "package ctsync\n\ndeny := [\"a\"] if true\n\ndeny := [\"b\"] if true\n")
	set, err = Load(context.Background(), []string{conflict})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := set.Eval(context.Background(), []byte(`{}`), Input{}); err == nil {
		t.Errorf("conflict: deny = %q, no error", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := set.Eval(ctx, []byte(`{}`), Input{}); err == nil {
		t.Error("cancelled context: no error")
	}
}

// plan500 is a plan of 500 security group rules, every tenth open to
// 0.0.0.0/0, in `terraform show -json`'s shape.
func plan500(tb testing.TB) []byte {
	rcs := make([]map[string]any, 500)
	for i := range rcs {
		cidr := fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)
		if i%10 == 0 {
			cidr = "0.0.0.0/0"
		}
		rcs[i] = map[string]any{
			"address": fmt.Sprintf("aws_security_group_rule.r[%d]", i), "mode": "managed",
			"type": "aws_security_group_rule", "name": "r", "index": i, "provider_name": "registry.terraform.io/hashicorp/aws",
			"change": map[string]any{"actions": []string{"create"}, "before": nil,
				"after": map[string]any{"type": "ingress", "from_port": 443, "to_port": 443, "protocol": "tcp",
					"cidr_blocks": []string{cidr}, "description": fmt.Sprintf("web instance %d", i),
					"security_group_id": "sg-0123456789abcdef0", "self": false},
				"after_unknown": map[string]any{"id": true}},
		}
	}
	b, err := json.Marshal(map[string]any{"format_version": "1.2", "terraform_version": "1.5.7", "resource_changes": rcs})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func TestPlan500(t *testing.T) {
	set, err := Load(context.Background(), []string{example})
	if err != nil {
		t.Fatal(err)
	}
	got, err := set.Eval(context.Background(), plan500(t), Input{Task: policy.Task{Name: "fw"}})
	if err != nil || len(got) != 50 {
		t.Errorf("%d messages, %v; want 50", len(got), err)
	}
}

// BenchmarkEval500 evaluates the example policy on a 500-resource plan
// (docs/performance.md).
func BenchmarkEval500(b *testing.B) {
	set, err := Load(context.Background(), []string{example})
	if err != nil {
		b.Fatal(err)
	}
	plan := plan500(b)
	in := Input{Task: policy.Task{Name: "fw"}, Trigger: "health/service/web"}
	b.SetBytes(int64(len(plan)))
	b.ReportAllocs()
	for b.Loop() {
		if got, err := set.Eval(context.Background(), plan, in); err != nil || len(got) != 50 {
			b.Fatal(len(got), err)
		}
	}
}

// BenchmarkLoad compiles the example policy, as a configuration load does.
func BenchmarkLoad(b *testing.B) {
	for b.Loop() {
		if err := Check([]string{example}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestEvaluate(t *testing.T) {
	got, err := Evaluate(context.Background(), []string{example}, 0, readPlan(t, "open-plan.json"), Input{Task: policy.Task{Name: "fw"}})
	if err != nil || len(got) != 2 {
		t.Fatalf("Evaluate: %q, %v", got, err)
	}
	if _, err := Evaluate(context.Background(), []string{filepath.Join(t.TempDir(), "gone.rego")}, 0, []byte(`{}`), Input{}); err == nil {
		t.Error("missing file: no error")
	}
}
