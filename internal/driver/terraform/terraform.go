// Package terraform is the Terraform/OpenTofu driver. For one task it writes
// a generated root module into the task's working directory (main.tf,
// variables.tf, variables.module.tf) and passes every value through files
// that Terraform loads itself: the Consul data in terraform.tfvars (CTS's
// layout, every value written by hclwrite, escaped, so no data from Consul
// is ever an HCL expression), provider arguments and task variables in
// providers.auto.tfvars.json and variables.auto.tfvars.json. It runs the commands
// with terraform-exec in a workspace named after the task.
package terraform

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/terraform-exec/tfexec"
	tfjson "github.com/hashicorp/terraform-json"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/driver/terraform/tftext"
	"github.com/ctsync/ctsync/internal/redact"
	"github.com/ctsync/ctsync/internal/task"
)

// DefaultKeepRunLogs is how many per-run log files are kept per task.
const DefaultKeepRunLogs = 20

const (
	fingerprintFile = ".ctsync-init"
	planFile        = "run.tfplan"
	planDirName     = ".ctsync-plan"
	dataDir         = ".terraform"
	tfLogFile       = "terraform.log"

	cacheMayBreakLockEnv = "TF_PLUGIN_CACHE_MAY_BREAK_DEPENDENCY_LOCK_FILE"
)

// Options configure a Driver for one task.
type Options struct {
	Spec task.Spec
	// WorkDir is the task's working directory (created with mode 0750).
	WorkDir string
	// Binary is the terraform/tofu executable; empty: FindBinary(Driver.Path).
	Binary string
	Driver config.TerraformDriver
	// Providers are the terraform_provider blocks the task uses, resolved.
	Providers []config.Provider
	Consul    config.Consul
	// PluginCacheDir, when set, is passed as TF_PLUGIN_CACHE_DIR.
	PluginCacheDir string
	// Env holds extra environment variables for Terraform.
	Env    map[string]string
	Logger *slog.Logger
	// KeepRunLogs is how many run logs to keep (default 20).
	KeepRunLogs int
	// StopTimeout bounds how long a cancelled command may take to stop
	// after SIGINT before Terraform and its children are killed (default
	// DefaultStopTimeout). Under high availability it is the kill bound of
	// the HA timing, shorter than the earliest takeover by another
	// instance.
	StopTimeout time.Duration
	// Redactor hides the configuration's secrets in the run logs and in
	// terraform.log before they reach the disk (nil: nothing is hidden).
	Redactor *redact.Redactor
	// Memory, when set, is the memory budget shared by every task's
	// driver: plan, apply and destroy wait for their share of it, and their
	// peak RSS is measured (see MemoryBudget).
	Memory *MemoryBudget
}

// Driver runs one task with Terraform or OpenTofu. It implements
// driver.Driver. Its methods must not be called concurrently; different
// Drivers can run in parallel.
type Driver struct {
	opts    Options
	workDir string
	realDir string // workDir with symbolic links resolved, as /proc shows a process's cwd
	mod     *rootModule
	tf      *tfexec.Terraform
	sink    *sink
	log     *slog.Logger
	// marker is this driver's value of markerEnv (leftover.go); reaped
	// says whether the leftovers of a previous daemon were looked for.
	marker   string
	reaped   bool
	recorded []int // the process groups in runFile
	inVerb   bool  // running has set up the current verb

	initDone bool
	// ui: the binary has the machine-readable UI (-json) for plan, apply
	// and destroy (Terraform >= 0.15.3, OpenTofu); known after Init.
	ui bool
}

var _ driver.Driver = (*Driver)(nil)

// initSem serialises `terraform init` across all drivers of the process: a
// shared plugin cache is not safe for concurrent installs.
var initSem = make(chan struct{}, 1)

