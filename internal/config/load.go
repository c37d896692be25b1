package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/ctsync/ctsync/internal/depth"
	"github.com/ctsync/ctsync/internal/task"
)

// Defaults that are not task defaults.
const (
	DefaultLogLevel      = "INFO"
	DefaultLogFormat     = "text"
	DefaultPort          = 8558
	DefaultWorkingDir    = "sync-tasks"
	DefaultConsulAddress = "localhost:8500"
	DefaultKVPath        = "consul-terraform-sync/"
	DefaultServiceName   = "consul-terraform-sync"
)

// DefaultMaxParallelRuns is max_parallel_runs when the configuration does
// not set it: one run per CPU this process may use (GOMAXPROCS, which
// follows the cgroup CPU limit), at least 1. A Terraform plan or apply keeps
// about one core busy, so more runs than cores make every run slower and
// the last one later, and fewer leave cores idle.
func DefaultMaxParallelRuns() int { return max(1, runtime.GOMAXPROCS(0)) }

// DefaultTransport holds the CTS transport defaults for the Consul client.
var DefaultTransport = Transport{
	DialKeepAlive:       30 * time.Second,
	DialTimeout:         30 * time.Second,
	IdleConnTimeout:     5 * time.Second,
	MaxIdleConnsPerHost: 100,
	TLSHandshakeTimeout: 10 * time.Second,
}

// Load reads configuration files and directories in order (the CTS
// -config-file and -config-dir flags both feed this one list). A directory
// contributes its *.hcl and *.json files in name order, skipping
// sub-directories, other files and empty files. Files are merged (later
// scalars win, tasks and providers append, maps merge), then defaults are
// applied and everything is validated.
//
// The error, if any, is an *Error or, when there are several problems, an
// Errors holding all of them; AsList returns them as a list.
func Load(paths []string) (*Config, error) {
	files, errs := collectFiles(paths)
	if len(errs) > 0 {
		return nil, toError(errs)
	}
	if len(files) == 0 {
		return nil, &Error{Msg: "no configuration files found"}
	}
	d := &decoder{src: map[string][]byte{}}
	parser := hclparse.NewParser()
	raw := &rawConfig{}
	names := make([]string, 0, len(files))
	for _, f := range files {
		names = append(names, f.name)
		if body := d.parse(parser, f.name, f.src); body != nil {
			d.decodeFile(body, raw)
		}
	}
	cfg := d.finish(raw)
	if len(d.errs) > 0 {
		sortErrors(d.errs, names)
		return nil, toError(d.errs)
	}
	cfg.Files = names
	cfg.Warnings = d.warns
	return cfg, nil
}

// LoadTaskFile decodes a file that holds exactly one task block (HCL, or
// JSON when the name ends in .json), as `task create -task-file` does.
// Relative variable_files are read relative to the process's working
// directory. Defaults are those of a configuration without a global
// buffer_period. Provider references are not checked: that needs the
// daemon's configuration.
func LoadTaskFile(path string) (task.Spec, error) {
	s, _, err := LoadTaskFileWarnings(path)
	return s, err
}

// LoadTaskFileWarnings is LoadTaskFile that also returns the warnings
// ("file:line: message") found while decoding.
func LoadTaskFileWarnings(path string) (task.Spec, []string, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return task.Spec{}, nil, &Error{Range: hcl.Range{Filename: path}, Msg: "cannot read task file: " + pathErr(err)}
	}
	d := &decoder{src: map[string][]byte{}}
	body := d.parse(hclparse.NewParser(), path, src)
	if body == nil {
		return task.Spec{}, nil, toError(d.errs)
	}
	// As CTS, a task file is read as a configuration file of which only
	// the task is used: the other fields of a configuration are ignored,
	// with a warning; an unknown field is an error.
	c := d.content(body, "", topKeys, topRejects)
	d.warnIgnoredInTaskFile(c)
	tasks := c.blocks["task"]
	// CTS's messages, which scripts may match.
	if len(tasks) == 0 && len(d.errs) == 0 {
		d.errf(hcl.Range{Filename: path}, "", "task file '%s' does not contain a task, must contain at least one task", path)
	}
	if len(tasks) > 1 {
		d.errf(tasks[1].DefRange, "task", "task file '%s' cannot contain more than 1 task, contains %d tasks", path, len(tasks))
	}
	var spec task.Spec
	if len(tasks) > 0 && len(d.errs) == 0 {
		t := d.task(tasks[0])
		d.resolveServices(t, nil)
		d.finishTask(t, task.DefaultBufferPeriod, 0)
		spec = t.spec
	}
	if len(d.errs) > 0 {
		sortErrors(d.errs, []string{path})
		return task.Spec{}, nil, toError(d.errs)
	}
	return spec, d.warns, nil
}

