package config

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/task"
)

// TestRemovalDelayAndWindowConfig: removal_delay (a task's, and the
// global default that the tasks with a services, catalog-services or
// nodes condition inherit) and approval { window, max_replace }, in HCL 2,
// in the HCL 1 forms CTS configurations use, and in JSON.
func TestRemovalDelayAndWindowConfig(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	hcl2 := lines(
		`removal_delay = "45s"`,
		`task {`,
		`  name          = "fw"`,
		`  module        = "org/m/x"`,
		`  removal_delay = "30s"`,
		`  condition "services" { names = ["web"] }`,
		`  approval {`,
		`    max_destroy_percent = 50`,
		`    window              = "2h"`,
		`    max_replace         = 10`,
		`  }`,
		`}`,
		`task {`,
		`  name   = "lb"`,
		`  module = "org/m/x"`,
		`  condition "catalog-services" { regexp = "web.*" }`,
		`}`,
		`task {`,
		`  name   = "kv"`,
		`  module = "org/m/x"`,
		`  condition "consul-kv" { path = "k" }`,
		`}`,
	)
	// HCL 1: blocks written as objects, arguments on one line with commas.
	hcl1 := lines(
		`removal_delay = "45s"`,
		`task = [{`,
		`  name = "fw", module = "org/m/x", removal_delay = "30s"`,
		`  condition "services" { names = ["web"] }`,
		`  approval = { max_destroy_percent = 50, window = "2h", max_replace = 10 }`,
		`}, {`,
		`  name = "lb", module = "org/m/x"`,
		`  condition "catalog-services" { regexp = "web.*" }`,
		`}, {`,
		`  name = "kv", module = "org/m/x"`,
		`  condition "consul-kv" { path = "k" }`,
		`}]`,
	)
	js := `{"removal_delay": "45s", "task": [
	  {"name": "fw", "module": "org/m/x", "removal_delay": "30s",
	   "condition": {"services": {"names": ["web"]}},
	   "approval": {"max_destroy_percent": 50, "window": "2h", "max_replace": 10}},
	  {"name": "lb", "module": "org/m/x", "condition": {"catalog-services": {"regexp": "web.*"}}},
	  {"name": "kv", "module": "org/m/x", "condition": {"consul-kv": {"path": "k"}}}]}`
	for name, content := range map[string]string{"h2.hcl": hcl2, "h1.hcl": hcl1, "c.json": js} {
		cfg := mustLoad(t, writeFile(t, dir, name, content))
		if cfg.RemovalDelay != 45*time.Second {
			t.Errorf("%s: global removal_delay %s", name, cfg.RemovalDelay)
		}
		got := map[string]*task.Spec{}
		for i := range cfg.Tasks {
			got[cfg.Tasks[i].Name] = &cfg.Tasks[i]
		}
		if d := got["fw"].Removal(); d != 30*time.Second {
			t.Errorf("%s: fw's own removal_delay %s", name, d)
		}
		if d := got["lb"].Removal(); d != 45*time.Second {
			t.Errorf("%s: lb inherits %s, want 45s", name, d)
		}
		if d := got["kv"].RemovalDelay; d != nil {
			t.Errorf("%s: a consul-kv task inherits %s: the default applies to removals only", name, d)
		}
		a := got["fw"].Approval
		if a == nil || a.Window == nil || a.Window.D() != 2*time.Hour || a.MaxReplace == nil || *a.MaxReplace != 10 ||
			a.EffectiveWindow() != 2*time.Hour {
			t.Errorf("%s: approval %+v", name, a)
		}
	}

	// Defaults: no removal_delay anywhere is off; an approval block
	// without window judges over DefaultWindow; window = "0s", each plan
	// alone; max_replace unset, no limit.
	cfg := mustLoad(t, writeFile(t, dir, "d.hcl", lines(okTask(`  approval {`, `    max_destroy = 1`, `  }`)...)))
	s := cfg.Tasks[0]
	if s.RemovalDelay != nil || cfg.RemovalDelay != 0 {
		t.Errorf("default removal_delay %s / %s", s.RemovalDelay, cfg.RemovalDelay)
	}
	if a := s.Approval; a.Window != nil || a.EffectiveWindow() != task.DefaultWindow || a.MaxReplace != nil {
		t.Errorf("default window/max_replace: %+v", a)
	}
	cfg = mustLoad(t, writeFile(t, dir, "z.hcl", lines(okTask(`  approval {`, `    window = "0s"`, `    max_replace = 0`, `  }`)...)))
	if a := cfg.Tasks[0].Approval; a.Window == nil || a.EffectiveWindow() != 0 || a.MaxReplace == nil || *a.MaxReplace != 0 {
		t.Errorf("window 0s, max_replace 0: %+v", a)
	}
	// A task's removal_delay = "0s" turns off the global default, and
	// is kept as set (its JSON, which task create sends, says "0s").
	cfg = mustLoad(t, writeFile(t, dir, "o.hcl", "removal_delay = \"1m\"\n"+lines(okTask(`  removal_delay = "0s"`)...)))
	if d := cfg.Tasks[0].RemovalDelay; d == nil || *d != 0 || cfg.Tasks[0].Removal() != 0 {
		t.Errorf("removal_delay = 0s over a global 1m: %v", d)
	}
	if b, _ := json.Marshal(cfg.Tasks[0]); !strings.Contains(string(b), `"removal_delay":"0s"`) {
		t.Errorf("the JSON of a task with removal_delay = 0s: %s", b)
	}
	// A task file (task create -task-file) takes the task's own value.
	spec, err := LoadTaskFile(writeFile(t, dir, "task.hcl", lines(okTask(`  removal_delay = "10s"`)...)))
	if err != nil || spec.Removal() != 10*time.Second {
		t.Errorf("task file: %s, %v", spec.RemovalDelay, err)
	}
}

