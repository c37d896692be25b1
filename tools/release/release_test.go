package main

// The release artifacts where users run them (make release-test):
//   - the tarball's binary runs here and prints the release version;
//   - the .deb installs with dpkg (as root): ctsync version, the ctsync user,
//     /var/lib/ctsync, the conffile, `systemd-analyze verify` of the unit;
//     an upgrade keeps the edited configuration; it removes and purges
//     cleanly; the .rpm is intact and holds the same (read by rpm);
//   - the OCI image's root filesystem, unpacked with go-containerregistry,
//     runs `ctsync start -once` under chroot as the image's user against a
//     real Consul (consul agent -dev from .tools) and applies a module whose
//     local-exec runs in busybox's shell;
//   - a second release run gives byte-identical files.
// Tests that need root, dpkg, chroot or consul skip themselves without.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// artifact returns the path of the artifact ending in suffix in -dist.
func artifact(t *testing.T, suffix string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(opts.dist, "ctsync_*_"+suffix))
	if len(m) != 1 {
		t.Fatalf("want one ctsync_*_%s in %s (run make release), found %v", suffix, opts.dist, m)
	}
	return m[0]
}

// shippedConfig checks that path holds packaging/ctsync.hcl, which sets
// the API's listen address to loopback.
func shippedConfig(t *testing.T, path string) {
	t.Helper()
	got, err := os.ReadFile(path)
	must(t, err)
	want, err := os.ReadFile(filepath.Join(opts.root, "packaging", "ctsync.hcl"))
	must(t, err)
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not packaging/ctsync.hcl:\n%s", path, got)
	}
	if !strings.Contains(string(got), "\naddress = \"127.0.0.1\"\n") {
		t.Errorf("%s does not set address = \"127.0.0.1\":\n%s", path, got)
	}
}

// distVersion is the version in the artifacts' names.
func distVersion(t *testing.T) string {
	base := filepath.Base(artifact(t, "oci.tar"))
	return strings.TrimSuffix(strings.TrimPrefix(base, "ctsync_"), "_oci.tar")
}

func needRoot(t *testing.T, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestTarballBinaryRuns(t *testing.T) {
	f, err := os.Open(artifact(t, "linux_amd64.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	dir := t.TempDir()
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(h.Name)), data, os.FileMode(h.Mode)); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(names, ","); got != "LICENSE,README.md,ctsync,ctsync-policy" {
		t.Errorf("tarball holds %s, want LICENSE,README.md,ctsync,ctsync-policy", got)
	}
	out := run(t, filepath.Join(dir, "ctsync"), "version")
	if !strings.HasPrefix(out, "ctsync v"+distVersion(t)+" (") || strings.Contains(out, "(unknown)") {
		t.Errorf("ctsync version:\n%s", out)
	}
	helperRuns(t, filepath.Join(dir, "ctsync-policy"))
}

// helperRuns checks that the policy helper at path runs and is of the
// release's version.
func helperRuns(t *testing.T, path string) {
	t.Helper()
	if out := run(t, path, "version"); !strings.HasPrefix(out, "ctsync-policy v"+distVersion(t)+" (protocol 1, OPA ") {
		t.Errorf("%s version:\n%s", path, out)
	}
}

// Every binary is a static Linux executable for its architecture (the
// arm64 ones cannot run here: their headers are checked).
func TestBinariesStaticPerArch(t *testing.T) {
	for arch, machine := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		if err := staticELF(binaryFromTarballArch(t, arch), machine); err != nil {
			t.Errorf("%s tarball's binary: %v", arch, err)
		}
		if _, err := exec.LookPath("dpkg-deb"); err == nil {
			if a := strings.TrimSpace(run(t, "dpkg-deb", "-f", artifact(t, arch+".deb"), "Architecture")); a != arch {
				t.Errorf("%s.deb: Architecture %q", arch, a)
			}
		}
	}
}