// warnIgnoredInTaskFile warns, in file order, about the fields of a task
// file other than its task.
func (d *decoder) warnIgnoredInTaskFile(c *content) {
	var ignored []hcl.Range
	names := map[hcl.Range]string{}
	for name, a := range c.attrs {
		ignored = append(ignored, a.NameRange)
		names[a.NameRange] = name
	}
	for name, bs := range c.blocks {
		if name == "task" {
			continue
		}
		for _, b := range bs {
			ignored = append(ignored, b.TypeRange)
			names[b.TypeRange] = name
		}
	}
	sortRanges(ignored, func(r hcl.Range) hcl.Range { return r })
	for _, r := range ignored {
		d.warnf(r, names[r], "ignored: only the task block of a task file is used")
	}
}

type srcFile struct {
	name string
	src  []byte
}

// collectFiles expands the paths into the files to read, in order.
func collectFiles(paths []string) ([]srcFile, []*Error) {
	var files []srcFile
	var errs []*Error
	add := func(name string) {
		src, err := os.ReadFile(name)
		if err != nil {
			errs = append(errs, &Error{Range: hcl.Range{Filename: name}, Msg: "cannot read configuration file: " + pathErr(err)})
			return
		}
		if len(strings.TrimSpace(string(src))) == 0 {
			return
		}
		files = append(files, srcFile{name: name, src: src})
	}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			errs = append(errs, &Error{Range: hcl.Range{Filename: p}, Msg: "cannot read configuration path: " + pathErr(err)})
			continue
		}
		if !fi.IsDir() {
			if !isConfigFile(p) {
				errs = append(errs, &Error{Range: hcl.Range{Filename: p}, Msg: "configuration files must end in .hcl or .json"})
				continue
			}
			add(p)
			continue
		}
		entries, err := os.ReadDir(p) // sorted by name
		if err != nil {
			errs = append(errs, &Error{Range: hcl.Range{Filename: p}, Msg: "cannot read configuration directory: " + pathErr(err)})
			continue
		}
		for _, e := range entries {
			name := filepath.Join(p, e.Name())
			if e.IsDir() || !isConfigFile(name) {
				continue
			}
			if e.Type()&fs.ModeSymlink != 0 {
				if fi, err := os.Stat(name); err == nil && fi.IsDir() {
					continue
				}
			}
			add(name)
		}
	}
	return files, errs
}

func isConfigFile(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".hcl", ".json":
		return true
	}
	return false
}

