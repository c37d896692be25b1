// Package redact hides secret values in what the daemon writes and serves:
// a Redactor replaces them in text (run logs, event log tails,
// notifications, API answers) and a RedactingHandler in every log record.
// The secrets come from the configuration (config.Config.Secrets) and from
// Vault as it rotates them.
package redact

import (
	"encoding/base64"
	"encoding/json"
	"maps"
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
// nil *Redactor change nothing (Add and Protect leave them so); use
// NewRedactor, even with no secrets, for one that can grow. Add extends it (a Vault secret that
// rotates): every holder of the pointer, and every view derived from it
// (ForTask, Protecting), sees the new secrets.
//
// A Redactor is a view of a set of secrets shared by all the views of one
// NewRedactor: the plain view (NewRedactor's) replaces every secret; a
// task's view (ForTask) also shows as written the strings protected for
// that task (Protect), and only those; Protecting gives a view of its own
// protected strings.
type Redactor struct {
	c    *core
	task string   // ForTask: the task whose protected strings this view shows
	own  *protSet // Protecting: this view's own protected strings
}

// core is what the views of one NewRedactor share.
type core struct {
	mu sync.Mutex // serialises Add and Protect
	// secrets are the ones given so far; plain is their matcher (nil:
	// nothing to redact), replaced by Add.
	secrets []string
	plain   atomic.Pointer[matcher]
	// tasks holds each task's protected strings (Protect), replaced
	// whole (copy on write) on each change, so that a view reads it
	// without a lock.
	tasks atomic.Pointer[map[string]*protSet]
}

// protSet is a set of protected strings and the matcher they make with
// the current secrets, built on first use and kept until the secrets
// change (a new plain matcher) or the set is replaced.
type protSet struct {
	values []string
	built  atomic.Pointer[derived]
}

// derived is the matcher of a protSet, built from base (the plain matcher
// of that time).
type derived struct {
	base, m *matcher
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
	c := &core{secrets: slices.Clone(secrets)}
	c.plain.Store(newReplacer(secrets))
	return &Redactor{c: c}
}

// Add makes r redact more secrets too (those it had stay redacted), in
// every view.
func (r *Redactor) Add(secrets ...string) {
	if r == nil || r.c == nil {
		return
	}
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.secrets)
	for _, s := range secrets {
		if len(s) >= MinSecretLength && !slices.Contains(c.secrets, s) {
			c.secrets = append(c.secrets, s)
		}
	}
	if len(c.secrets) == n {
		return
	}
	c.plain.Store(newReplacer(c.secrets))
}

// ForTask returns the view of r for the text that belongs to the task
// named name: its plan, its run logs, its terraform.log, its held plan,
// its events. It redacts what r does, except that the strings protected
// for that task (Protect) are shown as written. The name "" is the plain
// view. A view is cheap: the matcher of a task is built once and kept
// until its protected strings or the secrets change.
func (r *Redactor) ForTask(name string) *Redactor {
	if r == nil {
		return nil
	}
	return &Redactor{c: r.c, task: name}
}

// Protect sets the strings shown as written in the task's view (ForTask)
// wherever one appears whole, even when it contains a secret: the string
// values of the variables of a task created through the API or read from
// Consul KV, which the task's definition shows in clear to every API
// reader anyway. Without it the output of a task whose variable a request
// set would answer whether the value was a secret ("[redacted]" or not):
// an oracle for whoever can create tasks (docs/security.md). The strings
// replace those the task had; none drops the task's (a deleted task).
// Every other view, the plain one and other tasks', still redacts them,
// and so does the task's own view a secret found elsewhere or inside a
// longer string that is not protected.
func (r *Redactor) Protect(task string, values ...string) {
	if r == nil || r.c == nil {
		return
	}
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.tasks.Load()
	var cur *protSet
	if old != nil {
		cur = (*old)[task]
	}
	set := protectable(values)
	if len(set) == 0 && cur == nil || cur != nil && slices.Equal(cur.values, set) {
		return // unchanged: the task keeps its matcher
	}
	next := map[string]*protSet{}
	if old != nil {
		next = maps.Clone(*old)
	}
	if len(set) == 0 {
		delete(next, task)
	} else {
		next[task] = &protSet{values: set}
	}
	c.tasks.Store(&next)
}

// Protecting returns a view of r that shows the given strings as written
// (as Protect does for a task), for text that belongs to no task kept:
// the plan of a task inspected before it is created. Its matcher is built
// on first use.
func (r *Redactor) Protecting(values ...string) *Redactor {
	if r == nil {
		return nil
	}
	return &Redactor{c: r.c, own: &protSet{values: protectable(values)}}
}

// protectable returns the strings of values that can contain a secret,
// sorted, without duplicates.
func protectable(values []string) []string {
	var out []string
	for _, v := range values {
		if len(v) >= MinSecretLength {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// replacer is the current replacer; nil when there is nothing to redact.
func (r *Redactor) replacer() *strings.Replacer {
	if m := r.matcher(); m != nil {
		return m.rep
	}
	return nil
}

// matcher is the view's current matcher; nil when there is nothing to
// redact.
func (r *Redactor) matcher() *matcher {
	if r == nil || r.c == nil {
		return nil
	}
	plain := r.c.plain.Load()
	if plain == nil {
		return nil
	}
	set := r.own
	if set == nil && r.task != "" {
		if tasks := r.c.tasks.Load(); tasks != nil {
			set = (*tasks)[r.task]
		}
	}
	if set == nil {
		return plain
	}
	if d := set.built.Load(); d != nil && d.base == plain {
		return d.m
	}
	m := plain.protecting(set.values)
	set.built.Store(&derived{base: plain, m: m})
	return m
}

func newReplacer(secrets []string) *matcher {
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
	return build(compactLongestFirst(all), nil)
}

// protecting returns the matcher of m's secrets that leaves the given
// strings as written; m itself when none of them contains a secret.
func (m *matcher) protecting(protected []string) *matcher {
	for _, p := range protected {
		esc := jsonEscaped(p)
		for _, s := range m.secrets {
			if strings.Contains(p, s) || strings.Contains(esc, s) {
				return build(m.secrets, protected)
			}
		}
	}
	return m
}

// build compiles the secret patterns (longest first, no duplicates) and
// the protected strings into a matcher.
func build(secretSet, protected []string) *matcher {
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
