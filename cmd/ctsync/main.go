// Command ctsync keeps network infrastructure in sync with the Consul
// catalog by running Terraform modules.
package main

import (
	"os"

	"github.com/ctsync/ctsync/internal/cli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:], os.Stdout, os.Stderr))
}
