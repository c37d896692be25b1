package cli

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	ctsapi "github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/task"
)

// A SIGHUP reloads the configuration files and directories given at start
// (docs/configuration.md, "Reloading"). It is all or nothing: the files are
// loaded and checked first, as at start, and any error changes nothing.
// Then the tasks of the files are made what the files say (added tasks
// created, removed ones deleted with their resources kept, changed ones
// updated), and the global settings that can change while the daemon runs
// do; the others are logged as needing a restart and left as they are.

// reloadTasks is what a reload does to the controller's tasks: the
// controller itself (not the API's Persisting: the tasks of the files are
// not records of the store).
type reloadTasks interface {
	Task(name string) (reconcile.TaskState, error)
	Create(ctx context.Context, spec task.Spec, runNow bool) error
	Delete(ctx context.Context, name string, destroy bool) error
}

// taskUpdater replaces a task's settings keeping its run state, history
// and held plans (reconcile.Controller.Update): a changed desired state
// then runs as any change does.
type taskUpdater interface {
	Update(ctx context.Context, spec task.Spec) error
}

// liveAPI is the API server as a reload changes it.
type liveAPI interface {
	Reload() error
	SetLive(ctsapi.Live)
}

// taskPlan is what a reload does to the tasks of the files.
type taskPlan struct {
	add, update []task.Spec
	remove      []string
}

func (p taskPlan) empty() bool { return len(p.add)+len(p.update)+len(p.remove) == 0 }

// planTasks compares the tasks of the files in force (old) with the new
// ones.
func planTasks(old, next []task.Spec) taskPlan {
	var p taskPlan
	before := map[string]task.Spec{}
	for _, s := range old {
		before[s.Name] = s
	}
	seen := map[string]bool{}
	for _, s := range next {
		seen[s.Name] = true
		o, ok := before[s.Name]
		switch {
		case !ok:
			p.add = append(p.add, s)
		case !reflect.DeepEqual(o, s):
			p.update = append(p.update, s)
		}
	}
	for _, s := range old {
		if !seen[s.Name] {
			p.remove = append(p.remove, s.Name)
		}
	}
	return p
}

func findSpec(specs []task.Spec, name string) (task.Spec, bool) {
	i := slices.IndexFunc(specs, func(s task.Spec) bool { return s.Name == name })
	if i < 0 {
		return task.Spec{}, false
	}
	return specs[i], true
}