// New validates the task's configuration and prepares a Driver. It does not
// run Terraform unless Binary is empty (then the binary is looked up and
// asked for its version) and writes nothing but the working directory.
func New(opts Options) (*Driver, error) {
	if opts.WorkDir == "" {
		return nil, fmt.Errorf("task %q: working directory is not set", opts.Spec.Name)
	}
	if opts.KeepRunLogs <= 0 {
		opts.KeepRunLogs = DefaultKeepRunLogs
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	mod, err := newRootModule(&opts)
	if err != nil {
		return nil, fmt.Errorf("task %q: %w", opts.Spec.Name, err)
	}
	workDir, err := filepath.Abs(opts.WorkDir)
	if err != nil {
		return nil, err
	}
	switch {
	case opts.Binary == "":
		bin, _, err := FindBinary(opts.Driver.Path)
		if err != nil {
			return nil, err
		}
		opts.Binary = bin
	case !strings.ContainsRune(opts.Binary, filepath.Separator):
		// A bare name: resolve it now, the commands run in the task's folder.
		bin, err := exec.LookPath(opts.Binary)
		if err != nil {
			return nil, fmt.Errorf("terraform binary: %w", err)
		}
		opts.Binary = bin
	}
	if bin, err := filepath.Abs(opts.Binary); err == nil {
		opts.Binary = bin
	}
	env, err := buildEnv(&opts, mod.backend.Type == "consul")
	if err != nil {
		return nil, fmt.Errorf("task %q: %w", opts.Spec.Name, err)
	}
	if err := os.MkdirAll(workDir, 0o750); err != nil {
		return nil, fmt.Errorf("task %q: working directory: %w", opts.Spec.Name, err)
	}
	tf, err := tfexec.NewTerraform(workDir, opts.Binary)
	if err != nil {
		return nil, fmt.Errorf("task %q: %w", opts.Spec.Name, err)
	}
	marker := newMarker(opts.Spec.Name)
	env[markerEnv] = marker
	if err := tf.SetEnv(env); err != nil {
		return nil, fmt.Errorf("task %q: %w", opts.Spec.Name, err)
	}
	// terraform-exec interrupts Terraform when a run's context ends, then
	// waits this long before killing it; stopOnCancel kills the whole
	// process group at StopTimeout, so this only backs it up.
	if err := tf.SetWaitDelay(opts.StopTimeout + time.Second); err != nil {
		return nil, fmt.Errorf("task %q: %w", opts.Spec.Name, err)
	}
	if opts.Driver.PersistLog {
		// Terraform's TRACE log holds every value it handles, provider
		// secrets included: it is created for the daemon's user only
		// (Terraform appends to an existing file and keeps its mode).
		logPath := filepath.Join(workDir, tfLogFile)
		f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, fmt.Errorf("task %q: %s: %w", opts.Spec.Name, tfLogFile, err)
		}
		f.Close()
		if err := os.Chmod(logPath, 0o600); err != nil {
			return nil, fmt.Errorf("task %q: %s: %w", opts.Spec.Name, tfLogFile, err)
		}
		// Terraform writes it through a pipe that redacts it, set up for
		// each verb (persistLog).
	}
	s := &sink{task: opts.Spec.Name, mute: true, red: opts.Redactor}
	if opts.Driver.Log {
		s.logger = opts.Logger
	}
	tf.SetStdout(s.writer("stdout"))
	tf.SetStderr(s.writer("stderr"))
	realDir, err := filepath.EvalSymlinks(workDir)
	if err != nil {
		return nil, fmt.Errorf("task %q: working directory: %w", opts.Spec.Name, err)
	}
	d := &Driver{
		opts:    opts,
		workDir: workDir,
		realDir: realDir,
		mod:     mod,
		tf:      tf,
		sink:    s,
		log:     opts.Logger.With("task_name", opts.Spec.Name),
		marker:  marker,
	}
	s.started = d.recordGroups
	return d, nil
}

// WorkDir returns the task's absolute working directory.
func (d *Driver) WorkDir() string { return d.workDir }

