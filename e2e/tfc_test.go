package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	tfe "github.com/hashicorp/go-tfe"

	"github.com/ctsync/ctsync/internal/testutil"
)

// The terraform-cloud driver end to end: the real ctsync binary, a real
// Consul agent, and OTF (an open implementation of the HCP Terraform /
// Terraform Enterprise API, built by scripts/tools.sh) running the
// remote runs with the real terraform binary.

// tfcModule records the instance ids it is given in a terraform_data
// resource; tfcState reads them back from the workspace's state.
func tfcModule() string {
	return filepath.Join(testutil.RepoRoot(), "internal", "driver", "tfc", "testdata", "ids")
}

func tfcConfig(o *testutil.OTF, consulAddr, workDir string, port int, org, token string) string {
	return fmt.Sprintf(`log_level = "DEBUG"
working_dir = %q
port = %d
consul {
  address = %q
}
buffer_period {
  enabled = false
}
driver "terraform-cloud" {
  hostname     = %q
  organization = %q
  token        = %q
  workspaces {
    prefix = "cts-"
    tags   = ["ctsync", "dc1"]
  }
}
task {
  name   = "web"
  module = %q
  condition "services" {
    names = ["web"]
  }
}
`, workDir, port, consulAddr, o.URL, org, token, tfcModule())
}

