package config

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/tmpl"
)

// rawConfig accumulates what the files say, before defaults. Every file is
// decoded into the same rawConfig, which is how the CTS merge rules fall
// out: a later scalar overwrites an earlier one, lists (tasks, providers)
// append, maps merge key by key.
type rawConfig struct {
	logLevel, logFormat, workingDir, id opt[string]
	address                             opt[string] // the API's listen address (listen.go)
	port, maxParallel                   opt[int]
	buffer                              rawBuffer
	removalDelay                        opt[time.Duration] // the tasks' default removal_delay
	consul                              rawConsul
	driver                              rawDriver
	providers                           []Provider
	tasks                               []*rawTask
	services                            []*rawService // deprecated service blocks
	ha                                  rawHA         // high_availability (ha.go)
	tls                                 rawTLS        // the API's tls block (ha.go)
	notifications                       []Notification
	retry                               rawRetry    // retry.go
	runsPerTask                         opt[int]    // history { runs_per_task } (history.go)
	clientType                          opt[string] // client.go
	security                            rawSecurity // api_auth, api_tasks, api_http (security.go)
	ext                                 rawExt      // vault, syslog (vault.go, syslog.go)
	tfc                                 rawTFC      // driver "terraform-cloud" (tfc.go)
}

type rawBuffer struct {
	enabled  opt[bool]
	min, max opt[time.Duration]
	rng      hcl.Range // where the (last) block was declared
}

type rawConsul struct {
	address, token, kvPath opt[string]
	useCache               opt[bool]

	rawClientTLS                          // tls { ... } (clienttls.go)
	authEnabled                           opt[bool]
	username, password                    opt[string]
	dialKeepAlive, dialTimeout            opt[time.Duration]
	idleConnTimeout, tlsHandshakeTimeout  opt[time.Duration]
	disableKeepAlives                     opt[bool]
	maxIdleConns, maxIdleConnsPerHost     opt[int]
	regEnabled, checkEnabled              opt[bool]
	regName, regAddress, regNS, checkAddr opt[string]
}

type rawDriver struct {
	path, refresh   opt[string]
	log, persistLog opt[bool]
	maxMemory       opt[int64]
	backend         *Backend
	backendRng      hcl.Range
	required        map[string]RequiredProvider
}

var topKeys = []key{
	{name: "log_level"}, {name: "log_format"}, {name: "port"}, {name: "address"}, {name: "working_dir"},
	{name: "id"}, {name: "max_parallel_runs"}, {name: "client_type"}, // client.go
	{name: "buffer_period", kind: kBlock},
	{name: "removal_delay"},
	{name: "consul", kind: kBlock},
	{name: "driver", kind: kBlock, labels: 1, label: "name"},
	{name: "terraform_provider", kind: kBlock, labels: 1, label: "name"},
	{name: "task", kind: kBlock},
	{name: "service", kind: kBlock},
	{name: "tls", kind: kBlock}, {name: "high_availability", kind: kBlock}, // ha.go
	{name: "notification", kind: kBlock, labels: 1, label: "type"},
	{name: "retry", kind: kBlock},                                                                         // retry.go
	{name: "api_auth", kind: kBlock}, {name: "api_tasks", kind: kBlock}, {name: "api_http", kind: kBlock}, // security.go
	{name: "vault", kind: kBlock}, {name: "syslog", kind: kBlock}, // vault.go, syslog.go
	{name: "history", kind: kBlock}, // history.go
}

const enterpriseMsg = "is a CTS Enterprise feature and is not supported"

var topRejects = map[string]string{
	"license":      `"license" ` + enterpriseMsg + ": ctsync needs no license",
	"license_path": `"license_path" ` + enterpriseMsg + ": ctsync needs no license",
	"provider":     `unknown block "provider": use terraform_provider "<name>" { ... } to configure Terraform providers`,
}

var logLevels = map[string]string{
	"TRACE": "TRACE", "DEBUG": "DEBUG", "INFO": "INFO", "WARN": "WARN", "ERR": "ERR", "ERROR": "ERR",
}