// The arm64 .deb (which cannot be installed here) holds what the amd64
// one does, with the arm64 tarball's binary.
func TestDebArm64Contents(t *testing.T) {
	for _, tool := range []string{"dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	list := func(deb string) string {
		var names []string
		for _, l := range strings.Split(strings.TrimSpace(run(t, "dpkg-deb", "-c", deb)), "\n") {
			f := strings.Fields(l)
			names = append(names, f[0]+" "+f[1]+" "+f[len(f)-1]) // mode, owner, path
		}
		return strings.Join(names, "\n")
	}
	amd, arm := artifact(t, "amd64.deb"), artifact(t, "arm64.deb")
	if a, b := list(amd), list(arm); a != b {
		t.Errorf("the arm64 .deb holds other files than the amd64 one:\namd64:\n%s\narm64:\n%s", a, b)
	}
	for _, f := range []string{"conffiles", "postinst", "prerm", "postrm"} {
		if a, b := run(t, "dpkg-deb", "-I", amd, f), run(t, "dpkg-deb", "-I", arm, f); a != b {
			t.Errorf("%s differs between the amd64 and arm64 .deb", f)
		}
	}
	// Terraform or OpenTofu is recommended (installed by default with
	// apt where a repository has it; the daemon starts without).
	for _, deb := range []string{amd, arm} {
		if got := strings.TrimSpace(run(t, "dpkg-deb", "-f", deb, "Recommends")); got != "terraform | tofu" {
			t.Errorf("%s: Recommends %q, want %q", filepath.Base(deb), got, "terraform | tofu")
		}
	}
	dir := t.TempDir()
	run(t, "dpkg-deb", "-x", arm, dir)
	sameFile(t, filepath.Join(dir, "usr/bin/ctsync"), binaryFromTarballArch(t, "arm64"))
	sameFile(t, filepath.Join(dir, "usr/bin/ctsync-policy"), fileFromTarballArch(t, "arm64", "ctsync-policy"))
}

func sameFile(t *testing.T, a, b string) {
	t.Helper()
	da, err := os.ReadFile(a)
	must(t, err)
	db, err := os.ReadFile(b)
	must(t, err)
	if !bytes.Equal(da, db) {
		t.Errorf("%s and %s differ", a, b)
	}
}

func TestDebInstallsAndRemoves(t *testing.T) {
	needRoot(t, "dpkg", "systemd-analyze")
	if exec.Command("dpkg", "-s", "ctsync").Run() == nil {
		t.Skip("a ctsync package is installed on this machine already; not touching it")
	}
	deb := artifact(t, "amd64.deb")
	// The package leaves the ctsync user behind on purge (as Debian
	// advises); the test removes it if it made it.
	hadUser := exec.Command("getent", "passwd", "ctsync").Run() == nil
	t.Cleanup(func() {
		_ = exec.Command("dpkg", "--purge", "ctsync").Run()
		if !hadUser {
			_ = exec.Command("userdel", "ctsync").Run()
			_ = exec.Command("groupdel", "ctsync").Run()
		}
	})
	run(t, "dpkg", "-i", deb)

	out := run(t, "/usr/bin/ctsync", "version")
	if !strings.HasPrefix(out, "ctsync v"+distVersion(t)+" (") {
		t.Errorf("/usr/bin/ctsync version:\n%s", out)
	}
	helperRuns(t, "/usr/bin/ctsync-policy")
	if pw := run(t, "getent", "passwd", "ctsync"); !strings.Contains(pw, ":/var/lib/ctsync:/usr/sbin/nologin") {
		t.Errorf("ctsync user: %s", pw)
	}
	st, err := os.Stat("/var/lib/ctsync")
	if err != nil || !st.IsDir() {
		t.Fatalf("/var/lib/ctsync: %v", err)
	}
	uid := strings.TrimSpace(run(t, "id", "-u", "ctsync"))
	if got := fmt.Sprint(st.Sys().(*syscall.Stat_t).Uid); got != uid {
		t.Errorf("/var/lib/ctsync is owned by uid %s, want ctsync (%s)", got, uid)
	}
	if cf := run(t, "dpkg-query", "-W", "-f", "${Conffiles}", "ctsync"); !strings.Contains(cf, "/etc/ctsync.d/ctsync.hcl") {
		t.Errorf("conffiles: %q", cf)
	}
	// The shipped configuration keeps the API on loopback until api_auth
	// is set up (internal/cli TestPackagedConfigListensOnLoopback loads it).
	shippedConfig(t, "/etc/ctsync.d/ctsync.hcl")
	for _, p := range []string{"/usr/share/doc/ctsync/LICENSE", "/usr/lib/systemd/system/ctsync.service"} {
		if _, err := os.Stat(p); err != nil {
			t.Error(err)
		}
	}
	if rec := run(t, "dpkg-query", "-W", "-f", "${Recommends}", "ctsync"); rec != "terraform | tofu" {
		t.Errorf("Recommends: %q", rec)
	}
	// The unit wants the network online (as Consul's does) rather than
	// requiring it: a network-online.target that fails (no wait-online
	// service) does not keep ctsync from starting.
	unit, err := os.ReadFile("/usr/lib/systemd/system/ctsync.service")
	must(t, err)
	if !strings.Contains(string(unit), "\nWants=network-online.target\n") || strings.Contains(string(unit), "Requires=network-online.target") {
		t.Errorf("the unit does not use Wants=network-online.target:\n%s", unit)
	}
	// The installed unit, as systemd reads it.
	if out, err := exec.Command("systemd-analyze", "verify", "/usr/lib/systemd/system/ctsync.service").CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}

	// An upgrade (here: the same package again) keeps an edited
	// configuration, and works when the example was deleted.
	edited := []byte("log_level = \"DEBUG\"\n")
	must(t, os.WriteFile("/etc/ctsync.d/ctsync.hcl", edited, 0o640))
	run(t, "dpkg", "-i", deb)
	if got, err := os.ReadFile("/etc/ctsync.d/ctsync.hcl"); err != nil || !bytes.Equal(got, edited) {
		t.Errorf("the edited configuration after an upgrade: %q, %v", got, err)
	}
	must(t, os.Remove("/etc/ctsync.d/ctsync.hcl"))
	run(t, "dpkg", "-i", deb)
	must(t, os.WriteFile("/etc/ctsync.d/ctsync.hcl", edited, 0o640))

	// An edited conffile survives removal; purge takes it and the data.
	if err := os.WriteFile("/var/lib/ctsync/state", []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, "dpkg", "-r", "ctsync")
	if _, err := os.Stat("/usr/bin/ctsync"); !os.IsNotExist(err) {
		t.Errorf("/usr/bin/ctsync after dpkg -r: %v", err)
	}
	if _, err := os.Stat("/etc/ctsync.d/ctsync.hcl"); err != nil {
		t.Errorf("the edited configuration after dpkg -r: %v", err)
	}
	run(t, "dpkg", "--purge", "ctsync")
	for _, p := range []string{"/etc/ctsync.d", "/var/lib/ctsync", "/usr/lib/systemd/system/ctsync.service", "/usr/share/doc/ctsync"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s after dpkg --purge: %v", p, err)
		}
	}
	if exec.Command("dpkg", "-s", "ctsync").Run() == nil {
		t.Errorf("dpkg still knows ctsync after --purge")
	}
}

