package cli

import (
	"path/filepath"
	"testing"

	ctsapi "github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/config"
)

// The configuration the .deb, the .rpm and the image ship
// (packaging/ctsync.hcl, /etc/ctsync.d/ctsync.hcl) loads, and its API
// listens on loopback only: an installed ctsync is not open to the network
// before api_auth is set up.
func TestPackagedConfigListensOnLoopback(t *testing.T) {
	for _, n := range []string{"CONSUL_HTTP_ADDR", "CONSUL_HTTP_TOKEN", "CONSUL_TOKEN"} {
		t.Setenv(n, "")
	}
	cfg, err := config.Load([]string{filepath.Join("..", "..", "packaging", "ctsync.hcl")})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ListenAddress() != "127.0.0.1:8558" || ctsapi.ListensBeyondLoopback(cfg.ListenAddress()) {
		t.Errorf("the packaged configuration listens on %q, want 127.0.0.1:8558", cfg.ListenAddress())
	}
	if len(cfg.Tasks) != 0 || len(cfg.APIAuth.Tokens) != 0 {
		t.Errorf("the packaged configuration has tasks or tokens: %+v", cfg)
	}
}
