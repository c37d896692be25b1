package config

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
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
//	{{ with secret "path" }}{{ .Data.data.k }}{{ end }}
//	                    a Vault secret (secrets.go); "k=v" arguments after the
//	                    path write them and use the answer
//
// A string may hold several actions and text around them; "{{-" and "-}}"
// trim the white space next to the action, as in Go templates. Values are
// secrets: no error message ever quotes one, or quotes an action's text.
//
// Load resolves blocks that use only {{ env }} at once. A block with at least
// one {{ key }} or {{ with secret }} keeps every string as written until
// ResolveProviders (or ResolveProvidersWith), which needs a Consul client
// and a Vault reader, resolves the whole block in one pass: a resolved
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
	partSecret // {{ with secret "path" ... }} body {{ end }}
	partField  // {{ .Data.data.k }}, inside a with secret
)

// tmplPart is a piece of a templated string: literal text, or an action and
// its argument (for key: the KV path and an optional datacenter; for secret:
// the Vault path, its "k=v" arguments and the body between with and end;
// for field: the names after the dot).
type tmplPart struct {
	kind   partKind
	text   string
	dc     string
	params []string
	fields []string
	body   []tmplPart
}

// actionRE matches the inside of a supported action: a function and one
// quoted (Go syntax) argument.
var actionRE = regexp.MustCompile("^(env|key)\\s+(\"(?:[^\"\\\\]|\\\\.)*\"|`[^`]*`)$")

// withSecretRE matches the start of a Vault section and captures its
// arguments (quoted strings).
var withSecretRE = regexp.MustCompile(`^with\s+secret\b\s*(.*)$`)

// bareSecretRE matches a secret call that is not the head of a with.
var bareSecretRE = regexp.MustCompile(`^\(?\s*secret\b`)

// fieldRE matches a field reference: .Data.data.key
var fieldRE = regexp.MustCompile(`^(\.[A-Za-z0-9_-]+)+$`)

const supportedActions = `only {{ env "NAME" }}, {{ key "path" }} and {{ with secret "path" }}...{{ .Data.data.key }}...{{ end }} are`

// quotedArgs splits space-separated quoted (Go syntax) strings.
func quotedArgs(s string) ([]string, bool) {
	var out []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		q, err := strconv.QuotedPrefix(s)
		if err != nil {
			return nil, false
		}
		v, err := strconv.Unquote(q)
		if err != nil {
			return nil, false
		}
		out = append(out, v)
		s = s[len(q):]
		if s != "" && s[0] != ' ' && s[0] != '\t' {
			return nil, false
		}
	}
	return out, true
}

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
	// stack holds the parts of each open with secret section; the bottom
	// is the string itself.
	stack := [][]tmplPart{nil}
	heads := []tmplPart{}
	add := func(p tmplPart) { stack[len(stack)-1] = append(stack[len(stack)-1], p) }
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
			add(tmplPart{kind: partText, text: text})
		}
		last = l[1]
		trimNext = trimAfter
		if m := withSecretRE.FindStringSubmatch(inner); m != nil {
			if len(stack) > 1 {
				return nil, fmt.Errorf("template action %d: {{ with secret }} cannot be nested in another one", i+1)
			}
			args, ok := quotedArgs(m[1])
			if !ok || len(args) == 0 {
				return nil, fmt.Errorf(`template action %d: with secret needs a quoted Vault path, then optional quoted "key=value" arguments`, i+1)
			}
			path := strings.Trim(args[0], "/")
			if path == "" {
				return nil, fmt.Errorf("template action %d: secret needs a Vault path", i+1)
			}
			for _, a := range args[1:] {
				if k, _, ok := strings.Cut(a, "="); !ok || k == "" {
					return nil, fmt.Errorf(`template action %d: secret arguments after the path must be "key=value"`, i+1)
				}
			}
			heads = append(heads, tmplPart{kind: partSecret, text: path, params: args[1:]})
			stack = append(stack, nil)
			continue
		}
		switch {
		case inner == "end":
			if len(stack) == 1 {
				return nil, fmt.Errorf("template action %d: {{ end }} without a {{ with secret }}", i+1)
			}
			h := heads[len(heads)-1]
			h.body = stack[len(stack)-1]
			heads, stack = heads[:len(heads)-1], stack[:len(stack)-1]
			add(h)
			continue
		case inner == "else" || strings.HasPrefix(inner, "else "):
			return nil, fmt.Errorf("template action %d: {{ else }} is not supported in {{ with secret }}", i+1)
		case fieldRE.MatchString(inner):
			if len(stack) == 1 {
				return nil, fmt.Errorf("template action %d: a field (.Data...) can only be used inside {{ with secret \"path\" }}...{{ end }}", i+1)
			}
			add(tmplPart{kind: partField, fields: strings.Split(inner[1:], ".")})
			continue
		case bareSecretRE.MatchString(inner):
			return nil, fmt.Errorf(`template action %d: write a Vault secret as {{ with secret "path" }}{{ .Data.data.key }}{{ end }}`, i+1)
		}
		m := actionRE.FindStringSubmatch(inner)
		if m == nil {
			return nil, fmt.Errorf(`template action %d is not supported: `+supportedActions, i+1)
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
			add(tmplPart{kind: partEnv, text: arg})
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
			add(tmplPart{kind: partKey, text: path, dc: dc})
		}
	}
	rest := s[last:]
	if trimNext {
		rest = strings.TrimLeft(rest, " \t\r\n")
	}
	if strings.Contains(rest, "{{") {
		return nil, errors.New(`unterminated template action: "{{" without a closing "}}"`)
	}
	if len(stack) > 1 {
		return nil, errors.New(`{{ with secret }} without its {{ end }}`)
	}
	if rest != "" {
		add(tmplPart{kind: partText, text: rest})
	}
	return stack[0], nil
}

