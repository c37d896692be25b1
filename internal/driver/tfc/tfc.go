// Package tfc is the terraform-cloud driver: every run of a task happens
// remotely, in an HCP Terraform / Terraform Enterprise workspace named
// <prefix><task>, through the TFE API (go-tfe). The driver verbs map onto
// the API as follows:
//
//   - Init: find the workspace, or create it (with the configured tags,
//     execution mode, agent pool and Terraform version); check that an
//     existing one can be used (execution mode, no VCS connection, tag
//     allow/deny lists);
//   - Plan: upload the generated root module (and a local module) as a
//     speculative configuration version and run a plan-only run;
//   - Apply: upload it as a configuration version and queue a run that
//     applies automatically (confirmed by the driver when the server
//     ignores auto-apply);
//   - Destroy: queue a destroy run of the workspace's configuration.
//
// The Consul data and the task's variables travel inside the upload as
// auto-loaded variable files, so a configuration version is the whole
// desired state of its run. Before queuing an apply or a destroy, the
// driver records the run in the task's store entry (Options.Runs: Consul
// KV under high availability): first its configuration version, then its
// id. The next attempt of the same configuration (a retry after the API
// went away, or a new leader after a failover) finds that run by its id
// (or by its configuration version, when the id was not recorded) and
// waits for it, or takes its result when it has already applied, instead
// of queuing a duplicate; queue explains what a crash at each point
// leaves. Every run's message also names the task, the verb and a digest
// of the upload, and an unfinished run with the same message is waited for
// too: that finds runs the record does not know of on servers that keep
// messages (HCP Terraform, Terraform Enterprise; OTF v0.1.0 drops them).
//
// Where things are: tfc.go has the Options, New and the API client;
// workspace.go Init (the workspace); run.go the verbs and the queuing of a
// run; record.go the run record, waiting for a run and its result;
// upload.go the upload of the configuration and the run logs; held.go held
// plans; desired.go the workspace's part of the desired state.
package tfc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	tfe "github.com/hashicorp/go-tfe"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/driver/terraform"
	"github.com/ctsync/ctsync/internal/redact"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

// Defaults.
const (
	DefaultPollInterval = 500 * time.Millisecond
	DefaultKeepRunLogs  = 20
	// maxLog bounds how much of a phase's log is read back.
	maxLog = 1 << 20
	// messagePrefix starts the message of every run the driver queues.
	messagePrefix = "ctsync task "
	// moduleDir is where a local module is put in the upload.
	moduleDir = "module"
)

// Options configure the Driver of one task.
type Options struct {
	Spec task.Spec
	// WorkDir is the task's local directory: the upload is staged in it
	// and the run logs are kept there.
	WorkDir string
	Config  config.TFCDriver
	// Providers are the task's terraform_provider blocks, resolved.
	Providers []config.Provider
	Logger    *slog.Logger
	// PollInterval is how often a run's status is read (default 500ms).
	PollInterval time.Duration
	// KeepRunLogs is how many run logs are kept (default 20).
	KeepRunLogs int
	// Redactor hides the configuration's secrets in the run logs kept in
	// WorkDir: the remote logs are copied there, and a remote run may print
	// a provider's or the environment's secret. It is the task's view
	// (redact.Redactor.ForTask). Nil: no redaction.
	Redactor *redact.Redactor
	// HTTPClient, when set, is used instead of one built from Config.TLS.
	HTTPClient *http.Client
	// Runs is where the run the driver queues for the task is recorded
	// and where the outcomes of runs are read (the daemon's store: Consul
	// KV under high availability, so that a new leader finds the run of
	// the old one). Nil: the driver remembers its last run in memory.
	Runs Runs
}

// Runs is the part of the store the driver uses: the task's run record
// and its events (which tell whether a run's outcome was recorded).
type Runs interface {
	store.RemoteRuns
	Events(taskName string) []store.Event
}

// Driver runs one task in its workspace. It implements driver.Driver; its
// methods must not be called concurrently.
type Driver struct {
	opts   Options
	name   string // the workspace's name
	client *tfe.Client
	ws     *tfe.Workspace
	log    *slog.Logger
	calls  atomic.Int64 // API requests made, retries included

	mem      *store.RemoteRun // the run record without Options.Runs
	returned string           // the last remote run whose result was returned
}

var _ driver.Driver = (*Driver)(nil)

