package config

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// This file holds the dynamic values of terraform_provider blocks (CTS
// syntax, resolved once at start-up):
//
//	{{ env "NAME" }}    an environment variable of the ctsync process
//	{{ key "path" }}    a Consul KV value ("path@dc" reads another datacenter)
//	{{ with secret }}   Vault: refused, ctsync has no Vault support yet
//
// A string may hold several actions and text around them; "{{-" and "-}}"
// trim the white space next to the action, as in Go templates. Values are
// secrets: no error message ever quotes one, or quotes an action's text.
//
// Load resolves blocks that use only {{ env }} at once. A block with at least
// one {{ key }} keeps every string as written until ResolveProviders, which
// needs a Consul client, resolves the whole block in one pass: a resolved
// value is never parsed again, so a value that itself looks like a template
// stays plain text.

// ProviderResolveTimeout bounds the resolution of one terraform_provider
// block's dynamic values (CTS: 5 s per block, blocks in parallel).
const ProviderResolveTimeout = 5 * time.Second

// resolveTimeout is ProviderResolveTimeout; tests shorten it.
var resolveTimeout = ProviderResolveTimeout

type partKind int

const (
	partText partKind = iota
	partEnv
	partKey
)

// tmplPart is a piece of a templated string: literal text, or an action and
// its argument (for key: the KV path and an optional datacenter).
type tmplPart struct {
	kind partKind
	text string
	dc   string
}

// actionRE matches the inside of a supported action: a function and one
// quoted (Go syntax) argument.
var actionRE = regexp.MustCompile("^(env|key)\\s+(\"(?:[^\"\\\\]|\\\\.)*\"|`[^`]*`)$")

// secretRE matches the start of a Vault action.
var secretRE = regexp.MustCompile(`^(with\s+)?secret\b`)

// errVault is the error for {{ with secret }}.
var errVault = errors.New(`Vault is not supported yet: {{ with secret "..." }} cannot be resolved; use {{ env "NAME" }} or {{ key "path" }}, or set the value through the provider's environment (task_env)`)

// parseTemplate splits s into text and actions. It never quotes s or an
// action in its errors.
func parseTemplate(s string) ([]tmplPart, error) {
	locs := templateRE.FindAllStringIndex(s, -1)
	if len(locs) == 0 {
		if strings.Contains(s, "{{") {
			return nil, errors.New(`unterminated template action: "{{" without a closing "}}"`)
		}
		return []tmplPart{{kind: partText, text: s}}, nil
	}
	var parts []tmplPart
	last := 0
	trimNext := false
	for i, l := range locs {
		inner := s[l[0]+2 : l[1]-2]
		trimPrev := strings.HasPrefix(inner, "-")
		if trimPrev {
			inner = inner[1:]
		}
		trimAfter := strings.HasSuffix(inner, "-")
		if trimAfter {
			inner = inner[:len(inner)-1]
		}
		inner = strings.TrimSpace(inner)
		text := s[last:l[0]]
		if trimNext {
			text = strings.TrimLeft(text, " \t\r\n")
		}
		if trimPrev {
			text = strings.TrimRight(text, " \t\r\n")
		}
		if strings.Contains(text, "{{") {
			return nil, fmt.Errorf("template action %d is malformed", i+1)
		}
		if text != "" {
			parts = append(parts, tmplPart{kind: partText, text: text})
		}
		if secretRE.MatchString(inner) {
			return nil, errVault
		}
		m := actionRE.FindStringSubmatch(inner)
		if m == nil {
			return nil, fmt.Errorf(`template action %d is not supported: only {{ env "NAME" }} and {{ key "path" }} are (and {{ with secret }} is not supported yet)`, i+1)
		}
		arg, err := strconv.Unquote(m[2])
		if err != nil {
			return nil, fmt.Errorf("template action %d: its argument is not a valid quoted string", i+1)
		}
		switch m[1] {
		case "env":
			if arg == "" {
				return nil, fmt.Errorf("template action %d: env needs a variable name", i+1)
			}
			parts = append(parts, tmplPart{kind: partEnv, text: arg})
		case "key":
			path, dc := arg, ""
			if at := strings.LastIndexByte(arg, '@'); at >= 0 {
				path, dc = arg[:at], arg[at+1:]
				if dc == "" {
					return nil, fmt.Errorf(`template action %d: key "path@dc" needs a datacenter after "@"`, i+1)
				}
			}
			path = strings.TrimLeft(path, "/")
			if path == "" {
				return nil, fmt.Errorf("template action %d: key needs a KV path", i+1)
			}
			parts = append(parts, tmplPart{kind: partKey, text: path, dc: dc})
		}
		last = l[1]
		trimNext = trimAfter
	}
	rest := s[last:]
	if trimNext {
		rest = strings.TrimLeft(rest, " \t\r\n")
	}
	if strings.Contains(rest, "{{") {
		return nil, errors.New(`unterminated template action: "{{" without a closing "}}"`)
	}
	if rest != "" {
		parts = append(parts, tmplPart{kind: partText, text: rest})
	}
	return parts, nil
}

