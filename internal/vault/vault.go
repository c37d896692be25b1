// Package vault reads the Vault secrets of {{ with secret }} templates with
// the official client (github.com/hashicorp/vault/api), keeps them fresh
// and reports the ones that change:
//
//   - a secret with a renewable lease (a dynamic secret) is renewed by a
//     LifetimeWatcher; when its lease cannot be renewed any more (max TTL,
//     revoked) it is read again, which gives a new value;
//   - a secret with a lease that cannot be renewed is read again shortly
//     before the lease ends;
//   - a secret without a lease (KV) is read again every
//     vault.default_lease_duration, so that a new version is found.
//
// A value that differs from the last one is handed to the OnChange
// callback. While Vault cannot be reached the last values are kept and the
// reads are retried with backoff. The token itself is renewed (renew_token)
// or, with vault_agent_token_file, read again when the file changes.
//
// Values are secrets: they never appear in logs or errors.
package vault

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/vault/api"

	"github.com/ctsync/ctsync/internal/backoff"
	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/tmpl"
)

// Retry bounds of reads that failed because Vault was unavailable.
const (
	retryBase = 1 * time.Second
	retryMax  = 1 * time.Minute
)

// agentTokenPoll is how often vault_agent_token_file is checked.
var agentTokenPoll = 5 * time.Second

// Options configure a Manager.
type Options struct {
	Config config.Vault
	Logger *slog.Logger
	// OnChange is called (from the Manager's goroutines) with the
	// tmpl.SecretKey of each secret whose value changed.
	OnChange func(keys []string)
}

// Manager reads and watches secrets. Read is a resolve.SecretReader.
type Manager struct {
	api       *api.Client
	log       *slog.Logger
	cfg       config.Vault
	onChange  func([]string)
	tokenFile string

	mu      sync.Mutex // guards secrets, runCtx, onChange and the entries
	secrets map[string]*entry
	runCtx  context.Context // set by Run; nil before
	wg      sync.WaitGroup
}

// entry is one watched secret request.
type entry struct {
	key    string
	path   string
	params []string
	raw    *api.Secret
	val    *tmpl.Secret
}

// New builds the client from the vault block: address, namespace, TLS and
// transport, then the token (token, VAULT_TOKEN or ~/.vault-token as
// decoded, or vault_agent_token_file), unwrapped when unwrap_token is set.
// It does not contact Vault unless the token must be unwrapped.
func New(o Options) (*Manager, error) {
	c := o.Config
	conf := api.DefaultConfig() // the VAULT_* environment
	if conf.Error != nil {
		return nil, fmt.Errorf("vault: %w", conf.Error)
	}
	if c.Address != "" {
		conf.Address = c.Address
	}
	conf.MaxRetries = 0 // retried here, with the Manager's backoff
	conf.Timeout = 30 * time.Second
	if tr, ok := conf.HttpClient.Transport.(*http.Transport); ok {
		t := c.Transport
		tr.DialContext = (&net.Dialer{Timeout: t.DialTimeout, KeepAlive: t.DialKeepAlive}).DialContext
		tr.DisableKeepAlives = t.DisableKeepAlives
		tr.IdleConnTimeout = t.IdleConnTimeout
		tr.MaxIdleConns = t.MaxIdleConns
		tr.MaxIdleConnsPerHost = t.MaxIdleConnsPerHost
		tr.TLSHandshakeTimeout = t.TLSHandshakeTimeout
	}
	if c.TLS.Enabled {
		if err := conf.ConfigureTLS(&api.TLSConfig{
			CACert: c.TLS.CACert, CAPath: c.TLS.CAPath, ClientCert: c.TLS.Cert, ClientKey: c.TLS.Key,
			TLSServerName: c.TLS.ServerName, Insecure: !c.TLS.Verify,
		}); err != nil {
			return nil, fmt.Errorf("vault.tls: %w", err)
		}
	}
	client, err := api.NewClient(conf)
	if err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	if c.Namespace != "" {
		client.SetNamespace(c.Namespace)
	}
	m := &Manager{api: client, log: o.Logger, cfg: c, onChange: o.OnChange, secrets: map[string]*entry{}}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	token := c.Token
	if c.AgentTokenFile != "" {
		m.tokenFile = c.AgentTokenFile
		if token, err = readTokenFile(c.AgentTokenFile); err != nil {
			return nil, fmt.Errorf("vault.vault_agent_token_file: %w", err)
		}
	}
	client.SetToken(token)
	if c.UnwrapToken && token != "" {
		s, err := client.Logical().Unwrap(token)
		if err != nil {
			return nil, fmt.Errorf("vault: unwrapping the token (unwrap_token = true): %w", classify(err))
		}
		if s == nil || s.Auth == nil || s.Auth.ClientToken == "" {
			return nil, errors.New("vault: the unwrapped answer holds no token (unwrap_token = true)")
		}
		client.SetToken(s.Auth.ClientToken)
	}
	return m, nil
}

