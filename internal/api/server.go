// Package api serves ctsync's CTS-compatible HTTP API under /v1: task
// status, task management (create, enable/disable, delete, run) and health.
// Shapes, status codes and messages follow CTS; docs/api/openapi.yaml
// describes every route and a test checks live responses against it.
package api

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/redact"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

// Server timeouts. WriteTimeout bounds the longest synchronous request:
// create or enable with run=now waits for a whole Terraform apply.
const (
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 15 * time.Second
	WriteTimeout      = 15 * time.Minute
	IdleTimeout       = 60 * time.Second
	// ShutdownTimeout bounds the graceful shutdown once Run's ctx is done.
	ShutdownTimeout = 5 * time.Second
	// MaxBodyBytes is the largest request body accepted.
	MaxBodyBytes = 1 << 20
)

// Controller is what the API needs from the reconciler; *reconcile.Controller
// implements it.
type Controller interface {
	Tasks() []reconcile.TaskState
	Task(name string) (reconcile.TaskState, error)
	Create(ctx context.Context, spec task.Spec, runNow bool) error
	Inspect(ctx context.Context, spec task.Spec) (reconcile.PlanResult, error)
	SetEnabled(ctx context.Context, name string, enabled bool, mode reconcile.EnableMode) (reconcile.PlanResult, error)
	RunNow(ctx context.Context, name string) error
	Delete(ctx context.Context, name string, destroy bool) error
	Events(name string) []store.Event
	// StateChanged is closed at the next change of a task's state.
	StateChanged() <-chan struct{}
}

var _ Controller = (*reconcile.Controller)(nil)

// Options configure a Server.
type Options struct {
	// Addr is the listen address, e.g. ":8558"; ":0" picks a free port.
	Addr string
	// TLS is the top-level tls block: TLS, and with VerifyIncoming mutual TLS.
	TLS        config.APITLS
	Controller Controller
	Logger     *slog.Logger
	// BufferPeriod is the global buffer period that tasks created through
	// the API inherit when they do not set their own.
	BufferPeriod task.BufferPeriod
	// RemovalDelay is the global removal_delay that tasks created through
	// the API with a services, catalog-services or nodes condition
	// inherit when they do not set their own.
	RemovalDelay time.Duration
	// Validate, when set, runs after the built-in checks on a task created
	// through the API (e.g. that its providers are configured). A
	// *task.FieldError names the field in the 400 response.
	Validate func(task.Spec) error
	// Cluster, set with high availability, makes a follower refuse the
	// task and status endpoints and serves /v1/status/cluster (cluster.go).
	Cluster Cluster
	// Approvals, when set, are the safety gates' held plans: the plan
	// endpoints and the held status of tasks (approvals.go).
	Approvals Approvals
	// Health, when set, is GET /v1/health's verdict: nil is healthy (200
	// and CTS's empty object), an error is 503 with the reason. It is the
	// check Consul runs on ctsync's own registration.
	Health func() error
	// Redactor, when set, hides secrets in what the API serves: run logs,
	// plans, the log tails and error messages of events (see runlog.go);
	// a task's own text through the task's view (redact.Redactor.ForTask).
	Redactor *redact.Redactor

	// Tokens are the api_auth tokens; none: the API needs no token, as in
	// CTS (security.go).
	Tokens []config.APIToken
	// Tasks limits the tasks created through the API (api_tasks).
	Tasks config.APITasks
	// HTTP holds the CORS origins and the allowed Host names (api_http).
	HTTP config.APIHTTP
	// LogDirs, when set, are the only directories (absolute: the
	// working_dir and the tasks' own working directories) whose run logs
	// the run-log endpoint serves: an event record read back from Consul
	// cannot point it at another file.
	LogDirs []string
	// FileTask, when set, reports whether a task comes from the
	// configuration files: PATCH changes only its enabled flag.
	FileTask func(name string) bool
	// ReloadOnSIGHUP makes Run reload the token files and the TLS
	// certificate when the process receives SIGHUP (see Reload).
	ReloadOnSIGHUP bool
}

// Server is the API server.
type Server struct {
	opts Options
	log  *slog.Logger
	mux  *http.ServeMux
	h    http.Handler
	tls  *tls.Config

	tokens *Tokens
	certs  *certReloader // nil without TLS

	// liveMu guards the settings a reload changes in opts (live.go):
	// Tasks, BufferPeriod and LogDirs.
	liveMu sync.RWMutex

	mu sync.Mutex
	ln net.Listener
	// warning is exposureWarning of the bound address (set by Listen).
	warning string

	// bgCtx bounds work that outlives its request (asynchronous deletes).
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
}

