package gate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// planJSON is a plan's JSON form with one change per entry of changes
// (address, actions, before, after, after_sensitive), in that order.
func planJSON(t *testing.T, changes ...[5]any) []byte {
	t.Helper()
	var rcs []map[string]any
	for _, c := range changes {
		rcs = append(rcs, map[string]any{"address": c[0], "mode": "managed", "type": "x", "name": "y",
			"change": map[string]any{"actions": c[1], "before": c[2], "after": c[3], "after_sensitive": c[4],
				"before_sensitive": c[4]}})
	}
	b, err := json.Marshal(map[string]any{"format_version": "1.2", "resource_changes": rcs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestChangesDigest: the same changes give the same digest (whatever
// their order in the plan), a changed value, action or address gives
// another, and a value Terraform marks sensitive, or one the redactor
// hides, never reaches the input of the hash: a changed sensitive value
// alone does not change the digest.
func TestChangesDigest(t *testing.T) {
	create := []string{"create"}
	update := []string{"update"}
	a := [5]any{"local_file.a", create, nil, map[string]any{"content": "one", "n": 1}, map[string]any{}}
	b := [5]any{"local_file.b", update, map[string]any{"content": "x"}, map[string]any{"content": "y"}, map[string]any{}}
	secret := func(v string) [5]any {
		return [5]any{"local_file.s", update, map[string]any{"password": "old-" + v}, map[string]any{"password": v, "name": "db"},
			map[string]any{"password": true}}
	}
	base := planJSON(t, a, b)
	cases := []struct {
		name string
		plan []byte
		same bool
	}{
		{"same changes", planJSON(t, a, b), true},
		{"same changes, other order", planJSON(t, b, a), true},
		{"a value changed", planJSON(t, [5]any{"local_file.a", create, nil, map[string]any{"content": "two", "n": 1}, map[string]any{}}, b), false},
		{"a number changed", planJSON(t, [5]any{"local_file.a", create, nil, map[string]any{"content": "one", "n": 2}, map[string]any{}}, b), false},
		{"an action changed", planJSON(t, [5]any{"local_file.a", []string{"delete", "create"}, nil, map[string]any{"content": "one", "n": 1}, map[string]any{}}, b), false},
		{"an address changed", planJSON(t, [5]any{"local_file.c", create, nil, map[string]any{"content": "one", "n": 1}, map[string]any{}}, b), false},
		{"a change less", planJSON(t, a), false},
		{"a change more", planJSON(t, a, b, secret("hunter2")), false},
	}
	want, err := ChangesDigest(base, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(want, "sha256:") {
		t.Fatalf("digest %q", want)
	}
	for _, c := range cases {
		got, err := ChangesDigest(c.plan, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if (got == want) != c.same {
			t.Errorf("%s: digest equal = %v, want %v", c.name, got == want, c.same)
		}
	}

	// Sensitive values are masked before the hash: two plans that differ
	// in a sensitive value alone have one digest, and the input holds
	// neither value.
	s1, s2 := planJSON(t, a, secret("hunter2")), planJSON(t, a, secret("swordfish"))
	d1, _ := ChangesDigest(s1, nil)
	d2, _ := ChangesDigest(s2, nil)
	if d1 != d2 {
		t.Errorf("a changed sensitive value changed the digest")
	}
	in, err := canonicalChanges(s1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(in), "hunter2") || !strings.Contains(string(in), Masked) || !strings.Contains(string(in), `"db"`) {
		t.Errorf("the hash's input is %s", in)
	}
	// A value the task's redactor hides (a secret variable the module
	// does not mark sensitive) is hidden too.
	redact := func(s string) string { return strings.ReplaceAll(s, "one", "[redacted]") }
	in, _ = canonicalChanges(base, redact)
	if strings.Contains(string(in), `"one"`) {
		t.Errorf("the redactor's value reached the hash's input: %s", in)
	}

	// A real plan (testdata) has a digest; a plan without JSON has none.
	raw, err := os.ReadFile(filepath.Join("testdata", "load-balancer-replace.json"))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := ChangesDigest(raw, nil); err != nil || d == "" {
		t.Errorf("real plan: %q, %v", d, err)
	}
	if _, err := ChangesDigest(nil, nil); err == nil {
		t.Error("a plan without JSON has a digest")
	}
}
