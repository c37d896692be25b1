package cli

import (
	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver/terraform"
	"github.com/ctsync/ctsync/internal/driver/tfc"
	"github.com/ctsync/ctsync/internal/store"
)

// tfcOptions are the terraform-cloud driver's options of a task, from the
// local driver's (the task's folder, its resolved providers). st is the
// daemon's store (Consul KV under high availability), where the driver
// records the remote run it queues, so that a new leader finds it; nil
// when only the desired state is asked for.
func tfcOptions(cfg *config.Config, o terraform.Options, st store.Store) tfc.Options {
	opts := tfc.Options{
		Spec:      o.Spec,
		WorkDir:   o.WorkDir,
		Config:    *cfg.TFC,
		Providers: o.Providers,
		Logger:    o.Logger.With("driver", "terraform-cloud"),
		Redactor:  o.Redactor,
	}
	if runs, ok := st.(tfc.Runs); ok {
		opts.Runs = runs
	}
	return opts
}
