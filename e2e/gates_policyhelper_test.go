package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/testutil"
)

// copyExecutable copies the executable src to dst.
func copyExecutable(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	must(t, err)
	must(t, os.WriteFile(dst, b, 0o755))
}

// The policy helper fails closed, end to end (issue 39): a daemon whose
// configuration has a policy and that has no ctsync-policy next to it (nor
// in PATH) refuses to start, naming the task and the executable; a helper
// that crashes at evaluation fails the run, naming it, and nothing is
// applied; the run is not terminal: once the helper is fixed, a retry
// applies.
func TestPolicyHelperFailsClosedEndToEnd(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	work := t.TempDir()
	bin := mkdir(t, work, "bin")
	copyExecutable(t, ctsyncBin, filepath.Join(bin, "ctsync"))
	real := filepath.Join(filepath.Dir(ctsyncBin), "ctsync-policy")
	if _, err := os.Stat(real); err != nil {
		t.Fatalf("the harness built no ctsync-policy next to ctsync: %v", err)
	}
	pol := mkdir(t, work, "policies")
	writeFile(t, pol, "allow.rego", "package ctsync\n\ndeny contains \"never\" if input.plan.never\n")
	port := testutil.FreePort(t)
	g := &gated{gateAPI: gateAPI{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port), read: gateReadSecret, write: gateWriteSecret}, work: work}
	g.cfg = daemonConfig(t, work, port, c.Addr, gateAuth+
		echoTask("fw", `["10.0.0.0/8"]`, "  policy {\n    files = [\"policies/allow.rego\"]\n  }"))
	registerWeb(t, c, 1)

	// No helper: the configuration is refused (exit 15).
	p := startBinary(t, filepath.Join(bin, "ctsync"), work, nil, "start", "-config-file", g.cfg)
	if code := p.wait(t, 2*time.Minute); code != 15 {
		t.Fatalf("ctsync without its policy helper exited %d, want 15; output:\n%s", code, p.out.String())
	}
	if out := p.out.String(); !strings.Contains(out, `task "fw".policy.files: policy helper ctsync-policy: not found in `+bin) {
		t.Fatalf("the error does not name the task and the helper:\n%s", out)
	}

	// A helper that compiles (the real one) but crashes at evaluation.
	writeFile(t, bin, "ctsync-policy", fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = check ]; then exec %q \"$@\"; fi\necho 'evaluation crashed' >&2\nexit 3\n", real))
	must(t, os.Chmod(filepath.Join(bin, "ctsync-policy"), 0o755))
	g.p = startBinary(t, filepath.Join(bin, "ctsync"), work, nil, "start", "-config-file", g.cfg)
	g.waitUp()
	ev := g.waitNewEvent("fw", nil, "the helper's crash", func(ev store.Event) bool { return !ev.Success })
	want := "policy helper " + filepath.Join(bin, "ctsync-policy") + ": failed: exit status 3: evaluation crashed"
	if ev.Error == nil || !strings.Contains(ev.Error.Message, want) {
		t.Fatalf("event %+v (error %+v), want a failure with %q", ev, ev.Error, want)
	}
	for _, ev := range g.events("fw") {
		if ev.Success {
			t.Fatalf("a successful run %+v", ev)
		}
	}
	pairs, _, err := c.Client.KV().List("consul-terraform-sync/terraform", nil)
	must(t, err)
	for _, kv := range pairs {
		if bytes.Contains(kv.Value, []byte("terraform_data")) {
			t.Fatalf("a state holds a resource: %s", kv.Key)
		}
	}
	if ev.Terminal {
		t.Fatalf("the helper's crash made the run terminal: %+v", ev)
	}

	// The helper is fixed (the real one, swapped in whole): the failed
	// run is retried, without a change of the data, and applies.
	copyExecutable(t, real, filepath.Join(bin, "ctsync-policy.new"))
	must(t, os.Rename(filepath.Join(bin, "ctsync-policy.new"), filepath.Join(bin, "ctsync-policy")))
	ev = g.waitNewEvent("fw", nil, "applied once the helper works", func(ev store.Event) bool { return ev.Success })
	if ev.Kind != store.KindApply {
		t.Fatalf("the run after the fix: %+v, want an apply", ev)
	}
}
