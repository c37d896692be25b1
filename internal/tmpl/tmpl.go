// Package tmpl is the template syntax that configuration strings may hold
// (CTS syntax):
//
//	{{ env "NAME" }}    an environment variable of the ctsync process
//	{{ key "path" }}    a Consul KV value ("path@dc" reads another datacenter)
//	{{ with secret "path" }}{{ .Data.data.k }}{{ end }}
//	                    a Vault secret; "k=v" arguments after the path
//	                    write them and use the answer
//
// A string may hold several actions and text around them; "{{-" and "-}}"
// trim the white space next to the action, as in Go templates. Values are
// secrets: no error message ever quotes one, or quotes an action's text.
//
// Check parses; Render renders with the sources it is given (Lookups):
// package config checks syntax and renders {{ env }} while decoding,
// package resolve renders {{ key }} and {{ with secret }} at start-up. The
// package reads neither Consul nor Vault itself.
package tmpl

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/zclconf/go-cty/cty"
)

// actionsRE matches consul-template style dynamic syntax ({{ ... }}).
var actionsRE = regexp.MustCompile(`(?s)\{\{.*?\}\}`)

// HasAction reports whether s holds template syntax ({{ ... }}).
func HasAction(s string) bool { return actionsRE.MatchString(s) }

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
	locs := actionsRE.FindAllStringIndex(s, -1)
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

// Check parses s and returns its first syntax error. It never quotes s or
// an action in its errors.
func Check(s string) error {
	if !strings.Contains(s, "{{") {
		return nil
	}
	_, err := parseTemplate(s)
	return err
}

// NeedsLookup reports whether s holds an action that decoding cannot
// resolve: a {{ key }} (Consul) or a {{ with secret }} (Vault). s must
// parse.
func NeedsLookup(s string) bool {
	return hasKind(s, partKey) || hasKind(s, partSecret)
}

// UsesKey reports whether s holds a {{ key }} action (s must parse).
func UsesKey(s string) bool { return hasKind(s, partKey) }

// UsesSecret reports whether s holds a {{ with secret }} section (s must
// parse).
func UsesSecret(s string) bool { return hasKind(s, partSecret) }

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

// Lookups are the sources Render reads: Consul KV for {{ key }} (path and
// datacenter, empty for the agent's own), Vault for {{ with secret }}. A
// nil source makes its action an error. {{ env }} reads the process
// environment.
type Lookups struct {
	Key    func(path, dc string) (string, error)
	Secret func(path string, params []string) (*Secret, error)
}

// Render resolves a templated string with the given sources. A string
// without "{{" is returned as it is.
func Render(s string, l Lookups) (string, error) {
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
func renderParts(b *strings.Builder, parts []tmplPart, l Lookups, cur *secretScope) error {
	for _, p := range parts {
		switch p.kind {
		case partText:
			b.WriteString(p.text)
		case partEnv:
			b.WriteString(os.Getenv(p.text))
		case partKey:
			if l.Key == nil {
				return errors.New("{{ key }} needs Consul: the configuration must be resolved with resolve.Providers")
			}
			v, err := l.Key(p.text, p.dc)
			if err != nil {
				return err
			}
			b.WriteString(v)
		case partSecret:
			if l.Secret == nil {
				return ErrMissingVault
			}
			sec, err := l.Secret(p.text, p.params)
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

// MapStrings applies fn to every string inside v, keeping v's shape.
func MapStrings(v cty.Value, fn func(string) (string, error)) (cty.Value, error) {
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
			r, err := MapStrings(e, fn)
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
			r, err := MapStrings(e, fn)
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

// CheckValue validates the template syntax of every string in v and
// reports whether one holds a {{ key }} or {{ with secret }} action (which
// decoding cannot resolve).
func CheckValue(v cty.Value) (usesKey bool, err error) {
	_, err = MapStrings(v, func(s string) (string, error) {
		if !strings.Contains(s, "{{") {
			return s, nil
		}
		if _, err := parseTemplate(s); err != nil {
			return s, err
		}
		usesKey = usesKey || NeedsLookup(s)
		return s, nil
	})
	return usesKey, err
}

// Secret is a Vault secret as a template sees it: {{ .Data.data.key }} for
// KV version 2, {{ .Data.key }} for KV version 1 and most dynamic secrets,
// and {{ .LeaseID }}, {{ .LeaseDuration }}, {{ .Renewable }}.
type Secret struct {
	RequestID     string
	LeaseID       string
	LeaseDuration int
	Renewable     bool
	Data          map[string]any
	Warnings      []string
}

// ErrVaultUnavailable marks errors of a Vault that cannot be reached.
var ErrVaultUnavailable = errors.New("vault is unavailable")

// ErrMissingVault is CTS's error for secrets without a vault block.
var ErrMissingVault = errors.New("detected dynamic configuration using Vault: missing Vault configuration")

// SecretKey identifies a secret request: its path and arguments.
func SecretKey(path string, params []string) string {
	if len(params) == 0 {
		return path
	}
	return path + "\x00" + strings.Join(params, "\x00")
}

// SplitSecretKey is the inverse of SecretKey.
func SplitSecretKey(key string) (path string, params []string) {
	parts := strings.Split(key, "\x00")
	return parts[0], parts[1:]
}

// secretScope is the secret of an enclosing {{ with secret }}.
type secretScope struct {
	path string
	s    *Secret
}

// field renders {{ .A.b.c }} against the secret. It never quotes a value in
// its errors.
func (sc *secretScope) field(names []string) (string, error) {
	where := func(n int) string { return "." + strings.Join(names[:n], ".") }
	var cur any
	switch names[0] {
	case "Data":
		cur = sc.s.Data
	case "LeaseID":
		cur = sc.s.LeaseID
	case "LeaseDuration":
		cur = sc.s.LeaseDuration
	case "Renewable":
		cur = sc.s.Renewable
	case "RequestID":
		cur = sc.s.RequestID
	case "Warnings":
		cur = sc.s.Warnings
	default:
		return "", fmt.Errorf("secret %q: %s is not a field of a secret (use .Data, .LeaseID, .LeaseDuration or .Renewable)", sc.path, where(1))
	}
	for i, n := range names[1:] {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", fmt.Errorf("secret %q: %s is not a map", sc.path, where(i+1))
		}
		v, ok := m[n]
		if !ok {
			return "", fmt.Errorf("secret %q has no value at %s", sc.path, where(i+2))
		}
		cur = v
	}
	switch v := cur.(type) {
	case nil:
		return "", fmt.Errorf("secret %q has no value at %s", sc.path, where(len(names)))
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		return strconv.FormatBool(v), nil
	case int:
		return strconv.Itoa(v), nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return "", fmt.Errorf("secret %q: the value at %s cannot be written as text", sc.path, where(len(names)))
		}
		return string(b), nil
	}
}
