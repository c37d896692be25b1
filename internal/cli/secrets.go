package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/consul"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/redact"
	"github.com/ctsync/ctsync/internal/resolve"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/tmpl"
	"github.com/ctsync/ctsync/internal/vault"
)

// This file keeps the terraform_provider values that come from Vault
// current, and hands them to the drivers.
//
// The interface with the rest of the daemon is small:
//
//   - liveProviders.get(ref) is what driverOptions uses to find a task's
//     provider blocks (instead of a map built once): it returns the block
//     with its current values, or an error wrapping errWaitingForVault
//     while the block waits for an unreachable Vault (the desired-state
//     function passes that error on, so the task's status says why it
//     waits and it is retried with backoff);
//   - liveProviders.driver(build) wraps a task's driver so that, when a
//     secret changed since the driver was built, the next run builds it
//     again (with the new values) before planning or applying: the
//     controller's cached driver never holds stale values;
//   - when values change, every task using the block is notified
//     (Controller.Notify with trigger "vault"): its desired state, which
//     hashes the provider values, differs, so it runs again; a task whose
//     values did not change is not run (the fingerprint is the same);
//   - each new value is added to the redactor before any task can use it.

// errWaitingForVault marks a provider block that waits for Vault.
var errWaitingForVault = errors.New("waiting for Vault")

// vaultTrigger is the key tasks are notified with when a secret changed.
const vaultTrigger = "vault"

// liveProviders holds the resolved terraform_provider blocks.
type liveProviders struct {
	log   *slog.Logger
	vault *vault.Manager // nil without a vault block
	kv    resolve.KVGetter

	mu      sync.RWMutex
	byRef   map[string]config.Provider
	waiting map[string]error // refs still waiting for Vault, and why
	gen     atomic.Uint64    // bumped each time a block's values change

	// Set by setupSecrets once the controller and redactor exist.
	notify   func(refs []string)
	redactor *redact.Redactor

	// fields are the secrets read from Vault outside terraform_provider
	// blocks (secretfields.go).
	fields *liveFields
}

func newLiveProviders(cfg *config.Config, logger *slog.Logger) *liveProviders {
	l := &liveProviders{log: logger.With("component", "vault"), byRef: map[string]config.Provider{}}
	for _, p := range cfg.Providers {
		l.byRef[p.Ref()] = p
	}
	return l
}

// resolveProviders resolves the {{ key }} and {{ with secret }} values of
// the terraform_provider blocks at start-up. A Vault that cannot be reached
// is waited for: with -once or -inspect up to wait, then it is an error;
// the daemon starts anyway, and the blocks concerned wait (their tasks with
// them) while it retries in the background. Problems that waiting does not
// solve (a missing secret, permission denied) are configuration errors. code
// is ExitOK to go on.
// m is the Vault manager (nil without a vault block; secretfields.go).
func resolveProviders(ctx context.Context, cfg *config.Config, client *consul.Client, m *vault.Manager, logger *slog.Logger,
	once bool, wait time.Duration, stderr io.Writer) (l *liveProviders, code int) {
	lookups := resolve.Lookups{KV: resolve.ConsulKV(client.Client)}
	if m != nil {
		lookups.Secret = m.Read
	}
	waiting, err := resolve.ProvidersWith(ctx, cfg, lookups)
	if err != nil {
		fmt.Fprintf(stderr, "configuration error: %v\n", err)
		return nil, ExitConfig
	}
	if len(waiting) > 0 && once {
		deadline := time.Now().Add(wait)
		delay := time.Second
		for len(waiting) > 0 {
			for ref, why := range waiting {
				logger.Warn("waiting for Vault to resolve a terraform_provider block", "provider", ref, "error", why, "retry_in", delay)
			}
			if time.Now().Add(delay).After(deadline) {
				logger.Error("vault is not reachable: cannot resolve {{ with secret }} values of terraform_provider blocks",
					"address", cfg.Vault.Address, "waited", wait)
				return nil, ExitError
			}
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, ExitInterrupt
			case <-t.C:
			}
			delay = min(2*delay, 30*time.Second)
			if waiting, err = resolve.ProvidersWith(ctx, cfg, lookups); err != nil {
				fmt.Fprintf(stderr, "configuration error: %v\n", err)
				return nil, ExitConfig
			}
		}
	}
	l = newLiveProviders(cfg, logger)
	l.vault, l.kv = m, lookups.KV
	l.fields = newLiveFields(cfg, m, logger) // secretfields.go
	l.waiting = waiting
	for ref, why := range waiting {
		logger.Warn("vault is not reachable: the tasks using this provider wait for it; retrying in the background",
			"provider", ref, "error", why)
	}
	return l, ExitOK
}

