package policy

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/policy/policytest"
	"github.com/ctsync/ctsync/internal/task"
)

// TestMain puts the policy helper, built from cmd/ctsync-policy, in PATH:
// these tests run the real helper (the engine's own tests are in
// internal/policy/engine).
func TestMain(m *testing.M) {
	remove := policytest.InPath()
	code := m.Run()
	remove()
	os.Exit(code)
}

// example is the policy docs/safety.md shows.
var example = filepath.Join("..", "..", "examples", "policies", "no-open-cidr.rego")

func write(t *testing.T, name, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func readPlan(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("engine", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEvaluateWithHelper: the example policy, through the helper, on a
// plan with open rules and on one without; the input document reaches it.
func TestEvaluateWithHelper(t *testing.T) {
	in := Input{Task: TaskInput(task.Spec{Name: "firewall", Module: "./modules/fw"}), Trigger: "health/service/web"}
	got, err := Evaluate(context.Background(), []string{example}, 0, readPlan(t, "open-plan.json"), in)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"aws_security_group.lb opens ::/0 to everyone (task firewall)",
		"aws_security_group_rule.web_ingress opens 0.0.0.0/0 to everyone (task firewall)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("deny = %q, want %q", got, want)
	}
	e := &DeniedError{Messages: got}
	if want := "policy denied the plan: " + strings.Join(want, "; "); e.Error() != want {
		t.Errorf("%q", e.Error())
	}
	got, err = Evaluate(context.Background(), []string{example}, 0, readPlan(t, "closed-plan.json"), in)
	if err != nil || got == nil || len(got) != 0 {
		t.Errorf("closed plan: deny = %#v, %v; want none", got, err)
	}
	p := write(t, "in.rego", `package ctsync
deny contains sprintf("%s|%s|%s|%s|%s", [input.task.name, input.task.module, input.task.variables.port, concat(",", input.task.providers), input.trigger]) if input.plan.format_version == "1.2"
`)
	spec := task.Spec{Name: "fw", Module: "./fw", Providers: []string{"aws"}, Variables: map[string]string{"port": "443"}}
	got, err = Evaluate(context.Background(), []string{p}, 0, []byte(`{"format_version":"1.2"}`), Input{Task: TaskInput(spec), Trigger: "schedule"})
	if want := []string{"fw|./fw|443|aws|schedule"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("deny = %q, %v; want %q", got, err, want)
	}
}

// TestCheckWithHelper: the helper's compile errors come back with file,
// line and column, as Errors.
func TestCheckWithHelper(t *testing.T) {
	if err := Check([]string{example}); err != nil {
		t.Fatal(err)
	}
	p := write(t, "syntax.rego", "package ctsync\n\ndeny contains msg if {\n\tmsg := \n}\n")
	err := Check([]string{example, p})
	var es Errors
	if !errors.As(err, &es) || len(es) != 1 || es[0].File != p || es[0].Line != 5 || es[0].Col != 1 ||
		!strings.HasPrefix(err.Error(), p+":5:1: unexpected } token") {
		t.Fatalf("error %v (%#v)", err, es)
	}
	missing := filepath.Join(t.TempDir(), "missing.rego")
	if err := Check([]string{missing}); err == nil || !strings.Contains(err.Error(), missing+": cannot read policy file") {
		t.Errorf("missing file: %v", err)
	}
	if err := Check(nil); err == nil {
		t.Error("no files: no error")
	}
	// A compile error found by Evaluate is Errors too.
	if _, err := Evaluate(context.Background(), []string{p}, 0, []byte(`{}`), Input{}); !errors.As(err, &es) {
		t.Errorf("Evaluate of a file that does not compile: %v", err)
	}
}

// TestFailClosedWithHelper: an evaluation error in the helper is an
// error, never an empty verdict; its time limit and a cancellation stop
// it (issue 35).
func TestFailClosedWithHelper(t *testing.T) {
	div := write(t, "div.rego", "package ctsync\n\ndeny contains msg if {\n\tshare := 100 / count(input.plan.r)\n\tshare > 50\n\tmsg := \"too many\"\n}\n")
	if got, err := Evaluate(context.Background(), []string{div}, 0, []byte(`{"r": []}`), Input{}); err == nil || !strings.Contains(err.Error(), "divide by zero") {
		t.Errorf("division by zero: deny %q, error %v", got, err)
	}
	ok := write(t, "ok.rego", "package ctsync\n\ndeny contains \"no\" if input.plan.bad\n")
	if _, err := Evaluate(context.Background(), []string{ok}, 0, []byte(strings.Repeat("[", 100000)), Input{}); err == nil ||
		!strings.Contains(err.Error(), "nests deeper") {
		t.Errorf("deep plan: %v", err)
	}
	if _, err := Evaluate(context.Background(), []string{ok}, 0, []byte(`{not json`), Input{}); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Errorf("invalid plan: %v", err)
	}
	slow := write(t, "slow.rego", "package ctsync\n\ndeny contains msg if {\n\tsome i in numbers.range(1, 200000)\n\tsome j in numbers.range(1, 200000)\n\ti * j == -1\n\tmsg := \"never\"\n}\n")
	start := time.Now()
	_, err := Evaluate(context.Background(), []string{slow}, 500*time.Millisecond, []byte(`{}`), Input{})
	var te *TimeoutError
	if !errors.As(err, &te) || te.Timeout != 500*time.Millisecond || !strings.Contains(err.Error(), "did not finish within 500ms") {
		t.Fatalf("error %v, want a *TimeoutError", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("the evaluation stopped after %v", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start = time.Now()
	_, err = Evaluate(ctx, []string{slow}, time.Minute, []byte(`{}`), Input{})
	if !errors.Is(err, ErrCancelled) || errors.As(err, &te) {
		t.Fatalf("cancelled: %v, want ErrCancelled", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("the cancelled evaluation stopped after %v", d)
	}
}

// fakeHelper makes findHelper return a script standing for the helper.
func fakeHelper(t *testing.T, script string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), HelperName)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := findHelper
	findHelper = func() (string, error) { return p, nil }
	t.Cleanup(func() { findHelper = old })
	return p
}

// TestHelperFailuresFailClosed: every way the helper can fail is an error
// naming it, for Evaluate (the plan is not applied) and Check (the
// configuration is refused); none is a verdict.
func TestHelperFailuresFailClosed(t *testing.T) {
	ok := write(t, "ok.rego", "package ctsync\n\ndeny contains \"no\" if input.plan.bad\n")
	for name, c := range map[string]struct{ script, want string }{
		"crash":         {"cat >/dev/null; echo 'panic: boom' >&2; exit 2", "failed: exit status 2: panic: boom"},
		"killed":        {"cat >/dev/null; kill -9 $$", "failed: signal: killed"},
		"not JSON":      {"cat >/dev/null; echo 'hello'", "not its protocol's JSON"},
		"empty":         {"cat >/dev/null", "not its protocol's JSON"},
		"other version": {`cat >/dev/null; echo '{"protocol": 2, "deny": []}'`, "speaks protocol 2, this ctsync speaks 1"},
		"no verdict":    {`cat >/dev/null; echo '{"protocol": 1}'`, "without a verdict"},
		"null verdict":  {`cat >/dev/null; echo '{"protocol": 1, "deny": null}'`, "without a verdict"},
		"refuses":       {`cat >/dev/null; echo '{"protocol": 1, "error": {"kind": "protocol", "message": "no"}}'`, "protocol error: no"},
	} {
		t.Run(name, func(t *testing.T) {
			p := fakeHelper(t, c.script)
			got, err := Evaluate(context.Background(), []string{ok}, 0, []byte(`{}`), Input{})
			var he *HelperError
			if !errors.As(err, &he) || he.Path != p || !strings.Contains(err.Error(), "policy helper "+p+": ") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Evaluate: deny %q, error %v; want a *HelperError naming %s with %q", got, err, p, c.want)
			}
			if c.want == "without a verdict" {
				return // check's answer has no verdict
			}
			if err := Check([]string{ok}); !errors.As(err, &he) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Check: %v; want a *HelperError with %q", err, c.want)
			}
		})
	}
	t.Run("not executable", func(t *testing.T) {
		p := fakeHelper(t, "exit 0")
		os.Chmod(p, 0o644)
		_, err := Evaluate(context.Background(), []string{ok}, 0, []byte(`{}`), Input{})
		if !strings.Contains(err.Error(), "policy helper "+p+": cannot be run: permission denied") {
			t.Errorf("%v", err)
		}
	})
	t.Run("hangs", func(t *testing.T) {
		// The policy's time limit covers the helper: a helper that never
		// answers (here a child of it holding its output) is killed.
		fakeHelper(t, "sleep 60")
		start := time.Now()
		_, err := Evaluate(context.Background(), []string{ok}, 500*time.Millisecond, []byte(`{}`), Input{})
		var te *TimeoutError
		if !errors.As(err, &te) {
			t.Errorf("%v, want a *TimeoutError", err)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("stopped after %v", d)
		}
	})
	t.Run("missing", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		_, err := Evaluate(context.Background(), []string{ok}, 0, []byte(`{}`), Input{})
		var he *HelperError
		if !errors.As(err, &he) || !strings.Contains(err.Error(), "policy helper ctsync-policy: not found in ") || !strings.Contains(err.Error(), "nor in PATH") {
			t.Errorf("Evaluate: %v", err)
		}
		if err := Check([]string{ok}); !errors.As(err, &he) {
			t.Errorf("Check: %v", err)
		}
	})
}

