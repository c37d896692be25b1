package config

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/ctsync/ctsync/internal/tmpl"
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
// start-up by resolve.SecretFields, before the Consul client is built: until
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
	// resolution read (set by package resolve).
	Keys []string
	// Template is the value as written; package resolve renders it.
	Template string
}

// SecretFields returns the fields of the configuration whose value comes
// from Vault (their Keys empty until resolve.SecretFields).
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
	if err := tmpl.Check(s); err != nil {
		d.errf(rng, field, "%v", err)
		return "", false, false
	}
	if tmpl.UsesKey(s) {
		if kind == FieldConsulToken {
			d.errf(rng, field, `{{ key }} cannot be used for the Consul token: ctsync needs the token to read Consul KV. Read it from Vault ({{ with secret "path" }}...{{ end }}) or the environment ({{ env "NAME" }})`)
		} else {
			d.errf(rng, field, "{{ key }} cannot be used here: "+secretFieldActions)
		}
		return "", false, false
	}
	if tmpl.UsesSecret(s) {
		return "", true, true
	}
	v, err := tmpl.Render(s, tmpl.Lookups{})
	if err != nil {
		d.errf(rng, field, "%v", err)
		return "", false, false
	}
	return v, false, true
}

// pendingSecret records a field to resolve from Vault. The Vault block is
// checked in finishSecretFields.
func (d *decoder) pendingSecret(f SecretField, template string) {
	f.Template = template
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
			d.errf(f.Range, f.Field, "%v", tmpl.ErrMissingVault)
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

// CheckSecretFieldValue applies to a value read for a field of kind (one
// of the Field* constants) the rules of a value written in the file, and
// returns it as the field holds it. Its errors never quote the value.
func CheckSecretFieldValue(kind, v string) (string, error) {
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

// CheckTokenSecrets refuses two API tokens that share a secret, wherever
// it comes from (the file, a secret file or Vault): one error per token
// that repeats an earlier one's secret.
func (c *Config) CheckTokenSecrets() []*Error {
	var errs []*Error
	seen := map[string]string{}
	for _, t := range c.APIAuth.Tokens {
		if other, dup := seen[t.Secret]; dup && t.Secret != "" {
			f := secretFieldOf(c, FieldAPIToken, t.Name, "")
			errs = append(errs, &Error{Range: f.Range, Field: f.Field,
				Msg: fmt.Sprintf("token %q has the same secret as token %q: give each token its own secret", t.Name, other)})
			continue
		}
		seen[t.Secret] = t.Name
	}
	return errs
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

// SetSecretField writes the resolved value of f into c (Consul.Token,
// TFC.Token, the API token's Secret, the notification's header), so that
// Secrets includes it, and records f.Keys (the secrets it was read from)
// in the field SecretFields returns.
func (c *Config) SetSecretField(f SecretField, v string) {
	for i := range c.secretFields {
		if r := &c.secretFields[i]; r.Kind == f.Kind && r.Name == f.Name && r.Header == f.Header {
			r.Keys = f.Keys
		}
	}
	setSecretField(c, f, v)
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
