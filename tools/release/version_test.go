package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Packages built at successive versions sort in the order they were made,
// for dpkg and for rpm: pre-release snapshots, a release candidate, builds
// after it, the release, builds after the release (git describe's
// -N-g<commit>), the next release; and a dirty tree after its commit
// (its place among later commits is undefined). Each package is a real
// .deb and .rpm written by writePackage (with a stand-in binary), its
// version read back by dpkg-deb and rpm and compared by dpkg and rpm.
func TestPackageVersionsSort(t *testing.T) {
	for _, tool := range []string{"dpkg", "dpkg-deb", "rpm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	chains := [][]string{{
		"0.0.0-20261120101010-aaaaaaaaaaaa",
		"0.0.0-20261126043530-80cd67597e44",
		"1.2.0-rc.1",
		"1.2.0-rc.1-2-gabc1234",
		"1.2.0",
		"1.2.0-3-gabc1234",
		"1.2.0-3-gabc1234-dirty",
		"1.2.0-12-g0123456",
		"1.2.1",
	}, {"1.2.0", "1.2.0-dirty", "1.2.1"}}
	for _, versions := range chains {
		checkOrder(t, versions)
	}
}

func checkOrder(t *testing.T, versions []string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "ctsync")
	must(t, os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755))
	var debs, rpms []string
	for _, v := range versions {
		r := &release{
			dist: filepath.Join(dir, v), version: v, mtime: time.Unix(1764131730, 0),
			bins: map[string]string{"amd64": bin}, helpers: map[string]string{"amd64": bin}, licenseText: []byte("licence"), readmeMD: []byte("readme"),
			unit: []byte("[Unit]\n"), exampleConfig: []byte("# example\n"),
			postinst: []byte("#!/bin/sh\n"), prerm: []byte("#!/bin/sh\n"), postrm: []byte("#!/bin/sh\n"),
		}
		must(t, os.MkdirAll(r.dist, 0o755))
		for _, format := range []string{"deb", "rpm"} {
			if err := r.writePackage(format, "amd64"); err != nil {
				t.Fatalf("%s %s: %v", format, v, err)
			}
		}
		deb, _ := filepath.Glob(filepath.Join(r.dist, "*.deb"))
		rpm, _ := filepath.Glob(filepath.Join(r.dist, "*.rpm"))
		debs = append(debs, strings.TrimSpace(run(t, "dpkg-deb", "-f", deb[0], "Version")))
		rpms = append(rpms, run(t, "rpm", "-qp", "--queryformat", "%{VERSION}-%{RELEASE}", rpm[0]))
	}
	for i := 1; i < len(versions); i++ {
		if err := exec.Command("dpkg", "--compare-versions", debs[i-1], "lt", debs[i]).Run(); err != nil {
			t.Errorf("dpkg: %s (%s) does not sort before %s (%s)", debs[i-1], versions[i-1], debs[i], versions[i])
		}
		cmp := strings.TrimSpace(run(t, "rpm", "--eval", "%{lua: print(rpm.vercmp('"+rpms[i-1]+"', '"+rpms[i]+"'))}"))
		if cmp != "-1" {
			t.Errorf("rpm: %s (%s) does not sort before %s (%s): vercmp %s", rpms[i-1], versions[i-1], rpms[i], versions[i], cmp)
		}
	}
	t.Logf("deb: %s", strings.Join(debs, " < "))
	t.Logf("rpm: %s", strings.Join(rpms, " < "))
}

func TestPackageVersionRefusesNonSemver(t *testing.T) {
	if _, _, _, err := packageVersion("release-7"); err == nil || !strings.Contains(err.Error(), `"release-7"`) {
		t.Errorf("packageVersion(release-7): %v", err)
	}
}