func TestRemovalDelayAndWindowErrors(t *testing.T) {
	clearConsulEnv(t)
	approval := func(ls ...string) string {
		return lines(okTask(append(append([]string{`  approval {`}, ls...), `  }`)...)...)
	}
	kvTask := lines(`task {`, `  name = "web"`, `  module = "org/m/x"`, `  removal_delay = "30s"`,
		`  condition "consul-kv" { path = "k" }`, `}`)
	tests := []struct {
		name, file, content string
		line                int
		field, msg          string
	}{
		{"delay negative", "c.hcl", lines(okTask(`  removal_delay = "-1s"`)...), 4, `task "web".removal_delay`, "cannot be negative"},
		{"delay too long", "c.hcl", lines(okTask(`  removal_delay = "48h"`)...), 4, `task "web".removal_delay`, "at most 24h0m0s"},
		{"delay not a duration", "c.hcl", lines(okTask(`  removal_delay = "soon"`)...), 4, `task "web".removal_delay`, "not a valid duration"},
		{"delay on consul-kv", "c.hcl", kvTask, 4, `task "web".removal_delay`, `applies only to tasks with a services, catalog-services or nodes condition (this task's condition is "consul-kv")`},
		{"global delay too long", "c.hcl", "removal_delay = \"25h\"\n" + lines(okTask()...), 1, `removal_delay`, "at most 24h0m0s"},
		{"window negative", "c.hcl", approval(`    window = "-1h"`), 5, `task "web".approval.window`, "cannot be negative"},
		{"window 5ms", "c.hcl", approval(`    window = "5ms"`), 5, `task "web".approval.window`, "at least 1s"},
		{"window too long", "c.hcl", approval(`    window = "200h"`), 5, `task "web".approval.window`, "at most 168h0m0s"},
		{"window not a duration", "c.hcl", approval(`    window = "an hour"`), 5, `task "web".approval.window`, "not a valid duration"},
		{"max_replace negative", "c.hcl", approval(`    max_replace = -1`), 5, `task "web".approval.max_replace`, "cannot be negative"},
		{"json max_replace", "c.json", lines(`{"task": [{"name": "web", "module": "m",`, `  "approval": {`, `    "max_replace": -2}, "condition": {"services": {"names": ["a"]}}}]}`), 3,
			`task "web".approval.max_replace`, "cannot be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load([]string{writeFile(t, t.TempDir(), tt.file, tt.content)})
			if err == nil {
				t.Fatal("no error")
			}
			t.Log(err)
			found := false
			for _, e := range AsList(err) {
				if filepath.Base(e.Range.Filename) == tt.file && e.Range.Start.Line == tt.line &&
					e.Field == tt.field && strings.Contains(e.Msg, tt.msg) {
					found = true
				}
			}
			if !found {
				t.Fatalf("want an error at %s:%d on %q containing %q; got:\n%v", tt.file, tt.line, tt.field, tt.msg, err)
			}
		})
	}
}
