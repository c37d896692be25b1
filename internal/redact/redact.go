// Package redact hides secret values in what the daemon writes and serves:
// a Redactor replaces them in text (run logs, event log tails,
// notifications, API answers) and a RedactingHandler in every log record.
// The secrets come from the configuration (config.Config.Secrets) and from
// Vault as it rotates them.
package redact

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// MinSecretLength is the shortest value a Redactor hides: shorter ones
// ("us", "1") would blank out ordinary words of the output.
const MinSecretLength = 4

// Redacted replaces a secret in served text.
const Redacted = "[redacted]"

// Redactor replaces secret values with "[redacted]". The zero value and a
// nil *Redactor change nothing. Add extends it (a Vault secret that
// rotates): every holder of the pointer sees the new secrets.
type Redactor struct {
	r  *matcher
	mu sync.Mutex
	// secrets are the ones given so far; next holds the matcher built
	// by Add or Protect, which Redact uses when set.
	secrets []string
	// protected are strings shown as written even where they contain a
	// secret (Protect); only those that contain one are kept.
	protected []string
	next      atomic.Pointer[matcher]
}

// matcher is what a set of secrets compiles to: the replacer, and the
// patterns it replaces (each secret and its escaped form), which a Writer
// needs to find a secret cut across two writes.
type matcher struct {
	rep      *strings.Replacer
	patterns []string
	longest  int
	secrets  []string // the secret patterns alone (not the protected strings)
}

// NewRedactor returns a Redactor for the given secrets (see
// config.Config.Secrets). Each secret is also matched as it appears inside a JSON
// or HCL string (quotes and backslashes escaped), the way Terraform prints
// values.
//
// The value of an Authorization-style header ("Bearer <token>", "Basic
// <base64>", "Token <token>"...) is matched whole and by its credential
// alone, which is what leaks when a module or a log prints the token
// without its scheme; a Basic credential also by its decoded "user:pass"
// and password.
func NewRedactor(secrets []string) *Redactor {
	red := &Redactor{secrets: slices.Clone(secrets)}
	red.r = newReplacer(secrets, nil)
	return red
}

// Add makes r redact more secrets too (those it had stay redacted).
func (r *Redactor) Add(secrets ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.secrets)
	for _, s := range secrets {
		if len(s) >= MinSecretLength && !slices.Contains(r.secrets, s) {
			r.secrets = append(r.secrets, s)
		}
	}
	if len(r.secrets) == n {
		return
	}
	r.next.Store(newReplacer(r.secrets, r.protected))
}

// Protect makes r show the given strings as written wherever one appears
// whole, even when it contains a secret: the string values of a task's
// variables, which the task's definition shows in clear to every API
// reader anyway. Without it the output of a task whose variable a
// request set would answer whether the value was a secret ("[redacted]"
// or not): an oracle for whoever can create tasks (docs/security.md). A
// secret found elsewhere, or inside a longer string that is not
// protected, is still replaced. Only the strings that contain a secret
// at the time of the call are kept.
func (r *Redactor) Protect(values ...string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.matcherLocked()
	if m == nil {
		return
	}
	n := len(r.protected)
	for _, v := range values {
		if len(v) < MinSecretLength || slices.Contains(r.protected, v) {
			continue
		}
		for _, p := range m.secrets {
			if strings.Contains(v, p) {
				r.protected = append(r.protected, v)
				break
			}
		}
	}
	if len(r.protected) == n {
		return
	}
	r.next.Store(newReplacer(r.secrets, r.protected))
}

func (r *Redactor) matcherLocked() *matcher {
	if n := r.next.Load(); n != nil {
		return n
	}
	return r.r
}

// replacer is the current replacer; nil when there is nothing to redact.
func (r *Redactor) replacer() *strings.Replacer {
	if m := r.matcher(); m != nil {
		return m.rep
	}
	return nil
}

// matcher is the current matcher; nil when there is nothing to redact.
func (r *Redactor) matcher() *matcher {
	if r == nil {
		return nil
	}
	if n := r.next.Load(); n != nil {
		return n
	}
	return r.r
}

func newReplacer(secrets, protected []string) *matcher {
	var all []string
	add := func(s string) {
		if len(s) < MinSecretLength {
			return
		}
		all = append(all, s)
		if b, err := json.Marshal(s); err == nil {
			if esc := string(b[1 : len(b)-1]); esc != s {
				all = append(all, esc)
			}
		}
	}
	for _, s := range secrets {
		add(s)
		for _, c := range credentials(s) {
			add(c)
		}
	}
	if len(all) == 0 {
		return nil
	}
	secretSet := compactLongestFirst(all)
	// A protected string stands for itself: it is tried before the
	// secrets it contains (strings.Replacer tries, at each position, the
	// patterns in argument order), so a secret inside it is left alone.
	var prot []string
	for _, p := range protected {
		for _, q := range []string{p, jsonEscaped(p)} {
			for _, s := range secretSet {
				if strings.Contains(q, s) {
					prot = append(prot, q)
					break
				}
			}
		}
	}
	prot = compactLongestFirst(prot)
	pairs := make([]string, 0, 2*(len(secretSet)+len(prot)))
	patterns := make([]string, 0, len(secretSet)+len(prot))
	for _, p := range prot {
		pairs = append(pairs, p, p)
		patterns = append(patterns, p)
	}
	for _, s := range secretSet {
		pairs = append(pairs, s, Redacted)
		patterns = append(patterns, s)
	}
	longest := 0
	for _, p := range patterns {
		longest = max(longest, len(p))
	}
	return &matcher{rep: strings.NewReplacer(pairs...), patterns: patterns, longest: longest, secrets: secretSet}
}

// compactLongestFirst sorts longest first (a secret that contains another
// is replaced whole) and drops duplicates.
func compactLongestFirst(all []string) []string {
	slices.SortFunc(all, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	return slices.Compact(all)
}

func jsonEscaped(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		return s
	}
	return string(b[1 : len(b)-1])
}

// authSchemes are the Authorization schemes whose credential is registered
// alone too (lower case): HTTP's own and the common vendor ones.
var authSchemes = map[string]bool{"bearer": true, "basic": true, "token": true, "bot": true,
	"apikey": true, "api-key": true, "key": true, "sso-key": true, "ssws": true, "genietoken": true, "splunk": true}

// credentials returns the bare credential of an Authorization-style
// header value ("Bearer abc" gives "abc"; "Basic dXNlcjpwYXNz" gives the
// base64 text, "user:pass" and "pass"), nothing for another value.
func credentials(s string) []string {
	scheme, cred, ok := strings.Cut(strings.TrimSpace(s), " ")
	if !ok || scheme == "" {
		return nil
	}
	if !authSchemes[strings.ToLower(scheme)] {
		return nil // an ordinary value with a space in it
	}
	cred = strings.TrimSpace(cred)
	if cred == "" || strings.ContainsAny(cred, " \t") {
		return nil
	}
	out := []string{cred}
	if strings.EqualFold(scheme, "basic") {
		if dec, err := base64.StdEncoding.DecodeString(cred); err == nil && utf8.Valid(dec) {
			out = append(out, string(dec))
			if _, pass, ok := strings.Cut(string(dec), ":"); ok {
				out = append(out, pass)
			}
		}
	}
	return out
}

// Redact returns s with every secret replaced.
func (r *Redactor) Redact(s string) string {
	rep := r.replacer()
	if rep == nil {
		return s
	}
	return rep.Replace(s)
}
