package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/consul"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/driver/dev"
	"github.com/ctsync/ctsync/internal/driver/terraform"
	"github.com/ctsync/ctsync/internal/driver/tfc"
	"github.com/ctsync/ctsync/internal/ha"
	"github.com/ctsync/ctsync/internal/logging"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/redact"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/watch"
)

const (
	// shutdownGrace is how long runs in progress may take to finish after
	// SIGINT/SIGTERM before they are interrupted.
	shutdownGrace = 30 * time.Second
	// onceWait bounds how long -once and -inspect wait for Consul, and then
	// for each task's data; the environment variable onceWaitEnv (a Go
	// duration) overrides it, e.g. for a CI job that should fail faster.
	onceWait    = 2 * time.Minute
	onceWaitEnv = "CTSYNC_ONCE_WAIT"
)

type startFlags struct {
	configs      stringsFlag
	once         bool
	inspect      bool
	inspectTasks stringsFlag
	resetStorage bool
	clientType   string
	logFormat    string
}

// runStart is `ctsync start`: parse the flags, build the daemon's parts,
// run them.
func runStart(args []string, stdout, stderr io.Writer) int {
	f, code := parseStartFlags(args, stdout, stderr)
	if code != ExitOK || f == nil {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGQUIT)
	defer stop()
	app, code := buildApp(ctx, f, stderr)
	if app == nil {
		return code
	}
	defer app.closeHistory() // history.go
	if f.once || f.inspect {
		return app.runOnce(ctx, f.inspectTasks, f.inspect, stdout)
	}
	return app.runDaemon(ctx)
}

// parseStartFlags reads start's flags; a nil result with ExitOK is -help.
func parseStartFlags(args []string, stdout, stderr io.Writer) (*startFlags, int) {
	f := &startFlags{}
	fs := newFlagSet("start", stderr)
	fs.Var(&f.configs, "config-file", "A configuration file (HCL or JSON). Repeatable.")
	fs.Var(&f.configs, "config-dir", "A directory of configuration files. Repeatable.")
	fs.BoolVar(&f.once, "once", false, "Run every task once, then exit.")
	fs.BoolVar(&f.inspect, "inspect", false, "Plan every task and print the plans; apply nothing.")
	fs.Var(&f.inspectTasks, "inspect-task", "Plan only this task (implies -inspect). Repeatable.")
	fs.BoolVar(&f.resetStorage, "reset-storage", false, "With high availability: overwrite stored state with this instance's configuration.")
	fs.StringVar(&f.clientType, "client-type", "", `"development" runs no Terraform and logs what each run would do (as CTS's development client); overrides client_type.`)
	fs.StringVar(&f.logFormat, "log-format", "", `The log format: "text" (hclog's, the default) or "json"; overrides log_format.`)
	fs.Usage = func() {}
	if isHelp(args) {
		fmt.Fprint(stdout, startHelp(fs))
		return nil, ExitOK
	}
	if err := fs.Parse(args); err != nil {
		if hint := flagHint(fs, err); hint != "" {
			fmt.Fprintln(stderr, hint)
		}
		fmt.Fprint(stderr, startHelp(fs))
		return nil, ExitFlagParse
	}
	warnIgnored(stderr, fs.Args())
	if len(f.configs) == 0 {
		return nil, term{out: stderr, err: stderr}.failCode(ExitRequiredFlags, "unable to start "+Name,
			"no config file provided", moreHelp("start"))
	}
	switch f.logFormat {
	case "", "text", "json":
	default:
		fmt.Fprintf(stderr, "invalid value %q for -log-format: use \"text\" or \"json\"\n", f.logFormat)
		return nil, ExitFlagParse
	}
	if len(f.inspectTasks) > 0 {
		f.inspect = true
	}

	return f, ExitOK
}

// startHelp is start's -help text.
func startHelp(fs *flag.FlagSet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage CLI: %s start [-help] [options]\n\n  Starts the daemon, or runs every task once (-once), or plans them (-inspect).\n\nOptions:\n", Name)
	writeOptions(&b, fs)
	return b.String()
}

