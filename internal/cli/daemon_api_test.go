package cli

import (
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/task"
)

// A task created through the API may name a provider that has no
// terraform_provider block (its default configuration), as a task in a
// configuration file may and as CTS allows (CTS's task files name
// providers = ["local"]); an alias still needs its block.
func TestValidateAPITaskProviders(t *testing.T) {
	a := &app{cfg: &config.Config{Providers: []config.Provider{{Name: "aws", Alias: "east"}}}}
	for _, c := range []struct {
		providers []string
		err       string
	}{
		{[]string{"local"}, ""},
		{[]string{"local", "aws"}, ""},
		{[]string{"aws.east"}, ""},
		{[]string{"local", "aws.west"}, `providers[1]: provider "aws.west" is not configured`},
	} {
		err := a.validateAPITask(task.Spec{Name: "t", Module: "org/m/x", Providers: c.providers})
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%v: %v", c.providers, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%v: error %v, want %q", c.providers, err, c.err)
		}
	}
}
