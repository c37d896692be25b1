package cli

import (
	"strings"

	"github.com/zclconf/go-cty/cty"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver/terraform"
	"github.com/ctsync/ctsync/internal/ha"
	"github.com/ctsync/ctsync/internal/metrics"
	"github.com/ctsync/ctsync/internal/store"
)

// The HA elector and compatibility checks report to the metrics.
var _ ha.Metrics = (*metrics.Metrics)(nil)

// setupCoordinator builds this instance's part in a cluster (package ha:
// alone, leader/follower or spread, as the high_availability block says)
// and takes the state store from it: the local history database (or memory)
// alone, the cluster's state in Consul KV otherwise. It runs in newApp
// after the metrics and before the controller is built.
func (a *app) setupCoordinator(workDir string, mode appMode) error {
	cfg := a.cfg
	c, err := ha.NewCoordinator(ha.CoordinatorOptions{
		HA:           cfg.HA,
		Client:       a.client.Client,
		ID:           cfg.ID,
		Port:         cfg.Port,
		ServiceName:  cfg.Consul.ServiceRegistration.ServiceName,
		History:      cfg.History,
		Tasks:        cfg.Tasks,
		Self:         func() ha.Instance { return selfInstance(cfg.ID, cfg.Driver.Path) },
		ResetStorage: mode.resetStorage,
		CheckStored:  a.checkStoredTask, // daemon_api.go
		Local: func() (store.Store, error) {
			if !mode.history {
				return store.NewMemory(cfg.History), nil
			}
			return a.openHistory(workDir) // history.go
		},
		Logger:        a.log,
		Metrics:       a.obs.metrics,
		SpreadMetrics: func() ha.SpreadMetrics { return metrics.RegisterSpread(a.obs.metrics.Registry()) },
	})
	if err != nil {
		return err
	}
	a.coord = c
	a.store = c.Store()
	return nil
}

// selfInstance is this instance as the compatibility checks publish it:
// its id and Terraform binary.
func selfInstance(id, driverPath string) ha.Instance {
	self := ha.Instance{ID: id}
	if b, err := terraform.DetectBinary(driverPath); err == nil {
		self.TerraformVersion, self.OpenTofu = b.Version.String(), b.OpenTofu
	}
	return self
}

// stateLocks is what records the Terraform state lock sessions of the
// tasks' runs and ends those left by a stopped earlier owner (package
// terraform, statelock.go): the cluster's state in Consul, under high
// availability, when Terraform's state is in the same Consul (the consul
// backend without an address, datacenter or namespace of its own). nil
// otherwise: a stale lock then waits for Consul to expire it.
func (a *app) stateLocks() terraform.StateLocks {
	kv, ok := a.store.(*store.ConsulKV)
	if !ok || a.cfg.HA == nil || !backendOnOwnConsul(a.cfg) {
		return nil
	}
	return kv
}

// backendOnOwnConsul reports whether the tasks' Terraform state is kept by
// the consul backend in ctsync's own Consul.
func backendOnOwnConsul(cfg *config.Config) bool {
	b := cfg.Driver.Backend
	if b == nil {
		return true // the default consul backend
	}
	if b.Type != "consul" {
		return false
	}
	for k, v := range b.Attrs {
		switch k {
		case "path", "gzip", "lock", "scheme", "ca_file", "cert_file", "key_file", "access_token", "http_auth":
		case "address":
			if v.Type() != cty.String || v.IsNull() || !sameAddress(v.AsString(), cfg.Consul.Address) {
				return false
			}
		default: // datacenter, and anything else that may point elsewhere
			return false
		}
	}
	return true
}

// sameAddress compares two Consul addresses without their scheme.
func sameAddress(a, b string) bool {
	trim := func(s string) string {
		s = strings.ToLower(strings.TrimRight(s, "/"))
		s = strings.TrimPrefix(s, "https://")
		return strings.TrimPrefix(s, "http://")
	}
	if b == "" {
		b = "localhost:8500"
	}
	return trim(a) == trim(b)
}