// buildEnv is the Terraform process environment: ours on top of the
// daemon's. Variables that terraform-exec manages itself (TF_LOG*,
// TF_IN_AUTOMATION, TF_WORKSPACE, TF_CLI_ARGS*, TF_VAR_* ...) are dropped
// from the inherited environment and refused in the configured one.
func buildEnv(o *Options, consulBackend bool) (map[string]string, error) {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	tfexec.CleanEnv(env)
	// Each task has its own .terraform folder in its working directory.
	delete(env, "TF_DATA_DIR")
	env["CHECKPOINT_DISABLE"] = "1"
	if o.PluginCacheDir != "" {
		env["TF_PLUGIN_CACHE_DIR"] = o.PluginCacheDir
	}
	// Without a lock-file entry, Terraform >= 1.4 does not trust a provider
	// already in the shared cache: it installs it again into the cache,
	// replacing the folder that other tasks' .terraform links point to, and
	// their concurrent plan/apply fail with "could not read package
	// directory". Trusting the cache avoids rewriting it (our root modules'
	// lock files then hold the local package hash only). The daemon's own
	// setting, if any, wins.
	if _, ok := env[cacheMayBreakLockEnv]; !ok {
		env[cacheMayBreakLockEnv] = "1"
	}
	if consulBackend {
		for k, v := range consulEnv(o.Consul) {
			env[k] = v
		}
	}
	for _, p := range o.Providers {
		for k, v := range p.TaskEnv {
			if bad := tfexec.ProhibitedEnv(map[string]string{k: v}); len(bad) > 0 {
				return nil, fmt.Errorf("provider %s: task_env %q cannot be set: ctsync manages it", p.Ref(), k)
			}
			env[k] = v
		}
	}
	for k, v := range o.Env {
		if bad := tfexec.ProhibitedEnv(map[string]string{k: v}); len(bad) > 0 {
			return nil, fmt.Errorf("environment variable %q cannot be set for terraform: ctsync manages it", k)
		}
		env[k] = v
	}
	return env, nil
}

// consulEnv is the Consul connection as the environment variables that
// Terraform's consul backend (through the Consul API client) reads. The
// token and basic-auth credentials only ever travel this way.
func consulEnv(c config.Consul) map[string]string {
	env := map[string]string{}
	if c.Address != "" {
		env["CONSUL_HTTP_ADDR"] = c.Address
	}
	if c.Token != "" {
		env["CONSUL_HTTP_TOKEN"] = c.Token
	}
	if c.Auth.Enabled || c.Auth.Username != "" || c.Auth.Password != "" {
		env["CONSUL_HTTP_AUTH"] = c.Auth.Username + ":" + c.Auth.Password
	}
	if _, https := splitScheme(c.Address); c.TLS.Enabled || https {
		env["CONSUL_HTTP_SSL"] = "true"
		if !c.TLS.Verify {
			env["CONSUL_HTTP_SSL_VERIFY"] = "false"
		}
		set := func(k, v string) {
			if v != "" {
				env[k] = v
			}
		}
		set("CONSUL_CACERT", c.TLS.CACert)
		set("CONSUL_CAPATH", c.TLS.CAPath)
		set("CONSUL_CLIENT_CERT", c.TLS.Cert)
		set("CONSUL_CLIENT_KEY", c.TLS.Key)
		set("CONSUL_TLS_SERVER_NAME", c.TLS.ServerName)
	}
	return env
}

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

// --- runs --------------------------------------------------------------------

// startRun opens the run's log file and points the output at it.
func (d *Driver) startRun(run driver.Run) (string, error) {
	if err := validRunID(run.ID); err != nil {
		return "", err
	}
	name := run.ID + ".log"
	f, p, err := openLog(d.workDir, name)
	if err != nil {
		return "", err
	}
	d.sink.attach(f)
	if err := rotateLogs(d.workDir, name, d.opts.KeepRunLogs); err != nil {
		d.log.Warn("cannot remove old run logs", "error", err)
	}
	return p, nil
}

func (d *Driver) endRun() {
	if err := d.sink.detach(); err != nil {
		d.log.Warn("cannot close run log", "error", err)
	}
}

