// Package task holds the one task model used by configuration, the API, the
// reconciler, the driver and the store. A Spec is a plain value: defaults are
// applied once when it is decoded (from HCL/JSON config or from an API body),
// with the defaulting functions of rules.go both decoders use
// (SetBufferPeriod), and Validate is the single place where its rules live
// (CheckCron is the cron rule it applies, which configuration decoding also
// uses to report the expression where it was written).
package task

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Spec is one task: a Terraform module, the condition that triggers it and
// the extra module inputs it receives. JSON field names follow the CTS API.
type Spec struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Enabled     bool   `json:"enabled"`
	Module      string `json:"module"`
	Version     string `json:"version,omitempty"`
	// Providers lists terraform_provider names ("name" or "name.alias").
	Providers []string `json:"providers"`
	// Variables maps a module variable to an HCL expression text, e.g.
	// `"a"`, `5`, `["x","y"]`. Values read from variable_files are merged
	// in at config load, so the driver sees one map.
	Variables map[string]string `json:"variables,omitempty"`
	// VariableFiles is kept for display; its contents are already in Variables.
	VariableFiles []string `json:"-"`
	// WorkingDir is the task's directory; empty means <global working_dir>/<name>.
	WorkingDir   string        `json:"-"`
	BufferPeriod *BufferPeriod `json:"buffer_period,omitempty"`
	// RemovalDelay keeps a service instance, catalog service or node
	// that left the condition's result in the module's input until it has
	// been gone this long (removal.go; a ctsync extension). nil: off, and
	// left out of the JSON; a value set to 0 (the task's own "0s" over a
	// global default) is kept, so that the JSON carries it. Decoding
	// resolves the global default (SetRemovalDelay); read it with
	// Removal.
	RemovalDelay *Duration    `json:"removal_delay,omitempty"`
	Condition    Condition    `json:"condition"`
	ModuleInput  ModuleInputs `json:"module_input,omitempty"`
	// Parallelism is passed to terraform apply -parallelism when > 0.
	Parallelism int `json:"parallelism,omitempty"`
	// Refresh is the task's refresh policy (RefreshAuto or RefreshAlways;
	// a ctsync extension); "" takes the driver's default (driver
	// "terraform" refresh, itself "auto" when not set).
	Refresh string `json:"refresh,omitempty"`
	// DriftDetection plans the task periodically to find changes made
	// outside Terraform (ctsync extension); nil means off.
	DriftDetection *DriftDetection `json:"drift_detection,omitempty"`
	// TFCWorkspace is the terraform_cloud_workspace block (terraform-cloud
	// driver only, tfc.go); nil: the server's defaults.
	TFCWorkspace *TFCWorkspace `json:"terraform_cloud_workspace,omitempty"`
	// DependsOn names the tasks this one runs after (chain.go; a ctsync
	// extension).
	DependsOn []string `json:"depends_on,omitempty"`
	// Approval and Policy are the safety gates (gates.go; ctsync
	// extensions); nil: none.
	Approval *Approval `json:"approval,omitempty"`
	Policy   *Policy   `json:"policy,omitempty"`
	// ExportOutputs is set by the controller (never configured) when
	// another task receives this one's outputs: the driver then exposes
	// the module's outputs and reports them after each apply.
	ExportOutputs bool `json:"-"`
}

// The refresh policies of a task (Spec.Refresh). Under RefreshAuto a run
// that a change of the task's Consul data triggers may apply without
// Terraform's refresh (-refresh=false) while the last full refresh is
// recent and nothing has failed since; drift checks and every other run
// refresh. RefreshAlways refreshes every run, as CTS does.
const (
	RefreshAuto   = "auto"
	RefreshAlways = "always"
)

// CheckRefresh refuses a refresh policy other than "" (the default),
// RefreshAuto and RefreshAlways.
func CheckRefresh(v string) error {
	switch v {
	case "", RefreshAuto, RefreshAlways:
		return nil
	}
	return fmt.Errorf("%q is not a refresh policy (use %q or %q)", v, RefreshAuto, RefreshAlways)
}

// DriftDetection configures periodic drift checks: a plan that has changes
// although the task's inputs did not change means the infrastructure was
// changed behind Terraform's back.
type DriftDetection struct {
	Interval Duration `json:"interval"`
	// Remediate applies the task when drift is found.
	Remediate bool `json:"remediate"`
}

