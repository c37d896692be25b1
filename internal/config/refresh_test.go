package config

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/task"
)

// refresh is read from a task and from the driver "terraform" block (the
// default of the tasks that set none, "auto" when neither does), in HCL and
// JSON; a value that is not a policy is refused at its file and line.
func TestRefresh(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	taskBlock := func(extra string) []string {
		return []string{`task {`, `  name = "web"`, `  module = "org/m/x"`, extra,
			`  condition "services" {`, `    names = ["web"]`, `  }`, `}`}
	}
	cfg := mustLoad(t, writeFile(t, dir, "default.hcl", lines(taskBlock("")...)))
	if cfg.Driver.Refresh != task.RefreshAuto || cfg.Tasks[0].Refresh != "" {
		t.Fatalf("defaults: driver %q, task %q; want auto and unset", cfg.Driver.Refresh, cfg.Tasks[0].Refresh)
	}
	cfg = mustLoad(t, writeFile(t, dir, "set.hcl", lines(append([]string{`driver "terraform" {`, `  refresh = "always"`, `}`},
		taskBlock(`  refresh = "auto"`)...)...)))
	if cfg.Driver.Refresh != task.RefreshAlways || cfg.Tasks[0].Refresh != task.RefreshAuto {
		t.Fatalf("set: driver %q, task %q", cfg.Driver.Refresh, cfg.Tasks[0].Refresh)
	}
	cfg = mustLoad(t, writeFile(t, dir, "set.json", `{"driver": {"terraform": {"refresh": "auto"}},
		"task": [{"name": "web", "module": "org/m/x", "refresh": "always", "condition": {"services": {"names": ["web"]}}}]}`))
	if cfg.Driver.Refresh != task.RefreshAuto || cfg.Tasks[0].Refresh != task.RefreshAlways {
		t.Fatalf("json: driver %q, task %q", cfg.Driver.Refresh, cfg.Tasks[0].Refresh)
	}
	for _, tc := range []struct {
		name  string
		src   []string
		where string
		field string
	}{
		{"driver.hcl", []string{`log_level = "INFO"`, `driver "terraform" {`, `  refresh = "sometimes"`, `}`}, ":3", `driver "terraform".refresh`},
		{"task.hcl", append([]string{`log_level = "INFO"`}, taskBlock(`  refresh = "sometimes"`)...), ":5", `task "web".refresh`},
	} {
		p := writeFile(t, dir, tc.name, lines(tc.src...))
		_, err := Load([]string{p})
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, want := range []string{filepath.Base(p) + tc.where, tc.field, `"sometimes" is not a refresh policy`} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not contain %q", tc.name, err, want)
			}
		}
	}
	p := writeFile(t, dir, "bad.json", `{"task": [{"name": "web", "module": "m", "refresh": 1, "condition": {"services": {"names": ["web"]}}}]}`)
	if _, err := Load([]string{p}); err == nil || !strings.Contains(err.Error(), "refresh") {
		t.Errorf("refresh = 1 in JSON: error %v", err)
	}
}