// decodeFile decodes one configuration file's body into r.
func (d *decoder) decodeFile(body hcl.Body, r *rawConfig) {
	c := d.content(body, "", topKeys, topRejects)

	if s := d.str(c, "log_level", ""); s.Set {
		if lvl, ok := logLevels[strings.ToUpper(strings.TrimSpace(s.V))]; ok {
			s.V = lvl
			r.logLevel.merge(s)
		} else {
			d.errf(s.Rng, "log_level", "%q is not a valid log level (use TRACE, DEBUG, INFO, WARN or ERR)", s.V)
		}
	}
	if s := d.str(c, "log_format", ""); s.Set {
		switch f := strings.ToLower(strings.TrimSpace(s.V)); f {
		case "text", "json":
			s.V = f
			r.logFormat.merge(s)
		default:
			d.errf(s.Rng, "log_format", "%q is not a valid log format (use text or json)", s.V)
		}
	}
	if p := d.integer(c, "port", ""); p.Set {
		if p.V < 0 || p.V > 65535 {
			d.errf(p.Rng, "port", "must be between 0 and 65535")
		} else {
			r.port.merge(p)
		}
	}
	d.decodeAddress(c, r) // listen.go
	r.workingDir.merge(d.str(c, "working_dir", ""))
	r.id.merge(d.str(c, "id", ""))
	d.decodeClientType(c, r)
	if n := d.integer(c, "max_parallel_runs", ""); n.Set {
		if n.V < 1 {
			d.errf(n.Rng, "max_parallel_runs", "must be at least 1")
		} else {
			r.maxParallel.merge(n)
		}
	}
	if b := d.onlyOne(c, "buffer_period", ""); b != nil {
		d.bufferBlock(b, "buffer_period", &r.buffer)
	}
	if v := d.removalDelay(c, ""); v.Set {
		r.removalDelay.merge(v)
	}
	if b := d.onlyOne(c, "consul", ""); b != nil {
		d.consul(b, &r.consul)
	}
	seenTF := false
	for _, b := range c.blocks["driver"] {
		switch b.Labels[0] {
		case "terraform":
			if seenTF {
				d.errf(b.DefRange, `driver "terraform"`, "only one 'driver' block can be configured")
				continue
			}
			seenTF = true
			d.driver(b, &r.driver)
		case "terraform-cloud":
			d.tfcBlock(b, &r.tfc) // tfc.go
		default:
			d.errf(labelRange(b, 0), blockPath("", b), `unsupported driver %q: the only driver is "terraform"`, b.Labels[0])
		}
	}
	for _, b := range c.blocks["terraform_provider"] {
		r.providers = append(r.providers, d.provider(b))
	}
	for _, b := range c.blocks["task"] {
		r.tasks = append(r.tasks, d.task(b))
	}
	for _, b := range c.blocks["service"] {
		if s := d.service(b); s != nil {
			r.services = append(r.services, s)
		}
	}
	if b := d.onlyOne(c, "tls", ""); b != nil { // ha.go
		d.apiTLSBlock(b, &r.tls)
	}
	if b := d.onlyOne(c, "high_availability", ""); b != nil { // ha.go
		d.haBlock(b, &r.ha)
	}
	d.notifications(c, r)
	if b := d.onlyOne(c, "retry", ""); b != nil { // retry.go
		d.retryBlock(b, &r.retry)
	}
	if b := d.onlyOne(c, "history", ""); b != nil { // history.go
		d.historyBlock(b, &r.runsPerTask)
	}
	d.security(c, &r.security) // security.go
	d.decodeExt(c, &r.ext)     // vault.go, syslog.go
}

func labelRange(b *hcl.Block, i int) hcl.Range {
	if i < len(b.LabelRanges) {
		return b.LabelRanges[i]
	}
	return b.DefRange
}

// bufferBlock decodes buffer_period { enabled, min, max } into r.
func (d *decoder) bufferBlock(b *hcl.Block, path string, r *rawBuffer) {
	c := d.content(b.Body, path, attrs("enabled", "min", "max"), nil)
	r.enabled.merge(d.boolean(c, "enabled", path))
	r.min.merge(d.duration(c, "min", path))
	r.max.merge(d.duration(c, "max", path))
	r.rng = b.DefRange
}