// TestFindHelper: next to the running executable first, then PATH; one
// there that is not executable is an error, not a fallback.
func TestFindHelper(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	inPath, err := FindHelper()
	if err != nil || filepath.Base(inPath) != HelperName {
		t.Fatalf("in PATH: %q, %v", inPath, err)
	}
	next := filepath.Join(filepath.Dir(exe), HelperName)
	if _, err := os.Stat(next); err == nil {
		t.Skipf("%s exists", next)
	}
	if err := os.WriteFile(next, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Skipf("cannot write next to the test binary: %v", err)
	}
	defer os.Remove(next)
	if _, err := FindHelper(); err == nil || !strings.Contains(err.Error(), next+": is not executable") {
		t.Errorf("not executable: %v", err)
	}
	os.Chmod(next, 0o755)
	if p, err := FindHelper(); err != nil || p != next {
		t.Errorf("next to the executable: %q, %v; want %s", p, err, next)
	}
}

// TestRequestShape: the request written around the plan is the protocol's
// JSON, the plan untouched.
func TestRequestShape(t *testing.T) {
	dump := filepath.Join(t.TempDir(), "req.json")
	fakeHelper(t, `cat > '`+dump+`'; echo '{"protocol": 1, "deny": []}'`)
	plan := `{"resource_changes": [ {"a": 1} ]}`
	in := Input{Task: Task{Name: "fw"}, Trigger: "schedule"}
	if got, err := Evaluate(context.Background(), []string{"a.rego", "b.rego"}, 3*time.Second, []byte(plan), in); err != nil || len(got) != 0 {
		t.Fatalf("%q, %v", got, err)
	}
	b, err := os.ReadFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	var req Request
	if err := json.Unmarshal(b, &req); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if req.Protocol != ProtocolVersion || !slices.Equal(req.Files, []string{"a.rego", "b.rego"}) || req.TimeoutMS != 3000 ||
		req.Input.Task.Name != "fw" || req.Input.Trigger != "schedule" || string(req.Plan) != plan {
		t.Errorf("request %s", b)
	}
}

