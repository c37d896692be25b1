package terraform

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hashicorp/terraform-exec/tfexec"

	"github.com/ctsync/ctsync/internal/driver"
)

// --- Init --------------------------------------------------------------------

// Init writes the root module and, unless the working directory is already
// initialised for exactly this module and binary, runs `terraform init` and
// creates and selects the task's workspace.
func (d *Driver) Init(ctx context.Context) error {
	defer d.running(ctx)()
	d.initDone = false
	if dir := d.opts.PluginCacheDir; dir != "" {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return &driver.Error{Op: "init", Err: fmt.Errorf("plugin cache: %w", err)}
		}
	}
	modHash, err := d.writeRootModule()
	if err != nil {
		return &driver.Error{Op: "init", Err: err}
	}
	fp, err := d.fingerprint(ctx, modHash)
	if err != nil {
		return &driver.Error{Op: "init", Err: err}
	}
	fpPath := filepath.Join(d.workDir, fingerprintFile)
	if old, err := os.ReadFile(fpPath); err == nil && string(old) == fp && isDir(filepath.Join(d.workDir, dataDir)) {
		d.log.Debug("terraform working directory already initialised")
		d.initDone = true
		return nil
	}
	if err := os.Remove(fpPath); err != nil && !os.IsNotExist(err) {
		return &driver.Error{Op: "init", Err: err}
	}

	f, _, err := openLog(d.workDir, initLogName)
	if err != nil {
		return &driver.Error{Op: "init", Err: err}
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return &driver.Error{Op: "init", Err: err}
	}
	d.sink.attach(f)
	defer d.sink.detach()

	d.reinitialised() // a new module, provider or backend: the next run refreshes
	if err := d.terraformInit(ctx); err != nil {
		return err
	}
	d.sink.begin("workspace new "+d.opts.Spec.Name, false)
	if err := d.tf.WorkspaceNew(ctx, d.opts.Spec.Name); err != nil {
		_, stderr := d.sink.output()
		if !strings.Contains(stderr, "already exists") && !strings.Contains(err.Error(), "already exists") {
			return d.fail("workspace", err)
		}
	}
	d.sink.begin("workspace select "+d.opts.Spec.Name, false)
	if err := d.tf.WorkspaceSelect(ctx, d.opts.Spec.Name); err != nil {
		return d.fail("workspace", err)
	}
	if _, err := writeFileAtomic(fpPath, []byte(fp), 0o640); err != nil {
		return &driver.Error{Op: "init", Err: err}
	}
	d.initDone = true
	return nil
}

// Initialised reports whether a task's working directory holds what Init
// leaves there: the record of the module and binary it was initialised for
// (.ctsync-init) and Terraform's data directory. A directory removed, or
// emptied, since is not.
func Initialised(workDir string) bool {
	return fileExists(filepath.Join(workDir, fingerprintFile)) && isDir(filepath.Join(workDir, dataDir))
}

// terraformInit runs `terraform init`, one at a time across all drivers.
func (d *Driver) terraformInit(ctx context.Context) error {
	select {
	case initSem <- struct{}{}:
	case <-ctx.Done():
		return &driver.Error{Op: "init", Err: ctx.Err()}
	}
	defer func() { <-initSem }()

	d.sink.begin("init", false)
	err := d.tf.Init(ctx, tfexec.Upgrade(false))
	if err == nil {
		return nil
	}
	_, stderr := d.sink.output()
	// The backend's configuration changed (the driver's backend block was
	// edited): carry the state over to it, as an operator answering
	// Terraform's prompt with "yes" would, so that the resources in it
	// stay managed. (-force-copy implies -migrate-state.)
	if ctx.Err() == nil && strings.Contains(stderr, "Backend configuration changed") {
		d.sink.note("the backend configuration changed; running init again with -force-copy to carry the state over")
		d.sink.begin("init", false)
		if err = d.tf.Init(ctx, tfexec.Upgrade(false), tfexec.ForceCopy(true)); err == nil {
			return nil
		}
		_, stderr = d.sink.output()
	}
	// The workspace recorded in .terraform/environment may no longer exist in
	// the backend (state wiped, backend moved). Forget the selection and retry
	// once; the task's workspace is created right after.
	envFile := filepath.Join(d.workDir, dataDir, "environment")
	if ctx.Err() == nil && strings.Contains(strings.ToLower(stderr), "workspace") && fileExists(envFile) {
		if rmErr := os.Remove(envFile); rmErr == nil {
			d.sink.note("selected workspace no longer exists; retrying init with the default workspace")
			d.sink.begin("init", false)
			if err = d.tf.Init(ctx, tfexec.Upgrade(false)); err == nil {
				return nil
			}
		}
	}
	return d.fail("init", err)
}

