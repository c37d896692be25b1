package cli

import (
	"slices"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/consul"
	"github.com/ctsync/ctsync/internal/ha"
)

func TestHARegistrationTag(t *testing.T) {
	reg := consul.Registration{ID: "a", Tags: []string{"cts"}}
	solo, err := ha.NewCoordinator(ha.CoordinatorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := solo.Registration(reg); !slices.Equal(got.Tags, []string{"cts"}) {
		t.Fatalf("without HA: %v", got.Tags)
	}
	if solo.Cluster() != nil {
		t.Fatal("a cluster for the API without HA: /v1/status/cluster must answer 405")
	}
	client, err := api.NewClient(api.DefaultConfig()) // not contacted
	if err != nil {
		t.Fatal(err)
	}
	for _, spread := range []bool{false, true} {
		c, err := ha.NewCoordinator(ha.CoordinatorOptions{HA: &config.HA{ClusterName: "prod", SpreadTasks: spread}, Client: client, ID: "a"})
		if err != nil {
			t.Fatal(err)
		}
		got := c.Registration(reg)
		if !slices.Equal(got.Tags, []string{"cts", "cts-cluster:prod"}) || len(reg.Tags) != 1 {
			t.Fatalf("with HA (spread %t): %v (input now %v)", spread, got.Tags, reg.Tags)
		}
		if c.Cluster() == nil {
			t.Fatalf("no cluster for the API with HA (spread %t)", spread)
		}
	}
}
