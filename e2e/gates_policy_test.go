package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ctsync/ctsync/internal/policy"
	"github.com/ctsync/ctsync/internal/policy/engine"
	"github.com/ctsync/ctsync/internal/testutil"
)

// The example policy of docs/safety.md, on the JSON of real plans made by
// the real terraform binary: a rule opened to 0.0.0.0/0 is denied, one
// limited to private ranges is not. This is the input.plan the controller
// gives the policies (terraform show -json of the saved plan).
func TestExamplePolicyOnRealPlan(t *testing.T) {
	skipShort(t)
	tf := testutil.Binary(t, "terraform")
	rego := filepath.Join(testutil.RepoRoot(), "examples", "policies", "no-open-cidr.rego")
	set, err := engine.Load(context.Background(), []string{rego})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join(module("open_rule"), "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "main.tf", string(src))
	run := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command(tf, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), testutil.TerraformEnv()...)
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("terraform %v: %v\n%s%s", args, err, out, stderr)
		}
		return out
	}
	run("init", "-input=false", "-no-color")
	in := policy.Input{Task: policy.Task{Name: "firewall"}, Trigger: "health/service/web"}
	for _, c := range []struct {
		cidrs string
		want  []string
	}{
		{`["10.0.0.0/8", "0.0.0.0/0"]`, []string{"terraform_data.rule opens 0.0.0.0/0 to everyone (task firewall)"}},
		{`["10.0.0.0/8", "192.168.0.0/16"]`, nil},
	} {
		run("plan", "-input=false", "-no-color", "-out=plan.out", "-var", "cidr_blocks="+c.cidrs)
		plan := run("show", "-json", "plan.out")
		t.Logf("plan JSON: %d bytes", len(plan))
		got, err := set.Eval(context.Background(), plan, in)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("cidr_blocks %s: deny %q, want %q", c.cidrs, got, c.want)
		}
	}
}