// The image archive is a valid OCI image layout (what podman load and
// skopeo's oci-archive: read) and a valid Docker archive (manifest.json,
// what docker load reads), naming the same image.
func TestImageArchiveFormats(t *testing.T) {
	path := artifact(t, "oci.tar")
	dir := t.TempDir()
	if out, err := exec.Command("tar", "-xf", path, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("untar: %v\n%s", err, out)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	must(t, err)
	must(t, validate.Index(idx))
	im, err := idx.IndexManifest()
	must(t, err)
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != dockerTag(distVersion(t)) {
		t.Fatalf("index.json: %+v", im.Manifests)
	}
	docker, err := tarball.ImageFromPath(path, nil)
	must(t, err)
	must(t, validate.Image(docker))
	oci, err := idx.Image(im.Manifests[0].Digest)
	must(t, err)
	c1, err := docker.ConfigName()
	must(t, err)
	c2, err := oci.ConfigName()
	must(t, err)
	if c1 != c2 {
		t.Errorf("manifest.json names the configuration %s, the OCI manifest %s", c1, c2)
	}
}

// The .rpm of each architecture, read by rpm itself: intact, with the
// files, the configuration file and the scripts that create the user, and
// the binary of that architecture's tarball.
func TestRPMContents(t *testing.T) {
	if _, err := exec.LookPath("rpm"); err != nil {
		t.Skip("needs rpm")
	}
	for arch, rpmArch := range map[string]string{"amd64": "x86_64", "arm64": "aarch64"} {
		t.Run(rpmArch, func(t *testing.T) { checkRPM(t, artifact(t, rpmArch+".rpm"), rpmArch, arch) })
	}
}

func checkRPM(t *testing.T, pkg, rpmArch, arch string) {
	run(t, "rpm", "--checksig", "--nosignature", pkg)
	files := run(t, "rpm", "-qlp", pkg)
	for _, want := range []string{"/usr/bin/ctsync", "/usr/bin/ctsync-policy", "/usr/lib/systemd/system/ctsync.service", "/etc/ctsync.d/ctsync.hcl", "/usr/share/doc/ctsync/LICENSE"} {
		if !strings.Contains(files, want+"\n") {
			t.Errorf("the rpm lacks %s:\n%s", want, files)
		}
	}
	if cf := run(t, "rpm", "-qcp", pkg); strings.TrimSpace(cf) != "/etc/ctsync.d/ctsync.hcl" {
		t.Errorf("configuration files: %q", cf)
	}
	if s := run(t, "rpm", "-qp", "--scripts", pkg); !strings.Contains(s, "useradd --system") || !strings.Contains(s, "preuninstall") {
		t.Errorf("scripts:\n%s", s)
	}
	if rec := strings.TrimSpace(run(t, "rpm", "-qp", "--recommends", pkg)); rec != "(terraform or tofu)" {
		t.Errorf("recommends: %q", rec)
	}
	if v := run(t, "rpm", "-qp", "--queryformat", "%{ARCH} %{LICENSE}", pkg); v != rpmArch+" MPL-2.0" {
		t.Errorf("arch and licence: %q", v)
	}
	// The binary in it is the tarball's of the same architecture.
	dir := t.TempDir()
	if _, err := exec.LookPath("rpm2archive"); err != nil {
		t.Skip("needs rpm2archive (rpm's tools) to unpack the .rpm")
	}
	abs, err := filepath.Abs(pkg)
	must(t, err)
	cmd := exec.Command("sh", "-c", `rpm2archive - < "$1" | tar -xzf - ./usr/bin/ctsync ./usr/bin/ctsync-policy`, "sh", abs)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("rpm2archive: %v\n%s", err, out)
	}
	sameFile(t, filepath.Join(dir, "usr/bin/ctsync"), binaryFromTarballArch(t, arch))
	sameFile(t, filepath.Join(dir, "usr/bin/ctsync-policy"), fileFromTarballArch(t, arch, "ctsync-policy"))
}