// fail builds a *driver.Error from the failed command's diagnostics.
func (d *Driver) fail(op string, err error) error {
	err = usableErr(err)
	diags, text, stderr := d.diagnostics()
	sum := diags.Summary()
	if sum == "" {
		sum = tftext.Summarize(stderr)
	}
	if sum == "" && err != nil {
		sum = tftext.Summarize(err.Error())
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if sum == "" {
			sum = "interrupted: " + err.Error()
		}
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ProcessState != nil && ctxErr(err) == nil {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			// Killed from outside (a crash, the OOM killer, kill -9): stderr
			// has nothing, and "signal: killed" alone does not say whose.
			msg := fmt.Sprintf("terraform was terminated by signal %q before it finished (it crashed or was killed)", ws.Signal().String())
			if sum != "" && sum != tftext.Summarize(err.Error()) {
				msg += "; " + sum
			}
			sum = msg
		}
	}
	if holder, ok := stateLockHolder(text); ok {
		sum = "the Terraform state is locked by another process" + holder + "; " +
			strings.TrimSuffix(strings.TrimSpace(sum), ": Lock Info:")
		err = fmt.Errorf("%w: %w", driver.ErrStateLocked, err)
	}
	if stalePlan(diags) {
		err = errStale(err)
	}
	d.sink.note("%s failed: %s", op, sum)
	terminal := ctxErr(err) == nil && diags.Terminal()
	return &driver.Error{Op: op, Summary: sum, Headline: diags.Headline(), Err: err, Terminal: terminal}
}

// writeInputs writes terraform.tfvars atomically.
func (d *Driver) writeInputs(in *task.Inputs) error {
	data, err := d.mod.inputsTFVars(in)
	if err != nil {
		return fmt.Errorf("encoding inputs: %w", err)
	}
	_, err = writeFileAtomic(filepath.Join(d.workDir, fileInputs), data, 0o640)
	return err
}

// prepare runs Init if needed, opens the run log and writes the inputs.
func (d *Driver) prepare(ctx context.Context, op string, run driver.Run, in *task.Inputs) (string, error) {
	if err := d.ensureInit(ctx); err != nil {
		return "", err
	}
	logPath, err := d.startRun(run)
	if err != nil {
		return "", &driver.Error{Op: op, Err: err}
	}
	// A state an earlier run could not save goes to the backend first: a
	// run on the backend's older state would redo what that run did.
	if _, err := d.pushErrored(ctx, pushBound); err != nil {
		d.endRun()
		return "", &driver.Error{Op: op, Summary: err.Error(), Err: err}
	}
	if in != nil {
		if err := d.writeInputs(in); err != nil {
			d.endRun()
			return "", &driver.Error{Op: op, Err: err}
		}
	} else if !fileExists(filepath.Join(d.workDir, fileInputs)) {
		// Terraform needs a value for every variable without a default.
		if err := d.writeInputs(&task.Inputs{}); err != nil {
			d.endRun()
			return "", &driver.Error{Op: op, Err: err}
		}
	}
	return logPath, nil
}

// gate waits for the task's share of the memory budget, if there is one;
// release gives it back and records the command's peak RSS.
func (d *Driver) gate(ctx context.Context, op string) (release func(), err error) {
	if d.opts.Memory == nil {
		return func() {}, nil
	}
	r, err := d.opts.Memory.acquire(ctx, d.opts.Spec.Name, d.realDir)
	if err != nil {
		d.sink.note("%s interrupted while waiting for memory: %v", op, err)
		return nil, &driver.Error{Op: op, Summary: "interrupted while waiting for memory (driver \"terraform\" max_memory)", Err: err}
	}
	return r.release, nil
}

// Apply writes the inputs and runs `terraform apply`.
func (d *Driver) Apply(ctx context.Context, run driver.Run, in *task.Inputs) (driver.Result, error) {
	return d.change(ctx, "apply", run, in, "")
}

// Destroy runs `terraform destroy` with the current inputs file (an empty
// one if the task never ran).
func (d *Driver) Destroy(ctx context.Context, run driver.Run) (driver.Result, error) {
	return d.change(ctx, "destroy", run, nil, "")
}

