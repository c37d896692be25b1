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
package tfc

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	tfe "github.com/hashicorp/go-tfe"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/driver/terraform"
	"github.com/ctsync/ctsync/internal/driver/terraform/tftext"
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

// ---- Init: the workspace ----

// Init connects to the server and finds or creates the task's workspace.
func (d *Driver) Init(ctx context.Context) error {
	if err := d.connect(ctx); err != nil {
		return err
	}
	ws, err := d.workspace(ctx)
	if err != nil {
		return err
	}
	d.ws = ws
	return nil
}

func (d *Driver) settings() task.TFCWorkspace {
	if d.opts.Spec.TFCWorkspace != nil {
		return *d.opts.Spec.TFCWorkspace
	}
	return task.TFCWorkspace{}
}

func (d *Driver) workspace(ctx context.Context) (*tfe.Workspace, error) {
	org := d.opts.Config.Organization
	ws, err := d.client.Workspaces.Read(ctx, org, d.name)
	switch {
	case err == nil:
		return d.adopt(ctx, ws)
	case !errors.Is(err, tfe.ErrResourceNotFound):
		return nil, d.apiError(ctx, "init", fmt.Sprintf("reading workspace %q of organization %q", d.name, org), err)
	}
	// Not found: the workspace, or the organization (or the token cannot
	// see it). Tell which.
	if _, err := d.client.Organizations.Read(ctx, org); err != nil {
		if errors.Is(err, tfe.ErrResourceNotFound) {
			return nil, &driver.Error{Op: "init", Err: err, Terminal: true,
				Summary: fmt.Sprintf("organization %q not found on %s (or the token cannot see it): check driver \"terraform-cloud\" organization or TFC_ORGANIZATION", org, d.opts.Config.Address)}
		}
		return nil, d.apiError(ctx, "init", fmt.Sprintf("reading organization %q", org), err)
	}
	return d.create(ctx)
}

func (d *Driver) create(ctx context.Context) (*tfe.Workspace, error) {
	s := d.settings()
	opts := tfe.WorkspaceCreateOptions{
		Name:        tfe.String(d.name),
		Description: tfe.String(fmt.Sprintf("Runs ctsync task %q.", d.opts.Spec.Name)),
		AutoApply:   tfe.Bool(false),
	}
	mode := s.ExecutionMode
	if mode == "" {
		mode = task.ExecutionRemote
	}
	opts.ExecutionMode = tfe.String(mode)
	if mode == task.ExecutionAgent {
		id, err := d.agentPool(ctx, s)
		if err != nil {
			return nil, err
		}
		opts.AgentPoolID = tfe.String(id)
	}
	if s.TerraformVersion != "" {
		opts.TerraformVersion = tfe.String(s.TerraformVersion)
	}
	ws, err := d.client.Workspaces.Create(ctx, d.opts.Config.Organization, opts)
	if err != nil {
		// Another instance may have created it meanwhile.
		if again, rerr := d.client.Workspaces.Read(ctx, d.opts.Config.Organization, d.name); rerr == nil {
			return d.adopt(ctx, again)
		}
		return nil, d.apiError(ctx, "init", fmt.Sprintf("creating workspace %q", d.name), err)
	}
	d.log.Info("created workspace", "id", ws.ID, "execution_mode", mode)
	if err := d.addTags(ctx, ws); err != nil {
		return nil, err
	}
	return ws, nil
}

func (d *Driver) agentPool(ctx context.Context, s task.TFCWorkspace) (string, error) {
	if s.AgentPoolID != "" {
		return s.AgentPoolID, nil
	}
	list, err := d.client.AgentPools.List(ctx, d.opts.Config.Organization, &tfe.AgentPoolListOptions{Query: s.AgentPoolName})
	if err != nil {
		return "", d.apiError(ctx, "init", fmt.Sprintf("looking up agent pool %q", s.AgentPoolName), err)
	}
	for _, p := range list.Items {
		if p.Name == s.AgentPoolName {
			return p.ID, nil
		}
	}
	return "", &driver.Error{Op: "init", Terminal: true, Summary: fmt.Sprintf("agent pool %q not found in organization %q", s.AgentPoolName, d.opts.Config.Organization)}
}