func TestImageRunsUnderChroot(t *testing.T) {
	needRoot(t, "chroot", "consul")
	img, err := tarball.ImageFromPath(artifact(t, "oci.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" || c.WorkingDir != "/var/lib/ctsync" || c.Entrypoint[0] != "/usr/bin/ctsync" {
		t.Errorf("image config: user %q workdir %q entrypoint %q", c.User, c.WorkingDir, c.Entrypoint)
	}
	if _, ok := c.Volumes["/var/lib/ctsync"]; !ok {
		t.Errorf("no volume at /var/lib/ctsync: %v", c.Volumes)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.source":   "https://github.com/ctsync/ctsync",
		"org.opencontainers.image.version":  distVersion(t),
		"org.opencontainers.image.licenses": "MPL-2.0",
	} {
		if c.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], want)
		}
	}

	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	extract(t, mutate.Extract(img), root)
	// What a container runtime provides: /dev/null and friends.
	must(t, os.MkdirAll(filepath.Join(root, "dev"), 0o755))
	for name, dev := range map[string]int{"null": 3, "zero": 5, "random": 8, "urandom": 9} {
		must(t, syscall.Mknod(filepath.Join(root, "dev", name), syscall.S_IFCHR|0o666, 1<<8|dev))
		must(t, os.Chmod(filepath.Join(root, "dev", name), 0o666))
	}

	consul := startConsul(t)
	register(t, consul, `{"ID":"web-1","Name":"web","Address":"10.0.0.1","Port":80}`)

	// A module whose local-exec runs in the image's shell, as its user.
	mod := filepath.Join(root, "var/lib/ctsync/modules/exec")
	must(t, os.MkdirAll(mod, 0o755))
	must(t, os.WriteFile(filepath.Join(mod, "main.tf"), []byte(`
variable "services" {
  type = any
}

resource "terraform_data" "exec" {
  input = sort([for s in var.services : s.name])
  provisioner "local-exec" {
    command = "echo \"$(id -u) ${join(",", self.input)}\" > /var/lib/ctsync/local-exec.out"
  }
}
`), 0o644))
	must(t, filepath.Walk(filepath.Join(root, "var/lib/ctsync/modules"), func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, 65532, 65532)
	}))
	// The image ships the packages' configuration: the API on loopback
	// (docs/install.md: a container is given a configuration of its own).
	shippedConfig(t, filepath.Join(root, "etc/ctsync.d/ctsync.hcl"))
	port := freePort(t)
	must(t, os.WriteFile(filepath.Join(root, "etc/ctsync.d/ctsync.hcl"), []byte(fmt.Sprintf(`
log_level = "INFO"
port = %d
consul {
  address = %q
}
task {
  name   = "exec"
  module = "/var/lib/ctsync/modules/exec"
  condition "services" {
    names = ["web"]
  }
  policy {
    files = ["/var/lib/ctsync/allow.rego"]
  }
}
`, port, consul)), 0o640))
	// A policy that lets the plan through: the image's ctsync-policy, next
	// to ctsync, compiles it at load and evaluates it on the plan.
	must(t, os.WriteFile(filepath.Join(root, "var/lib/ctsync/allow.rego"), []byte("package ctsync\n\ndeny contains \"never\" if input.plan.never\n"), 0o644))
	helperRuns(t, filepath.Join(root, "usr/bin/ctsync-policy"))

	args := append([]string{"--userspec=" + c.User, root, "/bin/sh", "-c",
		`cd "$1" && shift && exec "$@"`, "sh", c.WorkingDir}, c.Entrypoint...)
	args = append(args, "start", "-once", "-config-dir=/etc/ctsync.d")
	cmd := exec.Command("chroot", args...)
	cmd.Env = c.Env
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ctsync start -once in the image: %v\n%s", err, out)
	}
	t.Logf("ctsync start -once in the image took %s", time.Since(start).Round(time.Millisecond))
	got, err := os.ReadFile(filepath.Join(root, "var/lib/ctsync/local-exec.out"))
	if err != nil {
		t.Fatalf("the local-exec did not run: %v\n%s", err, out)
	}
	if strings.TrimSpace(string(got)) != "65532 web" {
		t.Errorf("local-exec wrote %q, want \"65532 web\" (the image's user, the service)", got)
	}
	// The state is in Consul, where the default backend keeps it.
	resp, err := http.Get("http://" + consul + "/v1/kv/consul-terraform-sync/terraform-env:exec")
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("no Terraform state in Consul KV: %s", resp.Status)
	}
	if !strings.Contains(string(out), "OpenTofu") && !strings.Contains(string(out), "tofu") {
		t.Errorf("the run did not use the image's OpenTofu:\n%s", out)
	}
}

