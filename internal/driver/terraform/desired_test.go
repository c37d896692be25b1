package terraform

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

func desiredOf(t *testing.T, o Options) map[string]string {
	t.Helper()
	parts, err := DesiredState(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return parts
}

// Each part of the desired state moves when, and only when, what it stands
// for changes.
func TestDesiredStateParts(t *testing.T) {
	bin := needTerraform(t)
	dir := t.TempDir()
	o := localTask(t, dir, "web", bin)
	o.Providers = []config.Provider{{Name: "local", Args: config.ProviderBody{Attrs: map[string]cty.Value{"token": cty.StringVal("s3cr3t-value")}}}}
	base := desiredOf(t, o)
	for _, p := range []string{driver.PartModule, driver.PartProviders, driver.PartBackend, driver.PartRequiredProviders, driver.PartBinary} {
		if base[p] == "" {
			t.Fatalf("part %q missing: %v", p, base)
		}
		if strings.Contains(base[p], "s3cr3t") {
			t.Fatalf("part %q holds a secret in clear", p)
		}
	}
	if again := desiredOf(t, o); !maps.Equal(again, base) {
		t.Fatalf("not stable: %v vs %v", again, base)
	}
	changed := func(what string, o Options, want string) {
		t.Helper()
		got := desiredOf(t, o)
		for k, v := range got {
			if (v != base[k]) != (k == want) {
				t.Errorf("%s: part %q changed=%v", what, k, v != base[k])
			}
		}
	}

	// Module code: a file edited; Terraform's own folder ignored.
	modDir := filepath.Join(o.WorkDir, o.Spec.Module)
	if err := os.MkdirAll(filepath.Join(modDir, ".terraform"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(modDir, ".terraform", "x"), []byte("cache"), 0o644); err != nil {
		t.Fatal(err)
	}
	changed(".terraform written", o, "")
	main := filepath.Join(modDir, "main.tf")
	b, _ := os.ReadFile(main)
	if err := os.WriteFile(main, append(b, []byte("\n# edited\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	changed("module edited", o, driver.PartModule)
	if err := os.WriteFile(main, b, 0o644); err != nil {
		t.Fatal(err)
	}
	changed("module restored", o, "")

	p := o
	p.Providers = []config.Provider{{Name: "local", Args: config.ProviderBody{Attrs: map[string]cty.Value{"token": cty.StringVal("rotated")}}}}
	changed("provider argument", p, driver.PartProviders)
	p.Providers = []config.Provider{{Name: "local", Args: o.Providers[0].Args, TaskEnv: map[string]string{"TOKEN": "x"}}}
	changed("provider task_env", p, driver.PartProviders)

	be := o
	be.Driver.Backend = &config.Backend{Type: "local", Attrs: map[string]cty.Value{"path": cty.StringVal(filepath.Join(dir, "other.tfstate"))}}
	changed("backend", be, driver.PartBackend)
	// The consul backend reached through another agent (another address,
	// token): the same state, the same desired state; another path is not.
	cb := o
	cb.Driver.Backend = &config.Backend{Type: "consul", Attrs: map[string]cty.Value{"path": cty.StringVal("ctsync/web"),
		"address": cty.StringVal("10.0.0.1:8500"), "access_token": cty.StringVal("t1")}}
	cb2 := o
	cb2.Driver.Backend = &config.Backend{Type: "consul", Attrs: map[string]cty.Value{"path": cty.StringVal("ctsync/web"),
		"address": cty.StringVal("10.0.0.2:8500"), "access_token": cty.StringVal("t2"), "scheme": cty.StringVal("https")}}
	p1, err := DesiredState(context.Background(), cb)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := DesiredState(context.Background(), cb2)
	if err != nil {
		t.Fatal(err)
	}
	if p1[driver.PartBackend] != p2[driver.PartBackend] {
		t.Error("the consul backend's address, scheme or token changed the desired state")
	}
	cb2.Driver.Backend.Attrs["path"] = cty.StringVal("ctsync/other")
	if p3, _ := DesiredState(context.Background(), cb2); p3[driver.PartBackend] == p1[driver.PartBackend] {
		t.Error("another consul backend path did not change the desired state")
	}

	rp := o
	rp.Driver.RequiredProviders = map[string]config.RequiredProvider{"local": {Source: "hashicorp/local", Version: "2.4.0"}}
	changed("required_providers", rp, driver.PartRequiredProviders)

	other := filepath.Join(dir, "terraform-copy")
	copyFile(t, bin, other)
	bo := o
	bo.Binary = other
	changed("binary path", bo, driver.PartBinary)

	// A module directory that vanished: an error naming it.
	gone := o
	gone.Spec.Module = "../nowhere"
	_, err = DesiredState(context.Background(), gone)
	if err == nil || !strings.Contains(err.Error(), "nowhere") {
		t.Fatalf("vanished module: %v", err)
	}

	// A registry module: source, constraint and the version init resolved.
	reg := o
	reg.Spec.Module, reg.Spec.Version = "example.com/net/lb/aws", "~> 1.2"
	r1 := desiredOf(t, reg)
	if err := os.MkdirAll(filepath.Join(reg.WorkDir, ".terraform", "modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeModulesJSON := func(v string) {
		t.Helper()
		js := `{"Modules":[{"Key":"","Source":"","Dir":"."},{"Key":"web","Source":"example.com/net/lb/aws","Version":"` + v + `","Dir":".terraform/modules/web"}]}`
		if err := os.WriteFile(filepath.Join(reg.WorkDir, ".terraform", "modules", "modules.json"), []byte(js), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeModulesJSON("1.2.3")
	r2 := desiredOf(t, reg)
	writeModulesJSON("1.2.4")
	r3 := desiredOf(t, reg)
	// The version init resolved is recorded apart from the module: the
	// first run learns it, so it cannot be what decides that the task
	// runs again (a restart after that run would otherwise run it).
	if r1[driver.PartModule] != r2[driver.PartModule] || r2[driver.PartModule] != r3[driver.PartModule] {
		t.Fatal("the resolved module version changed the module part")
	}
	if _, ok := r1[driver.PartModuleResolved]; ok {
		t.Fatal("a resolved version before any init")
	}
	if r2[driver.PartModuleResolved] == "" || r2[driver.PartModuleResolved] == r3[driver.PartModuleResolved] {
		t.Fatal("the resolved module version is not recorded")
	}
	cv := reg
	cv.Spec.Version = "~> 1.3"
	if desiredOf(t, cv)[driver.PartModule] == r3[driver.PartModule] {
		t.Fatal("another version constraint did not change the module part")
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkDesiredState is the cost the desired state adds to each decision
// to run a task: hashing a small local module's files, the provider values,
// backend and required_providers, and the (cached) binary version.
func BenchmarkDesiredState(b *testing.B) {
	testutil.SetTerraformEnv(b)
	bin, _, err := FindBinary("")
	if err != nil {
		b.Skip("terraform:", err)
	}
	dir := b.TempDir()
	md := filepath.Join(dir, "mod")
	if err := os.MkdirAll(md, 0o755); err != nil {
		b.Fatal(err)
	}
	for _, f := range []string{"main.tf", "variables.tf", "outputs.tf"} {
		if err := os.WriteFile(filepath.Join(md, f), []byte(strings.Repeat("# a line of module code\n", 100)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	o := Options{Spec: task.Spec{Name: "bench", Module: "../mod"}, WorkDir: filepath.Join(dir, "bench"), Binary: bin,
		Providers: []config.Provider{{Name: "local", Args: config.ProviderBody{Attrs: map[string]cty.Value{"token": cty.StringVal("x")}}}}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DesiredState(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
}
