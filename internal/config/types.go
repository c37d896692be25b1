// Package config decodes ctsync's configuration (HCL or JSON, CTS schema)
// from files and directories, applies the CTS merge rules and defaults, and
// validates it. Every error names the file, the line and the field.
package config

import (
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/ctsync/ctsync/internal/task"
)

// Config is the whole decoded configuration, with defaults applied.
type Config struct {
	LogLevel  string // TRACE, DEBUG, INFO, WARN, ERR
	LogFormat string // "text" (default) or "json"
	Port      int    // API port, default 8558 (from address when it has one)
	// Address is the API's listen address, host:port: address's IP (or
	// "" for every interface, without address, as CTS) and Port (listen.go).
	Address    string
	WorkingDir string // default "sync-tasks"
	ID         string // default "cts-<hostname>"
	// MaxParallelRuns bounds how many tasks run Terraform at once
	// (ctsync extension; default DefaultMaxParallelRuns(), the CPUs).
	MaxParallelRuns int
	// Retry is the retry policy of failed runs (retry.go).
	Retry Retry
	// ClientType is "terraform" (default) or "development" (client.go).
	ClientType   string
	BufferPeriod task.BufferPeriod
	// RemovalDelay is the removal_delay of the tasks that do not set
	// their own (removal.go; a ctsync extension); 0: off.
	RemovalDelay time.Duration
	// TLS secures ctsync's own API (the top-level tls block).
	TLS APITLS
	// APIAuth, APITasks and APIHTTP control access to the API
	// (security.go; ctsync extensions).
	APIAuth  APIAuth
	APITasks APITasks
	APIHTTP  APIHTTP
	// History is how many run events are kept per task: history {
	// runs_per_task } (ctsync extension, default DefaultRunsPerTask).
	History int
	// HA is the high_availability block (ha.go); nil when it is absent.
	HA        *HA
	Consul    Consul
	Driver    TerraformDriver
	TFC       *TFCDriver // driver "terraform-cloud" (tfc.go); nil: tasks run locally
	Providers []Provider
	Tasks     []task.Spec
	// Vault and Syslog are the vault and syslog blocks (vault.go, syslog.go).
	Vault  Vault
	Syslog Syslog
	// Notifications are the notification blocks (ctsync extension).
	Notifications []Notification
	// Files lists the configuration files that were read, in order.
	Files []string
	// Warnings are non-fatal notes found while decoding (deprecations and
	// ignored settings), each naming its file and line.
	Warnings []string
	// Ranges maps "task.<name>" and "task.<name>.<field>" to where it was
	// declared, so later validation can point at the source.
	Ranges map[string]hcl.Range
	// secretFields are the values read from Vault outside
	// terraform_provider blocks (secretfields.go).
	secretFields []SecretField
}

// APITLS is TLS (and with VerifyIncoming, mutual TLS) for ctsync's API.
type APITLS struct {
	Enabled        bool
	Cert           string
	Key            string
	VerifyIncoming bool
	CACert         string
	CAPath         string
}

// Consul is the connection to the Consul agent.
type Consul struct {
	Address   string // default CONSUL_HTTP_ADDR, else "localhost:8500"
	Token     string // default CONSUL_TOKEN, then CONSUL_HTTP_TOKEN; a secret
	KVPath    string // default "consul-terraform-sync/"
	TLS       ConsulTLS
	Auth      ConsulAuth
	Transport Transport
	// UseCache asks the agent for cached health answers (?cached), kept
	// current by its streaming backend: the servers answer one stream per
	// service instead of one blocking query per change (ctsync extension).
	UseCache bool
	// ServiceRegistration is how ctsync registers itself as a Consul service.
	ServiceRegistration ServiceRegistration
}

// ServiceRegistration is the consul.service_registration block.
type ServiceRegistration struct {
	Enabled      bool   // default true
	ServiceName  string // default "consul-terraform-sync"
	Address      string // empty: the agent's node address
	Namespace    string
	DefaultCheck DefaultCheck
}

