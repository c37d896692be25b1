package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	ctsapi "github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/notify"
	"github.com/ctsync/ctsync/internal/redact"
	"github.com/ctsync/ctsync/internal/resolve"
	"github.com/ctsync/ctsync/internal/tmpl"
	"github.com/ctsync/ctsync/internal/vault"
)

// This file handles the secrets read from Vault outside terraform_provider
// blocks (config.SecretField): consul.token, api_auth token secrets,
// webhook headers and the terraform-cloud token.
//
// At start-up they are resolved before anything uses them, the Consul
// client included: an unreachable Vault is waited for (-once and -inspect
// within the once wait, the daemon without bound). While the daemon runs,
// a secret that changes in Vault is resolved again (the Vault manager's
// change callback, through liveProviders.secretsChanged):
//
//   - an API token's new secret replaces the old one at once;
//   - a webhook header's new value is sent from the next delivery on;
//   - the Consul token and the terraform-cloud token are read at start
//     only: a change is logged, and takes effect when ctsync restarts.
//
// Every value is added to the redactor before it is used.

// newVault builds the Vault manager when the vault block is enabled.
func newVault(cfg *config.Config, logger *slog.Logger) (*vault.Manager, error) {
	if !cfg.Vault.Enabled {
		return nil, nil
	}
	return vault.New(vault.Options{Config: cfg.Vault, Logger: logger.With("component", "vault")})
}

// resolveSecretFields resolves the configuration's secret fields through
// m, waiting for an unreachable Vault. code is ExitOK to go on.
func resolveSecretFields(ctx context.Context, cfg *config.Config, m *vault.Manager, logger *slog.Logger,
	once bool, wait time.Duration, stderr io.Writer) (code int) {
	if len(cfg.SecretFields()) == 0 {
		return ExitOK
	}
	var read resolve.SecretReader
	if m != nil {
		read = m.Read
	}
	deadline := time.Now().Add(wait)
	delay := time.Second
	for {
		err := resolve.SecretFields(ctx, cfg, read)
		switch {
		case err == nil:
			return ExitOK
		case ctx.Err() != nil:
			return ExitInterrupt
		case !errors.Is(err, tmpl.ErrVaultUnavailable):
			fmt.Fprintf(stderr, "configuration error: %v\n", err)
			return ExitConfig
		case once && time.Now().Add(delay).After(deadline):
			logger.Error("vault is not reachable: cannot resolve the {{ with secret }} values of the configuration",
				"address", cfg.Vault.Address, "waited", wait, "error", err)
			return ExitError
		}
		logger.Warn("waiting for Vault: the configuration's {{ with secret }} values (consul.token, api_auth, notification headers) are needed to start",
			"error", err, "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ExitInterrupt
		case <-t.C:
		}
		delay = min(2*delay, 30*time.Second)
	}
}

// liveFields keeps the secret fields' values current while the daemon
// runs.
type liveFields struct {
	log  *slog.Logger
	read resolve.SecretReader

	mu       sync.Mutex
	fields   []config.SecretField
	api      *ctsapi.Server // set once the API server is built
	pending  map[string]string
	notifier *notify.Dispatcher
	redactor *redact.Redactor
}

func newLiveFields(cfg *config.Config, m *vault.Manager, logger *slog.Logger) *liveFields {
	f := &liveFields{log: logger.With("component", "vault"), fields: cfg.SecretFields(), pending: map[string]string{}}
	if m != nil {
		f.read = m.Read
	}
	return f
}

// attachAPI gives the API server whose token secrets follow Vault; a
// secret that changed before it was built is applied now.
func (l *liveProviders) attachAPI(srv *ctsapi.Server) {
	if l == nil || l.fields == nil {
		return
	}
	f := l.fields
	f.mu.Lock()
	defer f.mu.Unlock()
	f.api = srv
	for name, secret := range f.pending {
		if _, err := srv.SetTokenSecret(name, secret); err != nil {
			f.log.Error("a Vault secret of an API token is refused; the token keeps its last secret", "token", name, "error", err)
		}
	}
	clear(f.pending)
}

// changed resolves again the fields that read one of the changed secrets
// and applies their new values.
func (f *liveFields) changed(keys []string) {
	if f == nil || f.read == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.fields {
		fd := &f.fields[i]
		if !slices.ContainsFunc(fd.Keys, func(k string) bool { return slices.Contains(keys, k) }) {
			continue
		}
		v, used, err := resolve.SecretField(context.Background(), *fd, f.read)
		if err != nil {
			f.log.Error("a Vault secret changed but the field cannot be resolved again; keeping its last value",
				"field", fd.Field, "error", err)
			continue
		}
		fd.Keys = used
		if f.redactor != nil {
			f.redactor.Add(v) // before any use
		}
		switch fd.Kind {
		case config.FieldAPIToken:
			if f.api != nil {
				if _, err := f.api.SetTokenSecret(fd.Name, v); err != nil {
					f.log.Error("a Vault secret of an API token is refused; the token keeps its last secret", "token", fd.Name, "error", err)
					continue
				}
			} else {
				f.pending[fd.Name] = v
			}
			f.log.Info("vault secret changed: the API token's new secret is in use, the old one no longer works", "token", fd.Name)
		case config.FieldHeader:
			if f.notifier != nil {
				f.notifier.SetHeader(fd.Name, fd.Header, v)
			}
			f.log.Info("vault secret changed: the webhook header's new value is sent from the next notification on",
				"notifier", fd.Name, "header", fd.Header)
		default: // consul.token, the terraform-cloud token: read at start only
			f.log.Warn("vault secret changed: this field is read at start-up only; restart ctsync to use the new value",
				"field", fd.Field)
		}
	}
}