// ---- consul ----

var consulKeys = []key{
	{name: "address"}, {name: "token"}, {name: "kv_path"}, {name: "kv_namespace"}, {name: "use_cache"},
	{name: "tls", kind: kBlock}, {name: "auth", kind: kBlock},
	{name: "transport", kind: kBlock}, {name: "service_registration", kind: kBlock},
}

func (d *decoder) consul(b *hcl.Block, r *rawConsul) {
	const path = "consul"
	c := d.content(b.Body, path, consulKeys, nil)
	r.address.merge(d.str(c, "address", path))
	r.token.merge(d.templStr(c, "token", path)) // {{ env }}, {{ with secret }}: secretfields.go
	r.kvPath.merge(d.str(c, "kv_path", path))
	r.useCache.merge(d.boolean(c, "use_cache", path))
	if s := d.str(c, "kv_namespace", path); s.Set {
		d.warnf(s.Rng, "consul.kv_namespace", "is ignored (CTS parses it but never uses it)")
	}
	if tb := d.onlyOne(c, "tls", path); tb != nil {
		d.clientTLS(tb, "consul.tls", &r.rawClientTLS)
	}
	if ab := d.onlyOne(c, "auth", path); ab != nil {
		p := "consul.auth"
		ac := d.content(ab.Body, p, attrs("enabled", "username", "password"), nil)
		r.authEnabled.merge(d.boolean(ac, "enabled", p))
		r.username.merge(d.str(ac, "username", p))
		r.password.merge(d.str(ac, "password", p))
	}
	if tb := d.onlyOne(c, "transport", path); tb != nil {
		p := "consul.transport"
		tc := d.content(tb.Body, p, attrs("dial_keep_alive", "dial_timeout", "disable_keep_alives",
			"idle_conn_timeout", "max_idle_conns", "max_idle_conns_per_host", "tls_handshake_timeout"), nil)
		r.dialKeepAlive.merge(d.duration(tc, "dial_keep_alive", p))
		r.dialTimeout.merge(d.duration(tc, "dial_timeout", p))
		r.disableKeepAlives.merge(d.boolean(tc, "disable_keep_alives", p))
		r.idleConnTimeout.merge(d.duration(tc, "idle_conn_timeout", p))
		for _, n := range []struct {
			name string
			dst  *opt[int]
		}{{"max_idle_conns", &r.maxIdleConns}, {"max_idle_conns_per_host", &r.maxIdleConnsPerHost}} {
			if v := d.integer(tc, n.name, p); v.Set {
				if v.V < 0 {
					d.errf(v.Rng, join(p, n.name), "cannot be negative")
				} else {
					n.dst.merge(v)
				}
			}
		}
		r.tlsHandshakeTimeout.merge(d.duration(tc, "tls_handshake_timeout", p))
	}
	if sb := d.onlyOne(c, "service_registration", path); sb != nil {
		p := "consul.service_registration"
		sc := d.content(sb.Body, p, []key{{name: "enabled"}, {name: "service_name"}, {name: "address"},
			{name: "namespace"}, {name: "default_check", kind: kBlock}}, nil)
		r.regEnabled.merge(d.boolean(sc, "enabled", p))
		r.regName.merge(d.str(sc, "service_name", p))
		r.regAddress.merge(d.str(sc, "address", p))
		r.regNS.merge(d.str(sc, "namespace", p))
		if cb := d.onlyOne(sc, "default_check", p); cb != nil {
			cp := p + ".default_check"
			cc := d.content(cb.Body, cp, attrs("enabled", "address"), nil)
			r.checkEnabled.merge(d.boolean(cc, "enabled", cp))
			r.checkAddr.merge(d.str(cc, "address", cp))
		}
	}
}

// ---- driver "terraform" ----

var driverKeys = []key{
	{name: "path"}, {name: "log"}, {name: "persist_log"}, {name: "version"}, {name: "max_memory"},
	{name: "refresh"},
	{name: "backend", kind: kBlock, labels: 1, label: "type"},
	{name: "required_providers", kind: kMap},
}