// DefaultCheck is the HTTP health check registered with the service.
type DefaultCheck struct {
	Enabled bool // default true
	// Address includes the scheme; empty means http(s)://localhost:<port>.
	Address string
}

// ConsulTLS configures TLS to the Consul agent.
type ConsulTLS struct {
	Enabled    bool
	Verify     bool // default true
	CACert     string
	CAPath     string
	Cert       string
	Key        string
	ServerName string
}

// ConsulAuth is HTTP basic auth to the agent. Password is a secret.
type ConsulAuth struct {
	Enabled  bool
	Username string
	Password string
}

// Transport tunes the HTTP transport to the agent (CTS defaults).
type Transport struct {
	DialKeepAlive       time.Duration // 30s
	DialTimeout         time.Duration // 30s
	DisableKeepAlives   bool
	IdleConnTimeout     time.Duration // 5s
	MaxIdleConns        int           // 0 = unlimited
	MaxIdleConnsPerHost int           // 100
	TLSHandshakeTimeout time.Duration // 10s
}

// TerraformDriver is the driver "terraform" block.
type TerraformDriver struct {
	// Path is a directory holding a terraform or tofu binary, or the binary
	// itself. Empty: look for terraform, then tofu, on PATH.
	Path       string
	Log        bool // copy Terraform output into ctsync's log
	PersistLog bool // TF_LOG_PATH=<task dir>/terraform.log
	// Backend is nil for the default: consul backend at <kv_path>terraform.
	Backend *Backend
	// RequiredProviders maps a provider name to its requirement.
	RequiredProviders map[string]RequiredProvider
	// MaxMemory bounds, in bytes, the peak RSS of the Terraform commands
	// running at once (max_memory, ctsync extension); 0: not set, the
	// bound is derived from the machine's memory.
	MaxMemory int64
	// Refresh is the refresh policy of the tasks that set none
	// (task.RefreshAuto, the default, or task.RefreshAlways; ctsync
	// extension).
	Refresh string
}

// Backend is a Terraform state backend passed through to the generated
// root module.
type Backend struct {
	Type  string               // consul, local, s3, gcs, azurerm, pg, kubernetes, cos, manta
	Attrs map[string]cty.Value // the block's arguments, as written
}

// RequiredProvider is one entry of required_providers.
type RequiredProvider struct {
	Source  string
	Version string
}

// Provider is a terraform_provider block.
type Provider struct {
	Name  string
	Alias string
	// TaskEnv is set as environment variables on the Terraform process of
	// every task that uses this provider. Values are secrets.
	TaskEnv map[string]string
	// Args are the provider's own arguments (alias and task_env removed).
	// Values are secrets.
	Args ProviderBody
	// Range is where the block was declared.
	Range hcl.Range

	// pending is set when the block holds {{ key }} templates: then every
	// string value of the block (arguments and task_env) is still as
	// written, until package resolve resolves them all.
	pending bool
	// taskEnvRng is where each task_env value with a template was written.
	taskEnvRng map[string]hcl.Range
	// tmpl is the block as written, kept once a block with
	// {{ with secret }} is resolved, to resolve it again when a secret
	// changes; secrets are the SecretKey of each secret it read.
	tmpl    *Provider
	secrets []string
}

// Ref returns how tasks refer to this provider: "name" or "name.alias".
func (p *Provider) Ref() string {
	if p.Alias == "" {
		return p.Name
	}
	return p.Name + "." + p.Alias
}

// ProviderBody is the content of a provider block or of one of its nested
// blocks: attributes with their values and nested blocks in source order.
type ProviderBody struct {
	Attrs  map[string]cty.Value
	Blocks []ProviderBlock

	// rng is where each argument holding a template was written.
	rng map[string]hcl.Range
}

// ProviderBlock is a nested block inside a provider block.
type ProviderBlock struct {
	Type   string
	Labels []string // usually none
	Body   ProviderBody
}
