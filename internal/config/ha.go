package config

import (
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// High-availability defaults (CTS values).
const (
	// DefaultHAParentPath is the KV folder that holds every cluster's
	// folder; the cluster name is appended to it.
	DefaultHAParentPath = "consul-terraform-sync/"
	// DefaultSessionTTL is the TTL of each instance's Consul session.
	DefaultSessionTTL = 15 * time.Second
	// MinSessionTTL is Consul's default session_ttl_min: Consul refuses a
	// session with a shorter TTL.
	MinSessionTTL = 10 * time.Second
	// MaxSessionTTL is the longest TTL Consul accepts (24h).
	MaxSessionTTL = 24 * time.Hour
	// MaxWeight bounds instance.weight.
	MaxWeight = 1000
)

// HA is the high_availability block. Config.HA is nil when the block is
// absent (a single instance, nothing shared).
type HA struct {
	// ClusterName names the cluster (cluster.name, required). Instances
	// with the same name and the same Consul elect one leader.
	ClusterName string
	// ParentPath is cluster.storage "consul".parent_path as written (or
	// the default); Prefix appends the cluster name.
	ParentPath string
	// Namespace is the Consul namespace of the KV entries and sessions
	// (Consul Enterprise); empty means the token's namespace.
	Namespace string
	// SessionTTL is the TTL of the instance's Consul session; the election
	// timing is derived from it (see package ha).
	SessionTTL time.Duration
	// InstanceAddress is instance.address: how other instances and API
	// clients reach this one ("" when not advertised).
	InstanceAddress string
	// RerunAllOnFailover runs every task once when an instance becomes
	// leader, as CTS Enterprise does (ctsync extension, default false:
	// only tasks whose inputs differ from the last applied ones, or that
	// were being applied when the previous leader stopped, run).
	RerunAllOnFailover bool
	// SpreadTasks is cluster.spread_tasks (ctsync extension, default
	// false): instead of one leader running every task, each task is owned
	// by one member and the tasks are spread over all members (see
	// package ha, Spreader).
	SpreadTasks bool
	// Weight is instance.weight (spread mode): this instance's share of
	// the tasks relative to the other members' (default 1).
	Weight int
	// AcceptUnlockedBackend is accept_unlocked_backend (ctsync extension,
	// default false): the operator acknowledges a Terraform backend whose
	// state locking is disabled, so that only ctsync's own fencing (the
	// step-down and kill bounds of package ha) keeps two instances' runs
	// of a task apart. Without it such a backend is refused.
	AcceptUnlockedBackend bool
}

// Prefix returns the KV folder of the cluster, without a trailing slash:
// parent_path + cluster name (consul-terraform-sync/<cluster> by default).
func (h *HA) Prefix() string {
	p := strings.Trim(h.ParentPath, "/")
	if p == "" {
		return h.ClusterName
	}
	return p + "/" + h.ClusterName
}

type rawHA struct {
	set        bool
	rng        hcl.Range // where the (last) block was declared
	name       opt[string]
	parentPath opt[string]
	namespace  opt[string]
	sessionTTL opt[time.Duration]
	address    opt[string]
	rerunAll   opt[bool]
	acceptUnl  opt[bool]
	spread     opt[bool]
	weight     opt[int]
}

type rawTLS struct {
	set                       bool
	rng                       hcl.Range
	enabled, verifyIncoming   opt[bool]
	cert, key, caCert, caPath opt[string]
}

var (
	haKeys = []key{
		{name: "cluster", kind: kBlock}, {name: "instance", kind: kBlock},
		{name: "rerun_all_on_failover"}, {name: "accept_unlocked_backend"},
	}
	haClusterKeys = []key{{name: "name"}, {name: "spread_tasks"}, {name: "storage", kind: kBlock, labels: 1, label: "type"}}
	haStorageKeys = attrs("parent_path", "namespace", "session_ttl")
	apiTLSKeys    = attrs("enabled", "cert", "key", "verify_incoming", "ca_cert", "ca_path")
)

// haBlock decodes high_availability { cluster { name, storage "consul" {
// parent_path, namespace, session_ttl } }, instance { address },
// rerun_all_on_failover }.
func (d *decoder) haBlock(b *hcl.Block, r *rawHA) {
	const path = "high_availability"
	r.set, r.rng = true, b.DefRange
	c := d.content(b.Body, path, haKeys, nil)
	r.rerunAll.merge(d.boolean(c, "rerun_all_on_failover", path))
	r.acceptUnl.merge(d.boolean(c, "accept_unlocked_backend", path))
	if cb := d.onlyOne(c, "cluster", path); cb != nil {
		const cp = path + ".cluster"
		cc := d.content(cb.Body, cp, haClusterKeys, nil)
		r.spread.merge(d.boolean(cc, "spread_tasks", cp))
		if n := d.str(cc, "name", cp); n.Set {
			n.V = strings.TrimSpace(n.V)
			switch {
			case n.V == "":
				d.errf(n.Rng, cp+".name", "cannot be empty")
			case strings.ContainsAny(n.V, "/ \t\n"):
				d.errf(n.Rng, cp+".name", "%q is not a valid cluster name: it is part of a Consul KV path and a service tag, so it cannot hold '/' or spaces", n.V)
			default:
				r.name.merge(n)
			}
		}
		if sb := d.onlyOne(cc, "storage", cp); sb != nil {
			sp := blockPath(cp, sb)
			if sb.Labels[0] != "consul" {
				d.errf(labelRange(sb, 0), sp, `unsupported storage %q: the only storage is "consul"`, sb.Labels[0])
			} else {
				sc := d.content(sb.Body, sp, haStorageKeys, nil)
				r.parentPath.merge(d.str(sc, "parent_path", sp))
				r.namespace.merge(d.str(sc, "namespace", sp))
				if ttl := d.duration(sc, "session_ttl", sp); ttl.Set {
					switch {
					case ttl.V < MinSessionTTL:
						d.errf(ttl.Rng, sp+".session_ttl", "(%s) must be at least %s, Consul's minimum session TTL", ttl.V, MinSessionTTL)
					case ttl.V > MaxSessionTTL:
						d.errf(ttl.Rng, sp+".session_ttl", "(%s) must be at most %s, Consul's maximum session TTL", ttl.V, MaxSessionTTL)
					default:
						r.sessionTTL.merge(ttl)
					}
				}
			}
		}
	}
	if ib := d.onlyOne(c, "instance", path); ib != nil {
		const ip = path + ".instance"
		ic := d.content(ib.Body, ip, attrs("address", "weight"), nil)
		r.address.merge(d.str(ic, "address", ip))
		if w := d.integer(ic, "weight", ip); w.Set {
			if w.V < 1 || w.V > MaxWeight {
				d.errf(w.Rng, ip+".weight", "(%d) must be between 1 and %d: it is this instance's share of the tasks relative to the other members' in spread mode", w.V, MaxWeight)
			} else {
				r.weight.merge(w)
			}
		}
	}
}

// apiTLSBlock decodes the top-level tls block (TLS for ctsync's API).
func (d *decoder) apiTLSBlock(b *hcl.Block, r *rawTLS) {
	const path = "tls"
	r.set, r.rng = true, b.DefRange
	c := d.content(b.Body, path, apiTLSKeys, nil)
	r.enabled.merge(d.boolean(c, "enabled", path))
	r.verifyIncoming.merge(d.boolean(c, "verify_incoming", path))
	r.cert.merge(d.str(c, "cert", path))
	r.key.merge(d.str(c, "key", path))
	r.caCert.merge(d.str(c, "ca_cert", path))
	r.caPath.merge(d.str(c, "ca_path", path))
}

// finishHA applies the defaults of the high_availability and tls blocks
// and checks what needs the whole configuration (the Terraform backend).
func (d *decoder) finishHA(r *rawConfig, cfg *Config) {
	cfg.TLS = d.finishAPITLS(&r.tls)
	d.finishSecurity(&r.security, cfg) // security.go
	h := &r.ha
	if !h.set {
		return
	}
	if !h.name.Set {
		d.errf(h.rng, "high_availability.cluster.name", "is required: instances with the same cluster name elect one leader")
	}
	cfg.HA = &HA{
		ClusterName:           h.name.V,
		ParentPath:            h.parentPath.or(DefaultHAParentPath),
		Namespace:             h.namespace.V,
		SessionTTL:            h.sessionTTL.or(DefaultSessionTTL),
		InstanceAddress:       strings.TrimSpace(h.address.V),
		RerunAllOnFailover:    h.rerunAll.V,
		AcceptUnlockedBackend: h.acceptUnl.V,
		SpreadTasks:           h.spread.V,
		Weight:                h.weight.or(1),
	}
	if h.weight.Set && !h.spread.V {
		d.warnf(h.weight.Rng, "high_availability.instance.weight", "is ignored: it only applies with high_availability.cluster.spread_tasks = true")
	}
	b := r.driver.backend
	if b == nil {
		return // the default consul backend locks
	}
	field := `driver "terraform".backend "` + b.Type + `"`
	if b.Type == "local" {
		d.errf(r.driver.backendRng, field,
			"the local backend cannot be used with high_availability: every instance must see the same Terraform state; use the consul backend (the default) or another remote backend")
		return
	}
	if attr, why := unlockedBackend(b); attr != "" && !cfg.HA.AcceptUnlockedBackend {
		d.errf(r.driver.backendRng, field+"."+attr,
			"%s: the backend does not lock the Terraform state, so under high_availability only ctsync's own fencing would keep two instances from running a task at once; "+
				"enable locking, or set high_availability.accept_unlocked_backend = true to accept that", why)
	}
}

// unlockedBackend reports whether a backend's state locking is disabled:
// the attribute that disables it (or that is missing) and why, or "".
// gcs, azurerm, pg, kubernetes, cos and manta always lock.
func unlockedBackend(b *Backend) (attr, why string) {
	isFalse := func(v cty.Value) bool {
		if v.IsNull() || !v.IsKnown() {
			return false
		}
		switch v.Type() {
		case cty.Bool:
			return v.False()
		case cty.String:
			return strings.EqualFold(strings.TrimSpace(v.AsString()), "false")
		}
		return false
	}
	set := func(name string) bool {
		v, ok := b.Attrs[name]
		if !ok || v.IsNull() {
			return false
		}
		return !isFalse(v) && !(v.Type() == cty.String && v.IsKnown() && strings.TrimSpace(v.AsString()) == "")
	}
	switch b.Type {
	case "consul":
		if v, ok := b.Attrs["lock"]; ok && isFalse(v) {
			return "lock", "lock = false"
		}
	case "s3":
		if !set("dynamodb_table") && !set("use_lockfile") {
			return "use_lockfile", "neither use_lockfile = true nor dynamodb_table is set"
		}
	}
	return "", ""
}

// finishAPITLS resolves the tls block: enabled is implicit when any other
// field is set; cert and key are required when enabled; verify_incoming
// needs ca_cert or ca_path, and ca_cert wins when both are set.
func (d *decoder) finishAPITLS(r *rawTLS) APITLS {
	if !r.set {
		return APITLS{}
	}
	anySet := r.cert.Set || r.key.Set || r.verifyIncoming.Set || r.caCert.Set || r.caPath.Set
	t := APITLS{
		Enabled:        r.enabled.or(anySet),
		Cert:           r.cert.V,
		Key:            r.key.V,
		VerifyIncoming: r.verifyIncoming.V,
		CACert:         r.caCert.V,
		CAPath:         r.caPath.V,
	}
	if !t.Enabled {
		return APITLS{}
	}
	if t.Cert == "" {
		d.errf(r.rng, "tls.cert", "is required when TLS is enabled")
	}
	if t.Key == "" {
		d.errf(r.rng, "tls.key", "is required when TLS is enabled")
	}
	if t.VerifyIncoming {
		switch {
		case t.CACert == "" && t.CAPath == "":
			d.errf(r.verifyIncoming.Rng, "tls.verify_incoming", "needs ca_cert or ca_path to verify client certificates")
		case t.CACert != "" && t.CAPath != "":
			d.warnf(r.caPath.Rng, "tls.ca_path", "is ignored: ca_cert is set too and takes precedence")
		}
	}
	return t
}
