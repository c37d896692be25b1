package config

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	hcl1 "github.com/hashicorp/hcl"

	"github.com/ctsync/ctsync/internal/depth"
)

// FuzzHCL1 feeds inputs that HCL 1 (CTS's parser) reads: ctsync must load
// each or refuse it with errors that all carry a file and line, and never
// panic. Inputs HCL 1 refuses are CTS's errors too and are skipped.
func FuzzHCL1(f *testing.F) {
	files, _ := filepath.Glob("testdata/hcl1/*.hcl")
	for _, name := range files {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b)
		}
	}
	for i := range 20 {
		g := gen{r: rand.New(rand.NewPCG(uint64(i), 7))}
		f.Add([]byte(g.items(g.config(), false)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if depth.HCL(data, 0) != nil {
			// Too deep for HCL 1's recursive parser (issue 35): Load
			// refuses it with the file's position, without parsing.
			p := filepath.Join(t.TempDir(), "fuzz.hcl")
			if err := os.WriteFile(p, data, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load([]string{p})
			if errs := AsList(err); len(errs) != 1 || errs[0].Range.Filename != p || errs[0].Range.Start.Line < 1 {
				t.Fatalf("too deep a file: %v, want one error with its position", err)
			}
			return
		}
		var root any
		if hcl1.Decode(&root, string(data)) != nil || strings.TrimSpace(string(data)) == "" {
			return
		}
		p := filepath.Join(t.TempDir(), "fuzz.hcl")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load([]string{p})
		if err == nil {
			if cfg == nil {
				t.Fatal("nil config without error")
			}
			return
		}
		errs := AsList(err)
		if len(errs) == 0 {
			t.Fatalf("error of unexpected type %T: %v", err, err)
		}
		for _, e := range errs {
			if e.Range.Filename != p || e.Range.Start.Line < 1 {
				t.Errorf("error without a position: %v", e)
			}
		}
		_, _ = LoadTaskFile(p)
	})
}