// buildApp loads the configuration and builds the daemon's parts: the
// logger, the Terraform binary, the secrets (Vault, then Consul KV), the
// Consul client, and the app. A nil app comes with the exit code.
func buildApp(ctx context.Context, f *startFlags, stderr io.Writer) (*app, int) {
	cfg, err := config.Load(f.configs)
	if err != nil {
		fmt.Fprintf(stderr, "configuration error: %v\n", err)
		return nil, ExitConfig
	}
	if f.logFormat != "" {
		cfg.LogFormat = f.logFormat
	}
	logger, level := newLoggerLevel(cfg, stderr)
	logger.Info(fmt.Sprintf("%s v%s (%s)", Name, Version, Commit)) // as CTS's first line
	for _, w := range cfg.Warnings {
		logger.Warn(w)
	}
	switch strings.ToLower(f.clientType) {
	case "":
	case config.ClientTerraform, config.ClientDevelopment:
		cfg.ClientType = strings.ToLower(f.clientType)
	default:
		fmt.Fprintf(stderr, "invalid value %q for -client-type: use %q or %q\n", f.clientType, config.ClientTerraform, config.ClientDevelopment)
		return nil, ExitFlagParse
	}

	// A local module folder that does not exist is a configuration error,
	// as for a task created through the API (the development client runs
	// no module).
	if cfg.ClientType != config.ClientDevelopment {
		if err := cfg.CheckLocalModules(); err != nil {
			fmt.Fprintf(stderr, "configuration error: %v\n", err)
			return nil, ExitConfig
		}
	}

	var bin string
	if cfg.ClientType == config.ClientDevelopment {
		logger.Warn("development client: no Terraform runs; each run is logged with its inputs, and nothing is changed")
	} else if cfg.TFC == nil { // the terraform-cloud driver runs Terraform remotely (tfc.go)
		b, ver, err := terraform.FindBinary(cfg.Driver.Path)
		switch {
		case err != nil && len(cfg.Tasks) == 0 && !f.once && !f.inspect:
			// Nothing runs Terraform yet: the daemon starts (the packaged
			// configuration has no task), and a task added later looks
			// for the binary when it runs, failing with this error until
			// one is installed.
			logger.Warn("no Terraform binary: the daemon starts because no task is configured; a task fails to run until Terraform or OpenTofu is installed", "error", err)
		case err != nil:
			logger.Error("terraform driver: the configured tasks need Terraform to run", "tasks", len(cfg.Tasks), "error", err)
			return nil, ExitDriver
		default:
			bin = b
			logger.Info("using terraform binary", "path", bin, "version", ver.String())
		}
	}

	wait := onceWait
	if v := os.Getenv(onceWaitEnv); v != "" {
		if wait, err = time.ParseDuration(v); err != nil || wait <= 0 {
			fmt.Fprintf(stderr, "configuration error: %s=%q is not a positive duration (e.g. \"30s\")\n", onceWaitEnv, v)
			return nil, ExitConfig
		}
	}

	// {{ with secret }} outside terraform_provider blocks (the Consul token
	// first of all): resolved before the Consul client is built
	// (secretfields.go).
	vm, err := newVault(cfg, logger)
	if err != nil {
		fmt.Fprintf(stderr, "configuration error: %v\n", err)
		return nil, ExitConfig
	}
	if code := resolveSecretFields(ctx, cfg, vm, logger, f.once || f.inspect, wait, stderr); code != ExitOK {
		return nil, code
	}

	client, err := consul.NewClient(cfg.Consul)
	if err != nil {
		fmt.Fprintf(stderr, "configuration error: consul: %v\n", err)
		return nil, ExitConfig
	}

	// {{ key "..." }} in terraform_provider blocks: read from Consul once.
	// That needs Consul, so wait for it first, as the rest of start-up does
	// (without a bound for the daemon, within the wait for -once/-inspect);
	// otherwise a Consul that is down at start would be a configuration
	// error.
	if needsConsulKV(cfg) {
		waitCtx, cancel := ctx, context.CancelFunc(func() {})
		if f.once || f.inspect {
			waitCtx, cancel = context.WithTimeout(ctx, wait)
		}
		err := consul.WaitReady(waitCtx, client.Client, logger)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ExitInterrupt
			}
			logger.Error("consul is not reachable: cannot resolve {{ key }} values of terraform_provider blocks",
				"address", cfg.Consul.Address, "waited", wait, "error", err)
			return nil, ExitError
		}
	}
	// {{ key }} and {{ with secret }} values (secrets.go).
	live, code := resolveProviders(ctx, cfg, client, vm, logger, f.once || f.inspect, wait, stderr)
	if code != ExitOK {
		return nil, code
	}

	if f.once || f.inspect {
		cfg.HA = nil // -once and -inspect run alone, outside the cluster (ha.go)
	}
	app, err := newApp(cfg, client, bin, logger, live, appMode{history: !f.inspect, resetStorage: f.resetStorage})
	if err != nil {
		logger.Error("start-up failed", "error", err)
		return nil, ExitConfig
	}
	app.onceWait = wait
	app.level = level
	app.flags = f
	return app, ExitOK
}