var driverRejects = map[string]string{
	"working_dir": "was removed in CTS 0.5: use the top-level working_dir or the task's working_dir",
}

// backendTypes are the Terraform backends a task's state may live in.
var backendTypes = []string{"azurerm", "consul", "cos", "gcs", "kubernetes", "local", "manta", "pg", "s3"}

func (d *decoder) driver(b *hcl.Block, r *rawDriver) {
	path := blockPath("", b)
	c := d.content(b.Body, path, driverKeys, driverRejects)
	r.path.merge(d.str(c, "path", path))
	r.log.merge(d.boolean(c, "log", path))
	r.persistLog.merge(d.boolean(c, "persist_log", path))
	r.maxMemory.merge(d.memorySize(c, "max_memory", path))
	if v := d.str(c, "refresh", path); v.Set {
		if err := task.CheckRefresh(v.V); err != nil {
			d.errf(v.Rng, join(path, "refresh"), "%v", err)
		} else {
			r.refresh.merge(v)
		}
	}
	if v := d.str(c, "version", path); v.Set {
		d.warnf(v.Rng, join(path, "version"), "is ignored: ctsync uses the terraform (or tofu) binary it finds on path or PATH and installs none")
	}
	if bb := d.onlyOne(c, "backend", path); bb != nil {
		d.backend(bb, path, r)
	}
	d.requiredProviders(c, path, r)
}

func (d *decoder) backend(b *hcl.Block, parent string, r *rawDriver) {
	path := blockPath(parent, b)
	typ := b.Labels[0]
	allowed := false
	for _, t := range backendTypes {
		allowed = allowed || t == typ
	}
	switch {
	case typ == "remote" || typ == "cloud":
		d.errf(labelRange(b, 0), path, "the %q backend (HCP Terraform / Terraform Enterprise runs) is not supported, as in CTS: "+
			"ctsync runs Terraform itself; keep state in one of %s", typ, strings.Join(backendTypes, ", "))
		return
	case !allowed:
		d.errf(labelRange(b, 0), path, "unsupported Terraform backend %q: use one of %s", typ, strings.Join(backendTypes, ", "))
		return
	}
	as, diags := b.Body.JustAttributes()
	d.addDiags(diags, path)
	list := make([]*hcl.Attribute, 0, len(as))
	for _, a := range as {
		list = append(list, a)
	}
	sortRanges(list, func(a *hcl.Attribute) hcl.Range { return a.Range })
	vals := map[string]cty.Value{}
	for _, a := range list {
		f := join(path, a.Name)
		v, ok := d.eval(a.Expr, f)
		if !ok || !d.checkNoTemplate(v, a.Expr.Range(), f) {
			continue
		}
		vals[a.Name] = v
	}
	if r.backend != nil && r.backend.Type != typ {
		d.errf(b.DefRange, path, "only one backend can be configured; backend %q is already configured at %s", r.backend.Type, posString(r.backendRng))
		return
	}
	if r.backend == nil {
		r.backend = &Backend{Type: typ, Attrs: map[string]cty.Value{}}
	}
	for k, v := range vals {
		r.backend.Attrs[k] = v
	}
	r.backendRng = b.DefRange
}