// get returns the provider block ref with its current values (a provider
// named without a block: its default configuration).
func (l *liveProviders) get(ref string) (config.Provider, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if why, ok := l.waiting[ref]; ok {
		return config.Provider{}, fmt.Errorf("terraform_provider %q is %w: %v", ref, errWaitingForVault, why)
	}
	p, ok := l.byRef[ref]
	if !ok {
		if strings.Contains(ref, ".") {
			return config.Provider{}, fmt.Errorf("provider %q is not configured", ref)
		}
		// No terraform_provider block: the provider's default
		// configuration, as CTS does.
		return config.Provider{Name: ref}, nil
	}
	return p, nil
}

// setupSecrets connects the provider values to the controller (tasks to
// notify) and to the redactor. It runs in newApp once both exist.
func (a *app) setupSecrets(l *liveProviders) {
	a.secrets = l
	l.redactor = a.obs.redactor
	if l.fields != nil { // secretfields.go
		l.fields.redactor, l.fields.notifier = a.obs.redactor, a.obs.notifier
	}
	l.notify = func(refs []string) {
		for _, st := range a.ctrl.Tasks() {
			if slices.ContainsFunc(st.Spec.Providers, func(r string) bool { return slices.Contains(refs, r) }) {
				a.ctrl.Notify(st.Spec.Name, vaultTrigger)
			}
		}
	}
}

// secretParts keep the Vault values fresh while the daemon runs (none
// without Vault): the Vault manager (leases, renewals, changed secrets,
// resolved again) and the resolution, with backoff, of the blocks waiting
// for Vault.
func (a *app) secretParts() []part {
	l := a.secrets
	if l == nil || l.vault == nil {
		return nil
	}
	l.vault.SetOnChange(l.secretsChanged)
	return []part{
		{"vault", l.vault.Run},
		{"vault.waiting", func(ctx context.Context) error { l.retryWaiting(ctx); return nil }},
	}
}

