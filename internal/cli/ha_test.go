package cli

import (
	"slices"
	"testing"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/consul"
)

func TestAdvertisedAddress(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"cts-01.example.com", "cts-01.example.com:8558"},
		{"10.0.0.1:9000", "10.0.0.1:9000"},
		{"https://cts.example.com", "https://cts.example.com"},
		{"::1", "[::1]:8558"},
		{"[::1]", "[::1]:8558"},
	} {
		if got := advertisedAddress(tc.in, 8558); got != tc.want {
			t.Errorf("advertisedAddress(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestHARegistrationTag(t *testing.T) {
	reg := consul.Registration{ID: "a", Tags: []string{"cts"}}
	a := &app{}
	if got := a.haRegistration(reg); !slices.Equal(got.Tags, []string{"cts"}) {
		t.Fatalf("without HA: %v", got.Tags)
	}
	a.ha = &haWiring{cfg: &config.HA{ClusterName: "prod"}}
	got := a.haRegistration(reg)
	if !slices.Equal(got.Tags, []string{"cts", "cts-cluster:prod"}) || len(reg.Tags) != 1 {
		t.Fatalf("with HA: %v (input now %v)", got.Tags, reg.Tags)
	}
	if a.apiCluster() == nil {
		t.Fatal("no cluster for the API with HA")
	}
	if (&app{}).apiCluster() != nil {
		t.Fatal("a cluster for the API without HA: /v1/status/cluster must answer 405")
	}
}