// SetOnChange replaces the callback of Options.OnChange.
func (m *Manager) SetOnChange(fn func(keys []string)) {
	m.mu.Lock()
	m.onChange = fn
	m.mu.Unlock()
}

// Client returns the underlying Vault client.
func (m *Manager) Client() *api.Client { return m.api }

func readTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", errors.New("the file is empty")
	}
	return t, nil
}

// classify marks the errors of a Vault that cannot answer (network, 5xx,
// 429, a sealed Vault) with tmpl.ErrVaultUnavailable. A 4xx (permission
// denied, bad request) is not: waiting will not fix it.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var re *api.ResponseError
	if errors.As(err, &re) {
		if re.StatusCode >= 500 || re.StatusCode == http.StatusTooManyRequests {
			return fmt.Errorf("%s: %w", oneLine(re), tmpl.ErrVaultUnavailable)
		}
		return errors.New(oneLine(re))
	}
	return fmt.Errorf("%v: %w", err, tmpl.ErrVaultUnavailable)
}

// oneLine is a ResponseError as one line: status and Vault's messages.
func oneLine(re *api.ResponseError) string {
	msg := fmt.Sprintf("Vault answered %d", re.StatusCode)
	if len(re.Errors) > 0 {
		msg += ": " + strings.Join(re.Errors, "; ")
	}
	return msg
}

// Read is a resolve.SecretReader: it returns the current value of the
// secret, reading it from Vault the first time it is asked for; from then
// on the Manager keeps it fresh (once Run runs).
func (m *Manager) Read(ctx context.Context, path string, params []string) (*tmpl.Secret, error) {
	key := tmpl.SecretKey(path, params)
	m.mu.Lock()
	if e, ok := m.secrets[key]; ok {
		m.mu.Unlock()
		return e.val, nil
	}
	m.mu.Unlock()
	raw, err := m.fetch(ctx, path, params)
	if err != nil || raw == nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.secrets[key]; ok { // read by another block meanwhile
		return e.val, nil
	}
	e := &entry{key: key, path: path, params: params, raw: raw, val: convert(raw)}
	m.secrets[key] = e
	if m.runCtx != nil {
		m.watch(m.runCtx, e)
	}
	return e.val, nil
}

// fetch reads the secret (or, with params, writes them and takes the
// answer). A missing secret is nil, nil.
func (m *Manager) fetch(ctx context.Context, path string, params []string) (*api.Secret, error) {
	var s *api.Secret
	var err error
	if len(params) > 0 {
		data := make(map[string]any, len(params))
		for _, p := range params {
			k, v, _ := strings.Cut(p, "=")
			data[k] = v
		}
		s, err = m.api.Logical().WriteWithContext(ctx, path, data)
	} else {
		s, err = m.api.Logical().ReadWithContext(ctx, path)
	}
	if err != nil {
		return nil, classify(err)
	}
	return s, nil
}

// convert turns the client's secret into what templates see.
func convert(s *api.Secret) *tmpl.Secret {
	return &tmpl.Secret{RequestID: s.RequestID, LeaseID: s.LeaseID, LeaseDuration: s.LeaseDuration,
		Renewable: s.Renewable, Data: s.Data, Warnings: s.Warnings}
}

// Run keeps the token and every secret read so far (and later) fresh until
// ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	m.runCtx = ctx
	for _, e := range m.secrets {
		m.watch(ctx, e)
	}
	m.mu.Unlock()
	m.wg.Go(func() { m.keepToken(ctx) })
	<-ctx.Done()
	m.wg.Wait()
	return nil
}

// watch starts the goroutine that keeps e fresh. m.mu is held.
func (m *Manager) watch(ctx context.Context, e *entry) {
	m.wg.Go(func() {
		for ctx.Err() == nil {
			m.mu.Lock()
			raw := e.raw
			m.mu.Unlock()
			if !m.waitLease(ctx, e, raw) {
				return
			}
			fresh, ok := m.refetch(ctx, e)
			if !ok {
				return
			}
			m.mu.Lock()
			changed := !reflect.DeepEqual(e.val.Data, fresh.Data)
			e.raw, e.val = fresh, convert(fresh)
			onChange := m.onChange
			m.mu.Unlock()
			if changed {
				m.log.Info("vault secret changed", "path", e.path, "lease_duration", fresh.LeaseDuration)
				if onChange != nil {
					onChange([]string{e.key})
				}
			} else {
				m.log.Debug("vault secret read again, unchanged", "path", e.path)
			}
		}
	})
}

