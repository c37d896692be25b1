// Package client is a small client of ctsync's /v1 API, used by the
// `task` and `status` commands. Its address and TLS settings come from the
// CTS flags and environment variables (-http-addr / CTS_ADDRESS, -ca-cert /
// CTS_CACERT, ...).
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/gate"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

// DefaultAddress is where the daemon listens by default.
const DefaultAddress = "http://localhost:8558"

// Environment variables, as CTS.
const (
	EnvAddress    = "CTS_ADDRESS"
	EnvCACert     = "CTS_CACERT"
	EnvCAPath     = "CTS_CAPATH"
	EnvClientCert = "CTS_CLIENT_CERT"
	EnvClientKey  = "CTS_CLIENT_KEY"
	EnvSSLVerify  = "CTS_SSL_VERIFY"
	// EnvToken holds an api_auth token (ctsync).
	EnvToken = "CTS_TOKEN"
)

// Config is how to reach the daemon.
type Config struct {
	// Address is the daemon's URL; without a scheme, http:// (https://
	// when a TLS setting is given).
	Address string
	// Port, when > 0, replaces the port of Address (the deprecated -port flag).
	Port       int
	CACert     string
	CAPath     string
	ClientCert string
	ClientKey  string
	// SSLVerify checks the server certificate (default true).
	SSLVerify bool
	// Timeout bounds a whole request; 0 means none (runs can take long).
	Timeout time.Duration
	// Token is sent as "Authorization: Bearer <token>" when set (ctsync;
	// the daemon's api_auth tokens).
	Token string
}

// ConfigFromEnv returns the defaults overridden by the CTS_* environment
// variables. An unparsable CTS_SSL_VERIFY is an error.
func ConfigFromEnv() (Config, error) {
	c := Config{
		Address:    DefaultAddress,
		CACert:     os.Getenv(EnvCACert),
		CAPath:     os.Getenv(EnvCAPath),
		ClientCert: os.Getenv(EnvClientCert),
		ClientKey:  os.Getenv(EnvClientKey),
		SSLVerify:  true,
		Token:      strings.TrimSpace(os.Getenv(EnvToken)),
	}
	if v := os.Getenv(EnvAddress); v != "" {
		c.Address = v
	}
	if v := os.Getenv(EnvSSLVerify); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return c, fmt.Errorf("%s=%q: not a boolean", EnvSSLVerify, v)
		}
		c.SSLVerify = b
	}
	return c, nil
}

// RegisterFlags adds the CTS client flags to fs, with c's values (normally
// from ConfigFromEnv) as defaults; parsing fs then updates c.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Address, "http-addr", c.Address, "The address of the ctsync API, including the scheme. Env: "+EnvAddress+".")
	fs.IntVar(&c.Port, "port", c.Port, "Deprecated: use -http-addr. Replaces the port of -http-addr.")
	fs.StringVar(&c.CACert, "ca-cert", c.CACert, "A PEM CA certificate to verify the API's certificate. Env: "+EnvCACert+".")
	fs.StringVar(&c.CAPath, "ca-path", c.CAPath, "A directory of PEM CA certificates to verify the API's certificate. Env: "+EnvCAPath+".")
	fs.StringVar(&c.ClientCert, "client-cert", c.ClientCert, "A PEM client certificate, for an API that verifies clients. Env: "+EnvClientCert+".")
	fs.StringVar(&c.ClientKey, "client-key", c.ClientKey, "The PEM key of -client-cert. Env: "+EnvClientKey+".")
	fs.BoolVar(&c.SSLVerify, "ssl-verify", c.SSLVerify, "Verify the API's certificate. Env: "+EnvSSLVerify+".")
	fs.Var((*secretFlag)(&c.Token), "token", "An API token of the daemon's api_auth block, sent as a bearer token. Prefer the environment variable: "+
		"a flag shows in the process list. Env: "+EnvToken+".")
}

// secretFlag is a string flag whose value is never shown (not even as the
// default taken from the environment in -h output).
type secretFlag string

func (s *secretFlag) String() string     { return "" }
func (s *secretFlag) Set(v string) error { *s = secretFlag(v); return nil }

// Client talks to one daemon.
type Client struct {
	base  *url.URL
	http  *http.Client
	token string
}

