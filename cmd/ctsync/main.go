// Command ctsync keeps network infrastructure in sync with the Consul
// catalog by running Terraform modules.
package main

import (
	"os"

	"github.com/ctsync/ctsync/internal/cli"
	"github.com/ctsync/ctsync/internal/driver/terraform"
)

func main() {
	terraform.RunWatchdogIfAsked() // the HA fence watchdog is this binary too
	os.Exit(cli.Run(os.Args[1:], os.Stdout, os.Stderr))
}
