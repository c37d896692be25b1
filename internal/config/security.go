package config

import (
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// This file holds the configuration of the API's access control (ctsync
// extensions, none of them in CTS):
//
//	api_auth  { token { name, secret | secret_file, access } ... }
//	api_tasks { allowed_modules = [...], allowed_variables = [...],
//	            allowed_kv_prefixes = [...], create = true }
//	api_http  { cors_origins = [...], allowed_hosts = [...] }
//
// Without api_auth the API is open, as in CTS; cross-site writes from a
// browser are refused either way (package api).

// Access levels of an API token.
const (
	AccessRead  = "read"
	AccessWrite = "write"
)

// MinTokenLength is the shortest API token secret accepted: a token is a
// password that scripts send on every request, so it must not be
// guessable.
const MinTokenLength = 16

// APIAuth is the api_auth block. With no token the API needs none.
type APIAuth struct {
	Tokens []APIToken
}

// Enabled reports whether the API requires a token.
func (a APIAuth) Enabled() bool { return len(a.Tokens) > 0 }

// APIToken is one token block of api_auth.
type APIToken struct {
	// Name identifies the token in audit logs; never the secret.
	Name string
	// Secret is the token's value, from secret (with {{ env }} resolved)
	// or read from SecretFile. A secret: never logged.
	Secret string
	// SecretFile, when set, is read again on SIGHUP (ReadTokenFile).
	SecretFile string
	// Access is AccessRead or AccessWrite.
	Access string
	// Range is where the block was declared.
	Range hcl.Range
}

// APITasks is the api_tasks block: what tasks created through the API may
// be.
type APITasks struct {
	// AllowedModules are glob patterns (path.Match syntax: "*" does not
	// cross "/") a module source must match; nil allows any module, as
	// CTS does.
	AllowedModules []string
	// CreateDisabled refuses the creation of tasks through the API
	// (create = false), run=inspect included.
	CreateDisabled bool
	// AllowedVariables are glob patterns (path.Match syntax) on the names
	// of the variables a task created through the API may set. They apply
	// once AllowedModules is set: then nil allows no variable.
	AllowedVariables []string
	// AllowedKVPrefixes are the Consul KV key prefixes a task created
	// through the API may read (consul-kv conditions and module inputs).
	// They apply once AllowedModules is set: then nil allows no key.
	AllowedKVPrefixes []string
}

// Restricted reports whether tasks created through the API are limited
// to an allowlist (allowed_modules is set): then their variables and the
// KV keys they read are limited too.
func (t APITasks) Restricted() bool { return t.AllowedModules != nil }

// VariableAllowed reports whether a task created through the API may set
// the variable.
func (t APITasks) VariableAllowed(name string) bool {
	if !t.Restricted() {
		return true
	}
	for _, p := range t.AllowedVariables {
		if ok, err := path.Match(p, name); err == nil && ok {
			return true
		}
	}
	return false
}

// KVAllowed reports whether a task created through the API may read the
// Consul KV key (recurse false) or every key under the prefix (recurse
// true): the key, or the prefix, must start with one of
// AllowedKVPrefixes. A key with an empty, "." or ".." segment is refused
// when there is an allowlist: an HTTP client may clean "net/../secrets"
// into "secrets".
func (t APITasks) KVAllowed(key string) bool {
	if !t.Restricted() {
		return true
	}
	if strings.HasPrefix(key, "/") || slices.ContainsFunc(strings.Split(strings.TrimSuffix(key, "/"), "/"), func(seg string) bool {
		return seg == "" || seg == "." || seg == ".."
	}) {
		return false
	}
	for _, p := range t.AllowedKVPrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// ModuleAllowed reports whether a task created through the API may use
// the module source. A source with a ".." path segment is refused when
// there is an allowlist: "./modules/../x" must not pass "./modules/*".
func (t APITasks) ModuleAllowed(source string) bool {
	if t.AllowedModules == nil {
		return true
	}
	if slices.Contains(strings.Split(strings.ReplaceAll(source, `\`, "/"), "/"), "..") {
		return false
	}
	for _, p := range t.AllowedModules {
		if ok, err := path.Match(p, source); err == nil && ok {
			return true
		}
	}
	return false
}

// APIHTTP is the api_http block: browser-facing rules of the API.
type APIHTTP struct {
	// CORSOrigins are the origins ("https://dash.example.com") that may
	// call the API from a browser; none by default.
	CORSOrigins []string
	// AllowedHosts are host names, besides localhost, IP addresses and the
	// listen address, that requests may name in their Host header when
	// auth is off (a guard against DNS rebinding).
	AllowedHosts []string
}

type rawSecurity struct {
	tokens            []APIToken
	allowedModules    opt[[]string]
	modulesElems      []hcl.Range
	allowedVariables  opt[[]string]
	allowedKVPrefixes opt[[]string]
	create            opt[bool]
	corsOrigins       opt[[]string]
	allowedHosts      opt[[]string]
}

var (
	apiAuthKeys  = []key{{name: "token", kind: kBlock}}
	apiTokenKeys = attrs("name", "secret", "secret_file", "access")
	apiTasksKeys = attrs("allowed_modules", "create", "allowed_variables", "allowed_kv_prefixes")
	apiHTTPKeys  = attrs("cors_origins", "allowed_hosts")
)

// security decodes the file's api_auth, api_tasks and api_http blocks.
// Tokens of every api_auth block add up; the others merge as scalars.
func (d *decoder) security(c *content, r *rawSecurity) {
	for _, b := range c.blocks["api_auth"] {
		ac := d.content(b.Body, "api_auth", apiAuthKeys, nil)
		for _, tb := range ac.blocks["token"] {
			if t, ok := d.apiToken(tb); ok {
				r.tokens = append(r.tokens, t)
			}
		}
	}
	if b := d.onlyOne(c, "api_tasks", ""); b != nil {
		const p = "api_tasks"
		tc := d.content(b.Body, p, apiTasksKeys, nil)
		if l, elems := d.globList(tc, p, "allowed_modules"); l.Set {
			r.allowedModules, r.modulesElems = l, elems
		}
		if l, _ := d.globList(tc, p, "allowed_variables"); l.Set {
			r.allowedVariables = l
		}
		if l, elems := d.strList(tc, "allowed_kv_prefixes", p); l.Set {
			for i, pfx := range l.V {
				rng := l.Rng
				if i < len(elems) {
					rng = elems[i]
				}
				if strings.TrimSpace(pfx) == "" || strings.HasPrefix(pfx, "/") {
					d.errf(rng, fmt.Sprintf("%s.allowed_kv_prefixes[%d]", p, i), "%q is not a KV prefix: write it as Consul names keys, without a leading slash (e.g. \"net/\")", pfx)
				}
			}
			r.allowedKVPrefixes = l
		}
		r.create.merge(d.boolean(tc, "create", p))
	}
	if b := d.onlyOne(c, "api_http", ""); b != nil {
		const p = "api_http"
		hc := d.content(b.Body, p, apiHTTPKeys, nil)
		if l, elems := d.strList(hc, "cors_origins", p); l.Set {
			for i, o := range l.V {
				rng := l.Rng
				if i < len(elems) {
					rng = elems[i]
				}
				if err := checkOrigin(o); err != nil {
					d.errf(rng, fmt.Sprintf("%s.cors_origins[%d]", p, i), "%q %v", o, err)
				}
			}
			r.corsOrigins = l
		}
		if l, elems := d.strList(hc, "allowed_hosts", p); l.Set {
			for i, h := range l.V {
				rng := l.Rng
				if i < len(elems) {
					rng = elems[i]
				}
				if h == "" || strings.ContainsAny(h, "/ :@") {
					d.errf(rng, fmt.Sprintf("%s.allowed_hosts[%d]", p, i), "%q is not a host name (no scheme, port or path)", h)
				}
			}
			r.allowedHosts = l
		}
	}
}

// globList reads a list of glob patterns (path.Match syntax) of the
// api_tasks block.
func (d *decoder) globList(c *content, p, name string) (opt[[]string], []hcl.Range) {
	l, elems := d.strList(c, name, p)
	for i, pat := range l.V {
		rng := l.Rng
		if i < len(elems) {
			rng = elems[i]
		}
		if _, err := path.Match(pat, ""); err != nil || strings.TrimSpace(pat) == "" {
			d.errf(rng, fmt.Sprintf("%s.%s[%d]", p, name, i), "%q is not a valid glob pattern", pat)
		}
	}
	return l, elems
}

// checkOrigin accepts scheme://host[:port] and nothing else, which is what
// a browser sends in Origin.
func checkOrigin(o string) error {
	scheme, rest, ok := strings.Cut(o, "://")
	if !ok || (scheme != "http" && scheme != "https") || rest == "" || strings.ContainsAny(rest, "/?#@ ") {
		return fmt.Errorf("is not an origin: write scheme://host[:port], e.g. \"https://dashboard.example.com\"")
	}
	return nil
}

func (d *decoder) apiToken(b *hcl.Block) (APIToken, bool) {
	const p = "api_auth.token"
	before := len(d.errs)
	t := APIToken{Range: b.DefRange}
	c := d.content(b.Body, p, apiTokenKeys, nil)
	if s := d.str(c, "name", p); s.Set && strings.TrimSpace(s.V) != "" {
		t.Name = strings.TrimSpace(s.V)
	} else if c.attr("name") == nil || s.Set {
		d.errf(c.missing, p+".name", "is required: it names the token in the audit log")
	}
	if s := d.str(c, "access", p); s.Set {
		switch a := strings.ToLower(strings.TrimSpace(s.V)); a {
		case AccessRead, AccessWrite:
			t.Access = a
		default:
			d.errf(s.Rng, p+".access", "%q is not an access level: use \"read\" or \"write\"", s.V)
		}
	} else if c.attr("access") == nil {
		d.errf(c.missing, p+".access", `is required: "read" or "write"`)
	}
	secretAttr := c.attr("secret")
	if f := d.str(c, "secret_file", p); f.Set {
		t.SecretFile = f.V
		if secretAttr != nil {
			d.errf(f.Rng, p+".secret_file", "cannot be set together with secret: use one of them")
			return t, false
		}
		secret, err := ReadTokenFile(f.V)
		if err != nil {
			d.errf(f.Rng, p+".secret_file", "%v", err)
		}
		t.Secret = secret
	} else if secretAttr != nil {
		// {{ env "NAME" }} and {{ with secret }} (secretfields.go) are
		// allowed here: the value is a secret.
		v, _, field, ok := d.typed(c, "secret", p, cty.String, "must be a string")
		if ok {
			s, pending, tok := d.secretTemplate(v.AsString(), secretAttr.Expr.Range(), field, FieldAPIToken)
			switch {
			case !tok:
			case pending:
				// Empty until resolved from Vault: no request can present it.
				d.pendingSecret(SecretField{Kind: FieldAPIToken, Name: t.Name,
					Field: apiTokenField(t.Name), Range: secretAttr.Expr.Range()}, v.AsString())
			default:
				t.Secret = strings.TrimSpace(s)
				if err := checkTokenSecret(t.Secret); err != nil {
					d.errf(secretAttr.Expr.Range(), field, "%v", err)
				}
			}
		}
	} else if c.attr("secret_file") == nil {
		d.errf(c.missing, p, "needs secret or secret_file")
	}
	return t, len(d.errs) == before
}

// ReadTokenFile reads an API token secret from a file: its content with
// surrounding white space removed. The message of an error never holds
// the file's content.
func ReadTokenFile(name string) (string, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return "", fmt.Errorf("reading the token file: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if err := checkTokenSecret(s); err != nil {
		return "", fmt.Errorf("the token in %s %v", name, err)
	}
	return s, nil
}

func checkTokenSecret(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("is empty")
	case len(s) < MinTokenLength:
		return fmt.Errorf("is too short: a token needs at least %d characters", MinTokenLength)
	case strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return fmt.Errorf("cannot contain spaces or control characters (it is sent in an HTTP header)")
	}
	return nil
}

// finishSecurity applies the defaults of the security blocks and checks
// the tokens against each other.
func (d *decoder) finishSecurity(r *rawSecurity, cfg *Config) {
	names := map[string]hcl.Range{}
	secrets := map[string]string{}
	for _, t := range r.tokens {
		if prev, dup := names[t.Name]; dup {
			d.errf(t.Range, "api_auth.token", "duplicate token name %q (first declared at %s)", t.Name, posString(prev))
			continue
		}
		names[t.Name] = t.Range
		if other, dup := secrets[t.Secret]; dup && t.Secret != "" { // "": from Vault, checked when resolved
			d.errf(t.Range, "api_auth.token", "token %q has the same secret as token %q: give each token its own secret", t.Name, other)
			continue
		}
		secrets[t.Secret] = t.Name
		cfg.APIAuth.Tokens = append(cfg.APIAuth.Tokens, t)
	}
	if r.allowedModules.Set {
		cfg.APITasks.AllowedModules = r.allowedModules.V
	}
	cfg.APITasks.CreateDisabled = r.create.Set && !r.create.V
	cfg.APITasks.AllowedVariables = r.allowedVariables.V
	cfg.APITasks.AllowedKVPrefixes = r.allowedKVPrefixes.V
	if (r.allowedVariables.Set || r.allowedKVPrefixes.Set) && !r.allowedModules.Set {
		rng := r.allowedVariables.Rng
		if !r.allowedVariables.Set {
			rng = r.allowedKVPrefixes.Rng
		}
		d.warnf(rng, "api_tasks", "allowed_variables and allowed_kv_prefixes apply only with allowed_modules: without it tasks created through the API are not limited")
	}
	cfg.APIHTTP = APIHTTP{CORSOrigins: r.corsOrigins.V, AllowedHosts: r.allowedHosts.V}
}
