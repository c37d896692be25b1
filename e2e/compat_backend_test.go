package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/testutil"
)

// driver "terraform" { backend "local" { ... } } works end to end with both
// binaries: the task's state is in the task's workspace of that backend.
func TestCompatLocalBackend(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	s := svc{id: "lb-1", name: "lb", port: 1, status: api.HealthPassing}
	s.register(t, c)
	node := agentNode(t, c)
	for _, b := range compatBinaries(t) {
		t.Run(b.name, func(t *testing.T) {
			work := t.TempDir()
			out := filepath.Join(work, "out")
			if err := os.MkdirAll(out, 0o755); err != nil {
				t.Fatal(err)
			}
			vars := writeFile(t, work, "dir.tfvars", fmt.Sprintf("dir = %q\n", out))
			stateDir := filepath.Join(work, "state")
			cfg := writeFile(t, work, "config.hcl", fmt.Sprintf(`
working_dir = %q
port        = %d
consul {
  address = %q
}
driver "terraform" {
  path = %q
  backend "local" {
    path          = %q
    workspace_dir = %q
  }
}
task {
  name           = "local-state"
  module         = %q
  variable_files = [%q]
  condition "services" {
    names = ["lb"]
  }
}
`, filepath.Join(work, "sync-tasks"), testutil.FreePort(t), c.Addr, b.path, filepath.Join(stateDir, "default.tfstate"),
				filepath.Join(stateDir, "workspaces"), module("compat_services"), vars))
			p := startCompat(t, work, []string{"TF_CLI_CONFIG_FILE=" + compatCLIConfig(t)}, "start", "-once", "-config-file", cfg)
			if code := p.wait(t, 3*time.Minute); code != 0 {
				t.Fatalf("exit code %d:\n%s", code, p.out.String())
			}
			want := map[string]any{}
			b2, _ := json.Marshal(map[string]any{s.key(node): s.rendered(node, api.HealthPassing, nil)})
			_ = json.Unmarshal(b2, &want)
			var got map[string]any
			if !readJSON(out, "services.json", &got) || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("services.json = %v, want %v", got, want)
			}
			// One workspace per task, named after it, as with the consul backend.
			state, err := os.ReadFile(filepath.Join(stateDir, "workspaces", "local-state", "terraform.tfstate"))
			if err != nil || !strings.Contains(string(state), `"local_file"`) {
				t.Fatalf("no state in the task's workspace of the local backend (%v):\n%s", err, state)
			}
			if kv, _, _ := c.Client.KV().Get("consul-terraform-sync/terraform-env:local-state", nil); kv != nil {
				t.Fatal("state written to Consul despite the local backend")
			}
		})
	}
}