// change runs an apply (of planPath, a saved plan, when set) or a destroy
// (op): with the machine-readable UI when the binary has it, read from its
// text otherwise.
func (d *Driver) change(ctx context.Context, op string, run driver.Run, in *task.Inputs, planPath string) (driver.Result, error) {
	defer d.running(ctx)()
	start := time.Now()
	logPath, err := d.prepare(ctx, op, run, in)
	if err != nil {
		return driver.Result{Duration: time.Since(start)}, err
	}
	defer d.endRun()
	release, err := d.gate(ctx, op)
	if err != nil {
		return driver.Result{LogPath: logPath, Duration: time.Since(start)}, err
	}
	defer release()
	began := time.Now()
	err = d.runChange(ctx, op, planPath)
	out, _ := d.sink.output()
	res := driver.Result{LogPath: logPath, Output: out}
	res.Add, res.Change, res.Destroy = d.counts(op, err != nil)
	if op == "apply" {
		res.Phases = applyPhases(began, d.sink.plannedAt(), time.Now())
		res.Changes = res.Add+res.Change+res.Destroy > 0
	} else {
		res.Changes = res.Destroy > 0
	}
	if err != nil {
		diags, _, _ := d.diagnostics()
		err = d.fail(op, err)
		// The infrastructure changed but Terraform could not save the state:
		// once the state is pushed back, the run has applied.
		pushed, perr := d.pushErrored(ctx, pushBound)
		switch {
		case perr != nil:
			d.sink.note("%v", perr)
			d.log.Warn("the state of the run is not saved in the backend; the next run pushes it first", "run_id", run.ID, "error", perr)
		case pushed && onlySaveErrors(diags):
			d.sink.note("%s: the state is saved now, the run has applied", op)
			err = nil
		}
	}
	if err == nil && op == "apply" && d.opts.Spec.ExportOutputs {
		res.Outputs, err = d.readOutputs(ctx)
	}
	res.Duration = time.Since(start)
	return res, err
}

// runChange runs the command of an apply (of planPath when set) or a
// destroy.
func (d *Driver) runChange(ctx context.Context, op, planPath string) error {
	stdout := d.sink.writer("stdout")
	defer d.tf.SetStdout(stdout) // the -json commands of terraform-exec replace it
	p := d.opts.Spec.Parallelism
	applyOpts := parallelism[tfexec.ApplyOption](p)
	if planPath != "" {
		applyOpts = append(applyOpts, tfexec.DirOrPlan(planPath))
	}
	switch {
	case op == "destroy" && d.ui:
		d.sink.beginUI(op)
		return d.tf.DestroyJSON(ctx, stdout, parallelism[tfexec.DestroyOption](p)...)
	case op == "destroy":
		d.sink.begin(op, false)
		return d.tf.Destroy(ctx, parallelism[tfexec.DestroyOption](p)...)
	case d.ui:
		d.sink.beginUI(op)
		return d.tf.ApplyJSON(ctx, stdout, applyOpts...)
	default:
		d.sink.begin(op, false)
		return d.tf.Apply(ctx, applyOpts...)
	}
}

// parallelism is the task's -parallelism as the options of a command (none
// when it is not set).
func parallelism[O any](p int) []O {
	if p <= 0 {
		return nil
	}
	o, _ := any(tfexec.Parallelism(p)).(O)
	return []O{o}
}

// --- output parsing ---------------------------------------------------------

// applyPhases splits the time of a `terraform apply` into its plan and its
// apply at the moment the plan's summary was printed (planned; zero when
// it was not seen: the whole command is the apply).
func applyPhases(start, planned, end time.Time) []driver.Phase {
	if planned.IsZero() || planned.Before(start) || planned.After(end) {
		return []driver.Phase{{Name: "apply", Start: start, End: end}}
	}
	return []driver.Phase{{Name: "plan", Start: start, End: planned}, {Name: "apply", Start: planned, End: end}}
}

// countPlan counts resource changes the way Terraform's plan summary does:
// a replacement is one add and one destroy.
func countPlan(p *tfjson.Plan) (add, change, destroy int) {
	for _, rc := range p.ResourceChanges {
		if rc == nil || rc.Change == nil {
			continue
		}
		a := rc.Change.Actions
		switch {
		case a.Replace():
			add++
			destroy++
		case a.Create():
			add++
		case a.Update():
			change++
		case a.Delete():
			destroy++
		}
	}
	return add, change, destroy
}

var (
	planSummaryRE = regexp.MustCompile(`Plan: (\d+) to add, (\d+) to change, (\d+) to destroy`)
	resourcesRE   = regexp.MustCompile(`(?m)^.*complete! Resources: (.*)$`)
	countRE       = regexp.MustCompile(`(\d+) (added|changed|destroyed)`)
)

