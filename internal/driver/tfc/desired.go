package tfc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/driver/terraform"
)

// PartWorkspace is the desired-state part of the terraform-cloud driver's
// workspace: server, organization, workspace name, tags and the task's
// terraform_cloud_workspace settings.
const PartWorkspace = "workspace"

// DesiredState returns the digests of the parts of a task's desired state
// that the driver knows and the task's spec does not hold (see
// reconcile.DesiredFunc): the module's code, the provider configuration,
// required_providers (as the local driver), and the workspace.
func DesiredState(_ context.Context, o Options) (map[string]string, error) {
	ro := terraform.Options{Spec: o.Spec, WorkDir: o.WorkDir, Providers: o.Providers}
	ro.Driver.RequiredProviders = o.Config.RequiredProviders
	mod, err := terraform.ModuleDigest(ro)
	if err != nil {
		return nil, err
	}
	ws, err := json.Marshal(struct {
		Address, Organization, Name string
		Tags                        []string
		Settings                    any
	}{o.Config.Address, o.Config.Organization, o.Config.WorkspaceName(o.Spec.Name), o.Config.Tags, o.Spec.TFCWorkspace})
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	h := sha256.Sum256(ws)
	return map[string]string{
		driver.PartModule:            mod,
		driver.PartProviders:         terraform.ProvidersDigest(ro),
		driver.PartRequiredProviders: terraform.RequiredProvidersDigest(ro),
		PartWorkspace:                hex.EncodeToString(h[:]),
	}, nil
}