// adopt checks that an existing workspace can run the task, and brings
// its tags and Terraform version in line with the configuration.
func (d *Driver) adopt(ctx context.Context, ws *tfe.Workspace) (*tfe.Workspace, error) {
	s := d.settings()
	fail := func(format string, args ...any) (*tfe.Workspace, error) {
		return nil, &driver.Error{Op: "init", Terminal: true, Summary: fmt.Sprintf("workspace %q: ", d.name) + fmt.Sprintf(format, args...)}
	}
	mode := ws.ExecutionMode
	switch {
	case s.ExecutionMode != "" && mode != s.ExecutionMode:
		return fail("it exists with execution mode %q, the task's terraform_cloud_workspace asks for %q: change one of them", mode, s.ExecutionMode)
	case s.ExecutionMode == "" && mode != task.ExecutionRemote && mode != task.ExecutionAgent:
		return fail("it exists with execution mode %q: ctsync runs tasks in the workspace, so it needs \"remote\" or \"agent\"", mode)
	}
	if ws.VCSRepo != nil {
		return fail("it is connected to a VCS repository (%s); ctsync uploads the task's configuration itself, so it needs a workspace without one", ws.VCSRepo.Identifier)
	}
	c := d.opts.Config
	if len(c.TagsAllowlist) > 0 && !slices.ContainsFunc(ws.TagNames, func(t string) bool { return slices.Contains(c.TagsAllowlist, t) }) {
		return fail("it carries none of the tags of workspaces.tags_allowlist %q (its tags: %q)", c.TagsAllowlist, ws.TagNames)
	}
	for _, t := range ws.TagNames {
		if slices.Contains(c.TagsDenylist, t) {
			return fail("it carries the tag %q of workspaces.tags_denylist", t)
		}
	}
	if s.TerraformVersion != "" && ws.TerraformVersion != s.TerraformVersion {
		up, err := d.client.Workspaces.UpdateByID(ctx, ws.ID, tfe.WorkspaceUpdateOptions{TerraformVersion: tfe.String(s.TerraformVersion)})
		if err != nil {
			return nil, d.apiError(ctx, "init", fmt.Sprintf("setting the Terraform version of workspace %q", d.name), err)
		}
		ws = up
	}
	if err := d.addTags(ctx, ws); err != nil {
		return nil, err
	}
	return ws, nil
}

