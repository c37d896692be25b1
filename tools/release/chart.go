package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

// imageRepository is where the image is published, and the name
// `docker load` / `podman load` give the image archive; the chart's
// image.repository defaults to it (a test keeps the two equal).
const imageRepository = "ghcr.io/ctsync/ctsync"

// writeChart writes ctsync-<version>.tgz: deploy/helm/ctsync packaged as
// `helm package` does (the chart's files under ctsync/), its version and
// appVersion set to the release's, so that the chart's default image is
// the one in ctsync_<version>_oci.tar (imageRepository:<version>).
func (r *release) writeChart() error {
	src := filepath.Join(r.root, "deploy", "helm", "ctsync")
	var entries []entry
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if rel == "Chart.yaml" {
			if data, err = stampChart(data, r.version, dockerTag(r.version)); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		entries = append(entries, entry{name: "ctsync/" + filepath.ToSlash(rel), mode: 0o644, data: data})
		return nil
	})
	if err != nil {
		return err
	}
	return writeTarGzFile(filepath.Join(r.dist, "ctsync-"+r.version+".tgz"), entries, r.mtime)
}

var (
	chartVersionLine    = regexp.MustCompile(`(?m)^version:.*$`)
	chartAppVersionLine = regexp.MustCompile(`(?m)^appVersion:.*$`)
)

// stampChart sets a Chart.yaml's version and appVersion.
func stampChart(chart []byte, version, appVersion string) ([]byte, error) {
	if len(chartVersionLine.FindAll(chart, -1)) != 1 || len(chartAppVersionLine.FindAll(chart, -1)) != 1 {
		return nil, fmt.Errorf("want one version: and one appVersion: line")
	}
	chart = chartVersionLine.ReplaceAllLiteral(chart, []byte("version: "+version))
	return chartAppVersionLine.ReplaceAllLiteral(chart, []byte("appVersion: "+strconv.Quote(appVersion))), nil
}
