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
			bins: map[string]string{"amd64": bin}, licenseText: []byte("licence"), readmeMD: []byte("readme"),
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