// New builds a Server. It loads the TLS certificates but does not listen
// yet (see Listen and Run).
func New(opts Options) (*Server, error) {
	if opts.Controller == nil {
		return nil, errors.New("api: a controller is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, log: opts.Logger, mux: http.NewServeMux(), tokens: NewTokens(opts.Tokens)}
	var certNames []string
	if opts.TLS.Enabled {
		cr, err := newCertReloader(opts.TLS)
		if err != nil {
			return nil, err
		}
		tc, err := tlsConfigWith(opts.TLS, cr)
		if err != nil {
			return nil, err
		}
		s.tls, s.certs = tc, cr
		certNames = cr.names()
	}
	s.bgCtx, s.bgCancel = context.WithCancel(context.Background())
	s.routes()
	g := newGuard(opts, s.tokens, certNames)
	s.h = s.middleware(g.wrap(s.clusterGate(s.mux))) // guard: security.go; clusterGate: cluster.go
	return s, nil
}

// Reload reads the token files (api_auth secret_file), the TLS
// certificate and key and the client CA (verify_incoming) again, and
// checks them as the configuration is checked at start-up. It is all or
// nothing: on any error nothing changes (the tokens, the certificate and
// the CA in force stay in force) and the error is logged and returned.
// Run calls it on SIGHUP when Options.ReloadOnSIGHUP is set.
func (s *Server) Reload() error {
	var errs []error
	tokens, changed, err := s.tokens.readFiles()
	if err != nil {
		errs = append(errs, fmt.Errorf("api tokens: %w", err))
	}
	var files *tlsFiles
	if s.certs != nil {
		if files, err = s.certs.load(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		s.log.Error("api: reload refused; the tokens and TLS files in force stay in force", "error", err)
		return err
	}
	s.tokens.commitFiles(tokens)
	if files != nil {
		s.certs.set(files)
	}
	s.log.Info("api: token files and TLS files reloaded", "tokens_changed", changed, "tls", s.certs != nil)
	return nil
}

// Handler returns the API's handler with its middleware (CORS, request id,
// logging), for tests and for embedding.
func (s *Server) Handler() http.Handler { return s.h }

// Handle mounts another handler (metrics, UI) on the API's mux; the
// pattern uses net/http.ServeMux syntax. It must be called before Run.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Listen binds the listen address, so a bad address or a port in use is
// reported before anything else starts. Run calls it when it has not been
// called.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("api: listening on %s: %w", s.opts.Addr, err)
	}
	s.ln = ln
	if w := s.exposureWarning(ln.Addr().String()); w != "" {
		s.warning = w
		s.log.Warn(w)
	}
	return nil
}

// listenWarning is the warning Listen logged, if any.
func (s *Server) listenWarning() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.warning
}

// Addr returns the bound address ("" before Listen).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Run serves until ctx is done, then shuts down gracefully within
// ShutdownTimeout. It returns nil after a shutdown caused by ctx and the
// error otherwise.
func (s *Server) Run(ctx context.Context) error {
	defer s.stopBackground()
	if err := s.Listen(); err != nil {
		return err
	}
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	srv := &http.Server{
		Handler:           s.h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		TLSConfig:         s.tls,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	scheme := "http"
	if s.tls != nil {
		scheme = "https"
		ln = tls.NewListener(plainHTTPListener{ln}, s.tls) // plain HTTP gets a 400: tlsplain.go
	}
	s.log.Info("api listening", "address", ln.Addr().String(), "scheme", scheme,
		"mtls", s.tls != nil && s.tls.ClientAuth == tls.RequireAndVerifyClientCert)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var hup chan os.Signal
	if s.opts.ReloadOnSIGHUP {
		hup = make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
wait:
	for {
		select {
		case err := <-errc:
			return fmt.Errorf("api: %w", err)
		case <-hup:
			_ = s.Reload()
		case <-ctx.Done():
			break wait
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		_ = srv.Close()
	}
	<-errc
	s.log.Info("api stopped")
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("api: shutdown: %w", err)
	}
	return nil
}

// stopBackground cancels and waits for asynchronous deletes.
func (s *Server) stopBackground() {
	s.bgCancel()
	s.bg.Wait()
}

// TLSConfig builds the server TLS configuration of the tls block: TLS 1.2
// or later with forward-secret AEAD cipher suites only and, with
// verify_incoming, client certificates required and verified against
// ca_cert (preferred) or the PEM files in ca_path.
func TLSConfig(c config.APITLS) (*tls.Config, error) {
	cr, err := newCertReloader(c)
	if err != nil {
		return nil, err
	}
	return tlsConfigWith(c, cr)
}

// tlsCipherSuites are the TLS 1.2 suites offered: ECDHE key exchange and
// AEAD ciphers (TLS 1.3 suites are all of that kind and not configurable).
var tlsCipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

func tlsConfigWith(c config.APITLS, cr *certReloader) (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		CipherSuites:   tlsCipherSuites,
		GetCertificate: cr.get,
	}
	if !c.VerifyIncoming {
		return tc, nil
	}
	tc.ClientCAs = cr.clientCAs()
	tc.ClientAuth = tls.RequireAndVerifyClientCert
	// Each handshake verifies the client against the CA in force (it
	// changes on reload).
	base := tc.Clone()
	tc.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.ClientCAs = cr.clientCAs()
		return c, nil
	}
	return tc, nil
}