// requiredProviders reads `required_providers { name = "version" }` or
// `name = { source = "...", version = "..." }`, as an argument or a block.
func (d *decoder) requiredProviders(c *content, path string, r *rawDriver) {
	entries, _, ok := d.mapEntries(c, "required_providers", path)
	if !ok {
		return
	}
	for _, e := range entries {
		f := join(path, "required_providers."+e.key)
		v, ok := d.eval(e.expr, f)
		if !ok || !d.checkNoTemplate(v, e.expr.Range(), f) {
			continue
		}
		var rp RequiredProvider
		if ty := v.Type(); (ty.IsTupleType() || ty.IsListType()) && v.LengthInt() == 1 {
			// HCL 1 (and JSON) write `name { ... }` as a list of one object.
			if e := v.Index(cty.NumberIntVal(0)); e.Type().IsObjectType() || e.Type().IsMapType() {
				v = e
			}
		}
		ty := v.Type()
		switch {
		case ty == cty.String:
			rp.Version = v.AsString()
		case ty.IsObjectType() || ty.IsMapType():
			good := true
			for it := v.ElementIterator(); it.Next(); {
				k, ev := it.Element()
				name := k.AsString()
				sv, err := convert.Convert(ev, cty.String)
				if err != nil || sv.IsNull() {
					d.errf(e.expr.Range(), f+"."+name, "must be a string")
					good = false
					continue
				}
				switch name {
				case "source":
					rp.Source = sv.AsString()
				case "version":
					rp.Version = sv.AsString()
				default:
					d.errf(e.expr.Range(), f+"."+name, "unknown field (use source and version)")
					good = false
				}
			}
			if !good {
				continue
			}
		default:
			d.errf(e.expr.Range(), f, `must be a version string or { source = "...", version = "..." }`)
			continue
		}
		if r.required == nil {
			r.required = map[string]RequiredProvider{}
		}
		r.required[e.key] = rp
	}
}

// ---- terraform_provider ----

// provider decodes a terraform_provider block. Its arguments are the
// provider's own, so there is no schema: native HCL bodies are walked
// directly (arguments and nested blocks), JSON bodies are all arguments.
// alias and task_env are taken out of the arguments.
func (d *decoder) provider(b *hcl.Block) Provider {
	d.inProvider = true
	defer func() { d.inProvider = false }()
	name := b.Labels[0]
	path := blockPath("", b)
	p := Provider{Name: name, Range: b.DefRange}
	if name == "" {
		d.errf(labelRange(b, 0), path, "the provider name cannot be empty")
	} else if err := task.CheckIdentifier(name); err != nil {
		d.errf(labelRange(b, 0), path, "the provider name %v", err)
	}

	attrList, blocks := d.rawItems(b.Body, path)

	usesKey := false
	p.Args.Attrs = map[string]cty.Value{}
	for _, a := range attrList {
		switch a.Name {
		case "alias":
			s := d.str(&content{attrs: map[string]*hcl.Attribute{"alias": a}}, "alias", path)
			if s.Set {
				if strings.Contains(s.V, "{{") {
					d.errf(s.Rng, join(path, "alias"), "cannot use template syntax")
				} else if err := task.CheckIdentifier(s.V); err != nil {
					d.errf(s.Rng, join(path, "alias"), "%v", err)
				}
				p.Alias = s.V
			}
		case "task_env":
			usesKey = d.taskEnv(&content{attrs: map[string]*hcl.Attribute{"task_env": a}}, path, &p) || usesKey
		default:
			usesKey = d.providerValue(a.Expr, path, a.Name, &p.Args) || usesKey
		}
	}
	for _, blk := range blocks {
		switch blk.Type {
		case "task_env":
			if len(blk.Labels) > 0 {
				d.errf(blk.TypeRange, join(path, "task_env"), "this block takes no labels")
				continue
			}
			usesKey = d.taskEnv(&content{blocks: map[string][]*hcl.Block{"task_env": {blk}}}, path, &p) || usesKey
		case "alias":
			d.errf(blk.TypeRange, join(path, "alias"), "must be an argument (alias = \"...\"), not a block")
		default:
			pb, k := d.providerBlock(blk, path)
			p.Args.Blocks = append(p.Args.Blocks, pb)
			usesKey = k || usesKey
		}
	}
	if usesKey {
		// Resolved as a whole by package resolve, which reads Consul.
		p.pending = true
		return p
	}
	// Only {{ env }}: resolve now. Syntax was checked above, so the only
	// possible error is none.
	return p.RenderStrings(func(s string) (string, error) { return tmpl.Render(s, tmpl.Lookups{}) }, func(field string, _ *hcl.Range, err error) {
		d.errf(p.Range, join(path, field), "%v", err)
	})
}