// MinDriftInterval is the shortest drift check interval allowed.
const MinDriftInterval = time.Second

// BufferPeriod is the debounce window of a dynamic task (CTS semantics).
// A nil *BufferPeriod on a Spec means "inherit the global one"; decoding
// resolves inheritance (SetBufferPeriod), so after decoding it is always set.
type BufferPeriod struct {
	Enabled bool     `json:"enabled"`
	Min     Duration `json:"min"`
	Max     Duration `json:"max"`
}

// Condition says what triggers a task. Exactly one field is set.
type Condition struct {
	Services        *ServicesCondition        `json:"services,omitempty"`
	CatalogServices *CatalogServicesCondition `json:"catalog_services,omitempty"`
	ConsulKV        *ConsulKVCondition        `json:"consul_kv,omitempty"`
	Schedule        *ScheduleCondition        `json:"schedule,omitempty"`
	// Nodes and Intentions are ctsync extensions (CTS has neither).
	Nodes      *NodesCondition      `json:"nodes,omitempty"`
	Intentions *IntentionsCondition `json:"intentions,omitempty"`
}

// ServicesSelector selects service instances from the health endpoint. It is
// shared by condition "services" and module_input "services".
type ServicesSelector struct {
	Names              []string          `json:"names,omitempty"`
	Regexp             *string           `json:"regexp,omitempty"`
	Datacenter         string            `json:"datacenter"`
	Namespace          string            `json:"namespace"`
	Filter             string            `json:"filter"`
	CTSUserDefinedMeta map[string]string `json:"cts_user_defined_meta"`
	// Status lists the aggregated health states of the instances to watch
	// (StatusPassing, StatusWarning, StatusCritical, StatusMaintenance).
	// nil is CTS's rule: passing only, unless Filter mentions Checks.Status.
	// A ctsync extension, left out of the JSON when not set.
	Status []string `json:"status,omitempty"`
	// Peer and Partition are query options (?peer=, ?partition=): services
	// imported from a cluster peer, services of an admin partition. ctsync
	// extensions, left out of the JSON when not set.
	Peer      string `json:"peer,omitempty"`
	Partition string `json:"partition,omitempty"`
	// PerService holds, for some of Names, query options and metadata that
	// replace the selector's own. Only the deprecated CTS form produces it:
	// a task's `services = [...]` list whose entries refer to top-level
	// `service` blocks, each with its own datacenter, namespace, filter and
	// cts_user_defined_meta. It is configuration-file only (CTS's API never
	// accepted it), so it is not part of the task's JSON.
	PerService map[string]ServiceOptions `json:"-"`
}

// ServiceOptions are the query options and metadata of one service name in
// a ServicesSelector's PerService. Status, Peer and Partition are always
// the selector's (service blocks have none of them).
type ServiceOptions struct {
	Datacenter         string
	Namespace          string
	Filter             string
	CTSUserDefinedMeta map[string]string
	Status             []string
	Peer               string
	Partition          string
}

// Options returns the query options and metadata that apply to the service
// name: its PerService entry when there is one, else the selector's own.
func (sel *ServicesSelector) Options(name string) ServiceOptions {
	o, ok := sel.PerService[name]
	if !ok {
		o = ServiceOptions{Datacenter: sel.Datacenter, Namespace: sel.Namespace, Filter: sel.Filter,
			CTSUserDefinedMeta: sel.CTSUserDefinedMeta}
	}
	o.Status, o.Peer, o.Partition = sel.Status, sel.Peer, sel.Partition
	return o
}

// Health states of a service instance, as Consul aggregates its checks
// (the worst wins: maintenance, critical, warning, passing).
const (
	StatusPassing     = "passing"
	StatusWarning     = "warning"
	StatusCritical    = "critical"
	StatusMaintenance = "maintenance"
)

// Statuses are the valid values of a selector's status list.
var Statuses = []string{StatusPassing, StatusWarning, StatusCritical, StatusMaintenance}

// ServicesCondition triggers on any change to the matching healthy instances.
type ServicesCondition struct {
	ServicesSelector
	UseAsModuleInput bool `json:"use_as_module_input"`
}

