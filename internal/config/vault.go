package config

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/ctsync/ctsync/internal/tmpl"
)

// Vault is the vault block: the Vault that {{ with secret }} templates read
// (CTS schema; environment fallbacks as the Vault CLI's).
type Vault struct {
	// Enabled is true when an address is known (vault.address or
	// VAULT_ADDR), unless enabled = false.
	Enabled   bool
	Address   string // default VAULT_ADDR
	Namespace string // default VAULT_NAMESPACE
	// Token is the Vault token (a secret): token, else VAULT_TOKEN, else
	// the contents of ~/.vault-token. Empty with AgentTokenFile.
	Token string
	// AgentTokenFile is a file a Vault agent keeps the token in
	// (vault_agent_token_file); it is read again when it changes.
	AgentTokenFile string
	// RenewToken renews the token in the background (default: true when a
	// token is set, false with AgentTokenFile; VAULT_RENEW_TOKEN).
	RenewToken bool
	// UnwrapToken treats Token as a response-wrapping token and unwraps it
	// at start (default false; VAULT_UNWRAP_TOKEN).
	UnwrapToken bool
	TLS         VaultTLS
	Transport   Transport
	// DefaultLeaseDuration is how often a secret without a lease (KV) is
	// read again to find a new version (ctsync extension; default 5m, as
	// consul-template).
	DefaultLeaseDuration time.Duration
	// Range is where the (last) vault block was declared.
	Range hcl.Range
}

// VaultTLS is TLS to Vault. Fields left empty fall back to the Vault
// environment variables (VAULT_CACERT, VAULT_CAPATH, VAULT_CLIENT_CERT,
// VAULT_CLIENT_KEY, VAULT_TLS_SERVER_NAME, VAULT_SKIP_VERIFY).
type VaultTLS struct {
	Enabled    bool // default true (used for https:// addresses)
	Verify     bool // default true
	CACert     string
	CAPath     string
	Cert       string
	Key        string
	ServerName string
}

// DefaultVaultLeaseDuration is the default of vault.default_lease_duration.
const DefaultVaultLeaseDuration = 5 * time.Minute

type rawVault struct {
	set                                  bool
	rng                                  hcl.Range
	enabled, renew, unwrap               opt[bool]
	address, namespace, token, agentFile opt[string]
	rawClientTLS                                   // tls { ... } (clienttls.go)
	transport                            rawConsul // its transport fields only
	leaseDuration                        opt[time.Duration]
}

var vaultKeys = []key{
	{name: "address"}, {name: "enabled"}, {name: "namespace"}, {name: "token"},
	{name: "vault_agent_token_file"}, {name: "renew_token"}, {name: "unwrap_token"},
	{name: "default_lease_duration"},
	{name: "tls", kind: kBlock}, {name: "transport", kind: kBlock},
}

// vaultBlock decodes one vault block into r (blocks of several files merge).
func (d *decoder) vaultBlock(b *hcl.Block, r *rawVault) {
	const path = "vault"
	r.set, r.rng = true, b.DefRange
	c := d.content(b.Body, path, vaultKeys, nil)
	r.address.merge(d.str(c, "address", path))
	r.enabled.merge(d.boolean(c, "enabled", path))
	r.namespace.merge(d.str(c, "namespace", path))
	r.token.merge(d.str(c, "token", path))
	r.agentFile.merge(d.str(c, "vault_agent_token_file", path))
	r.renew.merge(d.boolean(c, "renew_token", path))
	r.unwrap.merge(d.boolean(c, "unwrap_token", path))
	if v := d.duration(c, "default_lease_duration", path); v.Set {
		if v.V < time.Second {
			d.errf(v.Rng, "vault.default_lease_duration", "must be at least 1s")
		} else {
			r.leaseDuration.merge(v)
		}
	}
	if tb := d.onlyOne(c, "tls", path); tb != nil {
		d.clientTLS(tb, "vault.tls", &r.rawClientTLS)
	}
	if tb := d.onlyOne(c, "transport", path); tb != nil {
		p := "vault.transport"
		tc := d.content(tb.Body, p, attrs("dial_keep_alive", "dial_timeout", "disable_keep_alives",
			"idle_conn_timeout", "max_idle_conns", "max_idle_conns_per_host", "tls_handshake_timeout"), nil)
		t := &r.transport
		t.dialKeepAlive.merge(d.duration(tc, "dial_keep_alive", p))
		t.dialTimeout.merge(d.duration(tc, "dial_timeout", p))
		t.disableKeepAlives.merge(d.boolean(tc, "disable_keep_alives", p))
		t.idleConnTimeout.merge(d.duration(tc, "idle_conn_timeout", p))
		t.maxIdleConns.merge(d.integer(tc, "max_idle_conns", p))
		t.maxIdleConnsPerHost.merge(d.integer(tc, "max_idle_conns_per_host", p))
		t.tlsHandshakeTimeout.merge(d.duration(tc, "tls_handshake_timeout", p))
	}
}

// envBool reads a boolean environment variable; ok is false when unset or
// not a boolean.
func envBool(name string) (v, ok bool) {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(name))) {
	case "1", "t", "true", "yes":
		return true, true
	case "0", "f", "false", "no":
		return false, true
	}
	return false, false
}