// app is the wired daemon: the watch registry feeding the controller, which
// drives Terraform and records to the store.
type app struct {
	cfg      *config.Config
	log      *slog.Logger
	client   *consul.Client
	registry *watch.Registry
	ctrl     *reconcile.Controller
	store    store.Store
	onceWait time.Duration  // -once/-inspect: bound of each wait for Consul
	obs      observe        // metrics, dashboard, notifications (observe.go)
	coord    ha.Coordinator // this instance's part in a cluster, or alone (ha.go)
	secrets  *liveProviders // provider values, kept fresh from Vault (secrets.go)
	memory   *terraform.MemoryBudget
	history  *store.Bolt    // the local history database (history.go); nil with HA or -inspect
	apiAddr  string         // the address the API is bound to (startAPI)
	level    *slog.LevelVar // the log level, which a reload changes (reload.go)
	flags    *startFlags    // the command line: the files a reload reads again
	reloadMu sync.Mutex     // one reload at a time
	// fileTasks are the tasks of the configuration files in force: the
	// ones of the start, then of the last reload (written under liveMu).
	fileTasks []task.Spec
	// liveMu guards fileTasks and liveAPITasks, the api_tasks block of the
	// last reload (nil: the start's).
	liveMu       sync.RWMutex
	liveAPITasks *config.APITasks
	// inForce is the configuration of the last reload (nil: none yet),
	// whose live settings are in force (reloadMu).
	inForce *config.Config
	// updater, when set, updates the changed tasks of a reload in place of
	// the controller (tests).
	updater taskUpdater
}

// needsConsulKV reports whether start-up must read Consul KV: a
// terraform_provider block holds {{ key }} templates.
func needsConsulKV(cfg *config.Config) bool {
	for i := range cfg.Providers {
		if cfg.Providers[i].NeedsResolution() {
			return true
		}
	}
	return false
}

// appMode is what the command line asks of the daemon's wiring.
type appMode struct {
	// history opens the local history database when there is no high
	// availability (not for -inspect, which records no run).
	history bool
	// resetStorage is -reset-storage (high availability only).
	resetStorage bool
}