// certReloader serves the API's certificate, and holds the CA that client
// certificates are verified against (verify_incoming); both are loaded
// again on reload (SIGHUP): a renewed certificate or a new client CA is
// used without a restart.
type certReloader struct {
	c     config.APITLS
	mu    sync.RWMutex
	files *tlsFiles
}

// tlsFiles is what certReloader loads.
type tlsFiles struct {
	cert *tls.Certificate
	cas  *x509.CertPool // nil without verify_incoming
}

func newCertReloader(c config.APITLS) (*certReloader, error) {
	if c.Cert == "" || c.Key == "" {
		return nil, errors.New("api tls: cert and key are both required")
	}
	cr := &certReloader{c: c}
	files, err := cr.load()
	if err != nil {
		return nil, err
	}
	cr.set(files)
	return cr, nil
}

// load reads the certificate and key, and the client CA with
// verify_incoming, with the checks of start-up; nothing changes until set.
func (cr *certReloader) load() (*tlsFiles, error) {
	cert, err := tls.LoadX509KeyPair(cr.c.Cert, cr.c.Key)
	if err != nil {
		return nil, fmt.Errorf("api tls: loading cert and key: %w", err)
	}
	f := &tlsFiles{cert: &cert}
	if cr.c.VerifyIncoming {
		pool, err := LoadCAs(cr.c.CACert, cr.c.CAPath)
		if err != nil {
			return nil, fmt.Errorf("api tls: %w", err)
		}
		if pool == nil {
			return nil, errors.New("api tls: verify_incoming needs ca_cert or ca_path")
		}
		f.cas = pool
	}
	return f, nil
}

func (cr *certReloader) set(f *tlsFiles) {
	cr.mu.Lock()
	cr.files = f
	cr.mu.Unlock()
}

func (cr *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cr.mu.RLock()
	defer cr.mu.RUnlock()
	return cr.files.cert, nil
}

func (cr *certReloader) clientCAs() *x509.CertPool {
	cr.mu.RLock()
	defer cr.mu.RUnlock()
	return cr.files.cas
}

// names returns the DNS names of the certificate: a client that verified
// the certificate reached this server by one of them.
func (cr *certReloader) names() []string {
	cr.mu.RLock()
	defer cr.mu.RUnlock()
	if cr.files.cert.Leaf == nil {
		return nil
	}
	return cr.files.cert.Leaf.DNSNames
}

// LoadCAs reads PEM certificates from caFile, or when it is empty from
// every regular file in caDir. It returns nil, nil when both are empty.
func LoadCAs(caFile, caDir string) (*x509.CertPool, error) {
	var files []string
	switch {
	case caFile != "":
		files = []string{caFile}
	case caDir != "":
		entries, err := os.ReadDir(caDir)
		if err != nil {
			return nil, fmt.Errorf("reading ca_path: %w", err)
		}
		for _, e := range entries {
			if e.Type().IsRegular() {
				files = append(files, filepath.Join(caDir, e.Name()))
			}
		}
	default:
		return nil, nil
	}
	pool := x509.NewCertPool()
	added := 0
	for _, f := range files {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading CA certificate: %w", err)
		}
		if pool.AppendCertsFromPEM(pem) {
			added++
		}
	}
	if added == 0 {
		src := caFile
		if src == "" {
			src = caDir
		}
		return nil, fmt.Errorf("no PEM certificate found in %s", src)
	}
	return pool, nil
}