// writeRootModule (re)writes the generated files and returns a hash of the
// root module's .tf files. Unchanged files are not touched.
func (d *Driver) writeRootModule() ([]byte, error) {
	if err := os.MkdirAll(d.workDir, 0o750); err != nil {
		return nil, err
	}
	providers, err := d.mod.providersJSON()
	if err != nil {
		return nil, err
	}
	vars, err := d.mod.variablesJSON()
	if err != nil {
		return nil, err
	}
	files := []struct {
		name string
		data []byte // nil: the file must not exist
		mode os.FileMode
		hash bool
	}{
		{fileMain, d.mod.mainTF(), 0o640, true},
		{fileVariables, d.mod.variablesTF(), 0o640, true},
		{fileModuleVars, d.mod.variablesModuleTF(), 0o640, true},
		{fileProviders, providers, 0o600, false},
		{fileModuleVarVals, vars, 0o600, false}, // task variables often carry secrets
	}
	h := sha256.New()
	for _, f := range files {
		p := filepath.Join(d.workDir, f.name)
		if f.data == nil {
			if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
				return nil, err
			}
		} else if _, err := writeFileAtomic(p, f.data, f.mode); err != nil {
			return nil, err
		}
		if f.hash {
			fmt.Fprintf(h, "%s\x00%d\x00", f.name, len(f.data))
			h.Write(f.data)
		}
	}
	d.removeCTSFiles()
	d.takeOverInputs()
	return h.Sum(nil), nil
}

// ctsFiles are the files Consul-Terraform-Sync generates in a task's
// directory that Terraform would also load. In a working directory taken
// over from CTS they would feed stale values (and old provider secrets)
// next to ctsync's JSON files. CTS's terraform.tfvars is handled by
// takeOverInputs: ctsync writes that file itself.
var ctsFiles = []string{"terraform.tfvars.tmpl", "providers.auto.tfvars", "variables.auto.tfvars"}

// removeCTSFiles deletes the CTS-generated files, recognised by the header
// CTS writes; a file of that name without it is left alone with a warning,
// since it may be the operator's.
func (d *Driver) removeCTSFiles() {
	for _, name := range ctsFiles {
		p := filepath.Join(d.workDir, name)
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		head := make([]byte, 1024)
		n, _ := io.ReadFull(f, head)
		f.Close()
		if !strings.Contains(strings.ToLower(string(head[:n])), "consul-terraform-sync") {
			d.log.Warn("file in the task directory is not generated by ctsync; Terraform will load it too", "file", p)
			continue
		}
		if err := os.Remove(p); err != nil {
			d.log.Warn("cannot remove a file Consul-Terraform-Sync generated", "file", p, "error", err)
			continue
		}
		d.log.Info("removed a file Consul-Terraform-Sync generated", "file", p)
	}
}

// Who wrote a file found at the inputs path.
const (
	ownerNone   = iota // no such file
	ownerCtsync        // ctsync (its preamble)
	ownerCTS           // Consul-Terraform-Sync (its header)
	ownerOther         // someone else: the operator's file
)

// inputsFileOwner says who wrote the file at p, from its first line: ctsync's
// preamble, or the comment CTS opens its generated files with ("generated
// by Consul-Terraform-Sync").
func inputsFileOwner(p string) int {
	f, err := os.Open(p)
	if err != nil {
		return ownerNone
	}
	head := make([]byte, 256)
	n, _ := io.ReadFull(f, head)
	f.Close()
	first, _, _ := strings.Cut(string(head[:n]), "\n")
	switch {
	case strings.HasPrefix(first, "# "+inputsPreamble[0]):
		return ownerCtsync
	case strings.HasPrefix(first, "#") && strings.Contains(strings.ToLower(first), "generated by consul-terraform-sync"):
		return ownerCTS
	}
	return ownerOther
}