// newApp wires the daemon.
func newApp(cfg *config.Config, client *consul.Client, bin string, logger *slog.Logger, live *liveProviders, mode appMode) (*app, error) {
	workDir, err := filepath.Abs(cfg.WorkingDir)
	if err != nil {
		return nil, fmt.Errorf("working_dir: %w", err)
	}
	if err := os.MkdirAll(workDir, 0o750); err != nil {
		return nil, fmt.Errorf("creating working_dir: %w", err)
	}
	// What a killed daemon left running ends before anything runs, for
	// every task (terraform/leftover.go).
	if cfg.ClientType != config.ClientDevelopment {
		dirs := map[string]string{}
		for _, s := range cfg.Tasks {
			dirs[s.Name] = cmp.Or(s.WorkingDir, filepath.Join(workDir, s.Name))
		}
		terraform.EndLeftovers(workDir, dirs, logger.With("component", "terraform"))
		// The held plans of tasks created through the API, which this
		// daemon does not have, are removed now (terraform/heldsweep.go).
		terraform.SweepHeldPlans(workDir, dirs, logger.With("component", "terraform"))
		// And those of the configured tasks: a held plan restored from
		// the store is restored without its file, and the task's driver
		// may not start before it is decided.
		terraform.SweepHeldPlansOf(dirs, logger.With("component", "terraform"))
	}
	cacheDir := filepath.Join(workDir, ".plugin-cache")
	if err := os.MkdirAll(cacheDir, 0o750); err != nil {
		return nil, fmt.Errorf("creating plugin cache: %w", err)
	}
	a := &app{cfg: cfg, log: logger, client: client, fileTasks: cfg.Tasks}
	a.registry = watch.NewRegistry(client, logger.With("component", "watch"), func(sub, key string) {
		a.ctrl.Notify(sub, key)
	})
	if live == nil {
		live = newLiveProviders(cfg, logger)
	}
	// stopTimeout bounds how long an interrupted Terraform may take to
	// stop before it and its children are killed: under high availability
	// the HA timing's kill bound (set below, after setupCoordinator).
	stopTimeout := terraform.DefaultStopTimeout
	// One memory budget for every task's Terraform commands: max_memory,
	// else three quarters of the machine's (or cgroup's) memory.
	memLimit := cfg.Driver.MaxMemory
	if memLimit == 0 {
		memLimit = terraform.AutoMemoryLimit()
	}
	a.memory = terraform.NewMemoryBudget(memLimit, logger.With("component", "terraform"), func(task string, bytes int64) {
		if a.obs.metrics != nil {
			a.obs.metrics.TerraformPeakRSS(task, bytes)
		}
	})
	// driverOptions is the driver configuration of one task: the driver
	// is built from it, and so is the task's desired state.
	taskDir := func(spec task.Spec) string {
		if spec.WorkingDir != "" {
			return spec.WorkingDir
		}
		return filepath.Join(workDir, spec.Name)
	}
	driverOptions := func(spec task.Spec) (terraform.Options, error) {
		dir, err := filepath.Abs(taskDir(spec))
		if err != nil {
			return terraform.Options{}, err
		}
		spec.Module = localModuleSource(spec.Module, dir)
		var used []config.Provider
		for _, ref := range spec.Providers {
			p, err := live.get(ref) // secrets.go
			if err != nil {
				return terraform.Options{}, err
			}
			used = append(used, p)
		}
		return terraform.Options{
			Spec:           spec,
			WorkDir:        dir,
			Binary:         bin,
			Driver:         cfg.Driver,
			Providers:      used,
			Consul:         cfg.Consul,
			PluginCacheDir: cacheDir,
			Memory:         a.memory,
			Logger:         logger.With("component", "terraform"),
			StopTimeout:    stopTimeout,
			// Run logs and terraform.log on disk are redacted
			// (setupObserve), through the task's view: the values of its
			// own variables, when a request wrote them, are shown as
			// written (redact.Redactor.ForTask).
			Redactor:   a.obs.redactor.ForTask(spec.Name),
			StateLocks: a.stateLocks(), // ha.go
			Instance:   cfg.ID,
		}, nil
	}
	factory := func(spec task.Spec) (driver.Driver, error) {
		o, err := driverOptions(spec)
		if err != nil {
			return nil, err
		}
		if cfg.ClientType == config.ClientDevelopment {
			return dev.New(spec, logger.With("component", "driver")), nil
		}
		if cfg.TFC != nil {
			return tfc.New(tfcOptions(cfg, o, a.store)) // tfc.go
		}
		return terraform.New(o)
	}
	desired := withPolicyDigest(func(ctx context.Context, spec task.Spec) (map[string]string, error) { // gates.go
		o, err := driverOptions(spec)
		if errors.Is(err, errWaitingForVault) {
			// The task waits (not a failed run); its status says why,
			// and it is notified when Vault answers (secrets.go).
			return nil, fmt.Errorf("%w: %w", reconcile.ErrWaiting, err)
		}
		if err != nil {
			return nil, nil // the run reports it (the driver cannot be built)
		}
		if cfg.TFC != nil {
			return tfc.DesiredState(ctx, tfcOptions(cfg, o, nil)) // tfc.go
		}
		return terraform.DesiredState(ctx, o)
	})
	// A daemon without high availability keeps what each task applied in
	// its history database: a task whose working directory was removed
	// while it was stopped (its Terraform state too, with the local
	// backend) runs at start all the same.
	var prepared func(task.Spec) bool
	if cfg.HA == nil && cfg.TFC == nil && cfg.ClientType != config.ClientDevelopment {
		prepared = func(spec task.Spec) bool { return terraform.Initialised(taskDir(spec)) }
	}
	a.setupObserve()
	if err := a.setupCoordinator(workDir, mode); err != nil { // ha.go
		return nil, err
	}
	a.setupNotify() // observe.go
	if k := a.coord.KillBound(); k > 0 {
		stopTimeout = k
	}
	factory = a.coord.Driver(live.wrapFactory(factory)) // secrets.go: rebuilt when Vault values change
	a.ctrl = reconcile.New(reconcile.Options{
		Watcher:     a.registry,
		NewDriver:   factory,
		Store:       a.store,
		Logger:      logger.With("component", "ctrl"), // CTS's name of its controller's lines
		MaxParallel: cfg.MaxParallelRuns,
		Standby:     a.coord.Standby(), // a follower until elected (ha.go)
		Metrics:     a.obs.metrics,
		OnEvent:     a.obs.onEvent,
		OnGate:      a.onGate,
		OnRemoval:   a.obs.onRemoval,
		OnDestroyed: a.onDestroyed, // ha.go
		Desired:     desired,
		Prepared:    prepared,
		// The one rule of a run's life at shutdown: runs in progress
		// get this long to finish, then are interrupted.
		ShutdownGrace: shutdownGrace,
		Redactor:      a.obs.redactor,
		RetryMax:      cfg.Retry.MaxDelay,
		MaxRetries:    cfg.Retry.MaxRetries,
	}, cfg.Tasks)
	a.setupSecrets(live) // secrets.go
	return a, nil
}

