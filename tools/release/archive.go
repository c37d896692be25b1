package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"sort"
	"time"
)

// entry is one file, directory or symlink of an archive.
type entry struct {
	name     string // path without a leading slash; directories without a trailing one
	mode     int64
	data     []byte
	dir      bool
	link     string // symlink target
	uid, gid int
}

// writeTar writes entries as a tar stream in path order, every entry with
// the same mtime and no user or group names, so equal inputs give equal
// bytes.
func writeTar(w io.Writer, entries []entry, mtime time.Time) error {
	sorted := append([]entry(nil), entries...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	tw := tar.NewWriter(w)
	for _, e := range sorted {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: mtime, Uid: e.uid, Gid: e.gid, Format: tar.FormatPAX}
		switch {
		case e.dir:
			h.Typeflag, h.Name = tar.TypeDir, e.name+"/"
		case e.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(e.data); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// writeTarGz is writeTar, gzip-compressed with an empty gzip header (no
// name, no time).
func writeTarGz(w io.Writer, entries []entry, mtime time.Time) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	if err := writeTar(zw, entries, mtime); err != nil {
		return err
	}
	return zw.Close()
}

// writeTarGzFile is writeTarGz into the file at path.
func writeTarGzFile(path string, entries []entry, mtime time.Time) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeTarGz(f, entries, mtime); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// tarBytes is writeTar into memory.
func tarBytes(entries []entry, mtime time.Time) ([]byte, error) {
	var b bytes.Buffer
	err := writeTar(&b, entries, mtime)
	return b.Bytes(), err
}
