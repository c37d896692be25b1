// Package policytest builds the policy helper (cmd/ctsync-policy) for the
// tests of packages that evaluate policies: the daemon's side runs it
// (internal/policy) and finds it in PATH when it is not next to the
// running executable, as it is not next to a test binary.
package policytest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// InPath builds the helper into a temporary directory and puts that
// directory first in PATH; call it from TestMain, and the returned
// function once the tests have run (it removes the directory). It exits
// the process when the helper cannot be built.
func InPath() (remove func()) {
	dir, err := os.MkdirTemp("", "ctsync-policy-")
	if err == nil {
		err = Build(filepath.Join(dir, "ctsync-policy"))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	os.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return func() { os.RemoveAll(dir) }
}

// Build builds the helper at out.
func Build(out string) error {
	cmd := exec.Command("go", "build", "-o", out, "./cmd/ctsync-policy")
	cmd.Dir = repoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building ctsync-policy: %v\n%s", err, b)
	}
	return nil
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}
