package config

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/task"
)

const denyRego = "package ctsync\n\ndeny contains \"no\" if input.plan.bad\n"

func TestGatesConfig(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	rego := writeFile(t, dir, "policies/fw.rego", denyRego)
	body := []string{
		`  approval {`, `    required            = true`, `    max_destroy         = 5`,
		`    max_destroy_percent = 50`, `    expire              = "24h"`, `  }`,
		`  policy {`, fmt.Sprintf(`    files = [%q]`, rego), `    timeout = "2s"`, `  }`,
	}
	hcl1 := lines(okTask(body...)...)
	// The same with an expression only HCL 2's native syntax reads.
	hcl2 := strings.Replace(hcl1, `name = "web"`, `name = true ? "web" : "x"`, 1)
	js := fmt.Sprintf(`{"task": [{"name": "web", "module": "org/m/x",
	  "approval": {"required": true, "max_destroy": 5, "max_destroy_percent": 50, "expire": "24h"},
	  "policy": {"files": [%q], "timeout": "2s"},
	  "condition": {"services": {"names": ["web"]}}}]}`, rego)
	five, fifty := 5, 50
	wantA := &task.Approval{Required: true, MaxDestroy: &five, MaxDestroyPercent: &fifty, Expire: task.Duration(24 * time.Hour)}
	wantP := &task.Policy{Files: []string{rego}, Timeout: task.Duration(2 * time.Second)}
	for name, content := range map[string]string{"g1.hcl": hcl1, "g2.hcl": hcl2, "g.json": js} {
		cfg := mustLoad(t, writeFile(t, dir, name, content))
		s := cfg.Tasks[0]
		if !reflect.DeepEqual(s.Approval, wantA) || !reflect.DeepEqual(s.Policy, wantP) {
			t.Errorf("%s: approval %+v, policy %+v", name, s.Approval, s.Policy)
		}
	}
	// Defaults: an empty approval block holds nothing; no block, no gate.
	cfg := mustLoad(t, writeFile(t, dir, "e.hcl", lines(okTask(`  approval {`, `  }`)...)))
	if a := cfg.Tasks[0].Approval; a == nil || a.Required || a.MaxDestroy != nil || a.MaxDestroyPercent != nil || a.Expire != 0 {
		t.Errorf("empty approval block: %+v", a)
	}
	cfg = mustLoad(t, writeFile(t, dir, "n.hcl", lines(okTask()...)))
	if cfg.Tasks[0].Approval != nil || cfg.Tasks[0].Policy != nil {
		t.Errorf("no blocks: %+v %+v", cfg.Tasks[0].Approval, cfg.Tasks[0].Policy)
	}
	// max_destroy = 0 is a limit (any destroy holds), not "unset".
	cfg = mustLoad(t, writeFile(t, dir, "z.hcl", lines(okTask(`  approval {`, `    max_destroy = 0`, `  }`)...)))
	if a := cfg.Tasks[0].Approval; a == nil || a.MaxDestroy == nil || *a.MaxDestroy != 0 {
		t.Errorf("max_destroy = 0: %+v", a)
	}

	// A relative policy path is relative to the current directory, as
	// variable_files and local modules are; it is kept as written.
	t.Chdir(dir)
	cfg = mustLoad(t, writeFile(t, t.TempDir(), "r.hcl", lines(okTask(`  policy {`, `    files = ["policies/fw.rego"]`, `  }`)...)))
	if p := cfg.Tasks[0].Policy; p == nil || !reflect.DeepEqual(p.Files, []string{"policies/fw.rego"}) {
		t.Errorf("relative policy: %+v", p)
	}

	// A task file (task create -task-file) takes the approval block too.
	spec, err := LoadTaskFile(writeFile(t, dir, "task.hcl", hcl1))
	if err != nil || !reflect.DeepEqual(spec.Approval, wantA) {
		t.Errorf("task file: %+v, %v", spec.Approval, err)
	}
}