// CatalogServicesCondition triggers when the set of matching service names changes.
type CatalogServicesCondition struct {
	Regexp           string            `json:"regexp"`
	Datacenter       string            `json:"datacenter"`
	Namespace        string            `json:"namespace"`
	NodeMeta         map[string]string `json:"node_meta"`
	UseAsModuleInput bool              `json:"use_as_module_input"`
}

// ConsulKVSelector selects one key, or a prefix when Recurse is set.
type ConsulKVSelector struct {
	Path       string `json:"path"`
	Recurse    bool   `json:"recurse"`
	Datacenter string `json:"datacenter"`
	Namespace  string `json:"namespace"`
}

// ConsulKVCondition triggers when the key (or any key under the prefix) changes.
type ConsulKVCondition struct {
	ConsulKVSelector
	UseAsModuleInput bool `json:"use_as_module_input"`
}

// ScheduleCondition runs the task on a cron schedule (hashicorp/cronexpr syntax).
type ScheduleCondition struct {
	Cron string `json:"cron"`
}

// NodesSelector selects catalog nodes (/v1/catalog/nodes). It is shared by
// condition "nodes" and module_input "nodes".
type NodesSelector struct {
	Datacenter string `json:"datacenter"`
	// Filter is a Consul filter expression over the catalog's node
	// objects (Node, Address, Datacenter, TaggedAddresses, Meta, ...).
	Filter   string            `json:"filter"`
	NodeMeta map[string]string `json:"node_meta"`
}

// NodesCondition triggers on any change to the selected nodes: one added or
// removed, or a change of its address, tagged addresses or meta.
type NodesCondition struct {
	NodesSelector
	UseAsModuleInput bool `json:"use_as_module_input"`
}

// NameMatch selects service names: exactly one of Names (exact names) and
// Regexp (an empty regexp matches every name) is set.
type NameMatch struct {
	Names  []string `json:"names,omitempty"`
	Regexp *string  `json:"regexp,omitempty"`
}

// IntentionsSelector selects service intentions (config entries of kind
// service-intentions) by their source and destination service names. At
// least one of Source and Destination is set; one that is not set matches
// every name. It is shared by condition "intentions" and module_input
// "intentions".
type IntentionsSelector struct {
	Datacenter  string     `json:"datacenter"`
	Namespace   string     `json:"namespace"`
	Partition   string     `json:"partition,omitempty"`
	Source      *NameMatch `json:"source_services,omitempty"`
	Destination *NameMatch `json:"destination_services,omitempty"`
}

// IntentionsCondition triggers on any change to the selected intentions.
type IntentionsCondition struct {
	IntentionsSelector
	UseAsModuleInput bool `json:"use_as_module_input"`
}

// ModuleInputs are extra data sources for the module besides the
// condition's. As in CTS, a change to them makes a dynamic task run; a
// schedule task only reads them on its cron ticks.
type ModuleInputs struct {
	Services   *ServicesSelector   `json:"services,omitempty"`
	ConsulKV   *ConsulKVSelector   `json:"consul_kv,omitempty"`
	Nodes      *NodesSelector      `json:"nodes,omitempty"`
	Intentions *IntentionsSelector `json:"intentions,omitempty"`
	// TaskOutputs feeds other tasks' Terraform outputs to the module
	// (chain.go; a ctsync extension).
	TaskOutputs *TaskOutputsSelector `json:"task_outputs,omitempty"`
}

// Type returns the condition's type name as written in HCL ("services",
// "catalog-services", "consul-kv", "schedule", "nodes", "intentions"), or
// "" if none is set.
func (c Condition) Type() string {
	switch {
	case c.Services != nil:
		return "services"
	case c.CatalogServices != nil:
		return "catalog-services"
	case c.ConsulKV != nil:
		return "consul-kv"
	case c.Schedule != nil:
		return "schedule"
	case c.Nodes != nil:
		return "nodes"
	case c.Intentions != nil:
		return "intentions"
	}
	return ""
}

// count returns how many condition types are set.
func (c Condition) count() int {
	n := 0
	for _, set := range []bool{c.Services != nil, c.CatalogServices != nil, c.ConsulKV != nil, c.Schedule != nil,
		c.Nodes != nil, c.Intentions != nil} {
		if set {
			n++
		}
	}
	return n
}

// Defaults for a task when the config does not say otherwise.
var (
	DefaultBufferPeriod = BufferPeriod{Enabled: true, Min: Duration(5 * time.Second), Max: Duration(20 * time.Second)}
)