// hasKey reports whether s holds an action that Load cannot resolve: a
// {{ key }} (Consul) or a {{ with secret }} (Vault). s must parse.
func hasKey(s string) bool {
	return hasKind(s, partKey) || hasKind(s, partSecret)
}

// hasKind reports whether s holds a part of kind k (s must parse).
func hasKind(s string, k partKind) bool {
	if !strings.Contains(s, "{{") {
		return false
	}
	parts, err := parseTemplate(s)
	if err != nil {
		return false
	}
	var walk func([]tmplPart) bool
	walk = func(ps []tmplPart) bool {
		for _, p := range ps {
			if p.kind == k || walk(p.body) {
				return true
			}
		}
		return false
	}
	return walk(parts)
}

// keyLookup reads one Consul KV value for a {{ key }} action.
type keyLookup func(path, dc string) (string, error)

// render resolves a templated string. key is only called for {{ key }}
// actions; with key nil such an action is an error.
func render(s string, key keyLookup) (string, error) {
	return renderWith(s, lookups{key: key})
}

// lookups are the sources render reads: Consul KV for {{ key }}, Vault for
// {{ with secret }} (nil: such an action is an error).
type lookups struct {
	key    keyLookup
	secret func(path string, params []string) (*Secret, error)
}

// renderWith resolves a templated string with the given sources.
func renderWith(s string, l lookups) (string, error) {
	if !strings.Contains(s, "{{") {
		return s, nil
	}
	parts, err := parseTemplate(s)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := renderParts(&b, parts, l, nil); err != nil {
		return "", err
	}
	return b.String(), nil
}

