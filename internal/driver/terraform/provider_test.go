package terraform

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/testutil"
)

// localFileModule writes the sorted service keys into a file through the
// hashicorp/local provider (v1.4.0 from the tools mirror).
const localFileModule = `
variable "services" {
  type = any
}

variable "filename" {
  type = string
}

resource "local_file" "out" {
  filename = var.filename
  content  = jsonencode(sort(keys(var.services)))
}
`

// needLocalProvider fails the test with a hint when scripts/tools.sh has not
// built the provider mirror yet.
func needLocalProvider(t *testing.T) {
	t.Helper()
	tools := testutil.ToolsDir()
	p := filepath.Join(tools, "mirror", "registry.terraform.io", "hashicorp", "local", "1.4.0",
		runtime.GOOS+"_"+runtime.GOARCH, "terraform-provider-local_v1.4.0")
	if !fileExists(p) || !fileExists(filepath.Join(tools, "terraformrc")) {
		t.Fatalf("the hashicorp/local 1.4.0 provider mirror is missing (%s): run scripts/tools.sh", p)
	}
}

func TestLocalProvider(t *testing.T) {
	bin := needTerraform(t)
	needLocalProvider(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	src := writeModule(t, dir, "mod-file", map[string]string{"main.tf": localFileModule})
	out := filepath.Join(dir, "out", "services.json")

	o := localTask(t, dir, "files", bin)
	o.Spec.Module = src
	o.Spec.Providers = []string{"local.main"}
	o.Spec.Variables = map[string]string{"filename": `"` + out + `"`}
	o.Providers = []config.Provider{{Name: "local", Alias: "main", TaskEnv: map[string]string{"CTSYNC_TEST_TASK_ENV": "1"}}}
	o.Driver.RequiredProviders = map[string]config.RequiredProvider{
		"local": {Source: "hashicorp/local", Version: "1.4.0"},
		"time":  {Source: "hashicorp/time", Version: "0.14.2"}, // not used by the task: not required
	}
	d := mustNew(t, o)
	res, err := d.Apply(ctx, run("r1"), services("web-2", "web-1"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Add != 1 {
		t.Fatalf("apply: %+v", res)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `["web-1","web-2"]` {
		t.Fatalf("file content = %s", b)
	}
	lock, err := os.ReadFile(filepath.Join(d.WorkDir(), ".terraform.lock.hcl"))
	if err != nil || !strings.Contains(string(lock), `"registry.terraform.io/hashicorp/local"`) || !strings.Contains(string(lock), `"1.4.0"`) {
		t.Fatalf("lock file does not pin hashicorp/local 1.4.0 (%v):\n%s", err, lock)
	}
	if strings.Contains(string(lock), "hashicorp/time") {
		t.Fatal("a required provider the task does not use was installed")
	}

	// Provider arguments and nested blocks are part of the provider's
	// configuration: the provider's own schema (which has none) rejects them,
	// naming each one.
	o.Providers = []config.Provider{{Name: "local", Alias: "main", Args: config.ProviderBody{
		Attrs:  map[string]cty.Value{"bogus_arg": cty.StringVal("x")},
		Blocks: []config.ProviderBlock{{Type: "bogus_block", Body: config.ProviderBody{Attrs: map[string]cty.Value{"k": cty.True}}}},
	}}}
	d = mustNew(t, o)
	_, err = d.Plan(ctx, run("r2"), services("web-1"))
	var de *driver.Error
	if !errors.As(err, &de) {
		t.Fatalf("want a *driver.Error, got %v", err)
	}
	if !strings.Contains(de.Summary, "Error: Unsupported argument") || !strings.Contains(de.Summary, "Error: Unsupported block type") {
		t.Fatalf("summary = %q", de.Summary)
	}
	logText, _ := os.ReadFile(filepath.Join(d.WorkDir(), logsDir, "r2.log"))
	for _, want := range []string{`in provider "local"`, `An argument named "bogus_arg" is not expected here`, `Blocks of type "bogus_block" are not expected here`} {
		if !strings.Contains(string(logText), want) {
			t.Errorf("run log lacks %q:\n%s", want, logText)
		}
	}
	// The values themselves only live in the 0600 JSON file.
	pj, err := os.ReadFile(filepath.Join(d.WorkDir(), fileProviders))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(pj, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"local": map[string]any{"bogus_arg": "x", "bogus_block": map[string]any{"k": true}}}
	if gj, _ := json.Marshal(got); string(gj) != mustJSON(t, want) {
		t.Fatalf("providers file = %s", pj)
	}
	main, _ := os.ReadFile(filepath.Join(d.WorkDir(), fileMain))
	if strings.Contains(string(main), `"x"`) || !strings.Contains(string(main), "bogus_arg = var.local.bogus_arg") {
		t.Fatalf("main.tf must reference the variable, not hold the value:\n%s", main)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
