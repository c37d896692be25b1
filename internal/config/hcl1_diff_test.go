package config

import (
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	hcl1 "github.com/hashicorp/hcl"
	"github.com/zclconf/go-cty/cty"

	"github.com/ctsync/ctsync/internal/task"
)

// The differential test: a configuration is decoded by ctsync (Load) and,
// independently, by HCL 1's own decoder into map[string]interface{} — what
// CTS does before mapstructure — to which CTS's documented defaults are
// applied here. Both are flattened into "field path -> value" and must be
// equal.

// ---- the CTS side: HCL 1 decode + documented defaults ----

// objs returns the objects an HCL 1 value holds: a block decodes to a
// list of maps, an object directly inside a list to a map.
func objs(v any) []map[string]any {
	switch v := v.(type) {
	case map[string]any:
		return []map[string]any{v}
	case []map[string]any:
		return v
	case []any:
		var out []map[string]any
		for _, e := range v {
			out = append(out, objs(e)...)
		}
		return out
	}
	return nil
}

// one merges the objects of a singular block (CTS refuses two; tests only
// use one).
func one(v any) map[string]any {
	o := objs(v)
	if len(o) == 0 {
		return nil
	}
	return o[0]
}

// labelled returns (label, body) pairs of a labelled block.
func labelled(v any) (out [][2]any) {
	for _, m := range objs(v) {
		keys := sortedKeys(m)
		for _, k := range keys {
			for _, b := range objs(m[k]) {
				out = append(out, [2]any{k, b})
			}
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

var envTmpl = regexp.MustCompile(`\{\{\s*env\s+"([^"]*)"\s*\}\}`)

// weak renders a scalar as mapstructure's weak decoding into a string does.
func weak(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return envTmpl.ReplaceAllStringFunc(v, func(s string) string {
			return os.Getenv(envTmpl.FindStringSubmatch(s)[1])
		}), true
	case int:
		return strconv.Itoa(v), true
	case int64:
		return strconv.FormatInt(v, 10), true
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), true
	case bool:
		return strconv.FormatBool(v), true
	}
	return "", false
}

func weakBool(v any) (bool, bool) {
	switch v := v.(type) {
	case bool:
		return v, true
	case string:
		b, err := strconv.ParseBool(v)
		return b, err == nil
	}
	return false, false
}

func weakList(v any) []string {
	var out []string
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			s, _ := weak(e)
			out = append(out, s)
		}
	case string:
		out = []string{v}
	}
	return out
}

func weakMap(v any) map[string]string {
	out := map[string]string{}
	for _, m := range objs(v) {
		for k, e := range m {
			s, _ := weak(e)
			out[k] = s
		}
	}
	return out
}

