package terraform

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/hcl/v2/hclwrite"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/task"
)

// DesiredState returns the digests of the parts of a task's desired state
// that the driver knows and the task's spec does not hold (see
// reconcile.DesiredFunc):
//
//   - driver.PartModule: for a local module (a source starting with ./,
//     ../ or /), a hash of the contents of every file under its directory,
//     .terraform/ and .git/ left out; for any other source, the source and
//     the version constraint;
//   - driver.PartModuleResolved: for a module that is not local, the
//     version the last `terraform init` in the task's directory resolved
//     (from .terraform/modules/modules.json), when there is one: recorded
//     with what a run used, it does not trigger a run (the first run
//     resolves it; another instance, or a removed working directory,
//     resolves it again);
//   - driver.PartProviders: the resolved provider arguments and task_env
//     of the task's terraform_provider blocks, hashed (never kept in clear);
//   - driver.PartBackend and driver.PartRequiredProviders: as they are
//     written into the generated root module;
//   - driver.PartBinary: the binary's path and the version it reports
//     (asked again when the file changes).
//
// An error names what could not be read (a module directory that vanished).
// A configuration the driver refuses is not an error here: it is hashed as
// is, and the run reports it.
func DesiredState(ctx context.Context, o Options) (map[string]string, error) {
	parts := map[string]string{}
	mod, err := moduleDigest(o)
	if err != nil {
		return nil, err
	}
	parts[driver.PartModule] = mod
	if !IsLocalModule(o.Spec.Module) {
		if v := resolvedModuleVersion(o.WorkDir, o.Spec.Name); v != "" {
			parts[driver.PartModuleResolved] = digestOf(v)
		}
	}
	bin := o.Binary
	if bin == "" {
		if b, err := locate(o.Driver.Path); err == nil {
			bin = b
		}
	}
	if bin != "" {
		v, err := cachedVersion(ctx, bin)
		if err != nil {
			return nil, fmt.Errorf("binary: %w", err)
		}
		parts[driver.PartBinary] = digestOf(bin, v)
	}
	rm, err := newRootModule(&o)
	if err != nil {
		parts[driver.PartProviders] = digestOf("invalid", err.Error())
		return parts, nil
	}
	providers, err := rm.providersJSON()
	if err != nil {
		return nil, fmt.Errorf("provider configuration: %w", err)
	}
	h := sha256.New()
	h.Write(providers)
	for _, p := range rm.providers {
		for _, k := range slices.Sorted(maps.Keys(p.TaskEnv)) {
			fmt.Fprintf(h, "\x00env\x00%s\x00%s\x00%s", p.Ref(), k, p.TaskEnv[k])
		}
	}
	parts[driver.PartProviders] = hex.EncodeToString(h.Sum(nil))

	f := hclwrite.NewEmptyFile()
	be := f.Body().AppendNewBlock("backend", []string{rm.backend.Type}).Body()
	for _, k := range sortedKeys(rm.backend.Attrs) {
		if rm.backend.Type == "consul" && consulConnection[k] {
			continue
		}
		be.SetAttributeValue(k, rm.backend.Attrs[k])
	}
	parts[driver.PartBackend] = digestOf(string(f.Bytes()))

	req := map[string]any{}
	for _, p := range rm.providers {
		if r, ok := rm.required[p.Name]; ok {
			req[p.Name] = r
		}
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("required_providers: %w", err)
	}
	parts[driver.PartRequiredProviders] = digestOf(string(b))
	return parts, nil
}

// digestOf hashes strings with their lengths, so that no two lists of
// strings hash alike.
func digestOf(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// IsLocalModule reports whether a module source is a local path.
func IsLocalModule(src string) bool { return task.IsLocalModule(src) }

// moduleDigest identifies the module's code (see DesiredState).
func moduleDigest(o Options) (string, error) {
	src := o.Spec.Module
	if IsLocalModule(src) {
		dir := src
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(o.WorkDir, dir) // the driver writes the source relative to the task's directory
		}
		d, err := treeDigest(dir)
		if err != nil {
			return "", fmt.Errorf("module %q: %w", src, err)
		}
		return digestOf("local", d), nil
	}
	return digestOf("remote", src, o.Spec.Version), nil
}

// resolvedModuleVersion is the version `terraform init` installed for the
// task's module call ("" when not known yet).
func resolvedModuleVersion(workDir, name string) string {
	b, err := os.ReadFile(filepath.Join(workDir, dataDir, "modules", "modules.json"))
	if err != nil {
		return ""
	}
	var m struct {
		Modules []struct{ Key, Source, Version string }
	}
	if json.Unmarshal(b, &m) != nil {
		return ""
	}
	for _, mod := range m.Modules {
		if mod.Key == name {
			return mod.Source + "@" + mod.Version
		}
	}
	return ""
}

// treeDigest hashes every file under dir: path, kind, executable bit and
// contents (a symbolic link: its target). Terraform's own folders are left
// out.
func treeDigest(dir string) (string, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s is not a directory", dir)
	}
	h := sha256.New()
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			if path != dir && (d.Name() == dataDir || d.Name() == ".git") {
				return filepath.SkipDir
			}
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "L%d:%s%d:%s", len(rel), rel, len(target), target)
			return nil
		case !d.Type().IsRegular():
			return nil // sockets, pipes: not module code
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "F%d:%s%t%d:", len(rel), rel, info.Mode()&0o111 != 0, info.Size())
		return hashFile(h, path)
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func hashFile(h hash.Hash, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(h, f)
	return err
}

// The version of a binary is asked once per file state (path, size,
// modification time): replacing the binary in place is seen.
var (
	versionMu    sync.Mutex
	versionCache = map[string]versionEntry{}
)

type versionEntry struct {
	size    int64
	modTime time.Time
	version string
}

func cachedVersion(ctx context.Context, bin string) (string, error) {
	st, err := os.Stat(bin)
	if err != nil {
		return "", err
	}
	versionMu.Lock()
	e, ok := versionCache[bin]
	versionMu.Unlock()
	if ok && e.size == st.Size() && e.modTime.Equal(st.ModTime()) {
		return e.version, nil
	}
	v, _, err := binaryVersion(ctx, bin)
	if err != nil {
		return "", err
	}
	if v == nil {
		return "", errors.New("no version reported")
	}
	versionMu.Lock()
	versionCache[bin] = versionEntry{size: st.Size(), modTime: st.ModTime(), version: v.String()}
	versionMu.Unlock()
	return v.String(), nil
}

// consulConnection are the consul backend's arguments that say how to reach
// Consul, not where the state is: the high-availability members of one
// cluster may each reach it through their own agent (another address,
// token or certificate), and a new leader must find the desired state
// unchanged. Where the state lives (path, datacenter) and how it is stored
// (gzip, lock) still count.
var consulConnection = map[string]bool{
	"address": true, "scheme": true, "access_token": true, "http_auth": true,
	"ca_file": true, "cert_file": true, "key_file": true,
}
