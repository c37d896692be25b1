package config

import (
	"os"
	"testing"

	"github.com/ctsync/ctsync/internal/policy/policytest"
)

// TestMain puts the policy helper in PATH: a policy block's files are
// compiled by it when the configuration is loaded.
func TestMain(m *testing.M) {
	remove := policytest.InPath()
	code := m.Run()
	remove()
	os.Exit(code)
}