func pathErr(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// parse parses one file as JSON (by a .json extension) or HCL. It returns
// nil when the file has syntax errors, which are recorded.
//
// An HCL file is read as CTS reads it, with HCL 1 (see hcl1.go), so that
// every file CTS loads means the same here. A file that HCL 1 refuses is
// read with HCL 2's native syntax, whose messages say best what is wrong.
func (d *decoder) parse(p *hclparse.Parser, name string, src []byte) hcl.Body {
	if !d.checkDepth(name, src, "") {
		return nil
	}
	var f *hcl.File
	var diags hcl.Diagnostics
	if strings.EqualFold(filepath.Ext(name), ".json") {
		f, diags = p.ParseJSON(src, name)
	} else {
		if body := parseHCL1(name, src); body != nil {
			d.src[name] = src
			return body
		}
		f, diags = p.ParseHCL(src, name)
	}
	d.addDiags(diags, "")
	if diags.HasErrors() || f == nil {
		return nil
	}
	d.src[name] = src
	return f.Body
}

// checkDepth refuses a file that nests deeper than depth.Max levels
// before a parser (which recurses on every level) reads it, recording the
// error at the line where the nesting goes too deep.
func (d *decoder) checkDepth(name string, src []byte, field string) bool {
	var err error
	if strings.EqualFold(filepath.Ext(name), ".json") {
		err = depth.JSON(src, 0, true)
	} else {
		err = depth.HCL(src, 0)
	}
	var de *depth.Error
	if !errors.As(err, &de) {
		return true
	}
	pos := hcl.Pos{Line: de.Line, Column: de.Col, Byte: de.Offset}
	d.errf(hcl.Range{Filename: name, Start: pos, End: pos}, field, "the file %s: a parser would recurse that deep (docs/security.md)", de.Reason())
	return false
}

// finish applies defaults, inheritance and cross-file checks.
func (d *decoder) finish(r *rawConfig) *Config {
	cfg := &Config{
		LogLevel:        r.logLevel.or(DefaultLogLevel),
		LogFormat:       r.logFormat.or(DefaultLogFormat),
		WorkingDir:      nonEmpty(r.workingDir.V, DefaultWorkingDir),
		ID:              nonEmpty(r.id.V, defaultID()),
		MaxParallelRuns: r.maxParallel.or(DefaultMaxParallelRuns()),
		Ranges:          map[string]hcl.Range{},
	}
	d.finishAddress(r, cfg) // listen.go
	cfg.Retry = r.retry.config()
	cfg.History = r.runsPerTask.or(DefaultRunsPerTask) // history.go
	cfg.ClientType = nonEmpty(r.clientType.V, ClientTerraform)

	cfg.BufferPeriod = resolveBuffer(r.buffer, task.DefaultBufferPeriod)
	if r.buffer.max.Set && cfg.BufferPeriod.Enabled && cfg.BufferPeriod.Max < cfg.BufferPeriod.Min {
		d.errf(r.buffer.max.Rng, "buffer_period.max", "(%s) cannot be less than min (%s)", cfg.BufferPeriod.Max, cfg.BufferPeriod.Min)
	}

	cfg.Consul = consulConfig(&r.consul)
	d.finishHA(r, cfg) // high_availability and the API's tls block (ha.go)
	// driver "terraform-cloud" (tfc.go)
	d.finishTFC(r, cfg)

	cfg.Driver = TerraformDriver{
		Path:              r.driver.path.V,
		Log:               r.driver.log.V,
		PersistLog:        r.driver.persistLog.V,
		MaxMemory:         r.driver.maxMemory.V,
		Refresh:           r.driver.refresh.or(task.RefreshAuto),
		Backend:           r.driver.backend,
		RequiredProviders: r.driver.required,
	}

	cfg.Providers = r.providers
	refs := d.checkProviders(r.providers)

	serviceBlocks := d.serviceBlocks(r.services)
	cfg.RemovalDelay = r.removalDelay.V
	for _, t := range r.tasks {
		d.resolveServices(t, serviceBlocks)
		d.finishTask(t, cfg.BufferPeriod, cfg.RemovalDelay)
	}
	d.checkTaskRefs(r.tasks, refs)
	cfg.Notifications = d.checkNotifications(r.notifications)
	d.finishExt(&r.ext, cfg)     // vault.go, syslog.go
	d.finishSecretFields(r, cfg) // secrets from Vault outside terraform_provider (secretfields.go)
	for _, t := range r.tasks {
		cfg.Tasks = append(cfg.Tasks, t.spec)
		if t.spec.Name == "" {
			continue
		}
		prefix := "task." + t.spec.Name
		if _, dup := cfg.Ranges[prefix]; dup {
			continue
		}
		cfg.Ranges[prefix] = t.rng
		for k, rng := range t.ranges {
			cfg.Ranges[prefix+"."+k] = rng
		}
	}
	return cfg
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func defaultID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "cts"
	}
	return "cts-" + h
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// consulConfig applies defaults and environment fallbacks to the consul
// block. TLS and auth are implicitly enabled when any of their fields is set
// in the configuration; a value that only comes from the environment fills
// the field but does not by itself turn TLS on.
func consulConfig(r *rawConsul) Consul {
	c := Consul{
		Address:  nonEmpty(r.address.V, nonEmpty(os.Getenv("CONSUL_HTTP_ADDR"), DefaultConsulAddress)),
		Token:    nonEmpty(r.token.V, firstEnv("CONSUL_TOKEN", "CONSUL_HTTP_TOKEN")),
		KVPath:   nonEmpty(r.kvPath.V, DefaultKVPath),
		UseCache: r.useCache.V,
	}

	anyTLS := r.tlsVerify.Set || r.caCert.Set || r.caPath.Set || r.cert.Set || r.key.Set || r.serverName.Set
	c.TLS = ConsulTLS{
		Enabled:    r.tlsEnabled.or(anyTLS),
		Verify:     r.tlsVerify.or(true),
		CACert:     nonEmpty(r.caCert.V, os.Getenv("CONSUL_CACERT")),
		CAPath:     nonEmpty(r.caPath.V, os.Getenv("CONSUL_CAPATH")),
		Cert:       nonEmpty(r.cert.V, os.Getenv("CONSUL_CLIENT_CERT")),
		Key:        nonEmpty(r.key.V, os.Getenv("CONSUL_CLIENT_KEY")),
		ServerName: nonEmpty(r.serverName.V, os.Getenv("CONSUL_TLS_SERVER_NAME")),
	}

	c.Auth = ConsulAuth{
		Enabled:  r.authEnabled.or(r.username.Set || r.password.Set),
		Username: r.username.V,
		Password: r.password.V,
	}

	c.Transport = Transport{
		DialKeepAlive:       r.dialKeepAlive.or(DefaultTransport.DialKeepAlive),
		DialTimeout:         r.dialTimeout.or(DefaultTransport.DialTimeout),
		DisableKeepAlives:   r.disableKeepAlives.or(DefaultTransport.DisableKeepAlives),
		IdleConnTimeout:     r.idleConnTimeout.or(DefaultTransport.IdleConnTimeout),
		MaxIdleConns:        r.maxIdleConns.or(DefaultTransport.MaxIdleConns),
		MaxIdleConnsPerHost: r.maxIdleConnsPerHost.or(DefaultTransport.MaxIdleConnsPerHost),
		TLSHandshakeTimeout: r.tlsHandshakeTimeout.or(DefaultTransport.TLSHandshakeTimeout),
	}

	c.ServiceRegistration = ServiceRegistration{
		Enabled:     r.regEnabled.or(true),
		ServiceName: nonEmpty(r.regName.V, DefaultServiceName),
		Address:     r.regAddress.V,
		Namespace:   r.regNS.V,
		DefaultCheck: DefaultCheck{
			Enabled: r.checkEnabled.or(true),
			Address: r.checkAddr.V,
		},
	}
	return c
}
