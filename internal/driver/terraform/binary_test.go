package terraform

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeBinary writes a shell script that answers `version` like Terraform or
// OpenTofu would. jsonOK=false makes `version -json` fail (very old CLIs).
func fakeBinary(t *testing.T, dir, name, product, ver string, jsonOK bool) string {
	t.Helper()
	jsonPart := `echo "unknown flag" >&2; exit 1`
	if jsonOK {
		jsonPart = `echo '{"terraform_version":"` + ver + `","platform":"linux_amd64","provider_selections":{}}'`
	}
	script := "#!/bin/sh\nif [ \"$1\" != version ]; then exit 2; fi\n" +
		"if [ \"$2\" = -json ]; then " + jsonPart + "; exit 0; fi\n" +
		"echo '" + product + " v" + ver + "'\necho 'on linux_amd64'\n"
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFindBinary(t *testing.T) {
	dir := t.TempDir()

	// A directory: terraform is preferred over tofu.
	both := filepath.Join(dir, "both")
	os.MkdirAll(both, 0o755)
	tfPath := fakeBinary(t, both, "terraform", "Terraform", "1.5.7", true)
	fakeBinary(t, both, "tofu", "OpenTofu", "1.12.6", true)
	b, err := DetectBinary(both)
	if err != nil {
		t.Fatal(err)
	}
	if b.Path != tfPath || b.Version.String() != "1.5.7" || b.OpenTofu {
		t.Fatalf("got %+v", b)
	}

	// Only tofu in the directory.
	tofuDir := filepath.Join(dir, "tofu")
	os.MkdirAll(tofuDir, 0o755)
	fakeBinary(t, tofuDir, "tofu", "OpenTofu", "1.12.6", true)
	b, err = DetectBinary(tofuDir)
	if err != nil || !b.OpenTofu || b.Version.String() != "1.12.6" {
		t.Fatalf("tofu: %+v %v", b, err)
	}

	// A file, and a version only readable from the plain text.
	plain := fakeBinary(t, dir, "tf-plain", "Terraform", "0.14.11", false)
	bin, ver, err := FindBinary(plain)
	if err != nil || bin != plain || ver.String() != "0.14.11" {
		t.Fatalf("plain: %s %v %v", bin, ver, err)
	}

	// Too old: a clear error; no upper bound.
	old := fakeBinary(t, dir, "tf-old", "Terraform", "0.13.7", true)
	if _, _, err := FindBinary(old); err == nil || !strings.Contains(err.Error(), "too old") || !strings.Contains(err.Error(), "0.14.0") {
		t.Fatalf("old: %v", err)
	}
	future := fakeBinary(t, dir, "tf-future", "Terraform", "9.0.0-beta1", true)
	if _, ver, err := FindBinary(future); err != nil || ver.String() != "9.0.0-beta1" {
		t.Fatalf("future: %v %v", ver, err)
	}

	// Not found / not executable.
	if _, _, err := FindBinary(filepath.Join(dir, "empty-does-not-exist")); err == nil {
		t.Fatal("missing path accepted")
	}
	emptyDir := filepath.Join(dir, "empty")
	os.MkdirAll(emptyDir, 0o755)
	if _, _, err := FindBinary(emptyDir); err == nil || !strings.Contains(err.Error(), "no terraform or tofu") {
		t.Fatalf("empty dir: %v", err)
	}
	notExec := filepath.Join(dir, "notexec")
	os.WriteFile(notExec, []byte("x"), 0o644)
	if _, _, err := FindBinary(notExec); err == nil {
		t.Fatal("non-executable accepted")
	}

	// Empty path: PATH is searched, terraform first, then tofu.
	t.Setenv("PATH", tofuDir)
	b, err = DetectBinary("")
	if err != nil || !b.OpenTofu {
		t.Fatalf("PATH lookup: %+v %v", b, err)
	}
	t.Setenv("PATH", emptyDir)
	if _, err := DetectBinary(""); err == nil {
		t.Fatal("nothing on PATH, yet found")
	}
	// A task's driver built without a binary (the daemon started without
	// one) says which task needs it and what to install.
	_, err = New(localTask(t, t.TempDir(), "web", ""))
	if want := `task "web" needs Terraform to run: neither terraform nor tofu was found on PATH; install Terraform or OpenTofu (0.14.0 or newer) or set driver "terraform" { path }`; err == nil || err.Error() != want {
		t.Fatalf("New without a binary: %v, want %s", err, want)
	}
}

func TestFindRealTerraform(t *testing.T) {
	if testing.Short() {
		t.Skip("real Terraform")
	}
	b, err := DetectBinary("")
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(b.Path) || b.Version.LessThan(MinVersion) {
		t.Fatalf("%+v", b)
	}
	t.Logf("found %s %s (OpenTofu: %v)", b.Path, b.Version, b.OpenTofu)
}
