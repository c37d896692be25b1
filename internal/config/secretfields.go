package config

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// This file lets a few secrets outside terraform_provider blocks come from
// Vault (or the environment) instead of sitting in a configuration file
// (ctsync extension; CTS allows templates in terraform_provider only):
//
//	consul { token = "{{ with secret \"secret/data/ctsync\" }}{{ .Data.data.consul }}{{ end }}" }
//	api_auth { token { secret = "{{ with secret ... }}" } }
//	notification "webhook" { headers = { Authorization = "Bearer {{ with secret ... }}" } }
//	driver "terraform-cloud" { token = "{{ with secret ... }}" }
//
// {{ env "NAME" }} is resolved by Load. {{ with secret }} is resolved at
// start-up by ResolveSecretFields, before the Consul client is built: until
// then the field is empty (an API token nobody can present) and the
// template is kept in a SecretField. {{ key }} is refused in these fields:
// the Consul token is needed to read Consul KV, and the others are read
// before Consul is waited for.

// Kinds of SecretField.
const (
	FieldConsulToken = "consul.token"
	FieldAPIToken    = "api_auth.token"
	FieldHeader      = "notification.headers"
	FieldTFCToken    = "driver.terraform-cloud.token"
)

// SecretField is a configuration value outside terraform_provider blocks
// written with {{ with secret }}.
type SecretField struct {
	// Kind is one of the Field* constants.
	Kind string
	// Name is the API token's name (FieldAPIToken) or the notifier's name
	// (FieldHeader); Header is the header's name (FieldHeader).
	Name   string
	Header string
	// Field is how errors name the field; Range is where it was written.
	Field string
	Range hcl.Range
	// Keys are the config.SecretKey of the Vault secrets the last
	// resolution read (set by ResolveSecretFields).
	Keys []string
	tmpl string
}

// SecretFields returns the fields of the configuration whose value comes
// from Vault (empty until ResolveSecretFields).
func (c *Config) SecretFields() []SecretField { return slices.Clone(c.secretFields) }

// secretFieldAllowed is the message for an unsupported action in these
// fields.
const secretFieldActions = `only {{ env "NAME" }} and {{ with secret "path" }}...{{ end }} are allowed here`

// templStr is str, allowing template syntax in the value (checked by
// secretTemplate later).
func (d *decoder) templStr(c *content, name, path string) opt[string] {
	prev := d.inProvider
	d.inProvider = true
	defer func() { d.inProvider = prev }()
	return d.str(c, name, path)
}

// templStrMap is strMap, allowing template syntax in the values.
func (d *decoder) templStrMap(c *content, name, path string) (opt[map[string]string], map[string]hcl.Range) {
	prev := d.inProvider
	d.inProvider = true
	defer func() { d.inProvider = prev }()
	return d.strMap(c, name, path)
}

// secretTemplate checks a templated value of a field outside
// terraform_provider blocks. Without template syntax it returns s. With
// {{ env }} only, it returns the rendered value. With {{ with secret }} it
// returns "" and pending true: the caller records a SecretField. ok is
// false when an error was reported.
func (d *decoder) secretTemplate(s string, rng hcl.Range, field, kind string) (val string, pending, ok bool) {
	if !strings.Contains(s, "{{") {
		return s, false, true
	}
	if _, err := parseTemplate(s); err != nil {
		d.errf(rng, field, "%v", err)
		return "", false, false
	}
	if hasKind(s, partKey) {
		if kind == FieldConsulToken {
			d.errf(rng, field, `{{ key }} cannot be used for the Consul token: ctsync needs the token to read Consul KV. Read it from Vault ({{ with secret "path" }}...{{ end }}) or the environment ({{ env "NAME" }})`)
		} else {
			d.errf(rng, field, "{{ key }} cannot be used here: "+secretFieldActions)
		}
		return "", false, false
	}
	if hasKind(s, partSecret) {
		return "", true, true
	}
	v, err := render(s, nil)
	if err != nil {
		d.errf(rng, field, "%v", err)
		return "", false, false
	}
	return v, false, true
}

