package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"
	_ "github.com/goreleaser/nfpm/v2/rpm" // registers the rpm packager
)

// writePackage writes the .deb or .rpm of ctsync for arch:
//
//	/usr/bin/ctsync
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
	info := &nfpm.Info{
		Name:        "ctsync",
		Arch:        arch,
		Platform:    "linux",
		Version:     r.version,
		Release:     "1",
		Section:     "admin",
		Priority:    "optional",
		Maintainer:  "ctsync maintainers <ctsync@users.noreply.github.com>",
		Description: "Keeps network infrastructure in sync with the Consul catalog\nctsync watches the Consul catalog and KV store and runs Terraform or\nOpenTofu modules when they change; a drop-in successor to\nConsul-Terraform-Sync.",
		Vendor:      "ctsync",
		Homepage:    "https://github.com/ctsync/ctsync",
		License:     "MPL-2.0",
		MTime:       r.mtime,
		Overridables: nfpm.Overridables{
			Contents: files.Contents{
				{Source: r.bins[arch], Destination: "/usr/bin/ctsync", FileInfo: fi(0o755)},
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
	if format == "deb" {
		info.Depends = []string{"passwd"} // useradd, groupadd (shadow-utils on RPM systems: always there)
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
