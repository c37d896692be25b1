package tfc

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tfe "github.com/hashicorp/go-tfe"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// otfDriver is a driver for task name against a real OTF server.
func otfDriver(t *testing.T, o *testutil.OTF, name string, mutate func(*Options)) *Driver {
	t.Helper()
	mod, _ := filepath.Abs("testdata/ids")
	opts := Options{
		Spec:    task.Spec{Name: name, Module: mod, Variables: map[string]string{"label": `"v1"`}},
		WorkDir: t.TempDir(),
		Config: config.TFCDriver{Address: o.URL, Organization: o.Organization, Token: o.Token,
			WorkspacePrefix: "cts-", Tags: []string{"ctsync", "net"}},
		PollInterval: 100 * time.Millisecond,
	}
	if mutate != nil {
		mutate(&opts)
	}
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func inputs(ids ...string) *task.Inputs {
	in := &task.Inputs{Services: map[string]task.Service{}}
	for _, id := range ids {
		in.Services[id] = task.Service{ID: id, Name: "web", Address: "10.0.0.1", Port: 80}
	}
	return in
}

// appliedIDs reads the terraform_data resource's input from the
// workspace's current state.
func appliedIDs(t *testing.T, c *tfe.Client, wsID string) string {
	t.Helper()
	ctx := context.Background()
	sv, err := c.StateVersions.ReadCurrent(ctx, wsID)
	if err != nil {
		if errors.Is(err, tfe.ErrResourceNotFound) {
			return "<no state>"
		}
		t.Fatalf("current state: %v", err)
	}
	b, err := c.StateVersions.Download(ctx, sv.DownloadURL)
	if err != nil {
		t.Fatalf("download state: %v", err)
	}
	var st struct {
		Resources []struct {
			Type      string
			Instances []struct {
				Attributes struct {
					Input any `json:"input"`
				}
			}
		}
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("state: %v\n%s", err, b)
	}
	for _, r := range st.Resources {
		if r.Type == "terraform_data" && len(r.Instances) == 1 {
			in := r.Instances[0].Attributes.Input
			if m, ok := in.(map[string]any); ok { // a dynamic value: {"value": ..., "type": ...}
				in = m["value"]
			}
			s, _ := in.(string)
			return s
		}
	}
	return "<none>"
}

// TestOTFApplyPlanDestroy drives one task through its whole life against
// OTF: the workspace is created with its tags, an apply reaches the
// state, a plan (speculative) changes nothing, an unchanged apply has no
// changes, a destroy empties the state.
func TestOTFApplyPlanDestroy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs OTF")
	}
	o := testutil.StartOTF(t)
	c := o.Client(t)
	ctx := context.Background()
	d := otfDriver(t, o, "web", nil)
	if err := d.Init(ctx); err != nil {
		t.Fatalf("init: %v", err)
	}
	ws, err := c.Workspaces.Read(ctx, o.Organization, "cts-web")
	if err != nil {
		t.Fatalf("workspace: %v", err)
	}
	if ws.ExecutionMode != "remote" || !strings.Contains(strings.Join(ws.TagNames, ","), "ctsync") {
		t.Errorf("workspace = mode %q tags %q", ws.ExecutionMode, ws.TagNames)
	}

	start := time.Now()
	res, err := d.Apply(ctx, driver.Run{ID: "r1"}, inputs("web-1", "web-2"))
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	t.Logf("MEASURED first apply: %v, %d API requests (init included), %s", time.Since(start), d.APICalls(), res.RunURL)
	calls := d.APICalls()
	requests := func() int64 { n := d.APICalls() - calls; calls = d.APICalls(); return n }
	if !res.Changes || res.Add != 1 || !strings.Contains(res.RunURL, "/runs/run-") {
		t.Errorf("apply result = %+v", res)
	}
	if got := appliedIDs(t, c, ws.ID); got != "v1:web-1,web-2" {
		t.Fatalf("state = %q", got)
	}

	res, err = d.Plan(ctx, driver.Run{ID: "p1"}, inputs("web-1"))
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	t.Logf("MEASURED plan (speculative): %d API requests", requests())
	if !res.Changes || res.Change != 1 || !strings.Contains(res.Output, "terraform_data.ids") {
		t.Errorf("plan result = %+v", res)
	}
	if got := appliedIDs(t, c, ws.ID); got != "v1:web-1,web-2" {
		t.Fatalf("a plan changed the state: %q", got)
	}

	res, err = d.Apply(ctx, driver.Run{ID: "r2"}, inputs("web-1", "web-2"))
	if err != nil || res.Changes {
		t.Fatalf("unchanged apply: %+v, %v", res, err)
	}
	t.Logf("MEASURED later apply: %d API requests", requests())

	res, err = d.Destroy(ctx, driver.Run{ID: "d1"})
	if err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if res.Destroy != 1 {
		t.Errorf("destroy result = %+v", res)
	}
	t.Logf("MEASURED destroy: %d API requests", requests())
	if got := appliedIDs(t, c, ws.ID); got != "<none>" {
		t.Fatalf("state after destroy = %q", got)
	}
}
