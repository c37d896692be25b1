package task

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckVariable(t *testing.T) {
	for _, ok := range []struct{ name, value string }{
		{"a", `"x"`}, {"b", `5`}, {"c", `["x", 1]`}, {"d", `{ k = "v", n = [true] }`}, {"e-f", `null`},
	} {
		if err := CheckVariable(ok.name, ok.value); err != nil {
			t.Errorf("%s = %s: %v", ok.name, ok.value, err)
		}
	}
	for _, bad := range []struct{ name, value, want string }{
		{"a", `upper("x")`, "must be a literal value"},
		{"a", `var.x`, "must be a literal value"},
		{"a", `"${path.cwd}"`, "must be a literal value"},
		{"a", `"x`, "must be a literal value"},
		{"a b", `1`, "not a valid name"},
		{"1a", `1`, "not a valid name"},
		{"count", `1`, "is reserved"},
		{"consul_kv", `1`, "is reserved"},
	} {
		if err := CheckVariable(bad.name, bad.value); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s = %s: %v, want %q", bad.name, bad.value, err, bad.want)
		}
	}
}

func TestCheckProviderRef(t *testing.T) {
	for _, ok := range []string{"aws", "aws.east", "my-prov_1.a-b"} {
		if err := CheckProviderRef(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a b", "aws.", "aws.x y", ".x", "aws.a.b"} {
		if err := CheckProviderRef(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestCheckLocalModule(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	if err := os.Mkdir("mod", 0o700); err != nil {
		t.Fatal(err)
	}
	for src, want := range map[string]string{
		"./mod": "", dir: "", "registry.example.com/a/b/c": "", "git::https://x/y": "",
		"./missing": "does not exist", "../nothing-here": "does not exist", file: "is not a directory",
	} {
		err := CheckLocalModule(src)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", src, err, want)
		}
	}
}

func TestValidateNameLength(t *testing.T) {
	s := Spec{Name: strings.Repeat("a", MaxNameLength), Module: "m",
		Condition: Condition{Schedule: &ScheduleCondition{Cron: "* * * * *"}}}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	s.Name += "a"
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "at most 128") {
		t.Fatalf("%v", err)
	}
}
