// Command release writes ctsync's release artifacts into dist/: for linux
// amd64 and arm64 a tarball (the binaries ctsync and ctsync-policy, its
// policy helper; LICENSE, README.md), a .deb and an .rpm (built with nfpm:
// both binaries, systemd unit, commented configuration, the ctsync user,
// /var/lib/ctsync), an OCI image archive (built with go-containerregistry:
// ctsync, ctsync-policy, OpenTofu, CA certificates and busybox's shell,
// amd64), the Helm chart stamped with the release's version, and
// SHA256SUMS over them.
//
// The output is reproducible: the binaries are built with -trimpath and an
// empty build id, every file in every archive carries the commit time, and
// entries are written in a fixed order, so two runs on one commit give
// byte-identical files. It runs from `make release` (see the Makefile for
// the inputs it is given); it is a module of its own so that nfpm and
// go-containerregistry stay out of the daemon's dependencies.
package main

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// release is what one run knows: where things are and what it builds.
type release struct {
	root    string    // the ctsync repository
	dist    string    // the output directory
	version string    // from scripts/version.sh (git describe)
	commit  string    // full commit id
	mtime   time.Time // the commit time: every file's mtime
	ldflags string    // -X flags stamping version, commit and date

	tofu, tofuLicense       string // OpenTofu (linux/amd64) for the image
	busyboxRoot             string // the unpacked busybox-static .deb
	caCerts                 string // a PEM bundle of CA certificates
	tofuVersion             string
	arches                  []string
	bins                    map[string]string // arch -> built ctsync
	helpers                 map[string]string // arch -> built ctsync-policy
	licenseText, readmeMD   []byte
	unit, exampleConfig     []byte
	postinst, prerm, postrm []byte
}

// opts is the command line (also accepted by the tests, which check the
// artifacts in -dist and rebuild them for the reproducibility test).
var opts release

func init() {
	flag.StringVar(&opts.root, "root", ".", "the ctsync repository")
	flag.StringVar(&opts.dist, "dist", "dist", "output directory (emptied first)")
	flag.StringVar(&opts.tofu, "tofu", "", "OpenTofu binary for linux/amd64, put in the image")
	flag.StringVar(&opts.tofuLicense, "tofu-license", "", "OpenTofu's LICENSE file")
	flag.StringVar(&opts.busyboxRoot, "busybox-root", "", "the unpacked busybox-static .deb (bin/busybox)")
	flag.StringVar(&opts.caCerts, "ca-certificates", "/etc/ssl/certs/ca-certificates.crt", "CA certificate bundle for the image")
}

func main() {
	flag.Parse()
	r := opts
	start := time.Now()
	if err := r.run(); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
	fmt.Printf("release: ctsync %s in %s (%s)\n", r.version, r.dist, time.Since(start).Round(time.Second))
}

