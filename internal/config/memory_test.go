package config

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestParseMemory(t *testing.T) {
	for in, want := range map[string]int64{
		"2GiB": 2 << 30, "512 MiB": 512 << 20, "1.5GB": 1_500_000_000, "1073741824": 1 << 30,
		"4kib": 4096, "3TB": 3e12, "100b": 100, "1 TiB": 1 << 40,
	} {
		if got, ok := parseMemory(in); !ok || got != want {
			t.Errorf("parseMemory(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "GiB", "two GiB", "-1GiB", "2PB", "1e400", "NaN"} {
		if got, ok := parseMemory(in); ok {
			t.Errorf("parseMemory(%q) = %d, want an error", in, got)
		}
	}
}

func TestMaxMemory(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	cfg := mustLoad(t, writeFile(t, dir, "ok.hcl", lines(`driver "terraform" {`, `  max_memory = "2GiB"`, `}`)))
	if cfg.Driver.MaxMemory != 2<<30 {
		t.Fatalf("max_memory = %d", cfg.Driver.MaxMemory)
	}
	cfg = mustLoad(t, writeFile(t, dir, "bytes.json", `{"driver": {"terraform": {"max_memory": 1073741824}}}`))
	if cfg.Driver.MaxMemory != 1<<30 {
		t.Fatalf("max_memory = %d", cfg.Driver.MaxMemory)
	}
	cfg = mustLoad(t, writeFile(t, dir, "unset.hcl", lines(`driver "terraform" {`, `}`)))
	if cfg.Driver.MaxMemory != 0 {
		t.Fatalf("unset max_memory = %d", cfg.Driver.MaxMemory)
	}
	for _, tc := range []struct{ value, msg string }{
		{`"lots"`, "is not a size"},
		{`"10KiB"`, "at least 1MiB"},
		{`true`, "must be a size"},
		{`["1GiB"]`, "must be a size"},
	} {
		p := writeFile(t, dir, "bad.hcl", lines(`log_level = "INFO"`, `driver "terraform" {`, `  max_memory = `+tc.value, `}`))
		_, err := Load([]string{p})
		if err == nil {
			t.Errorf("max_memory = %s: no error", tc.value)
			continue
		}
		for _, want := range []string{filepath.Base(p) + ":3", `driver "terraform".max_memory`, tc.msg} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("max_memory = %s: error %q does not contain %q", tc.value, err, want)
			}
		}
	}
}