// canon renders any value, either side, as one comparable text: objects
// with sorted keys, a list of one object as that object (HCL 1 decodes a
// nested object as a list of one map).
func canon(v any) string {
	switch v := v.(type) {
	case []map[string]any:
		if len(v) == 1 {
			return canon(v[0])
		}
		parts := make([]string, len(v))
		for i, m := range v {
			parts[i] = canon(m)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case map[string]any:
		var parts []string
		for _, k := range sortedKeys(v) {
			parts = append(parts, strconv.Quote(k)+":"+canon(v[k]))
		}
		return "{" + strings.Join(parts, ",") + "}"
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = canon(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	s, _ := weak(v)
	return fmt.Sprintf("%T:%s", v, s)
}

// ctyAny turns a cty value into the Go shape HCL 1 gives.
func ctyAny(v cty.Value) any {
	if v.IsNull() || !v.IsKnown() {
		return nil
	}
	ty := v.Type()
	switch {
	case ty == cty.String:
		return v.AsString()
	case ty == cty.Bool:
		return v.True()
	case ty == cty.Number:
		bf := v.AsBigFloat()
		if i, acc := bf.Int64(); acc == big.Exact {
			return int(i)
		}
		f, _ := bf.Float64()
		return f
	case ty.IsObjectType() || ty.IsMapType():
		m := map[string]any{}
		for it := v.ElementIterator(); it.Next(); {
			k, e := it.Element()
			m[k.AsString()] = ctyAny(e)
		}
		return m
	default:
		out := []any{}
		for it := v.ElementIterator(); it.Next(); {
			_, e := it.Element()
			out = append(out, ctyAny(e))
		}
		return out
	}
}

func providerBodyAny(b ProviderBody) map[string]any {
	m := map[string]any{}
	for k, v := range b.Attrs {
		m[k] = ctyAny(v)
	}
	for _, blk := range b.Blocks {
		var v any = providerBodyAny(blk.Body)
		for i := len(blk.Labels) - 1; i >= 0; i-- {
			v = map[string]any{blk.Labels[i]: v}
		}
		m[blk.Type] = v
	}
	return m
}

type flat map[string]string

func (f flat) set(k string, v any) {
	switch v := v.(type) {
	case time.Duration:
		f[k] = v.String()
	case task.Duration:
		f[k] = time.Duration(v).String()
	case []string:
		f[k] = fmt.Sprintf("%q", v)
	case map[string]string:
		f[k] = fmt.Sprintf("%q", v)
	default:
		f[k] = fmt.Sprint(v)
	}
}

func strOr(m map[string]any, k, def string) string {
	if s, ok := weak(m[k]); ok {
		return s
	}
	return def
}

func boolOr(m map[string]any, k string, def bool) bool {
	if b, ok := weakBool(m[k]); ok {
		return b
	}
	return def
}

func durOr(t *testing.T, m map[string]any, k string, def time.Duration) time.Duration {
	s, ok := weak(m[k])
	if !ok {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s: %v", k, err)
	}
	return d
}

func intOr(m map[string]any, k string, def int) int {
	s, ok := weak(m[k])
	if !ok {
		return def
	}
	i, _ := strconv.Atoi(s)
	return i
}

// ctsBuffer applies CTS's buffer_period inheritance to a block (nil: none).
func ctsBuffer(t *testing.T, m map[string]any, parent task.BufferPeriod) task.BufferPeriod {
	_, e := m["enabled"]
	_, mi := m["min"]
	_, ma := m["max"]
	if !e && !mi && !ma {
		return parent
	}
	if !boolOr(m, "enabled", true) {
		return task.BufferPeriod{}
	}
	out := task.BufferPeriod{Enabled: true}
	switch {
	case mi:
		out.Min = task.Duration(durOr(t, m, "min", 0))
	case parent.Enabled:
		out.Min = parent.Min
	default:
		out.Min = task.Duration(5 * time.Second)
	}
	if ma {
		out.Max = task.Duration(durOr(t, m, "max", 0))
	} else {
		out.Max = 4 * out.Min
	}
	return out
}

func setBuffer(f flat, p string, b task.BufferPeriod) {
	f.set(p+".enabled", b.Enabled)
	f.set(p+".min", b.Min)
	f.set(p+".max", b.Max)
}

// ctsFlat decodes src as CTS does and flattens the result.
func ctsFlat(t *testing.T, src []byte) flat {
	t.Helper()
	var root any
	if err := hcl1.Decode(&root, string(src)); err != nil {
		t.Fatalf("HCL 1 refuses the input: %v", err)
	}
	raw, _ := root.(map[string]any)
	f := flat{}
	lvl := strings.ToUpper(strOr(raw, "log_level", "INFO"))
	if lvl == "ERROR" {
		lvl = "ERR"
	}
	f.set("log_level", lvl)
	f.set("port", intOr(raw, "port", 8558))
	f.set("working_dir", strOr(raw, "working_dir", "sync-tasks"))
	if s, ok := weak(raw["id"]); ok {
		f.set("id", s)
	}
	global := ctsBuffer(t, one(raw["buffer_period"]), task.DefaultBufferPeriod)
	setBuffer(f, "buffer_period", global)

	c := one(raw["consul"])
	f.set("consul.address", strOr(c, "address", "localhost:8500"))
	f.set("consul.token", strOr(c, "token", ""))
	f.set("consul.kv_path", strOr(c, "kv_path", "consul-terraform-sync/"))
	f.set("consul.use_cache", boolOr(c, "use_cache", false)) // ctsync extension
	tls := one(c["tls"])
	f.set("consul.tls.enabled", boolOr(tls, "enabled", len(tls) > 0))
	f.set("consul.tls.verify", boolOr(tls, "verify", true))
	for _, k := range []string{"ca_cert", "ca_path", "cert", "key", "server_name"} {
		f.set("consul.tls."+k, strOr(tls, k, ""))
	}
	auth := one(c["auth"])
	_, u := auth["username"]
	_, pw := auth["password"]
	f.set("consul.auth.enabled", boolOr(auth, "enabled", u || pw))
	f.set("consul.auth.username", strOr(auth, "username", ""))
	f.set("consul.auth.password", strOr(auth, "password", ""))
	tr := one(c["transport"])
	f.set("consul.transport.dial_keep_alive", durOr(t, tr, "dial_keep_alive", 30*time.Second))
	f.set("consul.transport.dial_timeout", durOr(t, tr, "dial_timeout", 30*time.Second))
	f.set("consul.transport.disable_keep_alives", boolOr(tr, "disable_keep_alives", false))
	f.set("consul.transport.idle_conn_timeout", durOr(t, tr, "idle_conn_timeout", 5*time.Second))
	f.set("consul.transport.max_idle_conns", intOr(tr, "max_idle_conns", 0))
	f.set("consul.transport.max_idle_conns_per_host", intOr(tr, "max_idle_conns_per_host", 100))
	f.set("consul.transport.tls_handshake_timeout", durOr(t, tr, "tls_handshake_timeout", 10*time.Second))
	sr := one(c["service_registration"])
	f.set("consul.service_registration.enabled", boolOr(sr, "enabled", true))
	f.set("consul.service_registration.service_name", strOr(sr, "service_name", "consul-terraform-sync"))
	f.set("consul.service_registration.address", strOr(sr, "address", ""))
	f.set("consul.service_registration.namespace", strOr(sr, "namespace", ""))
	dc := one(sr["default_check"])
	f.set("consul.service_registration.default_check.enabled", boolOr(dc, "enabled", true))
	f.set("consul.service_registration.default_check.address", strOr(dc, "address", ""))

	var drv map[string]any
	for _, l := range labelled(raw["driver"]) {
		if l[0] == "terraform" {
			drv = l[1].(map[string]any)
		}
	}
	f.set("driver.path", strOr(drv, "path", ""))
	f.set("driver.log", boolOr(drv, "log", false))
	f.set("driver.persist_log", boolOr(drv, "persist_log", false))
	for _, l := range labelled(drv["backend"]) {
		f.set("driver.backend.type", l[0])
		for k, v := range l[1].(map[string]any) {
			f.set("driver.backend."+k, canon(v))
		}
	}
	for _, m := range objs(drv["required_providers"]) {
		for name, v := range m {
			if s, ok := v.(string); ok {
				f.set("driver.required_providers."+name, "|"+s)
				continue
			}
			rp := one(v)
			f.set("driver.required_providers."+name, strOr(rp, "source", "")+"|"+strOr(rp, "version", ""))
		}
	}

	for i, l := range labelled(raw["terraform_provider"]) {
		p := fmt.Sprintf("provider[%d]", i)
		body := l[1].(map[string]any)
		f.set(p+".name", l[0])
		f.set(p+".alias", strOr(body, "alias", ""))
		for k, v := range weakMap(body["task_env"]) {
			f.set(p+".task_env."+k, v)
		}
		for k, v := range body {
			if k == "alias" || k == "task_env" {
				continue
			}
			f.set(p+".arg."+k, canon(resolveEnv(v)))
		}
	}

	for i, tm := range objs(raw["task"]) {
		p := fmt.Sprintf("task[%d]", i)
		f.set(p+".name", strOr(tm, "name", ""))
		f.set(p+".description", strOr(tm, "description", ""))
		f.set(p+".module", strOr(tm, "module", strOr(tm, "source", "")))
		f.set(p+".version", strOr(tm, "version", ""))
		f.set(p+".providers", weakList(tm["providers"]))
		f.set(p+".enabled", boolOr(tm, "enabled", true))
		f.set(p+".working_dir", strOr(tm, "working_dir", ""))
		bp := ctsBuffer(t, one(tm["buffer_period"]), global)
		for _, cl := range labelled(tm["condition"]) {
			typ, body := cl[0].(string), cl[1].(map[string]any)
			if typ == "schedule" {
				bp = task.BufferPeriod{}
			}
			f.set(p+".condition.type", typ)
			ctsSelector(f, p+".condition", typ, body, true)
		}
		setBuffer(f, p+".buffer_period", bp)
		inputs := append(labelled(tm["module_input"]), labelled(tm["source_input"])...)
		for _, ml := range inputs {
			ctsSelector(f, p+".module_input."+ml[0].(string), ml[0].(string), ml[1].(map[string]any), false)
		}
	}
	return f
}

func resolveEnv(v any) any {
	switch v := v.(type) {
	case string:
		s, _ := weak(v)
		return s
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = resolveEnv(e)
		}
		return out
	case []map[string]any:
		out := make([]map[string]any, len(v))
		for i, e := range v {
			out[i] = resolveEnv(e).(map[string]any)
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			out[k] = resolveEnv(e)
		}
		return out
	}
	return v
}

func ctsSelector(f flat, p, typ string, m map[string]any, cond bool) {
	if cond && typ != "schedule" {
		use := boolOr(m, "source_includes_var", true)
		use = boolOr(m, "use_as_module_input", use)
		f.set(p+".use_as_module_input", use)
	}
	switch typ {
	case "services":
		if v, ok := m["names"]; ok {
			f.set(p+".names", weakList(v))
		}
		if s, ok := weak(m["regexp"]); ok {
			f.set(p+".regexp", s)
		}
		f.set(p+".datacenter", strOr(m, "datacenter", ""))
		f.set(p+".namespace", strOr(m, "namespace", ""))
		f.set(p+".filter", strOr(m, "filter", ""))
		if v, ok := m["cts_user_defined_meta"]; ok {
			f.set(p+".cts_user_defined_meta", weakMap(v))
		}
		// ctsync extensions, read the same generic way.
		if v, ok := m["status"]; ok {
			f.set(p+".status", weakList(v))
		}
		f.set(p+".peer", strOr(m, "peer", ""))
		f.set(p+".partition", strOr(m, "partition", ""))
	case "nodes": // ctsync extension
		f.set(p+".datacenter", strOr(m, "datacenter", ""))
		f.set(p+".filter", strOr(m, "filter", ""))
		if v, ok := m["node_meta"]; ok {
			f.set(p+".node_meta", weakMap(v))
		}
	case "intentions": // ctsync extension
		f.set(p+".datacenter", strOr(m, "datacenter", ""))
		f.set(p+".namespace", strOr(m, "namespace", ""))
		f.set(p+".partition", strOr(m, "partition", ""))
		for _, side := range []string{"source_services", "destination_services"} {
			sm := one(m[side])
			if sm == nil {
				continue
			}
			if v, ok := sm["names"]; ok {
				f.set(p+"."+side+".names", weakList(v))
			}
			if s, ok := weak(sm["regexp"]); ok {
				f.set(p+"."+side+".regexp", s)
			}
		}
	case "catalog-services":
		f.set(p+".regexp", strOr(m, "regexp", ""))
		f.set(p+".datacenter", strOr(m, "datacenter", ""))
		f.set(p+".namespace", strOr(m, "namespace", ""))
		if v, ok := m["node_meta"]; ok {
			f.set(p+".node_meta", weakMap(v))
		}
	case "consul-kv":
		f.set(p+".path", strOr(m, "path", ""))
		f.set(p+".recurse", boolOr(m, "recurse", false))
		f.set(p+".datacenter", strOr(m, "datacenter", ""))
		f.set(p+".namespace", strOr(m, "namespace", ""))
	case "schedule":
		f.set(p+".cron", strOr(m, "cron", ""))
	}
}

// ---- the ctsync side ----

func ctsyncFlat(cfg *Config, withID bool) flat {
	f := flat{}
	f.set("log_level", cfg.LogLevel)
	f.set("port", cfg.Port)
	f.set("working_dir", cfg.WorkingDir)
	if withID {
		f.set("id", cfg.ID)
	}
	setBuffer(f, "buffer_period", cfg.BufferPeriod)
	c := cfg.Consul
	f.set("consul.address", c.Address)
	f.set("consul.token", c.Token)
	f.set("consul.kv_path", c.KVPath)
	f.set("consul.use_cache", c.UseCache)
	f.set("consul.tls.enabled", c.TLS.Enabled)
	f.set("consul.tls.verify", c.TLS.Verify)
	f.set("consul.tls.ca_cert", c.TLS.CACert)
	f.set("consul.tls.ca_path", c.TLS.CAPath)
	f.set("consul.tls.cert", c.TLS.Cert)
	f.set("consul.tls.key", c.TLS.Key)
	f.set("consul.tls.server_name", c.TLS.ServerName)
	f.set("consul.auth.enabled", c.Auth.Enabled)
	f.set("consul.auth.username", c.Auth.Username)
	f.set("consul.auth.password", c.Auth.Password)
	tr := c.Transport
	f.set("consul.transport.dial_keep_alive", tr.DialKeepAlive)
	f.set("consul.transport.dial_timeout", tr.DialTimeout)
	f.set("consul.transport.disable_keep_alives", tr.DisableKeepAlives)
	f.set("consul.transport.idle_conn_timeout", tr.IdleConnTimeout)
	f.set("consul.transport.max_idle_conns", tr.MaxIdleConns)
	f.set("consul.transport.max_idle_conns_per_host", tr.MaxIdleConnsPerHost)
	f.set("consul.transport.tls_handshake_timeout", tr.TLSHandshakeTimeout)
	sr := c.ServiceRegistration
	f.set("consul.service_registration.enabled", sr.Enabled)
	f.set("consul.service_registration.service_name", sr.ServiceName)
	f.set("consul.service_registration.address", sr.Address)
	f.set("consul.service_registration.namespace", sr.Namespace)
	f.set("consul.service_registration.default_check.enabled", sr.DefaultCheck.Enabled)
	f.set("consul.service_registration.default_check.address", sr.DefaultCheck.Address)

	d := cfg.Driver
	f.set("driver.path", d.Path)
	f.set("driver.log", d.Log)
	f.set("driver.persist_log", d.PersistLog)
	if d.Backend != nil {
		f.set("driver.backend.type", d.Backend.Type)
		for k, v := range d.Backend.Attrs {
			f.set("driver.backend."+k, canon(ctyAny(v)))
		}
	}
	for name, rp := range d.RequiredProviders {
		f.set("driver.required_providers."+name, rp.Source+"|"+rp.Version)
	}
	for i, p := range cfg.Providers {
		k := fmt.Sprintf("provider[%d]", i)
		f.set(k+".name", p.Name)
		f.set(k+".alias", p.Alias)
		for n, v := range p.TaskEnv {
			f.set(k+".task_env."+n, v)
		}
		for n, v := range providerBodyAny(p.Args) {
			f.set(k+".arg."+n, canon(v))
		}
	}
	for i, s := range cfg.Tasks {
		p := fmt.Sprintf("task[%d]", i)
		f.set(p+".name", s.Name)
		f.set(p+".description", s.Description)
		f.set(p+".module", s.Module)
		f.set(p+".version", s.Version)
		f.set(p+".providers", s.Providers)
		f.set(p+".enabled", s.Enabled)
		f.set(p+".working_dir", s.WorkingDir)
		setBuffer(f, p+".buffer_period", *s.BufferPeriod)
		cond := s.Condition
		switch {
		case cond.Services != nil:
			f.set(p+".condition.type", "services")
			selFlat(f, p+".condition", &cond.Services.ServicesSelector)
			f.set(p+".condition.use_as_module_input", cond.Services.UseAsModuleInput)
		case cond.CatalogServices != nil:
			cs := cond.CatalogServices
			f.set(p+".condition.type", "catalog-services")
			f.set(p+".condition.regexp", cs.Regexp)
			f.set(p+".condition.datacenter", cs.Datacenter)
			f.set(p+".condition.namespace", cs.Namespace)
			if cs.NodeMeta != nil {
				f.set(p+".condition.node_meta", cs.NodeMeta)
			}
			f.set(p+".condition.use_as_module_input", cs.UseAsModuleInput)
		case cond.ConsulKV != nil:
			f.set(p+".condition.type", "consul-kv")
			kvFlat(f, p+".condition", &cond.ConsulKV.ConsulKVSelector)
			f.set(p+".condition.use_as_module_input", cond.ConsulKV.UseAsModuleInput)
		case cond.Schedule != nil:
			f.set(p+".condition.type", "schedule")
			f.set(p+".condition.cron", cond.Schedule.Cron)
		case cond.Nodes != nil:
			f.set(p+".condition.type", "nodes")
			nodesFlat(f, p+".condition", &cond.Nodes.NodesSelector)
			f.set(p+".condition.use_as_module_input", cond.Nodes.UseAsModuleInput)
		case cond.Intentions != nil:
			f.set(p+".condition.type", "intentions")
			intentionsFlat(f, p+".condition", &cond.Intentions.IntentionsSelector)
			f.set(p+".condition.use_as_module_input", cond.Intentions.UseAsModuleInput)
		}
		if s.ModuleInput.Services != nil {
			selFlat(f, p+".module_input.services", s.ModuleInput.Services)
		}
		if s.ModuleInput.ConsulKV != nil {
			kvFlat(f, p+".module_input.consul-kv", s.ModuleInput.ConsulKV)
		}
		if s.ModuleInput.Nodes != nil {
			nodesFlat(f, p+".module_input.nodes", s.ModuleInput.Nodes)
		}
		if s.ModuleInput.Intentions != nil {
			intentionsFlat(f, p+".module_input.intentions", s.ModuleInput.Intentions)
		}
	}
	return f
}

func selFlat(f flat, p string, s *task.ServicesSelector) {
	if s.Names != nil {
		f.set(p+".names", s.Names)
	}
	if s.Regexp != nil {
		f.set(p+".regexp", *s.Regexp)
	}
	f.set(p+".datacenter", s.Datacenter)
	f.set(p+".namespace", s.Namespace)
	f.set(p+".filter", s.Filter)
	if s.CTSUserDefinedMeta != nil {
		f.set(p+".cts_user_defined_meta", s.CTSUserDefinedMeta)
	}
	if s.Status != nil {
		f.set(p+".status", s.Status)
	}
	f.set(p+".peer", s.Peer)
	f.set(p+".partition", s.Partition)
}

// nodesFlat and intentionsFlat flatten the ctsync extensions.
func nodesFlat(f flat, p string, s *task.NodesSelector) {
	f.set(p+".datacenter", s.Datacenter)
	f.set(p+".filter", s.Filter)
	if s.NodeMeta != nil {
		f.set(p+".node_meta", s.NodeMeta)
	}
}

func intentionsFlat(f flat, p string, s *task.IntentionsSelector) {
	f.set(p+".datacenter", s.Datacenter)
	f.set(p+".namespace", s.Namespace)
	f.set(p+".partition", s.Partition)
	for _, side := range []struct {
		name string
		m    *task.NameMatch
	}{{"source_services", s.Source}, {"destination_services", s.Destination}} {
		if side.m == nil {
			continue
		}
		if side.m.Names != nil {
			f.set(p+"."+side.name+".names", side.m.Names)
		}
		if side.m.Regexp != nil {
			f.set(p+"."+side.name+".regexp", *side.m.Regexp)
		}
	}
}

func kvFlat(f flat, p string, s *task.ConsulKVSelector) {
	f.set(p+".path", s.Path)
	f.set(p+".recurse", s.Recurse)
	f.set(p+".datacenter", s.Datacenter)
	f.set(p+".namespace", s.Namespace)
}

// diffFlat lists the fields where the two sides differ.
func diffFlat(want, got flat) []string {
	var out []string
	for _, k := range sortedKeys(want) {
		if g, ok := got[k]; !ok {
			out = append(out, fmt.Sprintf("%s: CTS %s, ctsync has none", k, want[k]))
		} else if g != want[k] {
			out = append(out, fmt.Sprintf("%s: CTS %s, ctsync %s", k, want[k], g))
		}
	}
	for _, k := range sortedKeys(got) {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%s: ctsync %s, CTS has none", k, got[k]))
		}
	}
	return out
}

// checkSameAsCTS loads path with ctsync and compares it with CTS's reading.
func checkSameAsCTS(t *testing.T, path string) {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Load([]string{path})
	if err != nil {
		t.Fatalf("ctsync refuses a configuration CTS loads:\n%v\n--- %s\n%s", err, path, src)
	}
	want := ctsFlat(t, src)
	_, withID := want["id"]
	if d := diffFlat(want, ctsyncFlat(cfg, withID)); len(d) > 0 {
		t.Errorf("%s: ctsync and CTS differ:\n  %s\n--- source:\n%s", path, strings.Join(d, "\n  "), src)
	}
}

// TestHCL1Corpus loads every file of testdata/hcl1: files named
// refused_*.hcl must be refused with a position (their first line says
// what the message holds: "# refused: <text>"); every other file must give
// the configuration HCL 1 and CTS's defaults give.
func TestHCL1Corpus(t *testing.T) {
	clearConsulEnv(t)
	t.Setenv("CTS_TEST_REGION", "us-east-1")
	files, err := filepath.Glob("testdata/hcl1/*.hcl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus: %v", err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			if !strings.HasPrefix(filepath.Base(path), "refused_") {
				checkSameAsCTS(t, path)
				return
			}
			src, _ := os.ReadFile(path)
			first, _, _ := strings.Cut(string(src), "\n")
			want := strings.TrimSpace(strings.TrimPrefix(first, "# refused:"))
			_, err := Load([]string{path})
			if err == nil {
				t.Fatal("loaded; want an error")
			}
			for _, e := range AsList(err) {
				if e.Range.Filename == "" || e.Range.Start.Line == 0 {
					t.Errorf("error without a position: %v", e)
				}
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		})
	}
}