func (r *release) run() error {
	r.arches = []string{"amd64", "arm64"}
	for name, p := range map[string]string{"-tofu": r.tofu, "-tofu-license": r.tofuLicense, "-busybox-root": r.busyboxRoot} {
		if p == "" {
			return fmt.Errorf("%s is required", name)
		}
	}
	if err := r.readSource(); err != nil {
		return err
	}
	if err := os.RemoveAll(r.dist); err != nil {
		return err
	}
	if err := os.MkdirAll(r.dist, 0o755); err != nil {
		return err
	}
	bindir, err := os.MkdirTemp("", "ctsync-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bindir)
	r.bins, r.helpers = map[string]string{}, map[string]string{}
	for _, arch := range r.arches {
		if r.bins[arch], err = r.buildBinary(bindir, arch, "ctsync"); err != nil {
			return err
		}
		if r.helpers[arch], err = r.buildBinary(bindir, arch, "ctsync-policy"); err != nil {
			return err
		}
		if err := r.writeTarball(arch); err != nil {
			return err
		}
		for _, format := range []string{"deb", "rpm"} {
			if err := r.writePackage(format, arch); err != nil {
				return fmt.Errorf("%s %s: %w", format, arch, err)
			}
		}
	}
	if err := r.writeImage(); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if err := r.writeChart(); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return r.writeSums()
}

// readSource reads the version (scripts/version.sh) and the files the
// artifacts carry.
func (r *release) readSource() error {
	out, err := exec.Command("bash", filepath.Join(r.root, "scripts", "version.sh"), "all").Output()
	if err != nil {
		return fmt.Errorf("scripts/version.sh: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 {
		return fmt.Errorf("scripts/version.sh all printed %q", out)
	}
	r.version, r.commit = lines[0], lines[1]
	if r.mtime, err = time.Parse(time.RFC3339, lines[2]); err != nil {
		return fmt.Errorf("commit time %q: %w", lines[2], err)
	}
	out, err = exec.Command("bash", filepath.Join(r.root, "scripts", "version.sh"), "ldflags").Output()
	if err != nil {
		return fmt.Errorf("scripts/version.sh ldflags: %w", err)
	}
	r.ldflags = strings.TrimSpace(string(out))
	tofu := exec.Command(r.tofu, "version", "-json")
	tofu.Env = []string{"TF_CLI_CONFIG_FILE=/dev/null", "CHECKPOINT_DISABLE=1"} // no warnings in the output
	out, err = tofu.Output()
	if err != nil {
		return fmt.Errorf("%s version -json: %w", r.tofu, err)
	}
	var tv struct {
		Version string `json:"terraform_version"`
	}
	if err := json.Unmarshal(out, &tv); err != nil || tv.Version == "" {
		return fmt.Errorf("%s version -json printed %q: %v", r.tofu, out, err)
	}
	r.tofuVersion = tv.Version
	if err := staticELF(r.tofu, elf.EM_X86_64); err != nil {
		return fmt.Errorf("-tofu %s cannot go into the linux/amd64 image: %w", r.tofu, err)
	}

	for _, f := range []struct {
		dst  *[]byte
		path string
	}{
		{&r.licenseText, "LICENSE"}, {&r.readmeMD, "README.md"},
		{&r.unit, "packaging/ctsync.service"}, {&r.exampleConfig, "packaging/ctsync.hcl"},
		{&r.postinst, "packaging/postinstall.sh"}, {&r.prerm, "packaging/preremove.sh"},
		{&r.postrm, "packaging/postremove.sh"},
	} {
		if *f.dst, err = os.ReadFile(filepath.Join(r.root, f.path)); err != nil {
			return err
		}
	}
	return nil
}

// buildBinary cross-compiles cmd/<name> (ctsync, ctsync-policy) for
// linux/arch, reproducibly.
func (r *release) buildBinary(dir, arch, name string) (string, error) {
	out := filepath.Join(dir, name+"_linux_"+arch)
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -buildid= "+r.ldflags, "-o", out, "./cmd/"+name)
	cmd.Dir = r.root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s linux/%s: %w", name, arch, err)
	}
	return out, nil
}

// name is the file name of an artifact: ctsync_<version>_<suffix>.
func (r *release) name(suffix string) string { return "ctsync_" + r.version + "_" + suffix }

// writeTarball writes ctsync_<version>_linux_<arch>.tar.gz.
func (r *release) writeTarball(arch string) error {
	bin, err := os.ReadFile(r.bins[arch])
	if err != nil {
		return err
	}
	helper, err := os.ReadFile(r.helpers[arch])
	if err != nil {
		return err
	}
	entries := []entry{
		{name: "ctsync", mode: 0o755, data: bin},
		{name: "ctsync-policy", mode: 0o755, data: helper},
		{name: "LICENSE", mode: 0o644, data: r.licenseText},
		{name: "README.md", mode: 0o644, data: r.readmeMD},
	}
	return writeTarGzFile(filepath.Join(r.dist, r.name("linux_"+arch+".tar.gz")), entries, r.mtime)
}

// writeSums writes SHA256SUMS over every artifact, in the format of
// sha256sum (check with `sha256sum -c SHA256SUMS`).
func (r *release) writeSums() error {
	names, err := filepath.Glob(filepath.Join(r.dist, "ctsync_*"))
	if err != nil {
		return err
	}
	charts, err := filepath.Glob(filepath.Join(r.dist, "ctsync-*.tgz"))
	if err != nil {
		return err
	}
	names = append(names, charts...)
	sort.Strings(names)
	var b strings.Builder
	for _, p := range names {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), filepath.Base(p))
	}
	return os.WriteFile(filepath.Join(r.dist, "SHA256SUMS"), []byte(b.String()), 0o644)
}

// staticELF checks that the file at p is a statically linked Linux
// executable for machine: the image has no C library and no loader.
func staticELF(p string, machine elf.Machine) error {
	f, err := elf.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if f.Machine != machine {
		return fmt.Errorf("an executable for %s, not %s", f.Machine, machine)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("dynamically linked (it needs a loader and a C library)")
		}
	}
	return nil
}
