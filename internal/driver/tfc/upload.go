package tfc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	tfe "github.com/hashicorp/go-tfe"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/driver/terraform"
	"github.com/ctsync/ctsync/internal/task"
)

// ---- the upload ----

// stage writes the configuration of a run into <WorkDir>/upload: the
// generated root module, the inputs, and the local module under module/.
// It returns the folder and a digest of everything in it.
func (d *Driver) stage(in *task.Inputs) (string, string, error) {
	files, err := terraform.RemoteRootModule(rootOptions(&d.opts), in)
	if err != nil {
		return "", "", err
	}
	dir := filepath.Join(d.opts.WorkDir, "upload")
	if err := os.RemoveAll(dir); err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return "", "", err
		}
	}
	if src := d.opts.localModuleDir(); src != "" {
		if err := copyTree(src, filepath.Join(dir, moduleDir)); err != nil {
			return "", "", fmt.Errorf("module %q: %w", d.opts.Spec.Module, err)
		}
	}
	digest, err := treeDigest(dir)
	return dir, digest, err
}

// copyTree copies the regular files under src (symbolic links followed;
// .terraform and .git left out) into dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if e.IsDir() {
			if p != src && (e.Name() == ".terraform" || e.Name() == ".git") {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o700)
		}
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, st.Mode().Perm()|0o600)
	})
}

// treeDigest hashes the names and contents of the files under dir.
func treeDigest(dir string) (string, error) {
	var names []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			names = append(names, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%d:%s%d:", len(n), n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:20], nil
}

// upload creates a configuration version and uploads the staged folder.
func (d *Driver) upload(ctx context.Context, op, dir string) (*tfe.ConfigurationVersion, error) {
	cv, err := d.client.ConfigurationVersions.Create(ctx, d.ws.ID, tfe.ConfigurationVersionCreateOptions{
		AutoQueueRuns: tfe.Bool(false), Speculative: tfe.Bool(op == "plan"),
	})
	if err != nil {
		return nil, d.apiError(ctx, op, fmt.Sprintf("creating a configuration version in workspace %q", d.name), err)
	}
	u := cv.UploadURL
	if strings.HasPrefix(u, "/") { // some servers (OTF) answer a host-relative URL
		u = d.opts.Config.Address + u
	}
	if err := d.client.ConfigurationVersions.Upload(ctx, u, dir); err != nil {
		return nil, d.apiError(ctx, op, "uploading the configuration", err)
	}
	// The server unpacks the upload before a run can use it.
	for cv.Status != tfe.ConfigurationUploaded {
		if cv.Status == tfe.ConfigurationErrored {
			return nil, &driver.Error{Op: op, Summary: fmt.Sprintf("configuration version %s errored: %s", cv.ID, cv.ErrorMessage)}
		}
		select {
		case <-ctx.Done():
			return nil, &driver.Error{Op: op, Summary: "waiting for the upload: " + ctx.Err().Error(), Err: ctx.Err()}
		case <-time.After(d.opts.PollInterval / 5):
		}
		if cv, err = d.client.ConfigurationVersions.Read(ctx, cv.ID); err != nil {
			return nil, d.apiError(ctx, op, "reading configuration version", err)
		}
	}
	return cv, nil
}

// ---- run logs ----

func (d *Driver) openRunLog(run driver.Run) (*os.File, string, error) {
	dir := filepath.Join(d.opts.WorkDir, "runs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	id := run.ID
	if id == "" || strings.ContainsAny(id, `/\`) {
		id = fmt.Sprintf("run-%d", time.Now().UnixNano())
	}
	p := filepath.Join(dir, id+".log")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, "", err
	}
	d.pruneLogs(dir)
	return f, p, nil
}

func (d *Driver) pruneLogs(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) <= d.opts.KeepRunLogs {
		return
	}
	type fileAge struct {
		name string
		mod  time.Time
	}
	var fs []fileAge
	for _, e := range entries {
		if info, err := e.Info(); err == nil {
			fs = append(fs, fileAge{e.Name(), info.ModTime()})
		}
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].mod.Before(fs[j].mod) })
	for _, f := range fs[:len(fs)-d.opts.KeepRunLogs] {
		_ = os.Remove(filepath.Join(dir, f.name))
	}
}
