package api

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/task"
)

// checkModule applies api_tasks.allowed_modules to the module of a task
// created through the API (run=inspect included: a plan runs the module's
// code too).
func checkModule(rules config.APITasks, module string) error {
	if rules.ModuleAllowed(module) {
		return nil
	}
	return &httpError{status: http.StatusForbidden, msg: fmt.Sprintf(
		"module %q is not allowed for tasks created through the API: the source must match one of api_tasks.allowed_modules (%s)",
		module, strings.Join(rules.AllowedModules, ", "))}
}

// CheckStoredTask validates a task read back from a shared store (the
// high-availability task records in Consul KV) before it is created: it
// must be a task the API would have accepted. The record's key must be the
// task's name, the task must pass its own rules (a valid name keeps its
// working directory inside working_dir), its module must be allowed by
// api_tasks and validate (when not nil) must accept it. Whoever can write
// the cluster's KV folder can otherwise make the daemon run any module.
func CheckStoredTask(key string, spec task.Spec, rules config.APITasks, validate func(task.Spec) error) error {
	if rules.CreateDisabled {
		return fmt.Errorf("creating tasks through the API is disabled (api_tasks { create = false })")
	}
	if spec.Name != key {
		return fmt.Errorf("the record %q holds a task named %q", key, spec.Name)
	}
	if spec.WorkingDir != "" || len(spec.VariableFiles) > 0 {
		return fmt.Errorf("a task created through the API cannot set working_dir or variable_files")
	}
	if err := validateTask(&spec); err != nil {
		return err
	}
	if !rules.ModuleAllowed(spec.Module) {
		return fmt.Errorf("module %q is not allowed by api_tasks.allowed_modules", spec.Module)
	}
	if validate != nil {
		if err := validate(spec); err != nil {
			return err
		}
	}
	return nil
}

// logAllowed reports whether the run-log endpoint may serve path: a
// "<dir>/logs/<run>.log" file under one of dirs (the working directories).
// An event's log path comes from the store, which with high availability is
// Consul KV: whoever can write it must not be able to read any file the
// daemon can. No dirs: anything the driver wrote (tests).
func logAllowed(path string, dirs []string) bool {
	if len(dirs) == 0 {
		return true
	}
	if !filepath.IsAbs(path) || filepath.Clean(path) != path ||
		filepath.Ext(path) != ".log" || filepath.Base(filepath.Dir(path)) != "logs" {
		return false
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		real = path // a missing log is reported as gone
	}
	for _, d := range dirs {
		if within(d, path) && within(d, real) {
			return true
		}
		if rd, err := filepath.EvalSymlinks(d); err == nil && within(rd, path) && within(rd, real) {
			return true
		}
	}
	return false
}

func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && !filepath.IsAbs(rel) && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