// pendingSecret records a field to resolve from Vault. The Vault block is
// checked in finishSecretFields.
func (d *decoder) pendingSecret(f SecretField, tmpl string) {
	f.tmpl = tmpl
	d.secretFields = append(d.secretFields, f)
}

// finishSecretFields checks the templates of consul.token and the
// terraform-cloud token (merged across files), then every recorded field
// against the final configuration: a field whose block was dropped is
// forgotten; {{ with secret }} needs an enabled vault block.
func (d *decoder) finishSecretFields(r *rawConfig, cfg *Config) {
	if t := r.consul.token; t.Set {
		v, pending, _ := d.secretTemplate(t.V, t.Rng, "consul.token", FieldConsulToken)
		if pending {
			d.pendingSecret(SecretField{Kind: FieldConsulToken, Field: "consul.token", Range: t.Rng}, t.V)
		}
		cfg.Consul.Token = v
	}
	if t := r.tfc.token; t.Set && cfg.TFC != nil {
		const field = `driver "terraform-cloud".token`
		v, pending, _ := d.secretTemplate(t.V, t.Rng, field, FieldTFCToken)
		if pending {
			d.pendingSecret(SecretField{Kind: FieldTFCToken, Field: field, Range: t.Rng}, t.V)
		}
		cfg.TFC.Token = v
	}
	for _, f := range d.secretFields {
		if !secretFieldExists(cfg, f) {
			continue
		}
		if !cfg.Vault.Enabled {
			d.errf(f.Range, f.Field, "%v", errMissingVault)
			continue
		}
		cfg.secretFields = append(cfg.secretFields, f)
	}
}

// secretFieldExists reports whether the field is still in cfg.
func secretFieldExists(cfg *Config, f SecretField) bool {
	switch f.Kind {
	case FieldConsulToken:
		return true
	case FieldTFCToken:
		return cfg.TFC != nil
	case FieldAPIToken:
		return slices.ContainsFunc(cfg.APIAuth.Tokens, func(t APIToken) bool { return t.Name == f.Name && t.SecretFile == "" })
	case FieldHeader:
		return slices.ContainsFunc(cfg.Notifications, func(n Notification) bool {
			_, ok := n.Headers[f.Header]
			return n.Name == f.Name && ok
		})
	}
	return false
}

// ResolveSecretField renders the field's template with the Vault reader
// (within ProviderResolveTimeout) and checks the value as Load checks a
// value written in the file. keys are the secrets it read. The error is an
// *Error naming the field; it wraps ErrVaultUnavailable when Vault could
// not be reached. It never holds the value.
func ResolveSecretField(ctx context.Context, f SecretField, read SecretReader) (value string, keys []string, err error) {
	bctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	l := lookups{}
	if read != nil {
		l.secret = func(path string, params []string) (*Secret, error) {
			if k := SecretKey(path, params); !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
			s, err := read(bctx, path, params)
			switch {
			case err != nil && bctx.Err() != nil && ctx.Err() == nil:
				return nil, fmt.Errorf("timed out after %s reading Vault secret %q: %w", resolveTimeout, path, ErrVaultUnavailable)
			case err != nil:
				return nil, fmt.Errorf("reading Vault secret %q: %w", path, err)
			case s == nil:
				return nil, fmt.Errorf("Vault secret %q does not exist", path)
			}
			return s, nil
		}
	}
	v, rerr := renderWith(f.tmpl, l)
	if rerr == nil {
		v, rerr = checkSecretFieldValue(f.Kind, v)
	}
	if rerr != nil {
		e := &Error{Range: f.Range, Field: f.Field, Msg: rerr.Error()}
		if errors.Is(rerr, ErrVaultUnavailable) {
			return "", nil, fmt.Errorf("%w: %w", e, ErrVaultUnavailable)
		}
		return "", nil, e
	}
	slices.Sort(keys)
	return v, keys, nil
}

