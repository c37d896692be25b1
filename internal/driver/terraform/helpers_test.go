package terraform

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// builtinModule uses only Terraform built-ins: it stores the services in a
// terraform_data resource and returns them as JSON. A service keyed "bad"
// fails a precondition, which gives a failing apply on demand.
const builtinModule = `
variable "services" {
  type = any
}

resource "terraform_data" "services" {
  input = var.services

  lifecycle {
    precondition {
      condition     = !contains(keys(var.services), "bad")
      error_message = "A service named bad is not allowed."
    }
  }
}

output "services_json" {
  value = jsonencode(var.services)
}
`

// needTerraform skips the test in -short mode and points Terraform at the
// provider mirror of scripts/tools.sh.
func needTerraform(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("real Terraform test (skipped with -short)")
	}
	testutil.SetTerraformEnv(t)
	bin, _, err := FindBinary("")
	if err != nil {
		t.Fatalf("terraform: %v", err)
	}
	return bin
}

// writeModule writes a module's files into dir/name and returns the relative
// source ("../name") as seen from a working directory dir/<task>.
func writeModule(t *testing.T, dir, name string, files map[string]string) string {
	t.Helper()
	md := filepath.Join(dir, name)
	if err := os.MkdirAll(md, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, content := range files {
		if err := os.WriteFile(filepath.Join(md, f), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return "../" + name
}

// localTask returns Options for a task using the built-in module and a local
// backend inside dir.
func localTask(t *testing.T, dir, name, bin string) Options {
	t.Helper()
	src := writeModule(t, dir, "mod-"+name, map[string]string{"main.tf": builtinModule})
	return Options{
		Spec:    task.Spec{Name: name, Module: src, Condition: servicesCondition("web")},
		WorkDir: filepath.Join(dir, name),
		Binary:  bin,
		Driver: config.TerraformDriver{Backend: &config.Backend{Type: "local", Attrs: map[string]cty.Value{
			"path":          cty.StringVal(filepath.Join(dir, "state", name+".tfstate")),
			"workspace_dir": cty.StringVal(filepath.Join(dir, "state", "workspaces")),
		}}},
		Consul: config.Consul{Address: "127.0.0.1:1"}, // unused with a local backend
	}
}

func mustNew(t *testing.T, o Options) *Driver {
	t.Helper()
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(3*time.Minute))
	t.Cleanup(cancel)
	return ctx
}

func services(keys ...string) *task.Inputs {
	in := &task.Inputs{Services: map[string]task.Service{}}
	for _, k := range keys {
		s := sampleService(k, "node-1")
		in.Services[k] = s
	}
	return in
}

func run(id string) driver.Run { return driver.Run{ID: id} }
