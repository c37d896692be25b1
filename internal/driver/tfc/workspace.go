package tfc

import (
	"context"
	"errors"
	"fmt"
	"slices"

	tfe "github.com/hashicorp/go-tfe"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/task"
)

// ---- Init: the workspace ----

// Init connects to the server and finds or creates the task's workspace.
func (d *Driver) Init(ctx context.Context) error {
	if err := d.connect(ctx); err != nil {
		return err
	}
	ws, err := d.workspace(ctx)
	if err != nil {
		return err
	}
	d.ws = ws
	return nil
}

func (d *Driver) settings() task.TFCWorkspace {
	if d.opts.Spec.TFCWorkspace != nil {
		return *d.opts.Spec.TFCWorkspace
	}
	return task.TFCWorkspace{}
}

func (d *Driver) workspace(ctx context.Context) (*tfe.Workspace, error) {
	org := d.opts.Config.Organization
	ws, err := d.client.Workspaces.Read(ctx, org, d.name)
	switch {
	case err == nil:
		return d.adopt(ctx, ws)
	case !errors.Is(err, tfe.ErrResourceNotFound):
		return nil, d.apiError(ctx, "init", fmt.Sprintf("reading workspace %q of organization %q", d.name, org), err)
	}
	// Not found: the workspace, or the organization (or the token cannot
	// see it). Tell which.
	if _, err := d.client.Organizations.Read(ctx, org); err != nil {
		if errors.Is(err, tfe.ErrResourceNotFound) {
			return nil, &driver.Error{Op: "init", Err: err, Terminal: true,
				Summary: fmt.Sprintf("organization %q not found on %s (or the token cannot see it): check driver \"terraform-cloud\" organization or TFC_ORGANIZATION", org, d.opts.Config.Address)}
		}
		return nil, d.apiError(ctx, "init", fmt.Sprintf("reading organization %q", org), err)
	}
	return d.create(ctx)
}

func (d *Driver) create(ctx context.Context) (*tfe.Workspace, error) {
	s := d.settings()
	opts := tfe.WorkspaceCreateOptions{
		Name:        tfe.String(d.name),
		Description: tfe.String(fmt.Sprintf("Runs ctsync task %q.", d.opts.Spec.Name)),
		AutoApply:   tfe.Bool(false),
	}
	mode := s.ExecutionMode
	if mode == "" {
		mode = task.ExecutionRemote
	}
	opts.ExecutionMode = tfe.String(mode)
	if mode == task.ExecutionAgent {
		id, err := d.agentPool(ctx, s)
		if err != nil {
			return nil, err
		}
		opts.AgentPoolID = tfe.String(id)
	}
	if s.TerraformVersion != "" {
		opts.TerraformVersion = tfe.String(s.TerraformVersion)
	}
	ws, err := d.client.Workspaces.Create(ctx, d.opts.Config.Organization, opts)
	if err != nil {
		// Another instance may have created it meanwhile.
		if again, rerr := d.client.Workspaces.Read(ctx, d.opts.Config.Organization, d.name); rerr == nil {
			return d.adopt(ctx, again)
		}
		return nil, d.apiError(ctx, "init", fmt.Sprintf("creating workspace %q", d.name), err)
	}
	d.log.Info("created workspace", "id", ws.ID, "execution_mode", mode)
	if err := d.addTags(ctx, ws); err != nil {
		return nil, err
	}
	return ws, nil
}

func (d *Driver) agentPool(ctx context.Context, s task.TFCWorkspace) (string, error) {
	if s.AgentPoolID != "" {
		return s.AgentPoolID, nil
	}
	list, err := d.client.AgentPools.List(ctx, d.opts.Config.Organization, &tfe.AgentPoolListOptions{Query: s.AgentPoolName})
	if err != nil {
		return "", d.apiError(ctx, "init", fmt.Sprintf("looking up agent pool %q", s.AgentPoolName), err)
	}
	for _, p := range list.Items {
		if p.Name == s.AgentPoolName {
			return p.ID, nil
		}
	}
	return "", &driver.Error{Op: "init", Terminal: true, Summary: fmt.Sprintf("agent pool %q not found in organization %q", s.AgentPoolName, d.opts.Config.Organization)}
}

// adopt checks that an existing workspace can run the task, and brings
// its tags and Terraform version in line with the configuration.
func (d *Driver) adopt(ctx context.Context, ws *tfe.Workspace) (*tfe.Workspace, error) {
	s := d.settings()
	fail := func(format string, args ...any) (*tfe.Workspace, error) {
		return nil, &driver.Error{Op: "init", Terminal: true, Summary: fmt.Sprintf("workspace %q: ", d.name) + fmt.Sprintf(format, args...)}
	}
	mode := ws.ExecutionMode
	switch {
	case s.ExecutionMode != "" && mode != s.ExecutionMode:
		return fail("it exists with execution mode %q, the task's terraform_cloud_workspace asks for %q: change one of them", mode, s.ExecutionMode)
	case s.ExecutionMode == "" && mode != task.ExecutionRemote && mode != task.ExecutionAgent:
		return fail("it exists with execution mode %q: ctsync runs tasks in the workspace, so it needs \"remote\" or \"agent\"", mode)
	}
	if ws.VCSRepo != nil {
		return fail("it is connected to a VCS repository (%s); ctsync uploads the task's configuration itself, so it needs a workspace without one", ws.VCSRepo.Identifier)
	}
	c := d.opts.Config
	if len(c.TagsAllowlist) > 0 && !slices.ContainsFunc(ws.TagNames, func(t string) bool { return slices.Contains(c.TagsAllowlist, t) }) {
		return fail("it carries none of the tags of workspaces.tags_allowlist %q (its tags: %q)", c.TagsAllowlist, ws.TagNames)
	}
	for _, t := range ws.TagNames {
		if slices.Contains(c.TagsDenylist, t) {
			return fail("it carries the tag %q of workspaces.tags_denylist", t)
		}
	}
	if s.TerraformVersion != "" && ws.TerraformVersion != s.TerraformVersion {
		up, err := d.client.Workspaces.UpdateByID(ctx, ws.ID, tfe.WorkspaceUpdateOptions{TerraformVersion: tfe.String(s.TerraformVersion)})
		if err != nil {
			return nil, d.apiError(ctx, "init", fmt.Sprintf("setting the Terraform version of workspace %q", d.name), err)
		}
		ws = up
	}
	if err := d.addTags(ctx, ws); err != nil {
		return nil, err
	}
	return ws, nil
}

func (d *Driver) addTags(ctx context.Context, ws *tfe.Workspace) error {
	var missing []*tfe.Tag
	for _, t := range d.opts.Config.Tags {
		if !slices.Contains(ws.TagNames, t) {
			missing = append(missing, &tfe.Tag{Name: t})
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := d.client.Workspaces.AddTags(ctx, ws.ID, tfe.WorkspaceAddTagsOptions{Tags: missing}); err != nil {
		return d.apiError(ctx, "init", fmt.Sprintf("tagging workspace %q", d.name), err)
	}
	for _, t := range missing {
		ws.TagNames = append(ws.TagNames, t.Name)
	}
	return nil
}