func TestGatesErrors(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	good := writeFile(t, dir, "good.rego", denyRego)
	syntax := writeFile(t, dir, "syntax.rego", "package ctsync\n\ndeny contains msg if {\n\tmsg := \"x\"\n\tinput.plan.\n}\n")
	unsafe := writeFile(t, dir, "unsafe.rego", "package ctsync\n\ndeny contains msg if {\n\tinput.plan.x == 1\n}\n")
	other := writeFile(t, dir, "other.rego", "package fw\n\ndeny contains \"x\" if true\n")
	missing := filepath.Join(dir, "missing.rego")
	approval := func(ls ...string) string {
		return lines(okTask(append(append([]string{`  approval {`}, ls...), `  }`)...)...)
	}
	pol := func(files ...string) string {
		q := make([]string, len(files))
		for i, f := range files {
			q[i] = fmt.Sprintf("%q", f)
		}
		return lines(okTask(`  policy {`, `    files = [`+strings.Join(q, ", ")+`]`, `  }`)...)
	}
	tests := []struct {
		name, file, content string
		errFile             string // the file the error points to; file when empty
		line                int
		field, msg          string
	}{
		{"max_destroy negative", "c.hcl", approval(`    max_destroy = -1`), "", 5, `task "web".approval.max_destroy`, "cannot be negative"},
		{"max_destroy not a number", "c.hcl", approval(`    max_destroy = "five"`), "", 5, `task "web".approval.max_destroy`, "whole number"},
		{"percent over 100", "c.hcl", approval(`    max_destroy_percent = 101`), "", 5, `task "web".approval.max_destroy_percent`, "between 0 and 100"},
		{"percent negative", "c.hcl", approval(`    max_destroy_percent = -5`), "", 5, `task "web".approval.max_destroy_percent`, "between 0 and 100"},
		{"expire zero", "c.hcl", approval(`    expire = "0s"`), "", 5, `task "web".approval.expire`, "longer than 0"},
		{"expire negative", "c.hcl", approval(`    expire = "-1h"`), "", 5, `task "web".approval.expire`, "cannot be negative"},
		{"expire not a duration", "c.hcl", approval(`    expire = "tomorrow"`), "", 5, `task "web".approval.expire`, "not a valid duration"},
		{"expire 5ns", "c.hcl", approval(`    expire = "5ns"`), "", 5, `task "web".approval.expire`, "must be at least 1s"},
		{"expire a number", "c.hcl", approval(`    expire = 5`), "", 5, `task "web".approval.expire`, "not a valid duration"},
		{"required not a bool", "c.hcl", approval(`    required = "yes"`), "", 5, `task "web".approval.required`, "must be a bool"},
		{"unknown approval key", "c.hcl", approval(`    max_create = 1`), "", 5, `task "web".approval.max_create`, "unknown field"},
		{"two approval blocks", "c.hcl", lines(okTask(`  approval {`, `  }`, `  approval {`, `  }`)...), "", 6, `task "web".approval`, "only one"},
		{"json percent", "c.json", lines(`{"task": [{"name": "web", "module": "m",`, `  "approval": {`, `    "max_destroy_percent": 150}, "condition": {"services": {"names": ["a"]}}}]}`), "", 3,
			`task "web".approval.max_destroy_percent`, "between 0 and 100"},

		{"files missing", "c.hcl", lines(okTask(`  policy {`, `  }`)...), "", 4, `task "web".policy.files`, "is required"},
		{"files empty", "c.hcl", pol(), "", 5, `task "web".policy.files`, "is required"},
		{"file empty string", "c.hcl", pol(good, ""), "", 5, `task "web".policy.files[1]`, "cannot be empty"},
		{"file not found", "c.hcl", pol(good, missing), "", 5, `task "web".policy.files[1]`, "no such file"},
		{"file is a directory", "c.hcl", pol(dir), "", 5, `task "web".policy.files[0]`, "not a regular file"},
		{"rego syntax error", "c.hcl", pol(good, syntax), "syntax.rego", 6, `task "web".policy.files[1]`, "unexpected whitespace token"},
		{"rego compile error", "c.hcl", pol(unsafe), "unsafe.rego", 3, `task "web".policy.files[0]`, "unsafe"},
		{"no deny rule", "c.hcl", pol(other), "", 5, `task "web".policy.files[0]`, "no rule defines data.ctsync.deny"},
		{"json rego syntax error", "c.json", fmt.Sprintf(`{"task": {"name": "web", "module": "m", "policy": {"files": [%q]}, "condition": {"services": {"names": ["a"]}}}}`, syntax),
			"syntax.rego", 6, `task "web".policy.files[0]`, "unexpected whitespace token"},
		{"policy timeout zero", "c.hcl", lines(okTask(`  policy {`, `    files = [`+fmt.Sprintf("%q", good)+`]`, `    timeout = "0s"`, `  }`)...), "", 6, `task "web".policy.timeout`, "must be longer than 0"},
		{"policy timeout too long", "c.hcl", lines(okTask(`  policy {`, `    files = [`+fmt.Sprintf("%q", good)+`]`, `    timeout = "1h"`, `  }`)...), "", 6, `task "web".policy.timeout`, "at most 10m0s"},
		{"policy timeout not a duration", "c.json", fmt.Sprintf(`{"task": {"name": "web", "module": "m", "policy": {"files": [%q], "timeout": "soon"}, "condition": {"services": {"names": ["a"]}}}}`, good),
			"", 1, `task "web".policy.timeout`, "not a valid duration"},
		{"unknown policy key", "c.hcl", lines(okTask(`  policy {`, `    query = "data.x"`, `  }`)...), "", 5, `task "web".policy.query`, "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load([]string{writeFile(t, t.TempDir(), tt.file, tt.content)})
			if err == nil {
				t.Fatal("no error")
			}
			t.Log(err)
			errFile := tt.errFile
			if errFile == "" {
				errFile = tt.file
			}
			found := false
			for _, e := range AsList(err) {
				if filepath.Base(e.Range.Filename) == errFile && e.Range.Start.Line == tt.line &&
					e.Field == tt.field && strings.Contains(e.Msg, tt.msg) {
					found = true
				}
			}
			if !found {
				t.Fatalf("want an error at %s:%d on %q containing %q; got:\n%v", errFile, tt.line, tt.field, tt.msg, err)
			}
		})
	}
}

// TestPolicyHelperMissing: a task with a policy on a machine without the
// policy helper is refused at load, naming the task and the executable
// (the policy could never be evaluated).
func TestPolicyHelperMissing(t *testing.T) {
	dir := t.TempDir()
	rego := writeFile(t, dir, "fw.rego", denyRego)
	cfgFile := writeFile(t, dir, "c.hcl", lines(okTask(`  policy {`, fmt.Sprintf(`    files = [%q]`, rego), `  }`)...))
	t.Setenv("PATH", t.TempDir())
	_, err := Load([]string{cfgFile})
	if err == nil {
		t.Fatal("no error")
	}
	found := false
	for _, e := range AsList(err) {
		if e.Field == `task "web".policy.files` && e.Range.Start.Line == 5 &&
			strings.Contains(e.Msg, "policy helper ctsync-policy: not found") && strings.Contains(e.Msg, "PATH") {
			found = true
		}
	}
	if !found {
		t.Fatalf("want an error on task \"web\".policy.files naming ctsync-policy; got:\n%v", err)
	}
}
