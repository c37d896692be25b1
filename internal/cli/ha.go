package cli

import (
	"context"

	"github.com/ctsync/ctsync/internal/driver/terraform"
	"github.com/ctsync/ctsync/internal/gate"
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

// onGate hands what a safety gate did to the observers (webhook, metrics)
// and, in a cluster, records a task whose held destroy plan was rejected
// or expired as kept (its deletion was saved with the destroy pending).
func (a *app) onGate(ev gate.Event) {
	a.obs.onGate(ev)
	if !ev.Plan.DeletesTask || (ev.Action != gate.ActionRejected && ev.Action != gate.ActionExpired) {
		return
	}
	if a.coord == nil {
		return
	}
	if p, ok := a.coord.API(a.ctrl).(*ha.Persisting); ok {
		go p.Kept(context.Background(), ev.Task)
	}
}

// onDestroyed records, in a cluster, the deletion of a task whose approved
// destroy plan was applied as done (no destroy left for a new leader).
func (a *app) onDestroyed(name string) {
	if a.coord == nil {
		return
	}
	if p, ok := a.coord.API(a.ctrl).(*ha.Persisting); ok {
		go p.Destroyed(context.Background(), name)
	}
}

// stateLocks is what records the Terraform state lock sessions of the
// tasks' runs and ends those left by a stopped earlier owner (package
// terraform, statelock.go): the cluster's state in Consul, under high
// availability with the consul backend. nil otherwise: a stale lock then
// waits for its holder's session to expire. The records and the clearing
// go to ctsync's Consul: with a backend in another Consul (or datacenter)
// no recorded session ever holds a lock there, and nothing is cleared.
func (a *app) stateLocks() terraform.StateLocks {
	kv, ok := a.store.(*store.ConsulKV)
	if !ok || a.cfg.HA == nil {
		return nil
	}
	if b := a.cfg.Driver.Backend; b != nil && b.Type != "consul" {
		return nil
	}
	return kv
}