// nameRE is the CTS rule for task names: a valid HCL identifier.
var nameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_-]*$`)

// FieldError is a validation error on one field of a task, addressed by its
// path (e.g. "condition.services.regexp"). Config decoding maps the path to a
// file and line; the API reports the path as is.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Validate checks the rules that hold wherever a Spec comes from. It returns
// the first problem found as a *FieldError.
func (s *Spec) Validate() error {
	if s.Name == "" {
		return fieldErr("name", "is required")
	}
	if len(s.Name) > MaxNameLength {
		return fieldErr("name", "is %d characters long: a task name has at most %d (it names the task's working directory)", len(s.Name), MaxNameLength)
	}
	if !nameRE.MatchString(s.Name) {
		return fieldErr("name", "%q is not a valid task name: it must start with a letter or underscore and contain only letters, digits, underscores and dashes", s.Name)
	}
	if s.Module == "" {
		return fieldErr("module", "is required")
	}
	for _, name := range slices.Sorted(maps.Keys(s.Variables)) {
		if err := CheckVariable(name, s.Variables[name]); err != nil {
			return fieldErr("variables."+name, "%v", err)
		}
	}
	switch s.Condition.count() {
	case 0:
		if len(s.Upstreams()) > 0 {
			break // triggered by its upstream tasks only (chain.go)
		}
		return fieldErr("condition", "task should be configured with a condition block")
	case 1:
	default:
		return fieldErr("condition", "only one condition can be configured per task")
	}
	seenProvider := map[string]bool{}
	for i, p := range s.Providers {
		if err := CheckProviderRef(p); err != nil {
			return fieldErr(fmt.Sprintf("providers[%d]", i), "%v", err)
		}
		base := p
		for j := 0; j < len(p); j++ {
			if p[j] == '.' {
				base = p[:j]
				break
			}
		}
		if seenProvider[base] {
			return fieldErr(fmt.Sprintf("providers[%d]", i), "provider %q is listed more than once; a task can use only one instance of a provider", base)
		}
		seenProvider[base] = true
	}
	if bp := s.BufferPeriod; bp != nil {
		if bp.Min < 0 || bp.Max < 0 {
			return fieldErr("buffer_period", "min and max cannot be negative")
		}
		if bp.Max < bp.Min {
			return fieldErr("buffer_period.max", "(%s) cannot be less than min (%s)", bp.Max, bp.Min)
		}
	}
	if s.Parallelism < 0 {
		return fieldErr("parallelism", "cannot be negative")
	}
	if err := CheckRefresh(s.Refresh); err != nil {
		return fieldErr("refresh", "%v", err)
	}
	if err := s.validateChain(); err != nil {
		return err
	}
	if err := s.validateGates(); err != nil { // gates.go
		return err
	}
	if err := s.validateRemovalDelay(); err != nil { // removal.go
		return err
	}
	if d := s.DriftDetection; d != nil && d.Interval.D() < MinDriftInterval {
		return fieldErr("drift_detection.interval", "must be at least %s", MinDriftInterval)
	}
	if c := s.Condition.Services; c != nil {
		if err := c.ServicesSelector.validate("condition.services"); err != nil {
			return err
		}
	}
	if c := s.Condition.CatalogServices; c != nil {
		if c.Regexp == "" {
			return fieldErr("condition.catalog_services.regexp", "is required")
		}
		if _, err := regexp.Compile(c.Regexp); err != nil {
			return fieldErr("condition.catalog_services.regexp", "does not compile: %v", err)
		}
	}
	if c := s.Condition.ConsulKV; c != nil && c.Path == "" {
		return fieldErr("condition.consul_kv.path", "is required")
	}
	if c := s.Condition.Schedule; c != nil && c.Cron == "" {
		return fieldErr("condition.schedule.cron", "is required")
	}
	if m := s.ModuleInput.Services; m != nil {
		if err := m.validate("module_input.services"); err != nil {
			return err
		}
	}
	if m := s.ModuleInput.ConsulKV; m != nil && m.Path == "" {
		return fieldErr("module_input.consul_kv.path", "is required")
	}
	// One source per variable type: a condition and a module_input cannot
	// both feed the same variable, even when use_as_module_input is false.
	if c := s.Condition.Intentions; c != nil {
		if err := c.IntentionsSelector.validate("condition.intentions"); err != nil {
			return err
		}
	}
	if m := s.ModuleInput.Intentions; m != nil {
		if err := m.validate("module_input.intentions"); err != nil {
			return err
		}
	}
	if s.Condition.Services != nil && s.ModuleInput.Services != nil {
		return fieldErr("module_input.services", "the services condition already provides the services variable; a task cannot also have a services module_input")
	}
	if s.Condition.ConsulKV != nil && s.ModuleInput.ConsulKV != nil {
		return fieldErr("module_input.consul_kv", "the consul-kv condition already provides the consul_kv variable; a task cannot also have a consul-kv module_input")
	}
	if s.Condition.Nodes != nil && s.ModuleInput.Nodes != nil {
		return fieldErr("module_input.nodes", "the nodes condition already provides the nodes variable; a task cannot also have a nodes module_input")
	}
	if s.Condition.Intentions != nil && s.ModuleInput.Intentions != nil {
		return fieldErr("module_input.intentions", "the intentions condition already provides the intentions variable; a task cannot also have an intentions module_input")
	}
	if c := s.Condition.Schedule; c != nil {
		if err := CheckCron(c.Cron); err != nil {
			return fieldErr("condition.schedule.cron", "%q %v", c.Cron, err)
		}
	}
	return nil
}

func (sel *ServicesSelector) validate(field string) error {
	hasRE := sel.Regexp != nil
	if hasRE == (len(sel.Names) > 0) {
		return fieldErr(field, "exactly one of regexp or names must be set")
	}
	if hasRE {
		if _, err := regexp.Compile(*sel.Regexp); err != nil {
			return fieldErr(field+".regexp", "does not compile: %v", err)
		}
		if sel.Peer != "" {
			// /v1/catalog/services ignores ?peer (Consul 1.22): a regexp
			// would be matched against the local services.
			return fieldErr(field+".peer", "cannot be combined with regexp: Consul's catalog does not list the services a peer exports; list them in names")
		}
	}
	for i, n := range sel.Names {
		if n == "" {
			return fieldErr(fmt.Sprintf("%s.names[%d]", field, i), "cannot be empty")
		}
	}
	if sel.Status != nil {
		if len(sel.Status) == 0 {
			return fieldErr(field+".status", "must list at least one of %s (or be left out: passing only)", quoted(Statuses))
		}
		seen := map[string]bool{}
		for i, st := range sel.Status {
			if !slices.Contains(Statuses, st) {
				return fieldErr(fmt.Sprintf("%s.status[%d]", field, i), "%q is not a health status; use %s", st, quoted(Statuses))
			}
			if seen[st] {
				return fieldErr(fmt.Sprintf("%s.status[%d]", field, i), "%q is listed twice", st)
			}
			seen[st] = true
		}
	}
	return nil
}

func (sel *IntentionsSelector) validate(field string) error {
	if sel.Source == nil && sel.Destination == nil {
		return fieldErr(field, "at least one of source_services and destination_services must be set (regexp = \"\" matches every name)")
	}
	for _, m := range []struct {
		name string
		m    *NameMatch
	}{{"source_services", sel.Source}, {"destination_services", sel.Destination}} {
		if m.m == nil {
			continue
		}
		f := field + "." + m.name
		if (m.m.Regexp != nil) == (len(m.m.Names) > 0) {
			return fieldErr(f, "exactly one of regexp or names must be set")
		}
		if m.m.Regexp != nil {
			if _, err := regexp.Compile(*m.m.Regexp); err != nil {
				return fieldErr(f+".regexp", "does not compile: %v", err)
			}
		}
		for i, n := range m.m.Names {
			if n == "" {
				return fieldErr(fmt.Sprintf("%s.names[%d]", f, i), "cannot be empty")
			}
		}
	}
	return nil
}

func quoted(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// IsDynamic reports whether the task is triggered by Consul data (as opposed
// to a schedule).
func (s *Spec) IsDynamic() bool { return s.Condition.Schedule == nil }

// Duration is a time.Duration that reads and writes as a Go duration string
// ("5s") in JSON, as the CTS API does.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON accepts a duration string ("5s") or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("invalid duration %q", s)
		}
		*d = Duration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("a duration must be a string such as \"5s\"")
	}
	*d = Duration(n)
	return nil
}
