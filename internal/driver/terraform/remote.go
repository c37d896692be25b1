package terraform

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclwrite"

	"github.com/ctsync/ctsync/internal/task"
)

// RemoteInputsFile is where RemoteRootModule puts the task's Consul data:
// an auto-loaded variables file, because HCP Terraform / Terraform
// Enterprise write their own terraform.tfvars from workspace variables.
const RemoteInputsFile = "ctsync.auto.tfvars"

// RemoteRootModule renders a task's root module for a run that happens
// elsewhere (the terraform-cloud driver uploads it as a configuration
// version): the same files the local driver writes, with no backend block
// (the workspace holds the state) and the Consul data in RemoteInputsFile.
// It returns file name -> contents; o.Spec.Module is used as given, so a
// caller that ships a local module along rewrites it first. o.Driver's
// Backend is ignored. in nil renders empty inputs.
func RemoteRootModule(o Options, in *task.Inputs) (map[string][]byte, error) {
	o.Driver.Backend = nil
	m, err := newRootModule(&o)
	if err != nil {
		return nil, fmt.Errorf("task %q: %w", o.Spec.Name, err)
	}
	main, err := withoutBackend(m.mainTF())
	if err != nil {
		return nil, err
	}
	if in == nil {
		in = &task.Inputs{}
	}
	inputs, err := m.inputsTFVars(in)
	if err != nil {
		return nil, fmt.Errorf("encoding inputs: %w", err)
	}
	files := map[string][]byte{
		fileMain:         main,
		fileVariables:    m.variablesTF(),
		fileModuleVars:   m.variablesModuleTF(),
		RemoteInputsFile: inputs,
	}
	providers, err := m.providersJSON()
	if err != nil {
		return nil, err
	}
	if providers != nil {
		files[fileProviders] = providers
	}
	vars, err := m.variablesJSON()
	if err != nil {
		return nil, err
	}
	if vars != nil {
		files[fileModuleVarVals] = vars
	}
	return files, nil
}

// withoutBackend removes the backend block from a rendered main.tf.
func withoutBackend(src []byte) ([]byte, error) {
	f, diags := hclwrite.ParseConfig(src, fileMain, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, fmt.Errorf("generated main.tf: %s", diags.Error())
	}
	for _, b := range f.Body().Blocks() {
		if b.Type() != "terraform" {
			continue
		}
		for _, be := range b.Body().Blocks() {
			if be.Type() == "backend" {
				b.Body().RemoveBlock(be)
			}
		}
	}
	return hclwrite.Format(f.Bytes()), nil
}

// ModuleDigest identifies the module's code as DesiredState's
// driver.PartModule does.
func ModuleDigest(o Options) (string, error) { return moduleDigest(o) }

// ProvidersDigest hashes the resolved provider configuration and task_env
// of the task's providers as DesiredState's driver.PartProviders does; a
// configuration the driver refuses hashes its error.
func ProvidersDigest(o Options) string {
	rm, err := newRootModule(&o)
	if err != nil {
		return digestOf("invalid", err.Error())
	}
	providers, err := rm.providersJSON()
	if err != nil {
		return digestOf("invalid", err.Error())
	}
	h := sha256.New()
	h.Write(providers)
	for _, p := range rm.providers {
		for _, k := range slices.Sorted(maps.Keys(p.TaskEnv)) {
			fmt.Fprintf(h, "\x00env\x00%s\x00%s\x00%s", p.Ref(), k, p.TaskEnv[k])
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// RequiredProvidersDigest hashes the required_providers entries of the
// task's providers (driver.PartRequiredProviders).
func RequiredProvidersDigest(o Options) string {
	req := map[string]any{}
	for _, p := range o.Providers {
		if r, ok := o.Driver.RequiredProviders[p.Name]; ok {
			req[p.Name] = r
		}
	}
	b, _ := json.Marshal(req)
	return digestOf(string(b))
}
