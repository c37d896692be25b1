package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/task"
)

func TestWithPolicyDigest(t *testing.T) {
	base := func(context.Context, task.Spec) (map[string]string, error) {
		return map[string]string{driver.PartModule: "m"}, nil
	}
	desired := withPolicyDigest(base)
	plain := task.Spec{Name: "a"}
	if parts, err := desired(context.Background(), plain); err != nil || len(parts) != 1 {
		t.Fatalf("task without policy: %v, %v", parts, err)
	}
	f := filepath.Join(t.TempDir(), "fw.rego")
	if err := os.WriteFile(f, []byte("package ctsync\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gated := task.Spec{Name: "a", Policy: &task.Policy{Files: []string{f}}}
	p1, err := desired(context.Background(), gated)
	if err != nil || p1[driver.PartPolicy] == "" || p1[driver.PartModule] != "m" {
		t.Fatalf("task with policy: %v, %v", p1, err)
	}
	os.WriteFile(f, []byte("package ctsync\n# edited\n"), 0o600)
	if p2, _ := desired(context.Background(), gated); p2[driver.PartPolicy] == p1[driver.PartPolicy] {
		t.Error("editing the policy file did not change the desired state")
	}
	os.Remove(f)
	if _, err := desired(context.Background(), gated); err == nil || !strings.Contains(err.Error(), f) {
		t.Errorf("missing policy file: %v", err)
	}
	// The driver's error wins; a driver that gives nothing still gets the part.
	boom := errors.New("boom")
	if _, err := withPolicyDigest(func(context.Context, task.Spec) (map[string]string, error) { return nil, boom })(context.Background(), gated); err != boom {
		t.Errorf("driver error: %v", err)
	}
	os.WriteFile(f, []byte("package ctsync\n"), 0o600)
	if parts, err := withPolicyDigest(func(context.Context, task.Spec) (map[string]string, error) { return nil, nil })(context.Background(), gated); err != nil || parts[driver.PartPolicy] == "" {
		t.Errorf("nil parts: %v, %v", parts, err)
	}
}
