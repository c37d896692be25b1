package config

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad feeds arbitrary bytes to Load, as native HCL and as JSON. Load
// may reject the input but must never panic.
func FuzzLoad(f *testing.F) {
	for _, name := range []string{"testdata/full.hcl", "testdata/full.json", "testdata/merge/base.hcl", "testdata/taskfile/task.hcl"} {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		for _, name := range []string{"fuzz.hcl", "fuzz.json"} {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, data, 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := Load([]string{p})
			if err == nil && cfg == nil {
				t.Fatal("nil config without error")
			}
			if err != nil && len(AsList(err)) == 0 {
				t.Fatalf("error of unexpected type %T: %v", err, err)
			}
			_, _ = LoadTaskFile(p)
		}
	})
}
