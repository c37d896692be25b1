package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/Masterminds/semver/v3"
	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"
	_ "github.com/goreleaser/nfpm/v2/rpm" // registers the rpm packager
)

// writePackage writes the .deb or .rpm of ctsync for arch:
//
//	/usr/bin/ctsync
//	/usr/bin/ctsync-policy                the policy helper, next to ctsync
//	/usr/lib/systemd/system/ctsync.service
//	/etc/ctsync.d/ctsync.hcl             a conffile, kept on upgrade
//	/var/lib/ctsync                      the working directory (postinstall)
//	/usr/share/doc/ctsync/LICENSE, README.md
//
// The install scripts (packaging/*.sh) create the ctsync system user.
func (r *release) writePackage(format, arch string) error {
	tmp, err := os.MkdirTemp("", "ctsync-pkg-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// nfpm reads contents and scripts from files.
	src := map[string][]byte{
		"ctsync.service": r.unit, "ctsync.hcl": r.exampleConfig, "LICENSE": r.licenseText,
		"README.md": r.readmeMD, "postinstall.sh": r.postinst, "preremove.sh": r.prerm,
		"postremove.sh": r.postrm,
	}
	for name, data := range src {
		if err := os.WriteFile(filepath.Join(tmp, name), data, 0o644); err != nil {
			return err
		}
	}
	in := func(name string) string { return filepath.Join(tmp, name) }
	fi := func(mode os.FileMode) *files.ContentFileInfo {
		return &files.ContentFileInfo{Owner: "root", Group: "root", Mode: mode, MTime: r.mtime}
	}
	version, prerelease, metadata, err := packageVersion(r.version)
	if err != nil {
		return err
	}
	info := &nfpm.Info{
		Name:            "ctsync",
		Arch:            arch,
		Platform:        "linux",
		Version:         version,
		Prerelease:      prerelease,
		VersionMetadata: metadata,
		Release:         "1",
		Section:         "admin",
		Priority:        "optional",
		Maintainer:      "ctsync maintainers <ctsync@users.noreply.github.com>",
		Description:     "Keeps network infrastructure in sync with the Consul catalog\nctsync watches the Consul catalog and KV store and runs Terraform or\nOpenTofu modules when they change; a drop-in successor to\nConsul-Terraform-Sync.",
		Vendor:          "ctsync",
		Homepage:        "https://github.com/ctsync/ctsync",
		License:         "MPL-2.0",
		MTime:           r.mtime,
		Overridables: nfpm.Overridables{
			Contents: files.Contents{
				{Source: r.bins[arch], Destination: "/usr/bin/ctsync", FileInfo: fi(0o755)},
				{Source: r.helpers[arch], Destination: "/usr/bin/ctsync-policy", FileInfo: fi(0o755)},
				{Source: in("ctsync.service"), Destination: "/usr/lib/systemd/system/ctsync.service", FileInfo: fi(0o644)},
				{Destination: "/etc/ctsync.d", Type: files.TypeDir, FileInfo: fi(0o750)},
				{Source: in("ctsync.hcl"), Destination: "/etc/ctsync.d/ctsync.hcl", Type: files.TypeConfigNoReplace, FileInfo: fi(0o640)},
				{Source: in("LICENSE"), Destination: "/usr/share/doc/ctsync/LICENSE", FileInfo: fi(0o644)},
				{Source: in("README.md"), Destination: "/usr/share/doc/ctsync/README.md", FileInfo: fi(0o644)},
			},
			Scripts: nfpm.Scripts{
				PostInstall: in("postinstall.sh"),
				PreRemove:   in("preremove.sh"),
				PostRemove:  in("postremove.sh"),
			},
			RPM: nfpm.RPM{BuildHost: "ctsync-release", Packager: "ctsync", Group: "System Environment/Daemons"},
		},
	}
	// Terraform runs the tasks (the daemon starts without it while it has
	// none): recommended, installed by default where the package manager
	// has it (HashiCorp's repository names it terraform, OpenTofu's tofu).
	if format == "deb" {
		info.Depends = []string{"passwd"} // useradd, groupadd (shadow-utils on RPM systems: always there)
		info.Recommends = []string{"terraform | tofu"}
	} else {
		info.Recommends = []string{"(terraform or tofu)"}
	}
	info = nfpm.WithDefaults(info)
	if err := nfpm.PrepareForPackager(info, format); err != nil {
		return err
	}
	pkg, err := nfpm.Get(format)
	if err != nil {
		return err
	}
	suffix := arch + ".deb"
	if format == "rpm" {
		suffix = map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[arch] + ".rpm"
	}
	out := filepath.Join(r.dist, r.name(suffix))
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := pkg.Package(info, f); err != nil {
		f.Close()
		return fmt.Errorf("nfpm: %w", err)
	}
	return f.Close()
}

// describeSuffix is what `git describe` adds after the tag for a later
// commit: -<commits since the tag>-g<commit>.
var describeSuffix = regexp.MustCompile(`^(.+)-([0-9]+)-g([0-9a-f]+)$`)

// packageVersion splits a version from scripts/version.sh into what nfpm
// writes as the package version, <version>[~<prerelease>][+<metadata>], so
// that dpkg and rpm order releases as they were made:
//
//	1.3.0-rc.1            1.3.0~rc.1        before 1.3.0 (a release candidate)
//	1.2.0-3-gabc1234      1.2.0+3.gabc1234  after 1.2.0 (3 commits later)
//	1.2.0-dirty           1.2.0+dirty       after 1.2.0 (local changes)
//	0.0.0-<time>-<commit> 0.0.0~<time>-<commit>  before any release, by time
//
// Given whole to nfpm, the describe suffix would become a prerelease and a
// build made after 1.2.0 would sort before it (dpkg would see the upgrade
// as a downgrade).
func packageVersion(v string) (version, prerelease, metadata string, err error) {
	var meta []string
	base, dirty := strings.CutSuffix(v, "-dirty")
	if m := describeSuffix.FindStringSubmatch(base); m != nil {
		base, meta = m[1], []string{m[2], "g" + m[3]}
	}
	if dirty {
		meta = append(meta, "dirty")
	}
	sv, err := semver.StrictNewVersion(base)
	if err != nil {
		return "", "", "", fmt.Errorf("version %q: %q is not a semantic version: %w", v, base, err)
	}
	if sv.Metadata() != "" {
		meta = append([]string{sv.Metadata()}, meta...)
	}
	return fmt.Sprintf("%d.%d.%d", sv.Major(), sv.Minor(), sv.Patch()), sv.Prerelease(), strings.Join(meta, "."), nil
}
