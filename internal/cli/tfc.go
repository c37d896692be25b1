package cli

import (
	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver/terraform"
	"github.com/ctsync/ctsync/internal/driver/tfc"
)

// tfcOptions are the terraform-cloud driver's options of a task, from the
// local driver's (the task's folder, its resolved providers).
func tfcOptions(cfg *config.Config, o terraform.Options) tfc.Options {
	return tfc.Options{
		Spec:      o.Spec,
		WorkDir:   o.WorkDir,
		Config:    *cfg.TFC,
		Providers: o.Providers,
		Logger:    o.Logger.With("driver", "terraform-cloud"),
	}
}