// taskEnv reads a task_env map into p.TaskEnv (values as written, their
// templates checked) and reports whether a value uses {{ key }}.
func (d *decoder) taskEnv(c *content, path string, p *Provider) (usesKey bool) {
	m, rngs := d.strMap(c, "task_env", path)
	if !m.Set {
		return false
	}
	if p.TaskEnv == nil {
		p.TaskEnv = map[string]string{}
	}
	keys := make([]string, 0, len(m.V))
	for k := range m.V {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := m.V[k]
		if strings.Contains(v, "{{") {
			if err := tmpl.Check(v); err != nil {
				d.errf(rngs[k], join(path, "task_env."+k), "%v", err)
				continue
			}
			if p.taskEnvRng == nil {
				p.taskEnvRng = map[string]hcl.Range{}
			}
			p.taskEnvRng[k] = rngs[k]
			usesKey = usesKey || tmpl.NeedsLookup(v)
		}
		p.TaskEnv[k] = v
	}
	return usesKey
}

// providerValue evaluates a provider argument into body (as written) after
// checking its template syntax, and reports whether it uses {{ key }}.
func (d *decoder) providerValue(expr hcl.Expression, path, name string, body *ProviderBody) (usesKey bool) {
	field := join(path, name)
	if err := task.CheckIdentifier(name); err != nil {
		d.errf(expr.Range(), field, "argument name %v", err) // JSON keys can be anything
		return false
	}
	v, ok := d.eval(expr, field)
	if !ok {
		return false
	}
	usesKey, err := tmpl.CheckValue(v)
	if err != nil {
		d.errf(expr.Range(), field, "%v", err)
		return false
	}
	found := false
	walkStrings(v, func(s string) { found = found || strings.Contains(s, "{{") })
	if found {
		if body.rng == nil {
			body.rng = map[string]hcl.Range{}
		}
		body.rng[name] = expr.Range()
	}
	body.Attrs[name] = v
	return usesKey
}

func (d *decoder) providerBlock(b *hcl.Block, parent string) (ProviderBlock, bool) {
	path := join(parent, b.Type)
	for _, l := range b.Labels {
		path += " " + strconv.Quote(l)
	}
	pb := ProviderBlock{Type: b.Type, Body: ProviderBody{Attrs: map[string]cty.Value{}}}
	if len(b.Labels) > 0 {
		pb.Labels = append([]string(nil), b.Labels...)
	}
	attrList, blocks := d.rawItems(b.Body, path)
	usesKey := false
	for _, a := range attrList {
		usesKey = d.providerValue(a.Expr, path, a.Name, &pb.Body) || usesKey
	}
	for _, nb := range blocks {
		nested, k := d.providerBlock(nb, path)
		pb.Body.Blocks = append(pb.Body.Blocks, nested)
		usesKey = k || usesKey
	}
	return pb, usesKey
}

// rawItems lists a body's arguments (in source order) and nested blocks
// without a schema, for provider arguments. JSON bodies have arguments
// only.
func (d *decoder) rawItems(body hcl.Body, path string) ([]*hcl.Attribute, []*hcl.Block) {
	var attrs []*hcl.Attribute
	var blocks []*hcl.Block
	switch b := body.(type) {
	case *hclsyntax.Body:
		for _, a := range b.Attributes {
			attrs = append(attrs, a.AsHCLAttribute())
		}
		for _, blk := range b.Blocks {
			blocks = append(blocks, blk.AsHCLBlock())
		}
	case *h1Body:
		return b.rawItems()
	default:
		as, diags := body.JustAttributes()
		d.addDiags(diags, path)
		for _, a := range as {
			attrs = append(attrs, a)
		}
	}
	sortRanges(attrs, func(a *hcl.Attribute) hcl.Range { return a.Range })
	return attrs, blocks
}

// checkProviders reports two providers with the same name and alias.
func (d *decoder) checkProviders(ps []Provider) map[string]bool {
	seen := map[string]hcl.Range{}
	refs := map[string]bool{}
	for i := range ps {
		ref := ps[i].Ref()
		if prev, dup := seen[ref]; dup {
			d.errf(ps[i].Range, fmt.Sprintf("terraform_provider %q", ps[i].Name),
				"duplicate provider configuration: %s (first declared at %s); give each block of the same provider a different alias", ref, posString(prev))
			continue
		}
		seen[ref] = ps[i].Range
		refs[ref] = true
	}
	return refs
}