// localModuleSource rewrites a local module path ("./x", "../x"), which CTS
// resolves against the process's working directory, into a path relative
// to the task's directory, where Terraform resolves it.
func localModuleSource(src, taskDir string) string {
	if !strings.HasPrefix(src, "./") && !strings.HasPrefix(src, "../") && !filepath.IsAbs(src) {
		return src
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		return src
	}
	rel, err := filepath.Rel(taskDir, abs)
	if err != nil {
		return src
	}
	rel = filepath.ToSlash(rel)
	if !strings.HasPrefix(rel, "../") {
		rel = "./" + rel
	}
	return rel
}

// runOnce runs (or, with inspect, plans) the tasks once and exits.
func (a *app) runOnce(ctx context.Context, only []string, inspect bool, stdout io.Writer) int {
	defer a.logSignal(ctx)() // daemon.go
	wait := a.onceWait
	if wait <= 0 {
		wait = onceWait
	}
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	err := consul.WaitReady(waitCtx, a.client.Client, a.log)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ExitInterrupt
		}
		a.log.Error("consul is not reachable", "address", a.cfg.Consul.Address, "waited", wait, "error", err)
		return ExitError
	}
	regCtx, stopReg := context.WithCancel(context.Background())
	regDone := make(chan error, 1)
	go func() { regDone <- a.registry.Run(regCtx) }()
	defer func() { stopReg(); <-regDone }()

	mode := "once"
	if inspect {
		mode = "inspect"
	}
	// CTS's wording, which operators' log alerts and scripts look for.
	n := len(only) // -inspect-task; else every enabled task
	for _, t := range a.cfg.Tasks {
		if len(only) == 0 && t.Enabled {
			n++
		}
	}
	a.log.Info("running controller in "+mode+" mode", "tasks", n)
	if err := a.ctrl.RunOnce(ctx, only, inspect, wait, stdout); err != nil {
		if ctx.Err() != nil {
			return ExitInterrupt
		}
		a.log.Error("error running controller in "+mode+" mode", "error", err)
		return ExitError
	}
	a.log.Info("all tasks completed once", "mode", mode)
	a.log.Info("graceful shutdown")
	return ExitOK
}

// logName is the hclog name of the lines logged without a component.
const logName = "cli"

func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	log, _ := newLoggerLevel(cfg, w)
	return log
}

// logLevel is the slog level of a log_level value (INFO when unknown).
func logLevel(s string) slog.Level {
	switch strings.ToUpper(s) {
	case "TRACE":
		return logging.LevelTrace
	case "DEBUG":
		return slog.LevelDebug
	case "WARN":
		return slog.LevelWarn
	case "ERR", "ERROR":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// newLoggerLevel is newLogger, with the level it logs at, which a reload
// of the configuration changes.
func newLoggerLevel(cfg *config.Config, w io.Writer) (*slog.Logger, *slog.LevelVar) {
	level := new(slog.LevelVar)
	level.Set(logLevel(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	// The text format is hclog's, as CTS, Consul, Vault and Nomad write it;
	// records without a component are "cli"'s, as CTS's start-up lines.
	var h slog.Handler = logging.NewHCLogHandler(w, logging.Options{Level: level, Name: logName})
	if cfg.LogFormat == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	h = withSyslog(cfg, h, opts) // syslog.go
	// Every record passes the configuration's secrets through a redactor
	// (set once the secrets are resolved, in setupObserve): Terraform
	// output forwarded with log = true included.
	return slog.New(redact.NewRedactingHandler(h)), level
}