// extract unpacks a flattened image filesystem (mutate.Extract) into dir
// with its modes and owners.
func extract(t *testing.T, rc io.ReadCloser, dir string) {
	t.Helper()
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		must(t, err)
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			must(t, os.MkdirAll(p, 0o755))
		case tar.TypeSymlink:
			must(t, os.Symlink(h.Linkname, p))
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			must(t, err)
			_, err = io.Copy(f, tr)
			must(t, err)
			must(t, f.Close())
		default:
			t.Fatalf("unexpected entry %s (type %c)", h.Name, h.Typeflag)
		}
		must(t, os.Lchown(p, h.Uid, h.Gid))
		if h.Typeflag != tar.TypeSymlink {
			must(t, os.Chmod(p, os.FileMode(h.Mode&0o777)|modeBits(h.Mode)))
		}
	}
}

func modeBits(m int64) os.FileMode {
	var f os.FileMode
	if m&0o1000 != 0 {
		f |= os.ModeSticky
	}
	return f
}

func TestReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the release a second time")
	}
	if opts.tofu == "" {
		t.Skip("needs the release inputs (-tofu, -tofu-license, -busybox-root): run make release-test")
	}
	want, err := os.ReadFile(filepath.Join(opts.dist, "SHA256SUMS"))
	must(t, err)
	r := opts
	r.dist = t.TempDir()
	must(t, r.run())
	got, err := os.ReadFile(filepath.Join(r.dist, "SHA256SUMS"))
	must(t, err)
	if !bytes.Equal(got, want) {
		t.Errorf("a second run gave other files:\nfirst:\n%s\nsecond:\n%s", want, got)
	}
}

// startConsul runs a real Consul dev agent on free ports and returns its
// HTTP address once it has a leader.
func startConsul(t *testing.T) string {
	t.Helper()
	httpPort := freePort(t)
	args := []string{"agent", "-dev", "-bind=127.0.0.1", "-client=127.0.0.1", "-node=release-test",
		fmt.Sprintf("-http-port=%d", httpPort), "-dns-port=-1", "-grpc-port=-1", "-grpc-tls-port=-1",
		fmt.Sprintf("-serf-lan-port=%d", freePort(t)), fmt.Sprintf("-serf-wan-port=%d", freePort(t)),
		fmt.Sprintf("-server-port=%d", freePort(t))}
	cmd := exec.Command("consul", args...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("consul:\n%s", logs.String())
		}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", httpPort)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v1/status/leader")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && len(bytes.Trim(b, `"`+"\n")) > 0 {
				return addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("consul has no leader after a minute:\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond) // polling the agent's readiness
	}
}

func register(t *testing.T, addr, service string) {
	t.Helper()
	req, err := http.NewRequest("PUT", "http://"+addr+"/v1/agent/service/register", strings.NewReader(service))
	must(t, err)
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("register %s: %s", service, resp.Status)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