// takeOverInputs makes terraform.tfvars the one inputs file Terraform reads
// in the task's directory. CTS's terraform.tfvars (its header) is removed:
// the next run writes ctsync's in its place. The terraform.tfvars.json that
// earlier ctsync versions wrote (an object of nothing but services,
// catalog_services and consul_kv) is removed, or Terraform would load it
// after terraform.tfvars and its stale values would win. A file at either
// path that neither wrote is the operator's: it is renamed aside (to
// <name>.ctsync-moved, never overwriting anything) with a warning, not
// clobbered; the module's variables are all ctsync's to set.
func (d *Driver) takeOverInputs() {
	p := filepath.Join(d.workDir, fileInputs)
	switch inputsFileOwner(p) {
	case ownerCTS:
		if err := os.Remove(p); err != nil {
			d.log.Warn("cannot remove a file Consul-Terraform-Sync generated", "file", p, "error", err)
		} else {
			d.log.Info("removed a file Consul-Terraform-Sync generated; ctsync writes it before the next run", "file", p)
		}
	case ownerOther:
		d.moveAside(p)
	}
	old := filepath.Join(d.workDir, fileOldInputs)
	if !fileExists(old) {
		return
	}
	if !isOldInputs(old) {
		d.moveAside(old)
		return
	}
	if err := os.Remove(old); err != nil {
		d.log.Warn("cannot remove the inputs file of an earlier ctsync version; Terraform will load it after "+fileInputs, "file", old, "error", err)
		return
	}
	d.log.Info("removed the inputs file of an earlier ctsync version; the inputs are now in "+fileInputs, "file", old)
}

// isOldInputs reports whether p is a terraform.tfvars.json that ctsync
// wrote: a JSON object with a services key and no key but the three input
// variables.
func isOldInputs(p string) bool {
	b, err := os.ReadFile(p)
	if err != nil {
		return false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(b, &obj) != nil {
		return false
	}
	if _, ok := obj["services"]; !ok {
		return false
	}
	for k := range obj {
		if k != "services" && k != "catalog_services" && k != "consul_kv" {
			return false
		}
	}
	return true
}

// moveAside renames an operator's file out of the way of ctsync's inputs
// file, to the first free name of <name>.ctsync-moved, <name>.ctsync-moved.1,
// ..., and says so at WARN. If it cannot, the file stays and the warning
// says Terraform will load it.
func (d *Driver) moveAside(p string) {
	for i := 0; i < 100; i++ {
		dst := p + ".ctsync-moved"
		if i > 0 {
			dst += "." + strconv.Itoa(i)
		}
		if _, err := os.Lstat(dst); !os.IsNotExist(err) {
			continue
		}
		if err := os.Rename(p, dst); err != nil {
			break
		}
		d.log.Warn("a file that ctsync did not write was in the way of the task's inputs file; moved aside, not deleted "+
			"(Terraform must read one inputs file, ctsync's "+fileInputs+")", "file", p, "moved_to", dst)
		return
	}
	d.log.Warn("a file that ctsync did not write is in the way of the task's inputs file and cannot be moved; remove it", "file", p)
}

// Forget removes what the task leaves behind once its infrastructure is
// destroyed: its Terraform workspace (and so its state in the backend) and
// its working directory.
func (d *Driver) Forget(ctx context.Context) error {
	defer d.running(ctx)()
	if err := d.ensureInit(ctx); err != nil {
		return err
	}
	if err := d.tf.WorkspaceSelect(ctx, "default"); err != nil {
		return d.fail("workspace select default", err)
	}
	if err := d.tf.WorkspaceDelete(ctx, d.opts.Spec.Name, tfexec.Force(true)); err != nil {
		return d.fail("workspace delete", err)
	}
	if err := os.RemoveAll(d.workDir); err != nil {
		return fmt.Errorf("removing working directory: %w", err)
	}
	if d.opts.Memory != nil {
		d.opts.Memory.Forget(d.opts.Spec.Name) // the task is gone: its measured peaks too
	}
	return nil
}

// fingerprint identifies an initialised working directory: the root module
// files and the binary (path and version) that initialised it.
func (d *Driver) fingerprint(ctx context.Context, moduleHash []byte) (string, error) {
	ver, _, err := d.tf.Version(ctx, false)
	if err != nil {
		return "", fmt.Errorf("terraform version: %w", err)
	}
	d.ui = !ver.Core().LessThan(machineUIVersion)
	h := sha256.New()
	h.Write(moduleHash)
	fmt.Fprintf(h, "binary\x00%s\x00%s", d.opts.Binary, ver.String())
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (d *Driver) ensureInit(ctx context.Context) error {
	if d.initDone {
		return nil
	}
	return d.Init(ctx)
}
