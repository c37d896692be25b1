// Package terraform is the Terraform/OpenTofu driver. For one task it writes
// a generated root module into the task's working directory (main.tf,
// variables.tf, variables.module.tf) and passes every value through files
// that Terraform loads itself: the Consul data in terraform.tfvars (CTS's
// layout, every value written by hclwrite, escaped, so no data from Consul
// is ever an HCL expression), provider arguments and task variables in
// providers.auto.tfvars.json and variables.auto.tfvars.json. It runs the commands
// with terraform-exec in a workspace named after the task.
//
// Where things are: terraform.go has the Options, New and the commands'
// environment; workdir.go the working directory (Init, the root module's
// files, the inputs files of CTS, Forget); generate.go, generate_hcl.go and
// generate_values.go the generated root module (its settings, its HCL files,
// its JSON and tfvars values); run.go Apply and Destroy and their errors;
// plan.go Plan and held plans; machine.go and runlog.go Terraform's -json
// stream and the run logs; parse.go the counts and the state lock read from
// Terraform's output; the tftext subpackage the diagnostics of its text
// output. The rest (binary.go, desired.go, errored.go, leftover.go,
// memory.go, outputs.go, procgroup.go, remote.go, tflog.go) is named after
// what it does.
package terraform

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/terraform-exec/tfexec"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver"
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
	// It is the task's view (redact.Redactor.ForTask): the values of the
	// task's own variables, when a request wrote them, are shown as written.
	Redactor *redact.Redactor
	// Memory, when set, is the memory budget shared by every task's
	// driver: plan, apply and destroy wait for their share of it, and their
	// peak RSS is measured (see MemoryBudget).
	Memory *MemoryBudget
	// StateLocks, under high availability with the consul backend on
	// ctsync's Consul, records the state lock session of each Terraform
	// command and ends a lock left by a Terraform that the fence stopped
	// on an earlier owner of the task (statelock.go); Instance is this
	// instance's id, recorded with it.
	StateLocks StateLocks
	Instance   string
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
	// refresh is what the driver knows of the task's last full refresh
	// (refresh.go).
	refresh refreshState
	// target is what the last successful apply applied and the state it
	// left, for targeted runs (target.go).
	target targetState
	// checkDue is since when the full check a targeted run left to a
	// later run (driver.Run.DeferCheck) is due; zero: none. Any
	// successful apply of everything (a full run, the check) clears it.
	checkDue time.Time
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
		// The daemon started without one (no task needed it then), or
		// the driver is built on its own: looked for now.
		bin, _, err := FindBinary(opts.Driver.Path)
		if err != nil {
			return nil, fmt.Errorf("task %q needs Terraform to run: %w", opts.Spec.Name, err)
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

// --- files ------------------------------------------------------------------

// sameContent reports whether the regular file at path holds exactly data.
// It compares a chunk at a time rather than reading the file whole: an
// inputs file of thousands of instances is megabytes, compared at every
// run of every task.
func sameContent(path string, data []byte) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() != int64(len(data)) {
		return false
	}
	buf := make([]byte, min(len(data), 32<<10))
	for off := 0; off < len(data); {
		n, err := io.ReadFull(f, buf[:min(len(buf), len(data)-off)])
		if err != nil || !bytes.Equal(buf[:n], data[off:off+n]) {
			return false
		}
		off += n
	}
	n, _ := f.Read(make([]byte, 1)) // grown since the Stat
	return n == 0
}

// writeFileAtomic writes data to path through a temporary file and a rename,
// so Terraform never reads a half-written file. When the file already holds
// exactly data it is left alone (only its mode is corrected).
func writeFileAtomic(path string, data []byte, mode os.FileMode) (changed bool, err error) {
	if sameContent(path, data) {
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