// hasKey reports whether s holds a {{ key }} action (s must parse).
func hasKey(s string) bool {
	parts, err := parseTemplate(s)
	if err != nil {
		return false
	}
	for _, p := range parts {
		if p.kind == partKey {
			return true
		}
	}
	return false
}

// keyLookup reads one Consul KV value for a {{ key }} action.
type keyLookup func(path, dc string) (string, error)

// render resolves a templated string. key is only called for {{ key }}
// actions; with key nil such an action is an error.
func render(s string, key keyLookup) (string, error) {
	if !strings.Contains(s, "{{") {
		return s, nil
	}
	parts, err := parseTemplate(s)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range parts {
		switch p.kind {
		case partText:
			b.WriteString(p.text)
		case partEnv:
			b.WriteString(os.Getenv(p.text))
		case partKey:
			if key == nil {
				return "", errors.New("{{ key }} needs Consul: the configuration must be resolved with ResolveProviders")
			}
			v, err := key(p.text, p.dc)
			if err != nil {
				return "", err
			}
			b.WriteString(v)
		}
	}
	return b.String(), nil
}

// mapStrings applies fn to every string inside v, keeping v's shape.
func mapStrings(v cty.Value, fn func(string) (string, error)) (cty.Value, error) {
	if v == cty.NilVal || v.IsNull() || !v.IsKnown() {
		return v, nil
	}
	ty := v.Type()
	switch {
	case ty == cty.String:
		s, err := fn(v.AsString())
		if err != nil {
			return v, err
		}
		return cty.StringVal(s), nil
	case ty.IsListType() || ty.IsSetType() || ty.IsTupleType():
		if v.LengthInt() == 0 {
			return v, nil
		}
		var elems []cty.Value
		for it := v.ElementIterator(); it.Next(); {
			_, e := it.Element()
			r, err := mapStrings(e, fn)
			if err != nil {
				return v, err
			}
			elems = append(elems, r)
		}
		switch {
		case ty.IsListType():
			return cty.ListVal(elems), nil
		case ty.IsSetType():
			return cty.SetVal(elems), nil
		}
		return cty.TupleVal(elems), nil
	case ty.IsMapType() || ty.IsObjectType():
		if v.LengthInt() == 0 {
			return v, nil
		}
		m := map[string]cty.Value{}
		for it := v.ElementIterator(); it.Next(); {
			k, e := it.Element()
			r, err := mapStrings(e, fn)
			if err != nil {
				return v, err
			}
			m[k.AsString()] = r
		}
		if ty.IsMapType() {
			return cty.MapVal(m), nil
		}
		return cty.ObjectVal(m), nil
	}
	return v, nil
}

// checkTemplates validates the template syntax of every string in v and
// reports whether one holds a {{ key }} action.
func checkTemplates(v cty.Value) (usesKey bool, err error) {
	_, err = mapStrings(v, func(s string) (string, error) {
		if !strings.Contains(s, "{{") {
			return s, nil
		}
		if _, err := parseTemplate(s); err != nil {
			return s, err
		}
		usesKey = usesKey || hasKey(s)
		return s, nil
	})
	return usesKey, err
}

