package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/policy"
)

func answer(t *testing.T, args []string, stdin string) policy.Answer {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(args, strings.NewReader(stdin), &out, &errb); code != 0 {
		t.Fatalf("%v: exit %d, %s", args, code, errb.String())
	}
	var a policy.Answer
	if err := json.Unmarshal(out.Bytes(), &a); err != nil || a.Protocol != policy.ProtocolVersion {
		t.Fatalf("%v: answer %s: %v", args, out.Bytes(), err)
	}
	return a
}

func TestCommands(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "p.rego")
	os.WriteFile(p, []byte("package ctsync\n\ndeny contains sprintf(\"no %s\", [input.task.name]) if input.plan.bad\n"), 0o600)
	bad := filepath.Join(dir, "bad.rego")
	os.WriteFile(bad, []byte("package ctsync\n\ndeny contains msg if {\n\tmsg := \n}\n"), 0o600)

	var out bytes.Buffer
	if code := run([]string{"version"}, nil, &out, &out); code != 0 || !strings.HasPrefix(out.String(), "ctsync-policy v0.0.0-dev (protocol 1, OPA ") {
		t.Errorf("version: %d %q", code, out.String())
	}
	if a := answer(t, []string{"check", p}, ""); len(a.Errors) != 0 || a.Error != nil {
		t.Errorf("check: %+v", a)
	}
	if a := answer(t, []string{"check", p, bad}, ""); len(a.Errors) != 1 || a.Errors[0].File != bad || a.Errors[0].Line != 5 {
		t.Errorf("check bad: %+v", a.Errors)
	}
	req := func(proto int, files []string, plan string) string {
		b, _ := json.Marshal(policy.Request{Protocol: proto, Files: files, TimeoutMS: 5000,
			Input: policy.Input{Task: policy.Task{Name: "fw"}}, Plan: json.RawMessage(plan)})
		return string(b)
	}
	if a := answer(t, []string{"eval"}, req(1, []string{p}, `{"bad": true}`)); len(a.Deny) != 1 || a.Deny[0] != "no fw" {
		t.Errorf("eval deny: %+v", a)
	}
	// A verdict letting the plan through is [], never absent.
	out.Reset()
	run([]string{"eval"}, strings.NewReader(req(1, []string{p}, `{}`)), &out, &out)
	if !strings.Contains(out.String(), `"deny":[]`) {
		t.Errorf("eval pass: %s", out.String())
	}
	if a := answer(t, []string{"eval"}, req(1, []string{bad}, `{}`)); len(a.Errors) != 1 || a.Deny != nil {
		t.Errorf("eval bad file: %+v", a)
	}
	if a := answer(t, []string{"eval"}, req(2, []string{p}, `{}`)); a.Error == nil || a.Error.Kind != policy.KindProtocol || a.Deny != nil {
		t.Errorf("eval other protocol: %+v", a)
	}
	if a := answer(t, []string{"eval"}, "{"); a.Error == nil || a.Error.Kind != policy.KindRequest || a.Deny != nil {
		t.Errorf("eval bad request: %+v", a)
	}
	div := filepath.Join(dir, "div.rego")
	os.WriteFile(div, []byte("package ctsync\n\ndeny contains \"x\" if 1 / count(input.plan.r) > 0\n"), 0o600)
	if a := answer(t, []string{"eval"}, req(1, []string{div}, `{"r": []}`)); a.Error == nil || a.Error.Kind != policy.KindEval || a.Deny != nil {
		t.Errorf("eval runtime error: %+v", a)
	}
	for _, args := range [][]string{nil, {"nosuch"}, {"eval", "x"}} {
		if code := run(args, nil, &out, &out); code != 2 {
			t.Errorf("%v: exit %d", args, code)
		}
	}
}
