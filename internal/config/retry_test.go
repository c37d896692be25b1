package config

import (
	"strings"
	"testing"
	"time"
)

func TestRetryBlock(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	cfg, err := Load([]string{writeFile(t, dir, "a.hcl", lines(okTask()...))})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Retry.MaxDelay != DefaultRetryMaxDelay || cfg.Retry.MaxRetries != 0 {
		t.Fatalf("defaults: %+v", cfg.Retry)
	}
	cfg, err = Load([]string{writeFile(t, dir, "b.hcl", lines(append(okTask(), "retry {", `  max_delay = "90s"`, "  max_retries = 10", "}")...))})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Retry.MaxDelay != 90*time.Second || cfg.Retry.MaxRetries != 10 {
		t.Fatalf("set: %+v", cfg.Retry)
	}
	for _, bad := range []struct{ line, want string }{
		{`  max_delay = "10ms"`, "c.hcl:2: retry.max_delay"},
		{`  max_retries = -1`, "c.hcl:2: retry.max_retries"},
		{`  max_dely = "1m"`, `did you mean "max_delay"`},
	} {
		_, err := Load([]string{writeFile(t, dir, "c.hcl", lines("retry {", bad.line, "}"))})
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: error %v, want %q", bad.line, err, bad.want)
		}
	}
}
