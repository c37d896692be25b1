package testutil

import (
	"context"
	"testing"

	tfe "github.com/hashicorp/go-tfe"
)

// TestStartOTF: PostgreSQL and otfd start, the organization exists and a
// workspace can be created in it.
func TestStartOTF(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and otfd")
	}
	o := StartOTF(t)
	c := o.Client(t)
	ws, err := c.Workspaces.Create(context.Background(), o.Organization, tfe.WorkspaceCreateOptions{Name: tfe.String("probe")})
	if err != nil {
		t.Fatalf("create workspace: %v", err)
	}
	if ws.Name != "probe" {
		t.Fatalf("workspace = %+v", ws)
	}
}