// New checks the task's configuration and prepares a Driver; it makes no
// request.
func New(opts Options) (*Driver, error) {
	if opts.WorkDir == "" {
		return nil, fmt.Errorf("task %q: working directory is not set", opts.Spec.Name)
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.KeepRunLogs <= 0 {
		opts.KeepRunLogs = DefaultKeepRunLogs
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	// Render once now, so that a task the generator refuses fails here.
	if _, err := terraform.RemoteRootModule(rootOptions(&opts), nil); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.WorkDir, 0o750); err != nil {
		return nil, fmt.Errorf("task %q: working directory: %w", opts.Spec.Name, err)
	}
	return &Driver{
		opts: opts,
		name: opts.Config.WorkspaceName(opts.Spec.Name),
		log:  opts.Logger.With("task_name", opts.Spec.Name, "workspace", opts.Config.WorkspaceName(opts.Spec.Name)),
	}, nil
}

// rootOptions are the options of the root module generator: the module
// source becomes ./module when the module is local (it is shipped along).
func rootOptions(o *Options) terraform.Options {
	spec := o.Spec
	if terraform.IsLocalModule(spec.Module) {
		spec.Module = "./" + moduleDir
	}
	return terraform.Options{
		Spec:      spec,
		WorkDir:   o.WorkDir,
		Driver:    config.TerraformDriver{RequiredProviders: o.Config.RequiredProviders},
		Providers: o.Providers,
	}
}

// localModuleDir is the local module's directory, or "" for a remote one.
func (o *Options) localModuleDir() string {
	src := o.Spec.Module
	if !terraform.IsLocalModule(src) {
		return ""
	}
	if filepath.IsAbs(src) {
		return src
	}
	return filepath.Join(o.WorkDir, src)
}

// WorkspaceName is the name of the task's workspace.
func (d *Driver) WorkspaceName() string { return d.name }

// APICalls returns how many API requests the driver made so far.
func (d *Driver) APICalls() int64 { return d.calls.Load() }

// ---- client ----

type countingTransport struct {
	base http.RoundTripper
	n    *atomic.Int64
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.n.Add(1)
	return t.base.RoundTrip(r)
}

func httpClient(c config.TFCTLS) (*http.Client, error) {
	hc := cleanhttp.DefaultPooledClient()
	if !c.Enabled && c.CACert == "" && c.CAPath == "" && c.Cert == "" && c.Verify {
		return hc, nil
	}
	tc := &tls.Config{ServerName: c.ServerName, InsecureSkipVerify: !c.Verify, MinVersion: tls.VersionTLS12} //nolint:gosec // verify = false is the user's choice
	if c.CACert != "" || c.CAPath != "" {
		pool := x509.NewCertPool()
		var files []string
		if c.CACert != "" {
			files = append(files, c.CACert)
		}
		if c.CAPath != "" {
			entries, err := os.ReadDir(c.CAPath)
			if err != nil {
				return nil, fmt.Errorf("tls.ca_path: %w", err)
			}
			for _, e := range entries {
				if !e.IsDir() {
					files = append(files, filepath.Join(c.CAPath, e.Name()))
				}
			}
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("tls: %w", err)
			}
			pool.AppendCertsFromPEM(b)
		}
		tc.RootCAs = pool
	}
	if c.Cert != "" {
		cert, err := tls.LoadX509KeyPair(c.Cert, c.Key)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	hc.Transport.(*http.Transport).TLSClientConfig = tc
	return hc, nil
}

// connect builds the API client (go-tfe asks the server's API version).
func (d *Driver) connect(ctx context.Context) error {
	if d.client != nil {
		return nil
	}
	hc := d.opts.HTTPClient
	if hc == nil {
		var err error
		if hc, err = httpClient(d.opts.Config.TLS); err != nil {
			return &driver.Error{Op: "init", Summary: err.Error(), Err: err, Terminal: true}
		}
	}
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	counted := *hc
	counted.Transport = countingTransport{base: base, n: &d.calls}
	// go-tfe's own retries of connection and server errors wait longer at
	// each attempt (30 attempts: minutes), which would hold a run while
	// the API is down. Only rate limits (429) are retried by the client;
	// any other failure ends the verb, and the task's retry with backoff
	// runs it again, finding the run it queued through the run record
	// (recordedRun) instead of queuing another.
	c, err := tfe.NewClient(&tfe.Config{
		Address: d.opts.Config.Address, Token: d.opts.Config.Token, HTTPClient: &counted,
		RetryServerErrors: false, Headers: http.Header{"User-Agent": []string{"ctsync"}},
	})
	if err != nil {
		return d.apiError(ctx, "init", "connecting to "+d.opts.Config.Address, err)
	}
	d.client = c
	return nil
}

// apiError turns a failed request into a driver error with a readable
// summary. A refused token, an unknown organization and a request the
// server calls invalid are terminal: the same configuration fails again.
func (d *Driver) apiError(ctx context.Context, op, what string, err error) error {
	if ctx.Err() != nil {
		return &driver.Error{Op: op, Summary: what + ": " + ctx.Err().Error(), Err: ctx.Err()}
	}
	e := &driver.Error{Op: op, Err: err}
	switch {
	case errors.Is(err, tfe.ErrUnauthorized):
		e.Summary = fmt.Sprintf("%s: the token was refused by %s (unauthorized): check driver \"terraform-cloud\" token or TFC_TOKEN", what, d.opts.Config.Address)
		e.Terminal = true
	case errors.Is(err, tfe.ErrResourceNotFound):
		e.Summary = fmt.Sprintf("%s: not found (or the token may not see it)", what)
	default:
		e.Summary = what + ": " + firstLine(err.Error())
	}
	return e
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
