package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// A policy file that does not parse or compile stops `ctsync start` with
// the configuration error code, naming the Rego file's line and the field
// that lists it, before anything runs. Relative policy paths are read from
// the current directory.
func TestPolicyBadRegoAtStart(t *testing.T) {
	skipShort(t)
	tests := []struct {
		name, rego string
		at         string // file:line in the error
		want       string
	}{
		{"syntax error", "package ctsync\n\ndeny contains msg if {\n\tmsg := \"open\"\n\tinput.plan.\n}\n", "fw.rego:6: ", "unexpected"},
		{"compile error", "package ctsync\n\ndeny contains msg if {\n\tnosuch(input.plan)\n\tmsg := \"x\"\n}\n", "fw.rego:4: ", "undefined function nosuch"},
		{"withheld builtin", "package ctsync\n\ndeny contains msg if {\n\tmsg := opa.runtime().env.HOME\n}\n", "fw.rego:4: ", "opa.runtime"},
		{"no deny rule", "package firewall\n\ndeny contains \"x\" if true\n", "bad.hcl:8: ", "no rule defines data.ctsync.deny"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			work := t.TempDir()
			if err := os.Mkdir(filepath.Join(work, "policies"), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, work, "policies/fw.rego", tt.rego)
			cfg := writeFile(t, work, "bad.hcl", fmt.Sprintf(`task {
  name   = "fw"
  module = %q
  condition "services" {
    names = ["web"]
  }
  policy {
    files = ["policies/fw.rego"]
  }
}
`, module("services_file")))
			p := startCtsync(t, work, "start", "-config-file", cfg)
			if code := p.wait(t, 30*time.Second); code != 15 {
				t.Fatalf("exit code %d, want 15:\n%s", code, p.out.String())
			}
			out := p.out.String()
			for _, w := range []string{tt.at, `task "fw".policy.files[0]`, tt.want} {
				if !strings.Contains(out, w) {
					t.Errorf("the error lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, "executing task") {
				t.Errorf("a task ran")
			}
		})
	}
}

// A task's approval and policy blocks, and the removal_delay it inherits
// from the top level, are loaded and shown by the API (GET
// /v1/tasks/NAME) of a daemon running against a real Consul.
func TestGatesConfigLoaded(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	work := t.TempDir()
	rego, err := filepath.Abs(filepath.Join(testutil.RepoRoot(), "examples", "policies", "no-open-cidr.rego"))
	if err != nil {
		t.Fatal(err)
	}
	port := testutil.FreePort(t)
	cfg := writeFile(t, work, "gates.hcl", fmt.Sprintf(`port = %d
working_dir = %q
consul {
  address = %q
}
removal_delay = "45s"
task {
  name    = "fw"
  module  = %q
  enabled = false
  condition "services" {
    names = ["web"]
  }
  approval {
    max_destroy_percent = 50
    expire              = "24h"
    window              = "2h"
    max_replace         = 3
  }
  policy {
    files = [%q]
  }
}
`, port, filepath.Join(work, "sync"), c.Addr, module("services_file"), rego))
	p := startCtsync(t, work, "start", "-config-file", cfg)
	var got struct {
		Task struct {
			RemovalDelay string `json:"removal_delay"`
			Approval     struct {
				MaxDestroyPercent *int   `json:"max_destroy_percent"`
				Expire            string `json:"expire"`
				Window            string `json:"window"`
				MaxReplace        *int   `json:"max_replace"`
			} `json:"approval"`
			Policy struct {
				Files []string `json:"files"`
			} `json:"policy"`
		} `json:"task"`
	}
	testutil.Eventually(t, 30*time.Second, "the task to be served", func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/tasks/fw", port))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&got) == nil
	})
	a := got.Task.Approval
	if a.MaxDestroyPercent == nil || *a.MaxDestroyPercent != 50 || a.Expire != "24h0m0s" ||
		a.Window != "2h0m0s" || a.MaxReplace == nil || *a.MaxReplace != 3 || got.Task.RemovalDelay != "45s" ||
		len(got.Task.Policy.Files) != 1 || got.Task.Policy.Files[0] != rego {
		t.Errorf("task = %+v", got.Task)
	}
	if _, err := os.Stat(rego); err != nil {
		t.Fatal(err)
	}
	_ = p
}
