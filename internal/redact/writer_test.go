package redact

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// TestWriterSplitSecrets: whatever the write boundaries, what reaches the
// file is the text redacted as a whole, and no secret (nor its JSON form)
// is in it, even cut in two.
func TestWriterSplitSecrets(t *testing.T) {
	secrets := []string{"T4skEnv-S3cret-0123", "acl-9f8e7d6c", `pa"ss\word`, "abcabcabX"}
	red := NewRedactor(secrets)
	text := "export TOKEN=acl-9f8e7d6c\nlocal-exec: T4skEnv-S3cret-0123 and T4skEnv-S3cret-012 (not whole)\n" +
		`  + password = "pa\"ss\\word"` + "\n" + "abcabcabcabcabX abcab\nT4skEnv-S3cret-0123"
	want := red.Redact(text)
	for _, s := range secrets {
		if strings.Contains(want, s) {
			t.Fatalf("the reference redaction leaves %q", s)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 2000; round++ {
		var out bytes.Buffer
		w := NewWriter(&out, red)
		for rest := text; rest != ""; {
			n := 1 + rng.IntN(min(len(rest), 12))
			if round == 0 {
				n = 1 // byte by byte
			}
			if k, err := w.Write([]byte(rest[:n])); k != n || err != nil {
				t.Fatalf("Write = %d, %v", k, err)
			}
			// Nothing written so far holds a secret, or its start cut
			// off where the writes stopped.
			for _, s := range []string{"T4skEnv-S3cret-0123", "acl-9f8e7d6c"} {
				if strings.Contains(out.String(), s) {
					t.Fatalf("round %d: %q written in clear: %q", round, s, out.String())
				}
			}
			rest = rest[n:]
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if out.String() != want {
			t.Fatalf("round %d:\n got %q\nwant %q", round, out.String(), want)
		}
	}
}

// TestWriterHoldsOnlyPossibleSecrets: text that cannot begin a secret is
// written at once (a log file follows the run as it goes).
func TestWriterHoldsOnlyPossibleSecrets(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out, NewRedactor([]string{"s3cr3t-value"}))
	_, _ = w.Write([]byte("Apply complete!\n"))
	if out.String() != "Apply complete!\n" {
		t.Errorf("held back: %q", out.String())
	}
	_, _ = w.Write([]byte("token s3cr"))
	if out.String() != "Apply complete!\ntoken " {
		t.Errorf("want the possible secret held: %q", out.String())
	}
	_, _ = w.Write([]byte("ew"))
	if out.String() != "Apply complete!\ntoken s3crew" {
		t.Errorf("not a secret after all, want it written: %q", out.String())
	}
	// A nil Redactor passes through; a pathological run of overlapping
	// beginnings is bounded.
	out.Reset()
	w = NewWriter(&out, nil)
	_, _ = w.Write([]byte("x"))
	if out.String() != "x" {
		t.Errorf("nil redactor: %q", out.String())
	}
	out.Reset()
	w = NewWriter(&out, NewRedactor([]string{"aaaaX"}))
	_, _ = w.Write(bytes.Repeat([]byte("a"), maxHeld+10))
	if out.Len() < maxHeld {
		t.Errorf("held %d bytes", maxHeld+10-out.Len())
	}
}

// TestWriterLearnsSecrets: a secret added to the Redactor (Vault rotation)
// is redacted from the next write on.
func TestWriterLearnsSecrets(t *testing.T) {
	var out bytes.Buffer
	red := NewRedactor(nil)
	w := NewWriter(&out, red)
	_, _ = w.Write([]byte("v1-rotated-secret\n"))
	red.Add("v2-rotated-secret")
	_, _ = w.Write([]byte("v2-rotated-secret\n"))
	_ = w.Flush()
	if got := out.String(); got != "v1-rotated-secret\n"+Redacted+"\n" {
		t.Errorf("got %q", got)
	}
}

func BenchmarkWriter(b *testing.B) {
	red := NewRedactor([]string{"T4skEnv-S3cret-0123456789abcdef", "acl-9f8e7d6c-0000-1111", "Pr0vider-S3cret-xyz"})
	line := []byte("module.x.null_resource.y (local-exec): Executing: [\"/bin/sh\" \"-c\" \"echo hello\"]\n")
	w := NewWriter(bytes.NewBuffer(nil), red)
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		_, _ = w.Write(line)
	}
}

// TestAuthorizationCredential: the secret of a header value such as
// "Bearer <token>" is also redacted alone (issue 35: a module that printed
// the bare token showed it in clear), a Basic one also decoded.
func TestAuthorizationCredential(t *testing.T) {
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("ops:hunter2-long"))
	r := NewRedactor([]string{"Bearer tok-0123456789abcdef", basic, "Managed here"})
	for in, want := range map[string]string{
		"auth: Bearer tok-0123456789abcdef":        "auth: " + Redacted,
		`token = "tok-0123456789abcdef"`:           `token = "` + Redacted + `"`,
		"user ops:hunter2-long, pass hunter2-long": "user " + Redacted + ", pass " + Redacted,
		"Managed by ctsync; here we go":            "Managed by ctsync; here we go", // not a scheme
	} {
		if got := r.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestProtect: a protected string (a task variable's value, shown in
// clear by the task's definition) is shown as written in the task's own
// view even when it contains a secret, so that the output of a task whose
// variable a request set does not answer whether the value is a secret;
// the secret elsewhere stays redacted, in a Writer too.
func TestProtect(t *testing.T) {
	const secret = "read-token-secret-0123456789"
	red := NewRedactor([]string{secret})
	red.Protect("a", "short", "not-a-secret-guess", secret)
	r := red.ForTask("a")
	if got := r.Redact(`+ guess = "not-a-secret-guess"`); got != `+ guess = "not-a-secret-guess"` {
		t.Errorf("a wrong guess: %q", got)
	}
	if got := r.Redact(`+ guess = "` + secret + `"`); strings.Contains(got, Redacted) {
		t.Errorf("the right guess is answered: %q", got)
	}
	// Elsewhere: a protected string equal to the secret protects every
	// occurrence of it in the task's view, which the task's definition
	// already shows; a secret not protected stays redacted.
	red2 := NewRedactor([]string{secret, "other-secret-value"})
	red2.Protect("a", "prefix-"+secret)
	r2 := red2.ForTask("a")
	if got := r2.Redact("a prefix-" + secret + " b " + secret + " c other-secret-value"); got != "a prefix-"+secret+" b "+Redacted+" c "+Redacted {
		t.Errorf("protected in context: %q", got)
	}
	var buf strings.Builder
	w := NewWriter(&buf, r2)
	text := "x prefix-" + secret + " y " + secret + "\n"
	for i := range len(text) { // one byte a write: the protected string is cut across writes
		w.Write([]byte{text[i]})
	}
	w.Flush()
	if got := buf.String(); got != "x prefix-"+secret+" y "+Redacted+"\n" {
		t.Errorf("writer: %q", got)
	}
}

// TestProtectScopedToTask: a string protected for task A is shown as
// written in A's view only: the plain view (the daemon's log) and task B's
// view still redact the secret it is, in text and through a Writer; a
// task's protections follow its current variables (replaced, dropped).
func TestProtectScopedToTask(t *testing.T) {
	const secret = "consul-acl-token-0123456789"
	red := NewRedactor([]string{secret})
	red.Protect("a", secret)
	line := `token = "` + secret + `"`
	want := `token = "` + Redacted + `"`
	if got := red.ForTask("a").Redact(line); got != line {
		t.Errorf("task a's view: %q", got)
	}
	for name, v := range map[string]*Redactor{"plain": red, "task b": red.ForTask("b"), `task ""`: red.ForTask("")} {
		if got := v.Redact(line); got != want {
			t.Errorf("%s view: %q", name, got)
		}
		var buf strings.Builder
		w := NewWriter(&buf, v)
		w.Write([]byte(line[:12]))
		w.Write([]byte(line[12:]))
		w.Flush()
		if buf.String() != want {
			t.Errorf("%s view, writer: %q", name, buf.String())
		}
	}
	// The logger's handler uses the plain view.
	var logged strings.Builder
	h := NewRedactingHandler(slog.NewTextHandler(&logged, nil))
	h.SetRedactor(red)
	slog.New(h).Info("run", "value", secret)
	if strings.Contains(logged.String(), secret) {
		t.Errorf("log: %s", logged.String())
	}
	// Replaced: the task's new variables only.
	red.Protect("a", "something-else")
	if got := red.ForTask("a").Redact(line); got != want {
		t.Errorf("after its variables changed: %q", got)
	}
	red.Protect("a", secret)
	red.Protect("a") // deleted
	if got := red.ForTask("a").Redact(line); got != want {
		t.Errorf("after the task was deleted: %q", got)
	}
	// An inspected task's view of its own.
	if got := red.Protecting(secret).Redact(line); got != line {
		t.Errorf("Protecting: %q", got)
	}
	if got := red.Redact(line); got != want {
		t.Errorf("plain after Protecting: %q", got)
	}
}

// TestProtectMatcherCached: a task's matcher is built once and kept while
// its protected strings and the secrets stay; Add rebuilds it (with the
// new secret) and another task's Protect does not.
func TestProtectMatcherCached(t *testing.T) {
	const secret = "consul-acl-token-0123456789"
	red := NewRedactor([]string{secret})
	red.Protect("a", "x-"+secret)
	red.Protect("c", "nothing-secret-here")
	a := red.ForTask("a")
	m1 := a.matcher()
	if m1 == red.matcher() {
		t.Fatal("task a uses the plain matcher")
	}
	if red.ForTask("a").matcher() != m1 {
		t.Error("rebuilt without a change")
	}
	if red.ForTask("c").matcher() != red.matcher() {
		t.Error("a task whose strings hold no secret: not the plain matcher")
	}
	red.Protect("b", "y-"+secret)
	red.Protect("a", "x-"+secret) // the same set
	if a.matcher() != m1 {
		t.Error("rebuilt after another task's change or the same set")
	}
	red.Add("second-secret-value")
	m2 := a.matcher()
	if m2 == m1 {
		t.Fatal("not rebuilt after Add")
	}
	if got := a.Redact("x-" + secret + " second-secret-value " + secret); got != "x-"+secret+" "+Redacted+" "+Redacted {
		t.Errorf("after Add: %q", got)
	}
	if a.matcher() != m2 {
		t.Error("rebuilt twice")
	}
}

// TestProtectConcurrent: views used while tasks' protections and the
// secrets change (run with -race).
func TestProtectConcurrent(t *testing.T) {
	const secret = "consul-acl-token-0123456789"
	red := NewRedactor([]string{secret})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprint("t", i)
			for j := range 200 {
				if j%2 == 0 {
					red.Protect(name, secret)
				} else {
					red.Protect(name)
				}
				if got := red.Redact(secret); got != Redacted {
					t.Errorf("plain: %q", got)
					return
				}
				_ = red.ForTask(name).Redact(secret)
				if j%50 == 0 {
					red.Add(fmt.Sprint("added-secret-", i, "-", j))
				}
			}
		}()
	}
	wg.Wait()
}