// resolveBody renders every string of a provider body. onErr is called with
// the field path (relative to the block) and where it was written.
func resolveBody(b ProviderBody, key keyLookup, path string, onErr func(field string, rng *hcl.Range, err error)) ProviderBody {
	out := ProviderBody{Attrs: make(map[string]cty.Value, len(b.Attrs))}
	for _, name := range sortedNames(b.Attrs) {
		v, err := mapStrings(b.Attrs[name], func(s string) (string, error) { return render(s, key) })
		if err != nil {
			var rng *hcl.Range
			if r, ok := b.rng[name]; ok {
				rng = &r
			}
			onErr(join(path, name), rng, err)
			continue
		}
		out.Attrs[name] = v
	}
	for _, nb := range b.Blocks {
		nb.Body = resolveBody(nb.Body, key, join(path, nb.Type), onErr)
		out.Blocks = append(out.Blocks, nb)
	}
	return out
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// resolveProvider renders every dynamic value of a provider block: its
// arguments, nested blocks and task_env. It reports each problem through
// onErr and returns the resolved block.
func resolveProvider(p Provider, key keyLookup, onErr func(field string, rng *hcl.Range, err error)) Provider {
	p.Args = resolveBody(p.Args, key, "", onErr)
	if p.TaskEnv != nil {
		env := make(map[string]string, len(p.TaskEnv))
		for _, k := range sortedNames(p.TaskEnv) {
			s, err := render(p.TaskEnv[k], key)
			if err != nil {
				var rng *hcl.Range
				if r, ok := p.taskEnvRng[k]; ok {
					rng = &r
				}
				onErr("task_env."+k, rng, err)
				continue
			}
			env[k] = s
		}
		p.TaskEnv = env
	}
	p.pending = false
	p.taskEnvRng = nil
	return p
}

// KVGetter reads one Consul KV key for ResolveProviders: its raw value and
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

// NeedsResolution reports whether the block still holds {{ key }}
// templates, i.e. the configuration has not been through ResolveProviders.
func (p *Provider) NeedsResolution() bool { return p.pending }

// ResolveProviders resolves the {{ key "path" }} values (and the other
// templates of the same blocks) of every terraform_provider block that has
// them, reading Consul KV through kv: once, at start-up, as CTS does. Blocks
// are resolved in parallel, each within ProviderResolveTimeout. It does not
// touch Consul when no block needs it. The error, like Load's, is an *Error
// or Errors naming the file, line and field; it never holds a value.
func ResolveProviders(ctx context.Context, cfg *Config, kv KVGetter) error {
	var idx []int
	for i := range cfg.Providers {
		if cfg.Providers[i].pending {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	var (
		mu   sync.Mutex
		errs []*Error
		wg   sync.WaitGroup
	)
	for _, i := range idx {
		p := cfg.Providers[i]
		wg.Go(func() {
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
				if kv == nil {
					return "", fmt.Errorf("cannot read Consul KV key %s: no Consul client", where)
				}
				val, ok, err := kv(bctx, path, dc)
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
			block := blockName(p)
			var perrs []*Error
			res := resolveProvider(p, key, func(field string, rng *hcl.Range, err error) {
				e := &Error{Range: p.Range, Field: join(block, field), Msg: err.Error()}
				if rng != nil {
					e.Range = *rng
				}
				perrs = append(perrs, e)
			})
			mu.Lock()
			defer mu.Unlock()
			if len(perrs) > 0 {
				errs = append(errs, perrs...)
				return
			}
			cfg.Providers[i] = res
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		sortErrors(errs, cfg.Files)
		return toError(errs)
	}
	return nil
}

// blockName is how a provider block is written in field paths.
func blockName(p Provider) string {
	return "terraform_provider " + strconv.Quote(p.Name)
}
