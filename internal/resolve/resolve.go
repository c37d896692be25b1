// Package resolve renders, at start-up, the values of a configuration
// that are read from Consul or Vault: the {{ key "path" }} and
// {{ with secret "path" }} templates (package tmpl) of terraform_provider
// blocks, and the {{ with secret }} values of consul.token, API token
// secrets, webhook headers and the terraform-cloud token (config.SecretField).
// Package config decodes and records where each template was written; this
// package reads Consul KV and Vault through the lookups it is given and
// writes plain values back into the configuration. The errors, like
// config.Load's, are *config.Error or config.Errors naming the file, line
// and field; they never hold a value.
package resolve

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/hcl/v2"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/tmpl"
)

// SecretReader reads a Vault secret for {{ with secret "path" "k=v" ... }}:
// with "k=v" arguments it writes them to path and returns the answer (as
// CTS does, e.g. to issue a certificate), otherwise it reads path. An error
// that wraps tmpl.ErrVaultUnavailable means Vault could not be reached (or
// answered 5xx): resolution waits for it instead of failing. A nil secret
// without an error means there is none at path (package vault implements
// one with the official client).
type SecretReader func(ctx context.Context, path string, params []string) (*tmpl.Secret, error)

// Timeout bounds the resolution of one terraform_provider
// block's dynamic values (CTS: 5 s per block, blocks in parallel).
const Timeout = 5 * time.Second

// resolveTimeout is Timeout; tests shorten it.
var resolveTimeout = Timeout

// KVGetter reads one Consul KV key for Providers: its raw value and
// whether it exists. datacenter is empty for the agent's own.
type KVGetter func(ctx context.Context, key, datacenter string) (value []byte, exists bool, err error)

// ConsulKV returns a KVGetter that reads through a Consul API client.
func ConsulKV(client *api.Client) KVGetter {
	return func(ctx context.Context, key, dc string) ([]byte, bool, error) {
		q := (&api.QueryOptions{Datacenter: dc}).WithContext(ctx)
		pair, _, err := client.KV().Get(key, q)
		if err != nil {
			return nil, false, err
		}
		if pair == nil {
			return nil, false, nil
		}
		return pair.Value, true, nil
	}
}

// Providers resolves the {{ key "path" }} values (and the other
// templates of the same blocks) of every terraform_provider block that has
// them, reading Consul KV through kv: once, at start-up, as CTS does. Blocks
// are resolved in parallel, each within Timeout. It does not
// touch Consul when no block needs it. The error, like Load's, is an *Error
// or Errors naming the file, line and field; it never holds a value. A
// block with {{ with secret }} is an error here: use ProvidersWith.
func Providers(ctx context.Context, cfg *config.Config, kv KVGetter) error {
	_, err := ProvidersWith(ctx, cfg, Lookups{KV: kv})
	return err
}

// Lookups are the sources of the dynamic values of terraform_provider
// blocks.
type Lookups struct {
	// KV reads Consul KV for {{ key }}.
	KV KVGetter
	// Secret reads Vault for {{ with secret }}; nil when there is no
	// Vault (such a block is then an error).
	Secret SecretReader
}

