// Package redact hides secret values in what the daemon writes and serves:
// a Redactor replaces them in text (run logs, event log tails,
// notifications, API answers) and a RedactingHandler in every log record.
// The secrets come from the configuration (config.Config.Secrets) and from
// Vault as it rotates them.
package redact

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	// by Add, which Redact uses when set.
	secrets []string
	next    atomic.Pointer[matcher]
}

// matcher is what a set of secrets compiles to: the replacer, and the
// patterns it replaces (each secret and its escaped form), which a Writer
// needs to find a secret cut across two writes.
type matcher struct {
	rep      *strings.Replacer
	patterns []string
	longest  int
}

// NewRedactor returns a Redactor for the given secrets (see
// config.Config.Secrets). Each secret is also matched as it appears inside a JSON
// or HCL string (quotes and backslashes escaped), the way Terraform prints
// values.
func NewRedactor(secrets []string) *Redactor {
	red := &Redactor{secrets: slices.Clone(secrets)}
	red.r = newReplacer(secrets)
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
	r.next.Store(newReplacer(r.secrets))
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

func newReplacer(secrets []string) *matcher {
	var all []string
	for _, s := range secrets {
		if len(s) < MinSecretLength {
			continue
		}
		all = append(all, s)
		if b, err := json.Marshal(s); err == nil {
			if esc := string(b[1 : len(b)-1]); esc != s {
				all = append(all, esc)
			}
		}
	}
	if len(all) == 0 {
		return nil
	}
	// Longest first: a secret that contains another is replaced whole.
	slices.SortFunc(all, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	all = slices.Compact(all)
	pairs := make([]string, 0, 2*len(all))
	for _, s := range all {
		pairs = append(pairs, s, Redacted)
	}
	return &matcher{rep: strings.NewReplacer(pairs...), patterns: all, longest: len(all[0])}
}

// Redact returns s with every secret replaced.
func (r *Redactor) Redact(s string) string {
	rep := r.replacer()
	if rep == nil {
		return s
	}
	return rep.Replace(s)
}
