package config

import (
	"strings"
	"testing"
)

func TestHistoryBlock(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	cfg, err := Load([]string{writeFile(t, dir, "a.hcl", lines(okTask()...))})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.History != DefaultRunsPerTask {
		t.Fatalf("default: %d", cfg.History)
	}
	cfg, err = Load([]string{writeFile(t, dir, "b.hcl", lines(append(okTask(), "history {", "  runs_per_task = 500", "}")...))})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.History != 500 {
		t.Fatalf("set: %d", cfg.History)
	}
	for _, bad := range []struct{ line, want string }{
		{`  runs_per_task = 0`, "c.hcl:2: history.runs_per_task: must be between 1 and 10000"},
		{`  runs_per_task = 10001`, "c.hcl:2: history.runs_per_task"},
		{`  runs_per_task = "many"`, "c.hcl:2"},
		{`  runs_per_tsk = 5`, `did you mean "runs_per_task"`},
	} {
		_, err := Load([]string{writeFile(t, dir, "c.hcl", lines("history {", bad.line, "}"))})
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: error %v, want %q", bad.line, err, bad.want)
		}
	}
}

func TestHistoryBlockJSON(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	cfg, err := Load([]string{writeFile(t, dir, "a.json", `{"history": {"runs_per_task": 7}, "task": [{"name": "t", "module": "m", "condition": {"services": {"names": ["web"]}}}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.History != 7 {
		t.Fatalf("history %d", cfg.History)
	}
}