// retryWaiting resolves the blocks left waiting for Vault at start-up.
func (l *liveProviders) retryWaiting(ctx context.Context) {
	delay := time.Second
	for {
		l.mu.RLock()
		refs := make([]string, 0, len(l.waiting))
		for ref := range l.waiting {
			refs = append(refs, ref)
		}
		l.mu.RUnlock()
		if len(refs) == 0 {
			return
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		var done []string
		for _, ref := range refs {
			l.mu.RLock()
			p := l.byRef[ref]
			l.mu.RUnlock()
			res, err := resolve.Provider(ctx, p, resolve.Lookups{KV: l.kv, Secret: l.vault.Read})
			l.mu.Lock()
			if err != nil {
				l.waiting[ref] = err
				l.mu.Unlock()
				if errors.Is(err, tmpl.ErrVaultUnavailable) {
					l.log.Warn("still waiting for Vault", "provider", ref, "error", err, "retry_in", delay)
				} else {
					l.log.Error("terraform_provider cannot be resolved; retrying", "provider", ref, "error", err, "retry_in", delay)
				}
				continue
			}
			l.addSecrets(res)
			l.byRef[ref] = res
			delete(l.waiting, ref)
			l.mu.Unlock()
			l.log.Info("terraform_provider resolved: its tasks can run", "provider", ref)
			done = append(done, ref)
		}
		if len(done) > 0 {
			l.gen.Add(1)
			if l.notify != nil {
				l.notify(done)
			}
		}
		delay = min(2*delay, time.Minute)
	}
}

// secretsChanged is the Vault manager's callback: the blocks that read one
// of the secrets are resolved again and their tasks notified.
func (l *liveProviders) secretsChanged(keys []string) {
	l.fields.changed(keys) // consul.token, api_auth, webhook headers (secretfields.go)
	var changed []string
	l.mu.RLock()
	var refs []string
	for ref, p := range l.byRef {
		if _, waiting := l.waiting[ref]; waiting {
			continue
		}
		if slices.ContainsFunc(p.SecretKeys(), func(k string) bool { return slices.Contains(keys, k) }) {
			refs = append(refs, ref)
		}
	}
	l.mu.RUnlock()
	slices.Sort(refs)
	for _, ref := range refs {
		l.mu.RLock()
		p := l.byRef[ref]
		l.mu.RUnlock()
		res, err := resolve.Provider(context.Background(), p, resolve.Lookups{KV: l.kv, Secret: l.vault.Read})
		if err != nil {
			l.log.Error("a Vault secret changed but the provider block cannot be resolved again; keeping its last values",
				"provider", ref, "error", err)
			continue
		}
		l.mu.Lock()
		l.addSecrets(res)
		l.byRef[ref] = res
		l.mu.Unlock()
		changed = append(changed, ref)
	}
	if len(changed) == 0 {
		return
	}
	l.gen.Add(1)
	l.log.Info("vault secrets changed: the tasks using these providers run again", "providers", changed)
	if l.notify != nil {
		l.notify(changed)
	}
}

// addSecrets adds the block's values to the redactor. l.mu is held.
func (l *liveProviders) addSecrets(p config.Provider) {
	if l.redactor == nil {
		return
	}
	one := &config.Config{Providers: []config.Provider{p}}
	l.redactor.Add(one.Secrets()...)
}

// wrapFactory wraps each driver f builds (see driver).
func (l *liveProviders) wrapFactory(f reconcile.DriverFactory) reconcile.DriverFactory {
	return func(spec task.Spec) (driver.Driver, error) {
		return l.driver(func() (driver.Driver, error) { return f(spec) })
	}
}

// driver wraps the driver build makes so that it is built again when
// provider values changed since (see liveDriver).
func (l *liveProviders) driver(build func() (driver.Driver, error)) (driver.Driver, error) {
	if l == nil || l.vault == nil {
		return build()
	}
	gen := l.gen.Load()
	d, err := build()
	if err != nil {
		return nil, err
	}
	return &liveDriver{l: l, build: build, inner: d, gen: gen}, nil
}

// liveDriver is a task's driver that follows provider value changes: before
// each verb it checks the values' generation and, when it moved, builds and
// initialises the driver again (init is skipped by the driver itself when
// the module did not change; the provider values file is rewritten).
type liveDriver struct {
	l     *liveProviders
	build func() (driver.Driver, error)
	inner driver.Driver
	gen   uint64
}

// fresh rebuilds the driver when needed; rebuilt is true when it was (and
// initialised).
func (d *liveDriver) fresh(ctx context.Context) (rebuilt bool, err error) {
	g := d.l.gen.Load()
	if g == d.gen {
		return false, nil
	}
	nd, err := d.build()
	if err != nil {
		return false, &driver.Error{Op: "prepare", Summary: err.Error(), Err: err}
	}
	if err := nd.Init(ctx); err != nil {
		return false, err
	}
	d.inner, d.gen = nd, g
	return true, nil
}

func (d *liveDriver) Init(ctx context.Context) error {
	rebuilt, err := d.fresh(ctx)
	if err != nil || rebuilt {
		return err
	}
	return d.inner.Init(ctx)
}

func (d *liveDriver) Plan(ctx context.Context, run driver.Run, in *task.Inputs) (driver.Result, error) {
	if _, err := d.fresh(ctx); err != nil {
		return driver.Result{}, err
	}
	return d.inner.Plan(ctx, run, in)
}

func (d *liveDriver) Apply(ctx context.Context, run driver.Run, in *task.Inputs) (driver.Result, error) {
	if _, err := d.fresh(ctx); err != nil {
		return driver.Result{}, err
	}
	return d.inner.Apply(ctx, run, in)
}

func (d *liveDriver) Destroy(ctx context.Context, run driver.Run) (driver.Result, error) {
	if _, err := d.fresh(ctx); err != nil {
		return driver.Result{}, err
	}
	return d.inner.Destroy(ctx, run)
}

// Forget passes on to the driver.
func (d *liveDriver) Forget(ctx context.Context) error { return d.inner.Forget(ctx) }

var _ driver.PlanHolder = (*liveDriver)(nil)

// PlanHeld makes a held plan with the current provider values.
func (d *liveDriver) PlanHeld(ctx context.Context, run driver.Run, in *task.Inputs) (driver.HeldPlan, error) {
	if _, err := d.fresh(ctx); err != nil {
		return driver.HeldPlan{}, err
	}
	ph, ok := d.inner.(driver.PlanHolder)
	if !ok {
		return driver.HeldPlan{}, &driver.Error{Op: "plan", Summary: "the task's driver cannot hold a plan", Terminal: true}
	}
	return ph.PlanHeld(ctx, run, in)
}

// ApplyPlan applies a held plan as it was made: the driver is not rebuilt
// (a plan made with other provider values is applied as approved).
func (d *liveDriver) ApplyPlan(ctx context.Context, run driver.Run, p driver.HeldPlan) (driver.Result, error) {
	ph, ok := d.inner.(driver.PlanHolder)
	if !ok {
		return driver.Result{}, &driver.Error{Op: "apply", Summary: "the task's driver cannot hold a plan", Terminal: true}
	}
	return ph.ApplyPlan(ctx, run, p)
}

// DiscardPlan passes on to the driver.
func (d *liveDriver) DiscardPlan(ctx context.Context, p driver.HeldPlan) error {
	if ph, ok := d.inner.(driver.PlanHolder); ok {
		return ph.DiscardPlan(ctx, p)
	}
	return nil
}