// loadForReload reads the files given at start again and checks them as
// start does (the command line's -client-type and -log-format still
// apply).
func (a *app) loadForReload() (*config.Config, error) {
	cfg, err := config.Load(a.flags.configs)
	if err != nil {
		return nil, err
	}
	if a.flags.logFormat != "" {
		cfg.LogFormat = a.flags.logFormat
	}
	if a.flags.clientType != "" {
		cfg.ClientType = strings.ToLower(a.flags.clientType)
	}
	if cfg.ClientType != config.ClientDevelopment {
		if err := cfg.CheckLocalModules(); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// restartOnly lists the settings that differ between old and next and
// cannot change while the daemon runs: they need a restart.
func restartOnly(old, next *config.Config) []string {
	var out []string
	diff := func(name string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			out = append(out, name)
		}
	}
	diff("working_dir", old.WorkingDir, next.WorkingDir)
	diff("id", old.ID, next.ID)
	diff("port/address", old.ListenAddress(), next.ListenAddress())
	diff("log_format", old.LogFormat, next.LogFormat)
	diff("client_type", old.ClientType, next.ClientType)
	diff("max_parallel_runs", old.MaxParallelRuns, next.MaxParallelRuns)
	diff("retry", old.Retry, next.Retry)
	diff("history", old.History, next.History)
	diff("high_availability", old.HA, next.HA)
	oc, nc := old.Consul, next.Consul
	if hasSecretField(old, config.FieldConsulToken) || hasSecretField(next, config.FieldConsulToken) {
		oc.Token, nc.Token = "", "" // from Vault: resolved at start only
	}
	diff("consul", oc, nc)
	diff("driver", old.Driver, next.Driver)
	if !hasSecretField(old, config.FieldTFCToken) && !hasSecretField(next, config.FieldTFCToken) {
		diff("driver \"terraform-cloud\"", old.TFC, next.TFC)
	}
	diff("terraform_provider", old.Providers, next.Providers)
	diff("vault", old.Vault, next.Vault)
	diff("syslog", old.Syslog, next.Syslog)
	if hasSecretField(old, config.FieldHeader) || hasSecretField(next, config.FieldHeader) {
		diff("notification (headers from Vault)", old.Notifications, next.Notifications)
	}
	diff("tls", old.TLS, next.TLS)
	diff("api_http", old.APIHTTP, next.APIHTTP)
	if hasSecretField(old, config.FieldAPIToken) || hasSecretField(next, config.FieldAPIToken) {
		diff("api_auth (tokens from Vault)", old.APIAuth, next.APIAuth)
	}
	return out
}

func hasSecretField(cfg *config.Config, kind string) bool {
	return slices.ContainsFunc(cfg.SecretFields(), func(f config.SecretField) bool { return f.Kind == kind })
}

// reloadConfig is the configuration part of a SIGHUP: it returns what
// changed, or the error that refused the reload (nothing changed then).
func (a *app) reloadConfig(ctx context.Context, srv liveAPI) (string, error) {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	next, err := a.loadForReload()
	if err != nil {
		return "", err
	}
	// cur holds the settings in force: the start's, with those that
	// change live as the last reload set them.
	cur := a.inForce
	if cur == nil {
		cur = a.cfg
	}
	plan := planTasks(a.fileTasks, next.Tasks)
	// A changed task keeps the enabled flag it has now (set through the
	// API, perhaps) unless the files changed it.
	for i, s := range plan.update {
		if o, ok := findSpec(a.fileTasks, s.Name); ok && o.Enabled == s.Enabled {
			if st, err := a.ctrl.Task(s.Name); err == nil {
				plan.update[i].Enabled = st.Spec.Enabled
			}
		}
	}
	upd, canUpdate := any(a.ctrl).(taskUpdater)
	if a.updater != nil {
		upd, canUpdate = a.updater, true
	}
	if len(plan.update) > 0 && !canUpdate {
		return "", errors.New("changing a task of the configuration files needs a restart with this controller")
	}
	// A task added or changed may name only the providers in force: a new
	// terraform_provider block needs a restart.
	for _, s := range append(slices.Clone(plan.add), plan.update...) {
		if err := a.checkProviders(s); err != nil {
			return "", fmt.Errorf("task %q: %w (a terraform_provider block added to the files needs a restart)", s.Name, err)
		}
	}
	// A task of the files added with the name of a task created through
	// the API replaces it (the files win, as at start).
	var replace []task.Spec
	adds := plan.add[:0:0]
	for _, s := range plan.add {
		if st, err := a.ctrl.Task(s.Name); err == nil && !st.Deleting {
			if !canUpdate {
				return "", fmt.Errorf("task %q of the configuration files has the name of a task created through the api: delete that task first", s.Name)
			}
			replace = append(replace, s)
			continue
		}
		adds = append(adds, s)
	}
	// The token and TLS files, all or nothing on their own: before the
	// tasks, so that a bad file there changes nothing at all.
	if srv != nil {
		if err := srv.Reload(); err != nil {
			return "", err
		}
	}

	for _, w := range next.Warnings {
		a.log.Warn(w)
	}
	if restart := restartOnly(a.cfg, next); len(restart) > 0 {
		a.log.Warn("reload: these settings changed and need a restart; the values in force stay until then", "settings", strings.Join(restart, ", "))
	}
	if a.level != nil && logLevel(cur.LogLevel) != logLevel(next.LogLevel) {
		a.level.Set(logLevel(next.LogLevel))
		a.log.Info("reload: log level changed", "log_level", next.LogLevel)
	}
	if srv != nil {
		live := ctsapi.Live{Tasks: next.APITasks, BufferPeriod: next.BufferPeriod, LogDirs: a.logDirs(a.fileTasks, next.Tasks)}
		if !hasSecretField(a.cfg, config.FieldAPIToken) && !hasSecretField(next, config.FieldAPIToken) &&
			!reflect.DeepEqual(cur.APIAuth, next.APIAuth) {
			live.Tokens, live.SetTokens = next.APIAuth.Tokens, true
			a.log.Info("reload: api_auth tokens changed", "tokens", len(next.APIAuth.Tokens))
		}
		srv.SetLive(live)
	}
	a.setAPITasks(next.APITasks)
	if a.obs.redactor != nil {
		a.obs.redactor.Add(next.Secrets()...) // new secrets (tokens, webhook URLs and headers) are redacted too
	}
	if a.obs.notifier != nil && !hasSecretField(a.cfg, config.FieldHeader) && !hasSecretField(next, config.FieldHeader) &&
		!reflect.DeepEqual(cur.Notifications, next.Notifications) {
		a.obs.notifier.SetNotifications(next.Notifications)
		a.log.Info("reload: notifications changed", "notifications", len(next.Notifications))
	}

	var errs []error
	err = a.coord.Reconfigure(next.Tasks, func() error {
		for _, name := range plan.remove {
			if err := a.ctrl.Delete(ctx, name, false); err != nil && !errors.Is(err, reconcile.ErrNotFound) {
				errs = append(errs, fmt.Errorf("deleting task %q: %w", name, err))
				continue
			}
			a.log.Info("reload: task removed from the configuration deleted; its resources are kept", "task_name", name)
		}
		for _, s := range replace {
			if err := upd.Update(ctx, s); err != nil {
				errs = append(errs, fmt.Errorf("updating task %q: %w", s.Name, err))
				continue
			}
			a.log.Warn("reload: a task created through the api has the name of a task added to the configuration, which wins: the configured one replaces it", "task_name", s.Name)
		}
		for _, s := range adds {
			if err := a.ctrl.Create(ctx, s, false); err != nil {
				errs = append(errs, fmt.Errorf("creating task %q: %w", s.Name, err))
				continue
			}
			a.log.Info("reload: task added", "task_name", s.Name, "enabled", s.Enabled)
		}
		for _, s := range plan.update {
			if err := upd.Update(ctx, s); err != nil {
				errs = append(errs, fmt.Errorf("updating task %q: %w", s.Name, err))
				continue
			}
			a.log.Info("reload: task changed", "task_name", s.Name)
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	a.liveMu.Lock()
	a.fileTasks = next.Tasks
	a.liveMu.Unlock()
	a.inForce = next
	summary := fmt.Sprintf("%d task(s) added, %d changed, %d removed", len(plan.add), len(plan.update), len(plan.remove))
	if plan.empty() {
		summary = "no task changed"
	}
	return summary, errors.Join(errs...)
}

// setAPITasks puts the api_tasks block in force for the checks of the
// stored tasks (checkStoredTask).
func (a *app) setAPITasks(t config.APITasks) {
	a.liveMu.Lock()
	defer a.liveMu.Unlock()
	a.liveAPITasks = &t
}

// isFileTask reports whether a task comes from the configuration files
// in force (the API changes only its enabled flag).
func (a *app) isFileTask(name string) bool {
	a.liveMu.RLock()
	defer a.liveMu.RUnlock()
	return slices.ContainsFunc(a.fileTasks, func(s task.Spec) bool { return s.Name == name })
}

// apiTasks is the api_tasks block in force.
func (a *app) apiTasks() config.APITasks {
	a.liveMu.RLock()
	defer a.liveMu.RUnlock()
	if a.liveAPITasks != nil {
		return *a.liveAPITasks
	}
	return a.cfg.APITasks
}

// statusLine is an error as one line for systemd's STATUS (bounded).
func statusLine(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	const max = 200
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}