// renderParts writes parts to b; cur is the secret of the enclosing with.
func renderParts(b *strings.Builder, parts []tmplPart, l lookups, cur *secretScope) error {
	for _, p := range parts {
		switch p.kind {
		case partText:
			b.WriteString(p.text)
		case partEnv:
			b.WriteString(os.Getenv(p.text))
		case partKey:
			if l.key == nil {
				return errors.New("{{ key }} needs Consul: the configuration must be resolved with ResolveProviders")
			}
			v, err := l.key(p.text, p.dc)
			if err != nil {
				return err
			}
			b.WriteString(v)
		case partSecret:
			if l.secret == nil {
				return errMissingVault
			}
			sec, err := l.secret(p.text, p.params)
			if err != nil {
				return err
			}
			if err := renderParts(b, p.body, l, &secretScope{path: p.text, s: sec}); err != nil {
				return err
			}
		case partField:
			v, err := cur.field(p.fields)
			if err != nil {
				return err
			}
			b.WriteString(v)
		}
	}
	return nil
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
// reports whether one holds a {{ key }} or {{ with secret }} action (which
// Load cannot resolve).
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
func resolveBody(b ProviderBody, l lookups, path string, onErr func(field string, rng *hcl.Range, err error)) ProviderBody {
	out := ProviderBody{Attrs: make(map[string]cty.Value, len(b.Attrs))}
	for _, name := range sortedNames(b.Attrs) {
		v, err := mapStrings(b.Attrs[name], func(s string) (string, error) { return renderWith(s, l) })
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
		nb.Body = resolveBody(nb.Body, l, join(path, nb.Type), onErr)
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
	return resolveProviderWith(p, lookups{key: key}, onErr)
}

func resolveProviderWith(p Provider, l lookups, onErr func(field string, rng *hcl.Range, err error)) Provider {
	p.Args = resolveBody(p.Args, l, "", onErr)
	if p.TaskEnv != nil {
		env := make(map[string]string, len(p.TaskEnv))
		for _, k := range sortedNames(p.TaskEnv) {
			s, err := renderWith(p.TaskEnv[k], l)
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

// NeedsResolution reports whether the block still holds {{ key }} or
// {{ with secret }} templates, i.e. it has not been resolved by
// ResolveProviders (or is waiting for Vault).
func (p *Provider) NeedsResolution() bool { return p.pending }

// ResolveProviders resolves the {{ key "path" }} values (and the other
// templates of the same blocks) of every terraform_provider block that has
// them, reading Consul KV through kv: once, at start-up, as CTS does. Blocks
// are resolved in parallel, each within ProviderResolveTimeout. It does not
// touch Consul when no block needs it. The error, like Load's, is an *Error
// or Errors naming the file, line and field; it never holds a value. A
// block with {{ with secret }} is an error here: use ResolveProvidersWith.
func ResolveProviders(ctx context.Context, cfg *Config, kv KVGetter) error {
	_, err := ResolveProvidersWith(ctx, cfg, Lookups{KV: kv})
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

// ResolveProvidersWith is ResolveProviders with Vault: it resolves every
// block that holds {{ key }} or {{ with secret }} templates. A block whose
// only problems are that Vault cannot be reached (errors that wrap
// ErrVaultUnavailable) is left unresolved and returned in waiting, by
// reference ("name" or "name.alias"), with the reason: the caller retries
// it later with ResolveProvider. Every other problem is in err, as in
// ResolveProviders.
func ResolveProvidersWith(ctx context.Context, cfg *Config, l Lookups) (waiting map[string]error, err error) {
	var idx []int
	for i := range cfg.Providers {
		if cfg.Providers[i].pending {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil, nil
	}
	var (
		mu   sync.Mutex
		errs []*Error
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
		sortErrors(errs, cfg.Files)
		return waiting, toError(errs)
	}
	return waiting, nil
}

// ResolveProvider resolves one provider block again from its templates, as
// written: a block that ResolveProvidersWith left waiting for Vault, or a
// resolved block whose Vault secrets changed (the reader returns the new
// values). A block without {{ key }} or {{ with secret }} is returned as it
// is. The error is an *Error or Errors naming the field; it wraps
// ErrVaultUnavailable when Vault alone is the problem.
func ResolveProvider(ctx context.Context, p Provider, l Lookups) (Provider, error) {
	switch {
	case p.tmpl != nil:
		p = *p.tmpl
	case !p.pending:
		return p, nil
	}
	res, perrs, transient := resolveOne(ctx, p, l)
	if len(perrs) == 0 {
		return res, nil
	}
	if transient != nil {
		return p, fmt.Errorf("%w: %w", toError(perrs), ErrVaultUnavailable)
	}
	return p, toError(perrs)
}

// resolveOne resolves one block within resolveTimeout. transient is the
// first error when every error wraps ErrVaultUnavailable.
func resolveOne(ctx context.Context, p Provider, l Lookups) (res Provider, errs []*Error, transient error) {
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
	lk := lookups{key: key}
	if l.Secret != nil {
		lk.secret = func(path string, params []string) (*Secret, error) {
			k := SecretKey(path, params)
			if !slices.Contains(used, k) {
				used = append(used, k)
			}
			s, err := l.Secret(bctx, path, params)
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
	block := blockName(p)
	allTransient := true
	res = resolveProviderWith(p, lk, func(field string, rng *hcl.Range, err error) {
		e := &Error{Range: p.Range, Field: join(block, field), Msg: err.Error()}
		if rng != nil {
			e.Range = *rng
		}
		errs = append(errs, e)
		if !errors.Is(err, ErrVaultUnavailable) {
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
		orig := p
		res.tmpl = &orig
		slices.Sort(used)
		res.secrets = used
	}
	return res, nil, nil
}

// blockName is how a provider block is written in field paths.
func blockName(p Provider) string {
	return "terraform_provider " + strconv.Quote(p.Name)
}