// The release refuses to put a tofu into the image that cannot run there:
// a dynamically linked one (as a distribution's package may be) or one for
// another machine.
func TestStaticELF(t *testing.T) {
	if err := staticELF("/bin/sh", elf.EM_X86_64); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("/bin/sh: %v", err)
	}
	bin := binaryFromTarballArch(t, "arm64")
	if err := staticELF(bin, elf.EM_X86_64); err == nil || !strings.Contains(err.Error(), "EM_AARCH64") {
		t.Errorf("the arm64 ctsync as amd64: %v", err)
	}
	if err := staticELF(binaryFromTarball(t), elf.EM_X86_64); err != nil {
		t.Errorf("the amd64 ctsync: %v", err)
	}
	if opts.tofu != "" {
		if err := staticELF(opts.tofu, elf.EM_X86_64); err != nil {
			t.Errorf("-tofu %s: %v", opts.tofu, err)
		}
	}
}

// The release version when the tags did not travel (a clone or a merge
// without them): scripts/version.sh, in a repository of its own, takes the
// newest release heading of CHANGELOG.md and the commit that added it. At
// that commit it prints the release (0.1.0), N commits later what git
// describe would (0.1.0-N-g<commit>, whose package sorts after it), with
// local changes -dirty; a tag wins over the heading. A ctsync built with
// its linker flags at the release commit says `ctsync v0.1.0`.
func TestVersionFromChangelog(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("needs git")
	}
	root, err := filepath.Abs(opts.root)
	must(t, err)
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "scripts"), 0o755))
	script, err := os.ReadFile(filepath.Join(root, "scripts", "version.sh"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "scripts", "version.sh"), script, 0o755))
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	commit := func(changelog string) string {
		t.Helper()
		must(t, os.WriteFile(filepath.Join(dir, "CHANGELOG.md"), []byte(changelog), 0o644))
		git("add", "-A")
		git("commit", "-q", "-m", "change")
		return git("rev-parse", "--short=7", "HEAD")
	}
	version := func(arg ...string) string {
		t.Helper()
		return strings.TrimSpace(run(t, "bash", append([]string{filepath.Join(dir, "scripts", "version.sh")}, arg...)...))
	}
	git("init", "-q")
	const head = "# Changelog\n\n## Unreleased\n\n"
	commit(head + "- a change\n")
	if v := version(); !strings.HasPrefix(v, "0.0.0-") {
		t.Errorf("before any release: %q, want a pseudo-version", v)
	}
	release := head + "## 0.1.0 — 2026-11-29\n\n### Added\n- a change\n"
	commit(release)
	if v := version(); v != "0.1.0" {
		t.Errorf("at the release commit: %q, want 0.1.0", v)
	}
	ldflags := version("ldflags")
	commit(release + "\n")
	later := commit(strings.Replace(release, "## Unreleased\n\n", "## Unreleased\n\n- a fix\n\n", 1))
	if v := version(); v != "0.1.0-2-g"+later {
		t.Errorf("two commits after the release: %q, want 0.1.0-2-g%s", v, later)
	}
	if pv, _, meta, err := packageVersion(version()); err != nil || pv != "0.1.0" || meta != "2.g"+later {
		t.Errorf("its package version: %s+%s (%v), want 0.1.0+2.g%s", pv, meta, err, later)
	}
	must(t, os.WriteFile(filepath.Join(dir, "CHANGELOG.md"), []byte(release+"edited\n"), 0o644))
	if v := version(); v != "0.1.0-2-g"+later+"-dirty" {
		t.Errorf("with local changes: %q", v)
	}
	git("checkout", "-q", "--", "CHANGELOG.md")
	git("tag", "v0.2.0")
	if v := version(); v != "0.2.0" {
		t.Errorf("tagged v0.2.0: %q, want the tag's version", v)
	}

	// The binary built at the release commit, with its linker flags.
	if testing.Short() {
		return
	}
	bin := filepath.Join(t.TempDir(), "ctsync")
	build := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, "./cmd/ctsync")
	build.Dir = root
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if out := run(t, bin, "version"); !strings.HasPrefix(out, "ctsync v0.1.0 (") {
		t.Errorf("ctsync version at the release commit:\n%s", out)
	}
}
