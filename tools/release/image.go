package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's user: a fixed non-root id, the one distroless images use.
const (
	imageUID  = 65532
	imageUser = "ctsync"
)

// writeImage writes ctsync_<version>_oci.tar: a linux/amd64 image with
// ctsync, its policy helper ctsync-policy, OpenTofu, CA certificates and busybox (a static /bin/sh for
// local-exec, and the usual commands), running as ctsync (65532) in
// /var/lib/ctsync (a volume), configuration in /etc/ctsync.d.
//
// The archive is an OCI image layout (oci-layout, index.json, blobs/)
// that also holds Docker's manifest.json, as `docker save` writes since
// Docker 25: `docker load`, `podman load` and skopeo's oci-archive: read it.
func (r *release) writeImage() error {
	root, err := r.imageRoot()
	if err != nil {
		return err
	}
	layerTar, err := tarBytes(root, r.mtime)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return err
	}
	created := v1.Time{Time: r.mtime}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: created, CreatedBy: "ctsync release (tools/release)",
		Comment: fmt.Sprintf("ctsync %s (with ctsync-policy), OpenTofu %s, busybox, CA certificates", r.version, r.tofuVersion),
	}})
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = "amd64", "linux", created
	cf.Author = "ctsync"
	cf.Config = v1.Config{
		User:         fmt.Sprintf("%d:%d", imageUID, imageUID),
		Entrypoint:   []string{"/usr/bin/ctsync"},
		Cmd:          []string{"start", "-config-dir=/etc/ctsync.d"},
		WorkingDir:   "/var/lib/ctsync",
		Volumes:      map[string]struct{}{"/var/lib/ctsync": {}},
		ExposedPorts: map[string]struct{}{"8558/tcp": {}},
		Env: []string{
			"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
			"HOME=/var/lib/ctsync",
			"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
		},
		StopSignal: "SIGTERM",
		Labels:     r.imageLabels(),
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(r.dist, r.name("oci.tar")))
	if err != nil {
		return err
	}
	if err := r.writeImageArchive(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (r *release) imageLabels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":         "ctsync",
		"org.opencontainers.image.description":   "Keeps network infrastructure in sync with the Consul catalog (Terraform/OpenTofu)",
		"org.opencontainers.image.source":        "https://github.com/ctsync/ctsync",
		"org.opencontainers.image.url":           "https://github.com/ctsync/ctsync",
		"org.opencontainers.image.documentation": "https://github.com/ctsync/ctsync/blob/main/docs/install.md",
		"org.opencontainers.image.version":       r.version,
		"org.opencontainers.image.revision":      r.commit,
		"org.opencontainers.image.created":       r.mtime.UTC().Format("2006-01-02T15:04:05Z"),
		"org.opencontainers.image.licenses":      "MPL-2.0",
		"io.ctsync.opentofu.version":             r.tofuVersion,
	}
}