// ProvidersWith is Providers with Vault: it resolves every
// block that holds {{ key }} or {{ with secret }} templates. A block whose
// only problems are that Vault cannot be reached (errors that wrap
// tmpl.ErrVaultUnavailable) is left unresolved and returned in waiting, by
// reference ("name" or "name.alias"), with the reason: the caller retries
// it later with Provider. Every other problem is in err, as in
// Providers.
func ProvidersWith(ctx context.Context, cfg *config.Config, l Lookups) (waiting map[string]error, err error) {
	var idx []int
	for i := range cfg.Providers {
		if cfg.Providers[i].NeedsResolution() {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil, nil
	}
	var (
		mu   sync.Mutex
		errs []*config.Error
		wg   sync.WaitGroup
	)
	for _, i := range idx {
		p := cfg.Providers[i]
		wg.Go(func() {
			res, perrs, transient := resolveOne(ctx, p, l)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case len(perrs) == 0:
				cfg.Providers[i] = res
			case transient != nil:
				if waiting == nil {
					waiting = map[string]error{}
				}
				waiting[p.Ref()] = transient
			default:
				errs = append(errs, perrs...)
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		config.SortErrors(errs, cfg.Files)
		return waiting, config.ErrorOf(errs)
	}
	return waiting, nil
}

// Provider resolves one provider block again from its templates, as
// written: a block that ProvidersWith left waiting for Vault, or a
// resolved block whose Vault secrets changed (the reader returns the new
// values). A block without {{ key }} or {{ with secret }} is returned as it
// is. The error is an *config.Error or config.Errors naming the field; it wraps
// tmpl.ErrVaultUnavailable when Vault alone is the problem.
func Provider(ctx context.Context, p config.Provider, l Lookups) (config.Provider, error) {
	if orig, ok := p.AsWritten(); ok {
		p = orig
	} else if !p.NeedsResolution() {
		return p, nil
	}
	res, perrs, transient := resolveOne(ctx, p, l)
	if len(perrs) == 0 {
		return res, nil
	}
	if transient != nil {
		return p, fmt.Errorf("%w: %w", config.ErrorOf(perrs), tmpl.ErrVaultUnavailable)
	}
	return p, config.ErrorOf(perrs)
}

// resolveOne resolves one block within resolveTimeout. transient is the
// first error when every error wraps tmpl.ErrVaultUnavailable.
func resolveOne(ctx context.Context, p config.Provider, l Lookups) (res config.Provider, errs []*config.Error, transient error) {
	bctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	cache := map[string]string{}
	key := func(path, dc string) (string, error) {
		ck := path + "@" + dc
		if v, ok := cache[ck]; ok {
			return v, nil
		}
		where := strconv.Quote(path)
		if dc != "" {
			where += " in datacenter " + strconv.Quote(dc)
		}
		if l.KV == nil {
			return "", fmt.Errorf("cannot read Consul KV key %s: no Consul client", where)
		}
		val, ok, err := l.KV(bctx, path, dc)
		switch {
		case err != nil && bctx.Err() != nil && ctx.Err() == nil:
			return "", fmt.Errorf("timed out after %s reading Consul KV key %s", resolveTimeout, where)
		case err != nil:
			return "", fmt.Errorf("reading Consul KV key %s: %v", where, err)
		case !ok:
			return "", fmt.Errorf("Consul KV key %s does not exist", where)
		}
		cache[ck] = string(val)
		return string(val), nil
	}
	var used []string
	lk := tmpl.Lookups{Key: key}
	if l.Secret != nil {
		lk.Secret = secretLookup(ctx, bctx, l.Secret, &used)
	}
	block := p.BlockField()
	allTransient := true
	res = p.RenderStrings(func(s string) (string, error) { return tmpl.Render(s, lk) }, func(field string, rng *hcl.Range, err error) {
		e := &config.Error{Range: p.Range, Field: block + "." + field, Msg: err.Error()}
		if rng != nil {
			e.Range = *rng
		}
		errs = append(errs, e)
		if !errors.Is(err, tmpl.ErrVaultUnavailable) {
			allTransient = false
		} else if transient == nil {
			transient = e
		}
	})
	if len(errs) > 0 {
		if !allTransient {
			transient = nil
		}
		return p, errs, transient
	}
	if len(used) > 0 {
		slices.Sort(used)
		res = res.WithTemplate(p, used)
	}
	return res, nil, nil
}

// SecretField renders the field's template with the Vault reader
// (within Timeout) and checks the value as Load checks a
// value written in the file. keys are the secrets it read. The error is an
// *Error naming the field; it wraps tmpl.ErrVaultUnavailable when Vault could
// not be reached. It never holds the value.
func SecretField(ctx context.Context, f config.SecretField, read SecretReader) (value string, keys []string, err error) {
	bctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	l := tmpl.Lookups{}
	if read != nil {
		l.Secret = secretLookup(ctx, bctx, read, &keys)
	}
	v, rerr := tmpl.Render(f.Template, l)
	if rerr == nil {
		v, rerr = config.CheckSecretFieldValue(f.Kind, v)
	}
	if rerr != nil {
		e := &config.Error{Range: f.Range, Field: f.Field, Msg: rerr.Error()}
		if errors.Is(rerr, tmpl.ErrVaultUnavailable) {
			return "", nil, fmt.Errorf("%w: %w", e, tmpl.ErrVaultUnavailable)
		}
		return "", nil, e
	}
	slices.Sort(keys)
	return v, keys, nil
}

// SecretFields resolves every SecretField of cfg through the Vault
// reader and writes the values into cfg (Consul.Token, TFC.Token, the API
// tokens' Secret, the notifications' Headers), so that Secrets includes
// them. Call it once, before cfg is used. An error is a *config.Error or
// config.Errors naming each field; when Vault could not be reached (and nothing else is
// wrong) it wraps tmpl.ErrVaultUnavailable and the caller may try again.
func SecretFields(ctx context.Context, cfg *config.Config, read SecretReader) error {
	var (
		errs      []*config.Error
		transient = true
	)
	for _, f := range cfg.SecretFields() {
		v, keys, err := SecretField(ctx, f, read)
		if err != nil {
			var e *config.Error
			if errors.As(err, &e) {
				errs = append(errs, e)
			}
			transient = transient && errors.Is(err, tmpl.ErrVaultUnavailable)
			continue
		}
		f.Keys = keys
		cfg.SetSecretField(f, v)
	}
	if len(errs) == 0 {
		if dup := cfg.CheckTokenSecrets(); len(dup) > 0 {
			errs, transient = dup, false
		}
	}
	if len(errs) == 0 {
		return nil
	}
	config.SortErrors(errs, cfg.Files)
	if transient {
		return fmt.Errorf("%w: %w", config.ErrorOf(errs), tmpl.ErrVaultUnavailable)
	}
	return config.ErrorOf(errs)
}

// secretLookup is the tmpl secret lookup of a resolution: it reads through
// read within bctx (the resolution's bound; ctx is the caller's), records
// each secret it reads in used, and says which of Vault's answers keep the
// value from being known (timed out: Vault unavailable; an error; no such
// secret).
func secretLookup(ctx, bctx context.Context, read SecretReader, used *[]string) func(string, []string) (*tmpl.Secret, error) {
	return func(path string, params []string) (*tmpl.Secret, error) {
		if k := tmpl.SecretKey(path, params); !slices.Contains(*used, k) {
			*used = append(*used, k)
		}
		s, err := read(bctx, path, params)
		switch {
		case err != nil && bctx.Err() != nil && ctx.Err() == nil:
			return nil, fmt.Errorf("timed out after %s reading Vault secret %q: %w", resolveTimeout, path, tmpl.ErrVaultUnavailable)
		case err != nil:
			return nil, fmt.Errorf("reading Vault secret %q: %w", path, err)
		case s == nil:
			return nil, fmt.Errorf("Vault secret %q does not exist", path)
		}
		return s, nil
	}
}