// parsePlanCounts reads "Plan: X to add, Y to change, Z to destroy." from a
// plan's text.
func parsePlanCounts(text string) (add, change, destroy int) {
	m := planSummaryRE.FindStringSubmatch(text)
	if m == nil {
		return 0, 0, 0
	}
	add, _ = strconv.Atoi(m[1])
	change, _ = strconv.Atoi(m[2])
	destroy, _ = strconv.Atoi(m[3])
	return add, change, destroy
}

// parseApplyCounts reads "Apply complete! Resources: X added, Y changed, Z
// destroyed." (or "Destroy complete! Resources: Z destroyed.").
func parseApplyCounts(out string) (add, change, destroy int) {
	ms := resourcesRE.FindAllStringSubmatch(out, -1)
	if ms == nil {
		return 0, 0, 0
	}
	for _, c := range countRE.FindAllStringSubmatch(ms[len(ms)-1][1], -1) {
		n, _ := strconv.Atoi(c[1])
		switch c[2] {
		case "added":
			add = n
		case "changed":
			change = n
		case "destroyed":
			destroy = n
		}
	}
	return add, change, destroy
}

// --- files ------------------------------------------------------------------

// writeFileAtomic writes data to path through a temporary file and a rename,
// so Terraform never reads a half-written file. When the file already holds
// exactly data it is left alone (only its mode is corrected).
func writeFileAtomic(path string, data []byte, mode os.FileMode) (changed bool, err error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		if st, err := os.Stat(path); err == nil && st.Mode().Perm() != mode {
			return false, os.Chmod(path, mode)
		}
		return false, nil
	}
	dir, base := filepath.Split(path)
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return false, err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(mode); err != nil {
		tmp.Close()
		return false, err
	}
	if _, err = tmp.Write(data); err != nil {
		tmp.Close()
		return false, err
	}
	if err = tmp.Close(); err != nil {
		return false, err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return false, err
	}
	return true, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// stateLockHolder reports whether a command failed because the state is
// locked ("Error acquiring the state lock", or the consul backend's "failed
// to lock state" while loading it) and describes the holder from the "Lock
// Info:" block of the diagnostics' text: " (held by WHO, operation OP, since
// CREATED, lock ID ID)", or "" when there is none.
func stateLockHolder(text string) (string, bool) {
	if !strings.Contains(text, "Error acquiring the state lock") && !strings.Contains(text, "failed to lock state") {
		return "", false
	}
	info := lockInfo(text)
	var parts []string
	for _, f := range []struct{ key, label string }{
		{"Who", "held by "}, {"Operation", "operation "}, {"Created", "since "}, {"ID", "lock ID "},
	} {
		if v := info[f.key]; v != "" {
			parts = append(parts, f.label+v)
		}
	}
	if len(parts) == 0 {
		return "", true
	}
	return " (" + strings.Join(parts, ", ") + ")", true
}

// lockInfo reads the "Lock Info:" block Terraform prints about a held lock
// (ID, Who, Operation, Created, ...); empty without one.
func lockInfo(text string) map[string]string {
	info := map[string]string{}
	_, block, ok := strings.Cut(text, "Lock Info:")
	if !ok {
		return info
	}
	for _, line := range strings.Split(block, "\n") {
		k, v, found := strings.Cut(unboxed(line), ":")
		if !found {
			continue
		}
		if k = strings.TrimSpace(k); info[k] == "" {
			info[k] = strings.TrimSpace(v)
		}
	}
	return info
}

// unboxed strips the "│ " of Terraform's boxed diagnostics from a line.
func unboxed(line string) string {
	line = strings.TrimSpace(line)
	if rest, ok := strings.CutPrefix(line, "│"); ok {
		return strings.TrimSpace(rest)
	}
	return line
}

// usableErr works around terraform-exec: when a command's context is
// cancelled and terraform still exits 0 (it stopped gracefully after the
// interrupt), the error it returns panics in Error(). That error is replaced
// by one that says what happened.
func usableErr(err error) (out error) {
	if err == nil {
		return nil
	}
	defer func() {
		if recover() != nil {
			cause := ctxErr(err)
			if cause == nil {
				cause = context.Canceled
			}
			out = fmt.Errorf("terraform stopped after an interrupt: %w", cause)
		}
	}()
	_ = err.Error()
	return err
}

// ctxErr returns the context error a command failed with, if any.
func ctxErr(err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return context.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return context.DeadlineExceeded
	}
	return nil
}