// vaultConfig applies the defaults and environment fallbacks.
func vaultConfig(r *rawVault) Vault {
	v := Vault{
		Address:        nonEmpty(r.address.V, os.Getenv("VAULT_ADDR")),
		Namespace:      nonEmpty(r.namespace.V, os.Getenv("VAULT_NAMESPACE")),
		AgentTokenFile: r.agentFile.V,
		Range:          r.rng,
	}
	v.Enabled = r.enabled.or(v.Address != "")
	if v.AgentTokenFile == "" {
		v.Token = nonEmpty(r.token.V, os.Getenv("VAULT_TOKEN"))
		if v.Token == "" && v.Enabled {
			if home, err := os.UserHomeDir(); err == nil {
				if b, err := os.ReadFile(filepath.Join(home, ".vault-token")); err == nil {
					v.Token = strings.TrimSpace(string(b))
				}
			}
		}
	}
	renewDef := v.Token != "" && v.AgentTokenFile == ""
	if e, ok := envBool("VAULT_RENEW_TOKEN"); ok {
		renewDef = e
	}
	v.RenewToken = r.renew.or(renewDef)
	unwrapDef, _ := envBool("VAULT_UNWRAP_TOKEN")
	v.UnwrapToken = r.unwrap.or(unwrapDef)
	verifyDef := true
	if skip, ok := envBool("VAULT_SKIP_VERIFY"); ok {
		verifyDef = !skip
	}
	v.TLS = VaultTLS{
		Enabled:    r.tlsEnabled.or(true),
		Verify:     r.tlsVerify.or(verifyDef),
		CACert:     nonEmpty(r.caCert.V, os.Getenv("VAULT_CACERT")),
		CAPath:     nonEmpty(r.caPath.V, os.Getenv("VAULT_CAPATH")),
		Cert:       nonEmpty(r.cert.V, os.Getenv("VAULT_CLIENT_CERT")),
		Key:        nonEmpty(r.key.V, os.Getenv("VAULT_CLIENT_KEY")),
		ServerName: nonEmpty(r.serverName.V, os.Getenv("VAULT_TLS_SERVER_NAME")),
	}
	t := &r.transport
	v.Transport = Transport{
		DialKeepAlive:       t.dialKeepAlive.or(DefaultTransport.DialKeepAlive),
		DialTimeout:         t.dialTimeout.or(DefaultTransport.DialTimeout),
		DisableKeepAlives:   t.disableKeepAlives.or(DefaultTransport.DisableKeepAlives),
		IdleConnTimeout:     t.idleConnTimeout.or(DefaultTransport.IdleConnTimeout),
		MaxIdleConns:        t.maxIdleConns.or(DefaultTransport.MaxIdleConns),
		MaxIdleConnsPerHost: t.maxIdleConnsPerHost.or(DefaultTransport.MaxIdleConnsPerHost),
		TLSHandshakeTimeout: t.tlsHandshakeTimeout.or(DefaultTransport.TLSHandshakeTimeout),
	}
	v.DefaultLeaseDuration = r.leaseDuration.or(DefaultVaultLeaseDuration)
	return v
}

// rawExt holds the blocks decoded outside decode.go: vault and syslog.
type rawExt struct {
	vault  rawVault
	syslog rawSyslog
}

// decodeExt decodes the file's vault and syslog blocks.
func (d *decoder) decodeExt(c *content, r *rawExt) {
	if b := d.onlyOne(c, "vault", ""); b != nil {
		d.vaultBlock(b, &r.vault)
	}
	if b := d.onlyOne(c, "syslog", ""); b != nil {
		d.syslogBlock(b, &r.syslog)
	}
}

// finishExt sets cfg.Vault and cfg.Syslog and refuses {{ with secret }}
// without a Vault, with CTS's error.
func (d *decoder) finishExt(r *rawExt, cfg *Config) {
	cfg.Vault = vaultConfig(&r.vault)
	cfg.Syslog = d.syslogConfig(&r.syslog)
	if cfg.Vault.Enabled {
		return
	}
	for i := range cfg.Providers {
		if p := &cfg.Providers[i]; p.UsesVault() {
			field, rng := secretArgument(p)
			d.errf(rng, field, "%v", tmpl.ErrMissingVault)
		}
	}
}

// secretArgument names the first argument of a provider block (in name
// order, nested blocks after) that holds a secret template, and where it
// was written; the block itself when none is found that way (task_env).
func secretArgument(p *Provider) (string, hcl.Range) {
	var find func(b *ProviderBody, path string) (string, hcl.Range, bool)
	find = func(b *ProviderBody, path string) (string, hcl.Range, bool) {
		for _, name := range sortedNames(b.Attrs) {
			found := false
			walkStrings(b.Attrs[name], func(s string) { found = found || tmpl.UsesSecret(s) })
			if r, ok := b.rng[name]; found && ok {
				return path + "." + name, r, true
			}
		}
		for i := range b.Blocks {
			if f, r, ok := find(&b.Blocks[i].Body, path+"."+b.Blocks[i].Type); ok {
				return f, r, true
			}
		}
		return "", hcl.Range{}, false
	}
	if f, r, ok := find(&p.Args, blockName(*p)); ok {
		return f, r
	}
	return blockName(*p), p.Range
}