// New builds a Client.
func New(c Config) (*Client, error) {
	addr := strings.TrimSpace(c.Address)
	if addr == "" {
		addr = DefaultAddress
	}
	useTLS := c.CACert != "" || c.CAPath != "" || c.ClientCert != ""
	if !strings.Contains(addr, "://") {
		if useTLS {
			addr = "https://" + addr
		} else {
			addr = "http://" + addr
		}
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, fmt.Errorf("invalid address %q: %v", c.Address, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("invalid address %q: the scheme must be http or https", c.Address)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("invalid address %q: no host", c.Address)
	}
	if c.Port > 0 {
		u.Host = net.JoinHostPort(u.Hostname(), strconv.Itoa(c.Port))
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tc, err := tlsConfig(c)
	if err != nil {
		return nil, err
	}
	tr.TLSClientConfig = tc
	token := strings.TrimSpace(c.Token)
	if strings.ContainsFunc(token, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return nil, errors.New("the API token cannot contain spaces or control characters")
	}
	return &Client{base: u, http: &http.Client{Transport: tr, Timeout: c.Timeout}, token: token}, nil
}

func tlsConfig(c Config) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: !c.SSLVerify} //nolint:gosec // the user asked with -ssl-verify=false
	pool, err := api.LoadCAs(c.CACert, c.CAPath)
	if err != nil {
		return nil, err
	}
	tc.RootCAs = pool // nil: the system pool
	if (c.ClientCert == "") != (c.ClientKey == "") {
		return nil, errors.New("-client-cert and -client-key must be given together")
	}
	if c.ClientCert != "" {
		cert, err := tls.LoadX509KeyPair(c.ClientCert, c.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("loading the client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Address returns the daemon's base URL.
func (c *Client) Address() string { return c.base.String() }

// Error is an error response from the API.
type Error struct {
	StatusCode int
	Message    string
	RequestID  string
}

// Error starts with the HTTP status line, as CTS's client prints it
// ("404 Not Found: a task with name 'x' does not exist ...").
func (e *Error) Error() string {
	status := fmt.Sprintf("%d %s", e.StatusCode, http.StatusText(e.StatusCode))
	if e.Message == "" {
		return status
	}
	return status + ": " + e.Message
}

// IsNotFound reports whether err is a 404 from the API.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.StatusCode == http.StatusNotFound
}

// httpsHint explains the usual cause of a failure to talk plain HTTP to a
// TLS server.
const httpsHint = "the ctsync API may be serving HTTPS: use an https:// address (-http-addr or " + EnvAddress + ") and the TLS flags"

// do sends a request and decodes a 2xx JSON answer into out (if not nil;
// a *string gets the answer as it is).
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	u := *c.base
	u.Path += path
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	// Names the approver of a held plan when the daemon has no api_auth.
	req.Header.Set(api.ClientHeader, "cli")
	resp, err := c.http.Do(req)
	if err != nil {
		if c.base.Scheme == "http" && (errors.Is(err, io.EOF) || strings.Contains(err.Error(), "EOF")) {
			return fmt.Errorf("%w\nhint: %s", err, httpsHint)
		}
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("reading the response: %w", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := &Error{StatusCode: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id")}
		var er api.ErrorResponse
		if json.Unmarshal(b, &er) == nil && er.Error.Message != "" {
			e.Message = er.Error.Message
			if er.RequestID != "" {
				e.RequestID = er.RequestID
			}
		} else {
			e.Message = strings.TrimSpace(string(b))
		}
		if c.base.Scheme == "http" && resp.StatusCode == http.StatusBadRequest &&
			strings.Contains(string(b), "HTTP request to an HTTPS server") {
			return fmt.Errorf("%w\nhint: %s", e, httpsHint)
		}
		if resp.StatusCode == http.StatusUnauthorized {
			if c.token == "" {
				return fmt.Errorf("%w\nhint: the daemon requires an API token: set %s (or pass -token)", e, EnvToken)
			}
			return fmt.Errorf("%w\nhint: the daemon does not know the token given with -token or %s", e, EnvToken)
		}
		return e
	}
	if out == nil {
		return nil
	}
	if text, ok := out.(*string); ok { // a text answer (a run's log)
		*text = string(b)
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decoding the response of %s %s: %w", method, path, err)
	}
	return nil
}

func taskPath(name string) string { return "/v1/tasks/" + url.PathEscape(name) }

// Health calls GET /v1/health.
func (c *Client) Health(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/v1/health", nil, nil, nil)
}

// Status calls GET /v1/status.
func (c *Client) Status(ctx context.Context) (api.StatusResponse, error) {
	var out api.StatusResponse
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, nil, &out)
	return out, err
}

// StatusQuery are the query parameters of the task status endpoints.
type StatusQuery struct {
	IncludeEvents bool
	Status        string
}

func (q StatusQuery) values() url.Values {
	v := url.Values{}
	if q.IncludeEvents {
		v.Set("include", "events")
	}
	if q.Status != "" {
		v.Set("status", q.Status)
	}
	return v
}

// TaskStatuses calls GET /v1/status/tasks, or /v1/status/tasks/{name}
// when name is not empty.
func (c *Client) TaskStatuses(ctx context.Context, name string, q StatusQuery) (map[string]api.TaskStatus, error) {
	path := "/v1/status/tasks"
	if name != "" {
		path += "/" + url.PathEscape(name)
	}
	out := map[string]api.TaskStatus{}
	err := c.do(ctx, http.MethodGet, path, q.values(), nil, &out)
	return out, err
}

// Tasks calls GET /v1/tasks.
func (c *Client) Tasks(ctx context.Context) ([]task.Spec, error) {
	var out api.TasksResponse
	err := c.do(ctx, http.MethodGet, "/v1/tasks", nil, nil, &out)
	return out.Tasks, err
}

// Task calls GET /v1/tasks/{name}.
func (c *Client) Task(ctx context.Context, name string) (task.Spec, error) {
	var out api.TaskResponse
	err := c.do(ctx, http.MethodGet, taskPath(name), nil, nil, &out)
	return out.Task, err
}

// Run modes of create and update.
const (
	RunDefault = ""
	RunNow     = "now"
	RunInspect = "inspect"
)

func runQuery(run string) url.Values {
	v := url.Values{}
	if run != "" {
		v.Set("run", run)
	}
	return v
}

// CreateTask calls POST /v1/tasks[?run=...]. body is the task object (a
// task.Spec or anything that marshals to the CTS task JSON).
func (c *Client) CreateTask(ctx context.Context, run string, body any) (api.TaskResponse, error) {
	var out api.TaskResponse
	raw, err := json.Marshal(body)
	if err != nil {
		return out, err
	}
	err = c.do(ctx, http.MethodPost, "/v1/tasks", runQuery(run), api.TaskRequest{Task: raw}, &out)
	return out, err
}

// UpdateTask calls PATCH /v1/tasks/{name}[?run=...] with {"enabled":...}.
// With run=inspect the plan is returned.
func (c *Client) UpdateTask(ctx context.Context, name string, enabled bool, run string) (api.UpdateTaskResponse, error) {
	var out api.UpdateTaskResponse
	err := c.do(ctx, http.MethodPatch, taskPath(name), runQuery(run), api.UpdateTaskRequest{Enabled: &enabled}, &out)
	return out, err
}

// PatchTask calls PATCH /v1/tasks/{name}[?run=...] with fields, an object
// holding fields of the task (a task.Spec marshals to all of them): each
// replaces the task's value (ctsync).
func (c *Client) PatchTask(ctx context.Context, name string, fields any, run string) (api.UpdateTaskResponse, error) {
	var out api.UpdateTaskResponse
	err := c.do(ctx, http.MethodPatch, taskPath(name), runQuery(run), fields, &out)
	return out, err
}

// DeleteTask calls DELETE /v1/tasks/{name}[?destroy=true] and returns the
// request id.
func (c *Client) DeleteTask(ctx context.Context, name string, destroy bool) (string, error) {
	out, err := c.DeleteTaskResult(ctx, name, destroy)
	return out.RequestID, err
}

// DeleteTaskResult calls DELETE /v1/tasks/{name}[?destroy=true] and
// returns the whole answer: for a task with safety gates and destroy, it
// says whether the destroy is held for approval (Status, Plan).
func (c *Client) DeleteTaskResult(ctx context.Context, name string, destroy bool) (api.DeleteTaskResponse, error) {
	v := url.Values{}
	if destroy {
		v.Set("destroy", "true")
	}
	var out api.DeleteTaskResponse
	err := c.do(ctx, http.MethodDelete, taskPath(name), v, nil, &out)
	return out, err
}

// RunTask calls POST /v1/tasks/{name}/run.
func (c *Client) RunTask(ctx context.Context, name string) (api.RunTaskResponse, error) {
	var out api.RunTaskResponse
	err := c.do(ctx, http.MethodPost, taskPath(name)+"/run", nil, nil, &out)
	return out, err
}

// EventLog calls GET /v1/tasks/{name}/events/{id}/log: the Terraform
// output of one run, as text.
func (c *Client) EventLog(ctx context.Context, name, id string) (string, error) {
	var text string
	err := c.do(ctx, http.MethodGet, taskPath(name)+"/events/"+url.PathEscape(id)+"/log", nil, nil, &text)
	return text, err
}

// Events calls GET /v1/tasks/{name}/events.
func (c *Client) Events(ctx context.Context, name string) ([]store.Event, error) {
	var out api.EventsResponse
	err := c.do(ctx, http.MethodGet, taskPath(name)+"/events", nil, nil, &out)
	return out.Events, err
}

// HeldPlan calls GET /v1/tasks/{name}/plan: the plan a safety gate holds.
func (c *Client) HeldPlan(ctx context.Context, name string) (gate.Plan, error) {
	var out api.PlanResponse
	err := c.do(ctx, http.MethodGet, taskPath(name)+"/plan", nil, nil, &out)
	return out.Plan, err
}

// DecidePlan calls POST /v1/tasks/{name}/plan/{id}/approve (approve true)
// or .../reject, and returns the plan as it stands after the decision.
func (c *Client) DecidePlan(ctx context.Context, name, id string, approve bool) (gate.Plan, error) {
	verb := "/reject"
	if approve {
		verb = "/approve"
	}
	var out api.PlanResponse
	err := c.do(ctx, http.MethodPost, taskPath(name)+"/plan/"+url.PathEscape(id)+verb, nil, nil, &out)
	return out.Plan, err
}
