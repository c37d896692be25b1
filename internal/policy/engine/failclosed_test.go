package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/policy"
)

// TestFailClosed: every evaluation error is an error, never an empty
// verdict (issue 35: a rule dividing by a count that is zero on an empty
// state let the plan through).
func TestFailClosed(t *testing.T) {
	for name, c := range map[string]struct{ src, plan, want string }{
		"division by zero": {
			"package ctsync\n\ndeny contains msg if {\n\tshare := 100 / count(input.plan.prior_state.values.root_module.resources)\n\tshare > 50\n\tmsg := \"too many\"\n}\n",
			`{"prior_state": {"values": {"root_module": {"resources": []}}}}`, "divide by zero"},
		"conversion": {
			"package ctsync\n\ndeny contains msg if {\n\tto_number(input.plan.x) > 5\n\tmsg := \"big\"\n}\n",
			`{"x": "five"}`, "to_number"},
		"undefined": {
			"package ctsync\n\ndeny := [\"no\"] if input.plan.bad\n",
			`{"bad": false}`, "undefined"},
		"conflict": {
			"package ctsync\n\ndeny := [\"a\"] if true\n\ndeny := [\"b\"] if true\n",
			`{}`, "conflict"},
	} {
		t.Run(name, func(t *testing.T) {
			p := write(t, "p.rego", c.src)
			got, err := Evaluate(context.Background(), []string{p}, 0, []byte(c.plan), Input{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("deny %q, error %v; want an error containing %q", got, err, c.want)
			}
		})
	}
	// A plan nesting past MaxPlanDepth is refused before it is decoded.
	p := write(t, "ok.rego", denyAll)
	if _, err := Evaluate(context.Background(), []string{p}, 0, []byte(strings.Repeat("[", 100000)), Input{}); err == nil ||
		!strings.Contains(err.Error(), "nests deeper") {
		t.Fatalf("deep plan: %v", err)
	}
}

const denyAll = "package ctsync\n\ndeny contains \"no\" if input.plan.bad\n"

// TestTimeout: a policy that takes longer than its time limit is stopped
// and the evaluation is an error naming the limit; a cancelled context
// stops it at once (issue 35: nested numbers.range loops and
// net.cidr_expand("0.0.0.0/0") pinned a CPU with no end).
func TestTimeout(t *testing.T) {
	for name, src := range map[string]string{
		"nested ranges": "package ctsync\n\ndeny contains msg if {\n\tsome i in numbers.range(1, 200000)\n\tsome j in numbers.range(1, 200000)\n\ti * j == -1\n\tmsg := \"never\"\n}\n",
		"cidr expand":   "package ctsync\n\ndeny contains msg if {\n\tcount(net.cidr_expand(\"0.0.0.0/0\")) == 1\n\tmsg := \"never\"\n}\n",
	} {
		t.Run(name, func(t *testing.T) {
			p := write(t, "slow.rego", src)
			start := time.Now()
			_, err := Evaluate(context.Background(), []string{p}, 300*time.Millisecond, []byte(`{}`), Input{})
			var te *policy.TimeoutError
			if !errors.As(err, &te) || te.Timeout != 300*time.Millisecond || !strings.Contains(err.Error(), "did not finish within 300ms") {
				t.Fatalf("error %v, want a *TimeoutError", err)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Fatalf("the evaluation stopped after %v", d)
			}
			// Cancelled from outside (a deletion): ErrCancelled, at once.
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(200*time.Millisecond, cancel)
			start = time.Now()
			_, err = Evaluate(ctx, []string{p}, time.Minute, []byte(`{}`), Input{})
			if !errors.Is(err, policy.ErrCancelled) || errors.As(err, &te) {
				t.Fatalf("cancelled: %v, want ErrCancelled", err)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Fatalf("the cancelled evaluation stopped after %v", d)
			}
		})
	}
}
