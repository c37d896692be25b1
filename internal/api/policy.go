package api

import (
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/task"
)

// checkAllowed applies api_tasks to a task created through the API
// (run=inspect included: a plan runs the module's code too): its module
// must match allowed_modules and, once that is set, every variable it
// sets must match allowed_variables, every Consul KV key it reads must
// be under allowed_kv_prefixes, and it can neither receive other tasks'
// outputs (module_input task_outputs) nor set cts_user_defined_meta (its
// values reach the module). The error, a 403, names the module, the
// variable, the key or the field.
func checkAllowed(rules config.APITasks, spec task.Spec) error {
	if err := allowedError(rules, spec); err != nil {
		return &httpError{status: http.StatusForbidden, msg: err.Error()}
	}
	return nil
}

// allowedError is checkAllowed's verdict as a plain error.
func allowedError(rules config.APITasks, spec task.Spec) error {
	if !rules.ModuleAllowed(spec.Module) {
		return fmt.Errorf("module %q is not allowed for tasks created through the API: the source must match one of api_tasks.allowed_modules (%s)",
			spec.Module, strings.Join(rules.AllowedModules, ", "))
	}
	for _, name := range slices.Sorted(maps.Keys(spec.Variables)) {
		if !rules.VariableAllowed(name) {
			return fmt.Errorf("variable %q (task.variables.%s) is not allowed for tasks created through the API: the name must match one of api_tasks.allowed_variables (%s)",
				name, name, listOrNone(rules.AllowedVariables))
		}
	}
	if rules.Restricted() {
		// Another task's outputs (module_input "task-outputs") are data the
		// allowlist does not cover: they come from modules and variables
		// the operator chose for that task, secrets included.
		if spec.ModuleInput.TaskOutputs != nil {
			return fmt.Errorf("task.module_input.task_outputs is not allowed for tasks created through the API once api_tasks.allowed_modules is set: other tasks' outputs are not covered by the allowlist (depends_on orders runs without passing data)")
		}
		// cts_user_defined_meta reaches the module in var.services as a
		// variable's value would, outside allowed_variables.
		for _, m := range []struct {
			field string
			sel   *task.ServicesSelector
		}{{"condition.services", servicesOf(spec.Condition.Services)}, {"module_input.services", spec.ModuleInput.Services}} {
			if m.sel != nil && len(m.sel.CTSUserDefinedMeta) > 0 {
				return fmt.Errorf("task.%s.cts_user_defined_meta is not allowed for tasks created through the API once api_tasks.allowed_modules is set: its values reach the module (var.services) as variables do, and api_tasks.allowed_variables does not cover them", m.field)
			}
		}
	}
	for _, kv := range []struct {
		field string
		sel   *task.ConsulKVSelector
	}{{"condition.consul_kv", kvOf(spec.Condition.ConsulKV)}, {"module_input.consul_kv", spec.ModuleInput.ConsulKV}} {
		if kv.sel == nil || rules.KVAllowed(kv.sel.Path) {
			continue
		}
		what := "key"
		if kv.sel.Recurse {
			what = "prefix"
		}
		return fmt.Errorf("consul KV %s %q (task.%s.path) is not allowed for tasks created through the API: it must start with one of api_tasks.allowed_kv_prefixes (%s)",
			what, kv.sel.Path, kv.field, listOrNone(rules.AllowedKVPrefixes))
	}
	return nil
}

func servicesOf(c *task.ServicesCondition) *task.ServicesSelector {
	if c == nil {
		return nil
	}
	return &c.ServicesSelector
}

func kvOf(c *task.ConsulKVCondition) *task.ConsulKVSelector {
	if c == nil {
		return nil
	}
	return &c.ConsulKVSelector
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none set"
	}
	return strings.Join(l, ", ")
}

// CheckStoredTask validates a task read back from a shared store (the
// high-availability task records in Consul KV) before it is created: it
// must be a task the API would have accepted. The record's key must be the
// task's name, the task must pass its own rules (a valid name keeps its
// working directory inside working_dir), its module, variables and KV keys
// must be allowed by api_tasks and validate (when not nil) must accept it. Whoever can write
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
	if spec.Policy != nil {
		return fmt.Errorf("a task created through the API cannot set policy: policy files are named by the configuration only")
	}
	if err := validateTask(&spec); err != nil {
		return err
	}
	if err := allowedError(rules, spec); err != nil {
		return err
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