func (d *Driver) addTags(ctx context.Context, ws *tfe.Workspace) error {
	var missing []*tfe.Tag
	for _, t := range d.opts.Config.Tags {
		if !slices.Contains(ws.TagNames, t) {
			missing = append(missing, &tfe.Tag{Name: t})
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := d.client.Workspaces.AddTags(ctx, ws.ID, tfe.WorkspaceAddTagsOptions{Tags: missing}); err != nil {
		return d.apiError(ctx, "init", fmt.Sprintf("tagging workspace %q", d.name), err)
	}
	for _, t := range missing {
		ws.TagNames = append(ws.TagNames, t.Name)
	}
	return nil
}

// ---- runs ----

// Plan uploads the task's configuration as a speculative configuration
// version and runs a plan-only run; nothing is applied.
func (d *Driver) Plan(ctx context.Context, run driver.Run, in *task.Inputs) (driver.Result, error) {
	return d.do(ctx, "plan", run, in)
}

// Apply uploads the task's configuration and runs it, applying the plan.
func (d *Driver) Apply(ctx context.Context, run driver.Run, in *task.Inputs) (driver.Result, error) {
	res, err := d.do(ctx, "apply", run, in)
	if err == nil && d.opts.Spec.ExportOutputs {
		res.Outputs, err = d.outputs(ctx)
	}
	return res, err
}

// outputs reads the module's outputs (the root output ctsync_outputs, see
// task.Spec.ExportOutputs) from the workspace's current state file: the
// API's output endpoints hide the values of sensitive outputs, and that one
// is sensitive.
func (d *Driver) outputs(ctx context.Context) (json.RawMessage, error) {
	raw, err := d.currentState(ctx, "apply", "the module's outputs")
	if err != nil {
		return nil, err
	}
	var st struct {
		Outputs map[string]struct {
			Value json.RawMessage `json:"value"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, &driver.Error{Op: "apply", Summary: "the workspace's state is not JSON: " + err.Error(), Err: err}
	}
	o, ok := st.Outputs[terraform.ExportOutput]
	if !ok || len(o.Value) == 0 || string(o.Value) == "null" {
		return json.RawMessage("{}"), nil
	}
	return o.Value, nil
}

// currentState downloads the workspace's current state file (for verb op,
// to read why).
func (d *Driver) currentState(ctx context.Context, op, why string) ([]byte, error) {
	sv, err := d.client.StateVersions.ReadCurrent(ctx, d.ws.ID)
	if err != nil {
		return nil, d.apiError(ctx, op, fmt.Sprintf("reading the current state of workspace %q for %s", d.name, why), err)
	}
	u := sv.DownloadURL
	if strings.HasPrefix(u, "/") { // some servers (OTF) answer a host-relative URL
		u = d.opts.Config.Address + u
	}
	raw, err := d.client.StateVersions.Download(ctx, u)
	if err != nil {
		return nil, d.apiError(ctx, op, "downloading the state for "+why, err)
	}
	return raw, nil
}

// Destroy queues a destroy run of the workspace's current configuration.
// Forget keeps the task's workspace: its (now empty) state and run history
// stay in HCP Terraform / Terraform Enterprise for the record.
func (d *Driver) Forget(context.Context) error { return nil }
func (d *Driver) Destroy(ctx context.Context, run driver.Run) (driver.Result, error) {
	return d.do(ctx, "destroy", run, nil)
}

func (d *Driver) do(ctx context.Context, op string, run driver.Run, in *task.Inputs) (driver.Result, error) {
	return d.logged(ctx, op, run, func(lg io.Writer, res driver.Result) (driver.Result, error) {
		return d.queueAndWait(ctx, op, run, in, lg, res, nil)
	})
}

// logged runs verb op of run (fn) with the run's log open: its header,
// its footer with the outcome and the number of API requests, and the
// result's log path and duration. The workspace is looked up first.
func (d *Driver) logged(ctx context.Context, op string, run driver.Run, fn func(lg io.Writer, res driver.Result) (driver.Result, error)) (res driver.Result, err error) {
	start := time.Now()
	calls := d.calls.Load()
	lg, logPath, lerr := d.openRunLog(run)
	if lerr != nil {
		return driver.Result{}, &driver.Error{Op: op, Err: lerr}
	}
	res.LogPath = logPath
	defer func() {
		res.Duration = time.Since(start)
		n := d.calls.Load() - calls
		fmt.Fprintf(lg, "\n# %s: %s, %d API requests\n", op, outcome(err), n)
		lg.Close()
		d.log.Info("remote run finished", "op", op, "run_url", res.RunURL, "duration", res.Duration.Round(time.Millisecond),
			"api_requests", n, "error", err)
	}()
	if d.ws == nil {
		if err := d.Init(ctx); err != nil {
			return res, err
		}
	}
	fmt.Fprintf(lg, "# ctsync task %s: %s in workspace %s/%s at %s\n", d.opts.Spec.Name, op, d.opts.Config.Organization, d.name, d.opts.Config.Address)
	return fn(lg, res)
}

// queueAndWait runs verb op: it finds the run of the same configuration
// already queued, or queues one, waits for it and reads its result. The
// run is also put in *got when got is set.
func (d *Driver) queueAndWait(ctx context.Context, op string, run driver.Run, in *task.Inputs, lg io.Writer, res driver.Result, got **tfe.Run) (driver.Result, error) {
	logPath := res.LogPath
	digest := "-"
	var (
		stage string
		r     *tfe.Run
		err   error
	)
	if op != "destroy" {
		if stage, digest, err = d.stage(in); err != nil {
			return res, &driver.Error{Op: op, Summary: err.Error(), Err: err, Terminal: true}
		}
	}
	message := fmt.Sprintf("%s%s %s %s", messagePrefix, d.opts.Spec.Name, op, digest)

	if op != "plan" {
		// The run this task recorded last, when it is of the same
		// configuration and its outcome was never recorded (see
		// recorded): wait for it, or take its result.
		if r, err = d.recordedRun(ctx, op, digest); err != nil {
			return res, err
		}
		if r != nil && final(r.Status) {
			res.RunURL = d.runURL(r.ID)
			// (A held plan is a run that waits for its confirmation: an
			// ended one is not held any more.)
			if applies(op) && (r.Status == tfe.RunApplied || r.Status == tfe.RunPlannedAndFinished) {
				fmt.Fprintf(lg, "# the recorded run %s of the same configuration has ended (%s): its result is this run's\n", r.ID, r.Status)
				out, ferr := d.finish(ctx, op, r, res, lg)
				if ferr == nil {
					if got != nil {
						*got = r
					}
					d.log.Info("the run recorded for this configuration has already ended: taking its result, not queuing another",
						"run_id", r.ID, "status", r.Status)
					d.done(r.ID)
					return out, nil
				}
				res = driver.Result{LogPath: logPath}
			}
			fmt.Fprintf(lg, "# the recorded run %s of the same configuration ended %s: queuing a new one\n", r.ID, r.Status)
			r = nil
		}
		if r != nil {
			d.log.Info("waiting for the run recorded for this configuration instead of queuing another", "run_id", r.ID, "status", r.Status)
			fmt.Fprintf(lg, "# found the recorded, unfinished run %s of the same configuration: waiting for it\n", r.ID)
		}
	}
	if r == nil {
		// Fallback: a run found by its message (a server that keeps run
		// messages; OTF v0.1.0 does not).
		if r, err = d.pending(ctx, op, message); err != nil {
			return res, err
		}
		if r != nil {
			d.log.Info("waiting for an unfinished run of the same configuration instead of queuing another", "run_id", r.ID, "status", r.Status)
			fmt.Fprintf(lg, "# found unfinished run %s of the same configuration: waiting for it\n", r.ID)
		}
	}
	if r == nil {
		if r, err = d.queue(ctx, op, run, digest, message, stage, lg); err != nil || r == nil {
			return res, err
		}
	}
	res.RunURL = d.runURL(r.ID)
	fmt.Fprintf(lg, "# run %s\n", res.RunURL)
	r, err = d.wait(ctx, op, r)
	if err != nil {
		return res, err
	}
	if got != nil {
		*got = r
	}
	res, err = d.finish(ctx, op, r, res, lg)
	if err == nil && applies(op) {
		d.done(r.ID)
	}
	return res, err
}

// applies reports whether verb op changes the workspace's state by itself
// (a held plan's run waits for its confirmation, see ApplyPlan).
func applies(op string) bool { return op == "apply" || op == "destroy" }

// queue uploads the configuration (or, for a destroy, picks the last
// applied one), records it and queues the run. It returns nil without an
// error when there is nothing to destroy.
//
// The record (recordRun) is written twice around Runs.Create: before it,
// with the configuration version, and after it, with the run's id. What a
// crash (or a lost lead) at each point leaves to the next attempt, here or
// on a new leader:
//
//   - before the first write: no run exists; the next attempt queues one.
//   - the first write fails (Consul unreachable, or the instance no longer
//     leads: the write is fenced): the run is not created; the verb fails
//     and is retried.
//   - between the first write and the creation: the record names a
//     configuration version no run uses; the next attempt finds none and
//     queues a run.
//   - the request to create the run was sent but its answer (or the second
//     write) was lost: the record has no run id; the next attempt lists the
//     workspace's runs and finds the run by its configuration version.
//   - after the second write: the next attempt reads the run by its id.
//
// So no duplicate comes from a crash. One remains possible: an old leader
// whose create request reaches the server after the new leader has looked
// at the workspace. The HA timing bounds that (a deposed leader's runs are
// cancelled before anyone can take over, docs/ha.md), and a duplicate run
// of the same configuration is idempotent: it plans no changes.
func (d *Driver) queue(ctx context.Context, op string, run driver.Run, digest, message, stage string, lg io.Writer) (*tfe.Run, error) {
	opts := tfe.RunCreateOptions{Workspace: d.ws, Message: tfe.String(message)}
	switch op {
	case "plan":
		opts.PlanOnly = tfe.Bool(true)
	case "apply":
		opts.AutoApply = tfe.Bool(true)
	case "hold":
		opts.AutoApply = tfe.Bool(false) // held: it waits for ApplyPlan's confirmation
	case "destroy":
		opts.IsDestroy = tfe.Bool(true)
		opts.AutoApply = tfe.Bool(true)
	}
	if op == "destroy" {
		// The configuration of the last apply: a speculative one (of a
		// later plan) cannot be applied.
		cvs, err := d.client.ConfigurationVersions.List(ctx, d.ws.ID, &tfe.ConfigurationVersionListOptions{ListOptions: tfe.ListOptions{PageSize: 50}})
		if err != nil {
			return nil, d.apiError(ctx, op, "listing configuration versions", err)
		}
		for _, cv := range cvs.Items {
			if !cv.Speculative && cv.Status == tfe.ConfigurationUploaded {
				opts.ConfigurationVersion = cv
				break
			}
		}
		if opts.ConfigurationVersion == nil {
			fmt.Fprintln(lg, "# the workspace has no applied configuration: nothing to destroy")
			return nil, nil
		}
	} else {
		cv, err := d.upload(ctx, op, stage)
		if err != nil {
			return nil, err
		}
		opts.ConfigurationVersion = cv
	}
	rec := store.RemoteRun{Op: op, Digest: digest, ConfigurationVersion: opts.ConfigurationVersion.ID, Run: run.ID, At: time.Now().UTC()}
	if op != "plan" {
		if err := d.recordRun(ctx, rec); err != nil {
			return nil, &driver.Error{Op: op, Err: err,
				Summary: fmt.Sprintf("not queuing a run in workspace %q: recording it for the task failed: %v", d.name, err)}
		}
	}
	r, err := d.client.Runs.Create(ctx, opts)
	if err != nil {
		return nil, d.apiError(ctx, op, fmt.Sprintf("queuing a run in workspace %q", d.name), err)
	}
	if op != "plan" {
		rec.ID = r.ID
		if err := d.recordRun(context.WithoutCancel(ctx), rec); err != nil {
			// The run is found by its configuration version instead.
			d.log.Warn("the queued run's id could not be recorded", "run_id", r.ID, "error", err)
		}
	}
	d.log.Info("queued a remote run", "op", op, "run_id", r.ID, "configuration_version", rec.ConfigurationVersion)
	return r, nil
}

// ---- the run record ----

// record returns the task's run record.
func (d *Driver) record() (store.RemoteRun, bool) {
	if d.opts.Runs != nil {
		return d.opts.Runs.RemoteRun(d.opts.Spec.Name)
	}
	if d.mem == nil {
		return store.RemoteRun{}, false
	}
	return *d.mem, true
}

// recordRun replaces the task's run record.
func (d *Driver) recordRun(ctx context.Context, r store.RemoteRun) error {
	if d.opts.Runs != nil {
		return d.opts.Runs.SetRemoteRun(ctx, d.opts.Spec.Name, r)
	}
	d.mem = &r
	return nil
}

// done notes that the outcome of the recorded run id is being returned to
// the caller.
func (d *Driver) done(id string) { d.returned = id }

// recorded reports whether the outcome of remote run id was recorded as a
// success: an event of the task names the run (tfc_run_url) and succeeded.
// Such a run is history; a later apply of the same configuration (a
// schedule tick, a drift remediation, a re-run) queues a new run. Without
// a store (Options.Runs), the driver knows only what it returned itself.
func (d *Driver) recorded(id string) bool {
	if id == "" {
		return false
	}
	if d.opts.Runs == nil {
		return d.returned == id
	}
	suffix := "/runs/" + id
	for _, ev := range d.opts.Runs.Events(d.opts.Spec.Name) {
		if ev.Success && strings.HasSuffix(ev.TFCRunURL, suffix) {
			return true
		}
	}
	return false
}

// recordedRun returns the run the task's record names when it is of the
// same verb and configuration and its outcome was not recorded: the run
// an attempt queued before it failed, or before its instance stopped
// leading (crash, partition, SIGKILL). Nil otherwise.
func (d *Driver) recordedRun(ctx context.Context, op, digest string) (*tfe.Run, error) {
	rec, ok := d.record()
	if !ok || d.recorded(rec.ID) {
		return nil, nil
	}
	if rec.Op != op || rec.Digest != digest {
		// A run of an older configuration whose outcome nobody recorded:
		// one that waits for a confirmation would hold up the
		// workspace's queue (and the new run behind it) for ever.
		d.discardStale(ctx, rec.ID)
		return nil, nil
	}
	if rec.ID != "" {
		r, err := d.client.Runs.Read(ctx, rec.ID)
		switch {
		case errors.Is(err, tfe.ErrResourceNotFound):
			return nil, nil
		case err != nil:
			return nil, d.apiError(ctx, op, "reading run "+rec.ID, err)
		}
		return r, nil
	}
	// Recorded before the run was created: it may or may not exist.
	list, err := d.client.Runs.List(ctx, d.ws.ID, &tfe.RunListOptions{ListOptions: tfe.ListOptions{PageSize: 20}})
	if err != nil {
		return nil, d.apiError(ctx, op, fmt.Sprintf("listing the runs of workspace %q", d.name), err)
	}
	for _, r := range list.Items { // newest first
		if r.ConfigurationVersion != nil && r.ConfigurationVersion.ID == rec.ConfigurationVersion && r.IsDestroy == (op == "destroy") {
			d.log.Info("found the run of the recorded configuration version", "run_id", r.ID, "configuration_version", rec.ConfigurationVersion)
			return r, nil
		}
	}
	return nil, nil
}

func outcome(err error) string {
	if err != nil {
		return "failed"
	}
	return "done"
}

// runURL is the run's page in the server's UI.
func (d *Driver) runURL(id string) string {
	return fmt.Sprintf("%s/app/%s/workspaces/%s/runs/%s", d.opts.Config.Address, d.opts.Config.Organization, d.name, id)
}

// pending returns an unfinished run of the workspace queued with the same
// message (the same task, verb and configuration), or nil. Unfinished
// runs of other ctsync messages that wait for a confirmation are stale (a
// previous attempt whose desired state has changed since): they are
// discarded, so that they do not hold up the queue.
func (d *Driver) pending(ctx context.Context, op, message string) (*tfe.Run, error) {
	list, err := d.client.Runs.List(ctx, d.ws.ID, &tfe.RunListOptions{ListOptions: tfe.ListOptions{PageSize: 20}})
	if err != nil {
		return nil, d.apiError(ctx, op, fmt.Sprintf("listing the runs of workspace %q", d.name), err)
	}
	var found *tfe.Run
	for _, r := range list.Items {
		if final(r.Status) || !strings.HasPrefix(r.Message, messagePrefix+d.opts.Spec.Name+" ") {
			continue
		}
		if r.Message == message {
			if found == nil {
				found = r
			}
			continue
		}
		if op != "plan" && r.Actions != nil && r.Actions.IsConfirmable {
			d.log.Info("discarding a stale run waiting for confirmation", "run_id", r.ID, "message", r.Message)
			if err := d.client.Runs.Discard(ctx, r.ID, tfe.RunDiscardOptions{Comment: tfe.String("superseded by a newer ctsync run")}); err != nil {
				d.log.Warn("discarding a stale run failed", "run_id", r.ID, "error", err)
			}
		}
	}
	return found, nil
}

// discardStale discards run id when it waits for a confirmation.
func (d *Driver) discardStale(ctx context.Context, id string) {
	if id == "" {
		return
	}
	r, err := d.client.Runs.Read(ctx, id)
	if err != nil || r.Actions == nil || !r.Actions.IsConfirmable {
		return
	}
	d.log.Info("discarding the recorded run of an older configuration: it waits for confirmation", "run_id", id)
	if err := d.client.Runs.Discard(ctx, id, tfe.RunDiscardOptions{Comment: tfe.String("superseded by a newer ctsync run")}); err != nil {
		d.log.Warn("discarding a stale run failed", "run_id", id, "error", err)
	}
}

// final reports whether a run status is one a run never leaves.
func final(s tfe.RunStatus) bool {
	switch s {
	case tfe.RunApplied, tfe.RunPlannedAndFinished, tfe.RunErrored, tfe.RunCanceled, tfe.RunDiscarded,
		tfe.RunPlannedAndSaved, "force_canceled", tfe.RunPolicySoftFailed:
		return true
	}
	return false
}

// wait polls the run until it is final, confirming it when it waits for
// a confirmation (a server that ignored auto-apply, or a held plan that
// ApplyPlan applies); a held plan's run (op "hold") is returned when it
// waits for its confirmation. The run is not
// cancelled when ctx ends: it finishes in the workspace, and the next
// attempt (here or on another instance) waits for it.
func (d *Driver) wait(ctx context.Context, op string, r *tfe.Run) (*tfe.Run, error) {
	confirmed := false
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		if final(r.Status) {
			return r, nil
		}
		if op == "hold" && r.Actions != nil && r.Actions.IsConfirmable {
			return r, nil // planned: held until ApplyPlan confirms it
		}
		if applies(op) && !confirmed && r.Actions != nil && r.Actions.IsConfirmable {
			if err := d.client.Runs.Apply(ctx, r.ID, tfe.RunApplyOptions{Comment: tfe.String("applied by ctsync")}); err != nil {
				return nil, d.apiError(ctx, op, "confirming run "+r.ID, err)
			}
			confirmed = true
		}
		t.Reset(d.opts.PollInterval)
		select {
		case <-ctx.Done():
			return nil, &driver.Error{Op: op, Summary: fmt.Sprintf("stopped waiting for run %s (%s): %v", r.ID, r.Status, ctx.Err()), Err: ctx.Err()}
		case <-t.C:
		}
		next, err := d.client.Runs.Read(ctx, r.ID)
		if err != nil {
			return nil, d.apiError(ctx, op, "reading run "+r.ID, err)
		}
		r = next
	}
}

// finish reads the run's plan and apply, writes their logs and builds the
// result.
func (d *Driver) finish(ctx context.Context, op string, r *tfe.Run, res driver.Result, lg io.Writer) (driver.Result, error) {
	var planLog, applyLog string
	if r.Plan != nil && r.Plan.ID != "" {
		p, err := d.client.Plans.Read(ctx, r.Plan.ID)
		if err != nil {
			return res, d.apiError(ctx, op, "reading the plan of run "+r.ID, err)
		}
		res.Changes = p.HasChanges
		res.Add, res.Change, res.Destroy = p.ResourceAdditions, p.ResourceChanges, p.ResourceDestructions
		planLog = d.readLog(ctx, func(c context.Context) (io.Reader, error) { return d.client.Plans.Logs(c, p.ID) })
		if res.Add+res.Change+res.Destroy == 0 {
			res.Add, res.Change, res.Destroy = countsFromLog(planLog, planCounts)
		}
		fmt.Fprintf(lg, "\n# plan\n%s\n", planLog)
	}
	if r.Status == tfe.RunApplied && r.Apply != nil && r.Apply.ID != "" {
		a, err := d.client.Applies.Read(ctx, r.Apply.ID)
		applyLog = d.readLog(ctx, func(c context.Context) (io.Reader, error) { return d.client.Applies.Logs(c, r.Apply.ID) })
		switch {
		case err == nil && a.ResourceAdditions+a.ResourceChanges+a.ResourceDestructions > 0:
			res.Add, res.Change, res.Destroy = a.ResourceAdditions, a.ResourceChanges, a.ResourceDestructions
		default: // some servers (OTF) report no counts: the log has them
			if add, chg, del := countsFromLog(applyLog, applyCounts); add+chg+del > 0 {
				res.Add, res.Change, res.Destroy = add, chg, del
			}
		}
		fmt.Fprintf(lg, "\n# apply\n%s\n", applyLog)
	}
	res.Output = planLog
	if op != "plan" && applyLog != "" {
		res.Output = applyLog
	}
	switch r.Status {
	case tfe.RunApplied:
		return res, nil
	case tfe.RunPlannedAndFinished:
		if !applies(op) || !res.Changes {
			return res, nil
		}
		// Changes planned, nothing applied: the server ran it as a plan.
		return res, &driver.Error{Op: op, Summary: fmt.Sprintf("run %s planned changes but ended without applying them", res.RunURL)}
	case tfe.RunPlanned, tfe.RunPlannedAndSaved:
		if !applies(op) {
			return res, nil
		}
	}
	if op == "hold" && r.Actions != nil && r.Actions.IsConfirmable {
		return res, nil // held, whatever the server's step (planned, cost estimated, policy checked)
	}
	text := planLog + "\n" + applyLog
	summary := tftext.Summarize(text)
	if summary == "" {
		summary = "the run ended " + string(r.Status)
	}
	return res, &driver.Error{Op: op, Summary: fmt.Sprintf("run %s %s: %s", res.RunURL, r.Status, summary),
		Err: fmt.Errorf("run %s: %s", r.ID, r.Status), Terminal: tftext.TerminalDiagnostic(text)}
}

var (
	planCounts  = regexp.MustCompile(`Plan: (\d+) to add, (\d+) to change, (\d+) to destroy`)
	applyCounts = regexp.MustCompile(`(?:Apply|Destroy) complete! Resources: (\d+) added, (\d+) changed, (\d+) destroyed`)
	ansi        = regexp.MustCompile("\x1b\\[[0-9;]*[A-Za-z]")
)

// countsFromLog reads the resource counts from Terraform's summary line.
func countsFromLog(log string, re *regexp.Regexp) (add, change, destroy int) {
	m := re.FindStringSubmatch(log)
	if m == nil {
		return 0, 0, 0
	}
	add, _ = strconv.Atoi(m[1])
	change, _ = strconv.Atoi(m[2])
	destroy, _ = strconv.Atoi(m[3])
	return add, change, destroy
}

// readLog reads a finished phase's log (bounded in size and time), with
// terminal colour codes removed.
func (d *Driver) readLog(ctx context.Context, open func(context.Context) (io.Reader, error)) string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rd, err := open(ctx)
	if err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(rd, maxLog))
	return ansi.ReplaceAllString(string(b), "")
}

// ---- the upload ----

// stage writes the configuration of a run into <WorkDir>/upload: the
// generated root module, the inputs, and the local module under module/.
// It returns the folder and a digest of everything in it.
func (d *Driver) stage(in *task.Inputs) (string, string, error) {
	files, err := terraform.RemoteRootModule(rootOptions(&d.opts), in)
	if err != nil {
		return "", "", err
	}
	dir := filepath.Join(d.opts.WorkDir, "upload")
	if err := os.RemoveAll(dir); err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return "", "", err
		}
	}
	if src := d.opts.localModuleDir(); src != "" {
		if err := copyTree(src, filepath.Join(dir, moduleDir)); err != nil {
			return "", "", fmt.Errorf("module %q: %w", d.opts.Spec.Module, err)
		}
	}
	digest, err := treeDigest(dir)
	return dir, digest, err
}

// copyTree copies the regular files under src (symbolic links followed;
// .terraform and .git left out) into dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if e.IsDir() {
			if p != src && (e.Name() == ".terraform" || e.Name() == ".git") {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o700)
		}
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, st.Mode().Perm()|0o600)
	})
}

// treeDigest hashes the names and contents of the files under dir.
func treeDigest(dir string) (string, error) {
	var names []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			names = append(names, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%d:%s%d:", len(n), n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:20], nil
}

// upload creates a configuration version and uploads the staged folder.
func (d *Driver) upload(ctx context.Context, op, dir string) (*tfe.ConfigurationVersion, error) {
	cv, err := d.client.ConfigurationVersions.Create(ctx, d.ws.ID, tfe.ConfigurationVersionCreateOptions{
		AutoQueueRuns: tfe.Bool(false), Speculative: tfe.Bool(op == "plan"),
	})
	if err != nil {
		return nil, d.apiError(ctx, op, fmt.Sprintf("creating a configuration version in workspace %q", d.name), err)
	}
	u := cv.UploadURL
	if strings.HasPrefix(u, "/") { // some servers (OTF) answer a host-relative URL
		u = d.opts.Config.Address + u
	}
	if err := d.client.ConfigurationVersions.Upload(ctx, u, dir); err != nil {
		return nil, d.apiError(ctx, op, "uploading the configuration", err)
	}
	// The server unpacks the upload before a run can use it.
	for cv.Status != tfe.ConfigurationUploaded {
		if cv.Status == tfe.ConfigurationErrored {
			return nil, &driver.Error{Op: op, Summary: fmt.Sprintf("configuration version %s errored: %s", cv.ID, cv.ErrorMessage)}
		}
		select {
		case <-ctx.Done():
			return nil, &driver.Error{Op: op, Summary: "waiting for the upload: " + ctx.Err().Error(), Err: ctx.Err()}
		case <-time.After(d.opts.PollInterval / 5):
		}
		if cv, err = d.client.ConfigurationVersions.Read(ctx, cv.ID); err != nil {
			return nil, d.apiError(ctx, op, "reading configuration version", err)
		}
	}
	return cv, nil
}

// ---- run logs ----

func (d *Driver) openRunLog(run driver.Run) (*os.File, string, error) {
	dir := filepath.Join(d.opts.WorkDir, "runs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	id := run.ID
	if id == "" || strings.ContainsAny(id, `/\`) {
		id = fmt.Sprintf("run-%d", time.Now().UnixNano())
	}
	p := filepath.Join(dir, id+".log")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, "", err
	}
	d.pruneLogs(dir)
	return f, p, nil
}

func (d *Driver) pruneLogs(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) <= d.opts.KeepRunLogs {
		return
	}
	type fileAge struct {
		name string
		mod  time.Time
	}
	var fs []fileAge
	for _, e := range entries {
		if info, err := e.Info(); err == nil {
			fs = append(fs, fileAge{e.Name(), info.ModTime()})
		}
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].mod.Before(fs[j].mod) })
	for _, f := range fs[:len(fs)-d.opts.KeepRunLogs] {
		_ = os.Remove(filepath.Join(dir, f.name))
	}
}