// imageRoot lists the image's root filesystem.
func (r *release) imageRoot() ([]entry, error) {
	read := func(p string) ([]byte, error) { return os.ReadFile(p) }
	ctsync, err := read(r.bins["amd64"])
	if err != nil {
		return nil, err
	}
	helper, err := read(r.helpers["amd64"])
	if err != nil {
		return nil, err
	}
	tofu, err := read(r.tofu)
	if err != nil {
		return nil, err
	}
	tofuLicense, err := read(r.tofuLicense)
	if err != nil {
		return nil, err
	}
	certs, err := read(r.caCerts)
	if err != nil {
		return nil, fmt.Errorf("CA certificates: %w", err)
	}
	busyboxPath := filepath.Join(r.busyboxRoot, "bin", "busybox")
	busybox, err := read(busyboxPath)
	if err != nil {
		return nil, err
	}
	busyboxCopyright, err := read(filepath.Join(r.busyboxRoot, "usr", "share", "doc", "busybox-static", "copyright"))
	if err != nil {
		return nil, err
	}
	dir := func(name string, mode int64) entry { return entry{name: name, mode: mode, dir: true} }
	file := func(name string, mode int64, data []byte) entry { return entry{name: name, mode: mode, data: data} }
	es := []entry{
		dir("bin", 0o755), dir("etc", 0o755), dir("etc/ssl", 0o755), dir("etc/ssl/certs", 0o755),
		dir("sbin", 0o755), dir("usr", 0o755), dir("usr/bin", 0o755), dir("usr/sbin", 0o755),
		dir("usr/share", 0o755), dir("usr/share/doc", 0o755), dir("usr/share/doc/ctsync", 0o755),
		dir("usr/share/doc/opentofu", 0o755), dir("usr/share/doc/busybox-static", 0o755),
		dir("var", 0o755), dir("var/lib", 0o755), dir("root", 0o700),
		{name: "tmp", mode: 0o1777, dir: true},
		{name: "etc/ctsync.d", mode: 0o750, dir: true, gid: imageUID},
		{name: "var/lib/ctsync", mode: 0o750, dir: true, uid: imageUID, gid: imageUID},
		file("usr/bin/ctsync", 0o755, ctsync),
		file("usr/bin/ctsync-policy", 0o755, helper),
		file("usr/bin/tofu", 0o755, tofu),
		file("bin/busybox", 0o755, busybox),
		file("etc/ssl/certs/ca-certificates.crt", 0o644, certs),
		{name: "etc/ctsync.d/ctsync.hcl", mode: 0o640, data: r.exampleConfig, gid: imageUID},
		file("etc/passwd", 0o644, []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:ctsync:/var/lib/ctsync:/sbin/nologin\n", imageUser, imageUID, imageUID))),
		file("etc/group", 0o644, []byte(fmt.Sprintf("root:x:0:\n%s:x:%d:\n", imageUser, imageUID))),
		file("usr/share/doc/ctsync/LICENSE", 0o644, r.licenseText),
		file("usr/share/doc/opentofu/LICENSE", 0o644, tofuLicense),
		file("usr/share/doc/busybox-static/copyright", 0o644, busyboxCopyright),
	}
	// busybox's applets as symlinks (sh, ls, cat, ...), where its own
	// list puts them; the list comes from running the (static, amd64)
	// binary here.
	out, err := exec.Command(busyboxPath, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list-full: %w", err)
	}
	taken := map[string]bool{}
	for _, e := range es {
		taken[e.name] = true
	}
	for _, p := range strings.Fields(string(out)) {
		p = strings.TrimPrefix(path.Clean("/"+p), "/")
		if taken[p] || !taken[path.Dir(p)] {
			continue
		}
		taken[p] = true
		es = append(es, entry{name: p, mode: 0o777, link: "/bin/busybox"})
	}
	if !taken["bin/sh"] {
		return nil, fmt.Errorf("busybox at %s has no sh applet", busyboxPath)
	}
	return es, nil
}

// writeImageArchive writes img as an OCI image layout in a tar, plus
// Docker's manifest.json naming the same blobs.
func (r *release) writeImageArchive(w io.Writer, img v1.Image) error {
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	configName, err := img.ConfigName()
	if err != nil {
		return err
	}
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
	entries := []entry{
		{name: "blobs", mode: 0o755, dir: true},
		{name: "blobs/sha256", mode: 0o755, dir: true},
		{name: "oci-layout", mode: 0o644, data: []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{name: blob(digest), mode: 0o644, data: manifest},
		{name: blob(configName), mode: 0o644, data: config},
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	var layerPaths []string
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		entries = append(entries, entry{name: blob(d), mode: 0o644, data: data})
		layerPaths = append(layerPaths, blob(d))
	}
	ref := imageRepository + ":" + dockerTag(r.version)
	index := map[string]any{
		"schemaVersion": 2,
		"mediaType":     types.OCIImageIndex,
		"manifests": []map[string]any{{
			"mediaType": types.OCIManifestSchema1,
			"digest":    digest.String(),
			"size":      len(manifest),
			"platform":  map[string]string{"architecture": "amd64", "os": "linux"},
			"annotations": map[string]string{
				"io.containerd.image.name":          ref,
				"org.opencontainers.image.ref.name": dockerTag(r.version),
			},
		}},
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}
	dockerManifest, err := json.Marshal([]map[string]any{{
		"Config": blob(configName), "RepoTags": []string{ref}, "Layers": layerPaths,
	}})
	if err != nil {
		return err
	}
	entries = append(entries,
		entry{name: "index.json", mode: 0o644, data: indexJSON},
		entry{name: "manifest.json", mode: 0o644, data: dockerManifest})
	return writeTar(w, entries, r.mtime)
}

// dockerTag makes version a valid image tag ([A-Za-z0-9_.-], at most 128).
func dockerTag(version string) string {
	t := regexp.MustCompile(`[^A-Za-z0-9_.-]`).ReplaceAllString(version, "-")
	if len(t) > 128 {
		t = t[:128]
	}
	return t
}