// checkSecretFieldValue applies the rules of a value written in the file.
// Its errors never quote the value.
func checkSecretFieldValue(kind, v string) (string, error) {
	switch kind {
	case FieldAPIToken:
		v = strings.TrimSpace(v)
		if err := checkTokenSecret(v); err != nil {
			return "", fmt.Errorf("the token read from Vault %v", err)
		}
	case FieldConsulToken, FieldTFCToken:
		v = strings.TrimSpace(v)
		if v == "" {
			return "", errors.New("the token read from Vault is empty")
		}
		if strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			return "", errors.New("the token read from Vault cannot contain spaces or control characters")
		}
	case FieldHeader:
		if strings.ContainsAny(v, "\r\n\x00") {
			return "", errors.New("the value read from Vault cannot contain line breaks")
		}
	}
	return v, nil
}

// ResolveSecretFields resolves every SecretField of cfg through the Vault
// reader and writes the values into cfg (Consul.Token, TFC.Token, the API
// tokens' Secret, the notifications' Headers), so that Secrets includes
// them. Call it once, before cfg is used. An error is an *Error or Errors
// naming each field; when Vault could not be reached (and nothing else is
// wrong) it wraps ErrVaultUnavailable and the caller may try again.
func ResolveSecretFields(ctx context.Context, cfg *Config, read SecretReader) error {
	var (
		errs      []*Error
		transient = true
	)
	for i := range cfg.secretFields {
		f := &cfg.secretFields[i]
		v, keys, err := ResolveSecretField(ctx, *f, read)
		if err != nil {
			var e *Error
			if errors.As(err, &e) {
				errs = append(errs, e)
			}
			transient = transient && errors.Is(err, ErrVaultUnavailable)
			continue
		}
		f.Keys = keys
		setSecretField(cfg, *f, v)
	}
	if len(errs) == 0 {
		// Two API tokens cannot share a secret, wherever it comes from.
		seen := map[string]string{}
		for _, t := range cfg.APIAuth.Tokens {
			if other, dup := seen[t.Secret]; dup && t.Secret != "" {
				f := secretFieldOf(cfg, FieldAPIToken, t.Name, "")
				errs = append(errs, &Error{Range: f.Range, Field: f.Field,
					Msg: fmt.Sprintf("token %q has the same secret as token %q: give each token its own secret", t.Name, other)})
				transient = false
				continue
			}
			seen[t.Secret] = t.Name
		}
	}
	if len(errs) == 0 {
		return nil
	}
	sortErrors(errs, cfg.Files)
	if transient {
		return fmt.Errorf("%w: %w", toError(errs), ErrVaultUnavailable)
	}
	return toError(errs)
}

// secretFieldOf returns the recorded field (or one naming the API token's
// block when it has none).
func secretFieldOf(cfg *Config, kind, name, header string) SecretField {
	for _, f := range cfg.secretFields {
		if f.Kind == kind && f.Name == name && f.Header == header {
			return f
		}
	}
	for _, t := range cfg.APIAuth.Tokens {
		if kind == FieldAPIToken && t.Name == name {
			return SecretField{Kind: kind, Name: name, Field: "api_auth.token", Range: t.Range}
		}
	}
	return SecretField{Kind: kind, Name: name, Header: header, Field: kind}
}

// setSecretField writes a resolved value into cfg.
func setSecretField(cfg *Config, f SecretField, v string) {
	switch f.Kind {
	case FieldConsulToken:
		cfg.Consul.Token = v
	case FieldTFCToken:
		if cfg.TFC != nil {
			cfg.TFC.Token = v
		}
	case FieldAPIToken:
		for i := range cfg.APIAuth.Tokens {
			if t := &cfg.APIAuth.Tokens[i]; t.Name == f.Name && t.SecretFile == "" {
				t.Secret = v
			}
		}
	case FieldHeader:
		for i := range cfg.Notifications {
			if n := &cfg.Notifications[i]; n.Name == f.Name {
				if _, ok := n.Headers[f.Header]; ok {
					n.Headers[f.Header] = v
				}
			}
		}
	}
}

// apiTokenField names an API token's secret in errors.
func apiTokenField(name string) string {
	return "api_auth.token " + strconv.Quote(name) + ".secret"
}