// tfcState is the terraform_data input in the workspace's current state,
// "<none>" without one.
func tfcState(t *testing.T, c *tfe.Client, org, ws string) string {
	t.Helper()
	ctx := context.Background()
	w, err := c.Workspaces.Read(ctx, org, ws)
	if err != nil {
		return "<no workspace>"
	}
	sv, err := c.StateVersions.ReadCurrent(ctx, w.ID)
	if errors.Is(err, tfe.ErrResourceNotFound) {
		return "<none>"
	}
	if err != nil {
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
		t.Fatalf("state: %v", err)
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

func tfcDo(t *testing.T, method string, port int, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d%s", port, path), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestTFCDaemon: register, health flip and deregister reach the
// workspace's applied state; the workspace is created with its tags; the
// events carry the run URL; run=inspect plans (a speculative run) and
// applies nothing; DELETE ?destroy=true destroys through a destroy run.
func TestTFCDaemon(t *testing.T) {
	skipShort(t)
	o := testutil.StartOTF(t)
	c := testutil.StartConsul(t)
	tc := o.Client(t)
	dir := t.TempDir()
	port := testutil.FreePort(t)
	cfg := writeFile(t, dir, "c.hcl", tfcConfig(o, c.Addr, filepath.Join(dir, "sync"), port, o.Organization, o.Token))

	c.RegisterService(t, &api.AgentServiceRegistration{ID: "web-1", Name: "web", Address: "10.0.0.1", Port: 80}, "passing")
	p := startCtsync(t, dir, "start", "-config-file", cfg)

	state := func() string { return tfcState(t, tc, o.Organization, "cts-web") }
	reach := func(want, what string) time.Duration {
		t.Helper()
		start := time.Now()
		last := ""
		defer func() {
			if t.Failed() {
				t.Logf("last state read: %q", last)
			}
		}()
		testutil.Eventually(t, 90*time.Second, what+": state "+want, func() bool { last = state(); return last == want })
		return time.Since(start)
	}
	reach("none:web-1", "first run")
	ws, err := tc.Workspaces.Read(context.Background(), o.Organization, "cts-web")
	if err != nil {
		t.Fatal(err)
	}
	if ws.ExecutionMode != "remote" || !strings.Contains(strings.Join(ws.TagNames, ","), "ctsync") || !strings.Contains(strings.Join(ws.TagNames, ","), "dc1") {
		t.Errorf("workspace: mode %q, tags %q", ws.ExecutionMode, ws.TagNames)
	}

	c.RegisterService(t, &api.AgentServiceRegistration{ID: "web-2", Name: "web", Address: "10.0.0.2", Port: 80}, "passing")
	d1 := reach("none:web-1,web-2", "register")
	c.SetCheck(t, "web-1", "critical", "down")
	d2 := reach("none:web-2", "health flip")
	if err := c.Client.Agent().ServiceDeregister("web-2"); err != nil {
		t.Fatal(err)
	}
	d3 := reach("none:", "deregister")
	t.Logf("change -> remote run applied (read back through the API): register %v, health flip %v, deregister %v", d1, d2, d3)

	// Events carry the run URL.
	code, body := tfcDo(t, "GET", port, "/v1/status/tasks/web?include=events", "")
	if code != 200 || !strings.Contains(string(body), `"tfc_run_url":"`+o.URL+"/app/"+o.Organization+"/workspaces/cts-web/runs/run-") {
		t.Errorf("events: %d %s", code, body)
	}

	// run=inspect: a plan with changes, nothing applied.
	testutil.Eventually(t, 30*time.Second, "task disabled", func() bool {
		code, _ := tfcDo(t, "PATCH", port, "/v1/tasks/web", `{"enabled": false}`)
		return code == 200
	})
	c.RegisterService(t, &api.AgentServiceRegistration{ID: "web-3", Name: "web", Address: "10.0.0.3", Port: 80}, "passing")
	// The new instance reaches the task's data soon after the
	// registration: plan until the plan shows it.
	testutil.Eventually(t, 30*time.Second, "inspect sees web-3", func() bool {
		code, body = tfcDo(t, "PATCH", port, "/v1/tasks/web?run=inspect", `{"enabled": true}`)
		return code != 200 || strings.Contains(string(body), `"changes_present":true`)
	})
	if code != 200 || !strings.Contains(string(body), `"changes_present":true`) || !strings.Contains(string(body), "terraform_data.ids") ||
		!strings.Contains(string(body), `"tfc_run_url":"`) {
		t.Errorf("inspect: %d %s", code, body)
	}
	if got := state(); got != "none:" {
		t.Errorf("inspect applied: state %q", got)
	}

	// DELETE ?destroy=true: a destroy run empties the state.
	code, body = tfcDo(t, "DELETE", port, "/v1/tasks/web?destroy=true", "")
	if code/100 != 2 {
		t.Fatalf("delete: %d %s", code, body)
	}
	reach("<none>", "destroy on delete")
	// API requests per remote run, as the driver counts and logs them.
	testutil.Eventually(t, 30*time.Second, "the destroy run's log line", func() bool {
		return len(p.lines(` remote run finished: `, "op=destroy")) > 0
	})
	for _, l := range p.lines(` remote run finished: `) {
		m := apiRequestsRe.FindStringSubmatch(l)
		if m != nil {
			t.Logf("MEASURED remote run: op %s, %s API requests, %s", m[1], m[3], m[2])
		}
	}
}

var apiRequestsRe = regexp.MustCompile(`op=(\S+) .*duration=(\S+) api_requests=(\d+)`)

// TestTFCBadInput: -inspect plans and applies nothing; a wrong token, an
// unknown organization and a workspace with another execution mode end
// -once with a clear error (and never the token).
func TestTFCBadInput(t *testing.T) {
	skipShort(t)
	o := testutil.StartOTF(t)
	c := testutil.StartConsul(t)
	tc := o.Client(t)
	c.RegisterService(t, &api.AgentServiceRegistration{ID: "web-1", Name: "web", Address: "10.0.0.1", Port: 80}, "passing")
	dir := t.TempDir()
	run := func(name, org, token string, args ...string) (int, string) {
		t.Helper()
		cfg := writeFile(t, dir, name+".hcl", tfcConfig(o, c.Addr, filepath.Join(dir, name), testutil.FreePort(t), org, token))
		p := startCtsyncEnv(t, dir, []string{"CTSYNC_ONCE_WAIT=60s"}, append([]string{"start", "-config-file", cfg}, args...)...)
		code := p.wait(t, 2*time.Minute)
		return code, p.out.String()
	}

	code, out := run("inspect", o.Organization, o.Token, "-inspect")
	if code != 0 || !strings.Contains(out, "terraform_data.ids will be created") {
		t.Errorf("-inspect: exit %d\n%s", code, out)
	}
	if got := tfcState(t, tc, o.Organization, "cts-web"); got != "<none>" {
		t.Errorf("-inspect applied: %q", got)
	}

	bad := "wrong-token-0123456789"
	code, out = run("token", o.Organization, bad, "-once")
	if code == 0 || !strings.Contains(out, "token was refused") || strings.Contains(out, bad) {
		t.Errorf("wrong token: exit %d\n%s", code, out)
	}
	code, out = run("org", "no-such-org", o.Token, "-once")
	if code == 0 || !strings.Contains(out, `organization \"no-such-org\" not found`) && !strings.Contains(out, `organization "no-such-org" not found`) {
		t.Errorf("unknown organization: exit %d\n%s", code, out)
	}

	if _, err := tc.Workspaces.Create(context.Background(), o.Organization, tfe.WorkspaceCreateOptions{
		Name: tfe.String("cts-local"), ExecutionMode: tfe.String("local")}); err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(tfcConfig(o, c.Addr, filepath.Join(dir, "local"), testutil.FreePort(t), o.Organization, o.Token), `name   = "web"`, `name   = "local"`, 1)
	f := writeFile(t, dir, "local.hcl", cfg)
	p := startCtsyncEnv(t, dir, []string{"CTSYNC_ONCE_WAIT=60s"}, "start", "-config-file", f, "-once")
	if code := p.wait(t, 2*time.Minute); code == 0 || !strings.Contains(p.out.String(), `exists with execution mode`) {
		t.Errorf("local workspace: exit %d\n%s", code, p.out.String())
	}
	_ = os.Remove(f)
}