// TestHelperEnv: the helper gets none of the daemon's environment (its
// tokens) but the Go runtime's settings.
func TestHelperEnv(t *testing.T) {
	t.Setenv("CONSUL_HTTP_TOKEN", "secret")
	t.Setenv("GOMAXPROCS", "1")
	env := helperEnv()
	if slices.Contains(env, "CONSUL_HTTP_TOKEN=secret") || !slices.Contains(env, "GOMAXPROCS=1") {
		t.Errorf("%q", env)
	}
}

func TestHash(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.rego")
	os.WriteFile(a, []byte("package ctsync\n"), 0o600)
	h1, err := Hash([]string{a})
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := Hash([]string{a}); h != h1 {
		t.Error("hash not stable")
	}
	os.WriteFile(a, []byte("package ctsync\n# changed\n"), 0o600)
	if h, _ := Hash([]string{a}); h == h1 {
		t.Error("hash did not change with the file's content")
	}
	if _, err := Hash([]string{filepath.Join(dir, "gone.rego")}); err == nil || !strings.Contains(err.Error(), "gone.rego") {
		t.Errorf("missing file: %v", err)
	}
}

// BenchmarkEvaluateHelper500 is one evaluation as the daemon makes it:
// starting the helper, which compiles the example policy and evaluates it
// on a 500-resource plan (docs/performance.md; the engine alone:
// internal/policy/engine's BenchmarkEval500).
func BenchmarkEvaluateHelper500(b *testing.B) {
	rcs := make([]map[string]any, 500)
	for i := range rcs {
		cidr := "10.0.0.0/24"
		if i%10 == 0 {
			cidr = "0.0.0.0/0"
		}
		rcs[i] = map[string]any{"address": "aws_security_group_rule.r", "type": "aws_security_group_rule",
			"change": map[string]any{"actions": []string{"create"}, "after": map[string]any{"cidr_blocks": []string{cidr}}}}
	}
	plan, err := json.Marshal(map[string]any{"format_version": "1.2", "resource_changes": rcs})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(plan)))
	for b.Loop() {
		if got, err := Evaluate(context.Background(), []string{example}, 0, plan, Input{Task: Task{Name: "fw"}}); err != nil || len(got) == 0 {
			b.Fatal(len(got), err)
		}
	}
}