// waitLease returns when the secret must be read again: its renewable
// lease cannot be renewed any more, its lease nears its end, or (no lease)
// after the default lease duration. false: ctx ended.
func (m *Manager) waitLease(ctx context.Context, e *entry, raw *api.Secret) bool {
	if raw.Renewable && raw.LeaseID != "" {
		w, err := m.api.NewLifetimeWatcher(&api.LifetimeWatcherInput{Secret: raw})
		if err == nil {
			go w.Start()
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return false
				case err := <-w.DoneCh():
					if err != nil {
						m.log.Warn("vault lease renewal failed; reading the secret again", "path", e.path, "error", err)
					} else {
						m.log.Info("vault lease cannot be renewed any more; reading the secret again", "path", e.path)
					}
					return true
				case r := <-w.RenewCh():
					if r != nil && r.Secret != nil {
						m.log.Debug("vault lease renewed", "path", e.path, "lease_duration", r.Secret.LeaseDuration)
					}
				}
			}
		}
	}
	d := m.cfg.DefaultLeaseDuration
	if d <= 0 {
		d = config.DefaultVaultLeaseDuration
	}
	if raw.LeaseDuration > 0 {
		d = time.Duration(raw.LeaseDuration) * time.Second
	}
	// Read again at 85-95% of the lease, as consul-template does, so a
	// new value is there before the old one expires.
	d = backoff.Jitter{Lo: -0.15, Hi: -0.05}.Spread(d)
	return backoff.Sleep(ctx, d)
}

// refetch reads e again until it succeeds; failures keep the last value.
func (m *Manager) refetch(ctx context.Context, e *entry) (*api.Secret, bool) {
	delay := retryBase
	for {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		s, err := m.fetch(rctx, e.path, e.params)
		cancel()
		if ctx.Err() != nil {
			return nil, false
		}
		if err == nil && s != nil {
			return s, true
		}
		if err == nil {
			err = errors.New("the secret no longer exists")
		}
		m.log.Warn("reading vault secret failed; keeping its last value", "path", e.path, "retry_in", delay, "error", err)
		if !backoff.Sleep(ctx, delay) {
			return nil, false
		}
		delay = min(2*delay, retryMax)
	}
}

// keepToken renews the token while it can (renew_token), and follows the
// agent's token file.
func (m *Manager) keepToken(ctx context.Context) {
	if m.tokenFile != "" {
		m.followTokenFile(ctx)
		return
	}
	if !m.cfg.RenewToken || m.api.Token() == "" {
		return
	}
	delay := retryBase
	for ctx.Err() == nil {
		s, err := m.api.Auth().Token().LookupSelfWithContext(ctx)
		if err != nil || s == nil {
			m.log.Warn("vault token lookup failed; retrying", "retry_in", delay, "error", classify(err))
			if !backoff.Sleep(ctx, delay) {
				return
			}
			delay = min(2*delay, retryMax)
			continue
		}
		delay = retryBase
		renewable, _ := s.TokenIsRenewable()
		ttl, _ := s.TokenTTL()
		if !renewable || ttl <= 0 {
			m.log.Debug("vault token is not renewable or does not expire: not renewing it")
			return
		}
		w, err := m.api.NewLifetimeWatcher(&api.LifetimeWatcherInput{Secret: &api.Secret{Auth: &api.SecretAuth{
			ClientToken: m.api.Token(), Renewable: true, LeaseDuration: int(ttl.Seconds())}}})
		if err != nil {
			m.log.Warn("vault token renewal cannot start", "error", err)
			return
		}
		go w.Start()
		done := false
		for !done {
			select {
			case <-ctx.Done():
				w.Stop()
				return
			case err := <-w.DoneCh():
				if err != nil {
					m.log.Warn("vault token renewal failed", "error", err)
				} else {
					m.log.Warn("vault token cannot be renewed any more: it expires soon; give ctsync a new token")
				}
				done = true
			case <-w.RenewCh():
				m.log.Debug("vault token renewed")
			}
		}
		w.Stop()
		if !backoff.Sleep(ctx, retryMax) {
			return
		}
	}
}

// followTokenFile uses the token a Vault agent writes, read again when it
// changes.
func (m *Manager) followTokenFile(ctx context.Context) {
	var last time.Time
	if fi, err := os.Stat(m.tokenFile); err == nil {
		last = fi.ModTime()
	}
	for backoff.Sleep(ctx, agentTokenPoll) {
		fi, err := os.Stat(m.tokenFile)
		if err != nil || fi.ModTime().Equal(last) {
			continue
		}
		t, err := readTokenFile(m.tokenFile)
		if err != nil {
			m.log.Warn("vault agent token file cannot be read; keeping the current token", "file", m.tokenFile, "error", err)
			continue
		}
		last = fi.ModTime()
		m.api.SetToken(t)
		m.log.Info("vault token read again from the agent's token file", "file", m.tokenFile)
	}
}
