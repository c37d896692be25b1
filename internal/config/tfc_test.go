package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/task"
)

func clearTFCEnv(t *testing.T) {
	t.Helper()
	for _, n := range []string{EnvTFCHostname, EnvTFCOrganization, EnvTFCToken} {
		t.Setenv(n, "")
	}
}

func TestTFCDriverBlock(t *testing.T) {
	clearTFCEnv(t)
	dir := t.TempDir()
	p2 := writeFile(t, dir, "t.hcl", lines(okTask(`  terraform_cloud_workspace {`, `    execution_mode  = "agent"`,
		`    agent_pool_name = "dc1"`, `    terraform_version = "1.5.7"`, `  }`)...))
	p := writeFile(t, dir, "c.hcl", lines(
		`driver "terraform-cloud" {`,
		`  hostname     = "tfe.example.com:8443"`,
		`  organization = "acme"`,
		`  token        = "team-token-123"`,
		`  workspaces {`,
		`    prefix         = "cts-"`,
		`    tags           = ["cts", "net"]`,
		`    tags_allowlist = ["cts"]`,
		`    tags_denylist  = ["prod"]`,
		`  }`,
		`  required_providers {`,
		`    local = { source = "hashicorp/local", version = "2.4.0" }`,
		`  }`,
		`  tls {`,
		`    ca_cert = "/etc/ca.pem"`,
		`  }`,
		`}`))
	cfg := mustLoad(t, p, p2)
	want := &TFCDriver{
		Address: "https://tfe.example.com:8443", Hostname: "tfe.example.com:8443", Organization: "acme", Token: "team-token-123",
		WorkspacePrefix: "cts-", Tags: []string{"cts", "net"}, TagsAllowlist: []string{"cts"}, TagsDenylist: []string{"prod"},
		RequiredProviders: map[string]RequiredProvider{"local": {Source: "hashicorp/local", Version: "2.4.0"}},
		TLS:               TFCTLS{CACert: "/etc/ca.pem", Verify: true},
	}
	got := *cfg.TFC
	got.Range = want.Range
	if !reflect.DeepEqual(&got, want) {
		t.Errorf("TFC =\n%+v\nwant\n%+v", got, *want)
	}
	if ws := cfg.Tasks[0].TFCWorkspace; ws == nil || *ws != (task.TFCWorkspace{ExecutionMode: "agent", AgentPoolName: "dc1", TerraformVersion: "1.5.7"}) {
		t.Errorf("task workspace = %+v", ws)
	}
	if got := cfg.TFC.WorkspaceName("web"); got != "cts-web" {
		t.Errorf("workspace name = %q", got)
	}
	found := false
	for _, s := range cfg.Secrets() {
		found = found || s == "team-token-123"
	}
	if !found {
		t.Error("the token is not among the secrets to redact")
	}
}

// TestTFCDriverEnv: TFC_HOSTNAME, TFC_ORGANIZATION and TFC_TOKEN fill in
// what the block leaves out; the deprecated workspace_prefix adds "-"; a
// JSON configuration works the same.
func TestTFCDriverEnv(t *testing.T) {
	clearTFCEnv(t)
	t.Setenv(EnvTFCHostname, "http://127.0.0.1:9999")
	t.Setenv(EnvTFCOrganization, "env-org")
	t.Setenv(EnvTFCToken, "env-token")
	dir := t.TempDir()
	cfg := mustLoad(t, writeFile(t, dir, "c.hcl", lines(`driver "terraform-cloud" {`, `  organization = "file-org"`, `  workspace_prefix = "cts"`, `}`)))
	if c := cfg.TFC; c.Address != "http://127.0.0.1:9999" || c.Organization != "file-org" || c.Token != "env-token" || c.WorkspacePrefix != "cts-" {
		t.Errorf("TFC = %+v", c)
	}
	if len(cfg.Warnings) == 0 || !strings.Contains(strings.Join(cfg.Warnings, "\n"), "workspace_prefix: is deprecated") {
		t.Errorf("warnings = %q", cfg.Warnings)
	}
	cfg = mustLoad(t, writeFile(t, dir, "j.json", `{"driver": {"terraform-cloud": {"workspaces": {"prefix": "p-"}}},
 "task": [{"name": "web", "module": "org/m/x", "condition": {"services": {"names": ["web"]}}, "terraform_cloud_workspace": {"terraform_version": "1.6.0"}}]}`))
	if cfg.TFC.WorkspacePrefix != "p-" || cfg.TFC.Organization != "env-org" || cfg.Tasks[0].TFCWorkspace.TerraformVersion != "1.6.0" {
		t.Errorf("json: TFC = %+v, workspace = %+v", cfg.TFC, cfg.Tasks[0].TFCWorkspace)
	}
}

func TestTFCDriverErrors(t *testing.T) {
	clearTFCEnv(t)
	head := []string{`driver "terraform-cloud" {`, `  organization = "o"`, `  token = "t"`}
	tests := []struct {
		name, src, where, field, msg string
	}{
		{"no token", lines(`driver "terraform-cloud" {`, `  organization = "o"`, `}`), "c.hcl:1", `driver "terraform-cloud".token`, "is required (or set TFC_TOKEN)"},
		{"bad hostname", lines(append(head, `  hostname = "ftp://x"`, `}`)...), "c.hcl:4", `driver "terraform-cloud".hostname`, "http or https"},
		{"backend in tfc", lines(append(head, `  backend "consul" {`, `  }`, `}`)...), "c.hcl:4", `driver "terraform-cloud".backend`, "the workspace holds the state"},
		{"both prefixes", lines(append(head, `  workspace_prefix = "a"`, `  workspaces {`, `    prefix = "b"`, `  }`, `}`)...), "c.hcl:4", "workspace_prefix", "cannot be used with workspaces.prefix"},
		{"tag denied", lines(append(head, `  workspaces {`, `    tags = ["x"]`, `    tags_denylist = ["x"]`, `  }`, `}`)...), "c.hcl:5", "workspaces.tags", `tag "x" is also in tags_denylist`},
		{"two drivers", lines(append(head, `}`, `driver "terraform" {`, `  log = true`, `}`)...), "c.hcl:1", `driver "terraform-cloud"`, "only one driver"},
		{"local execution", lines(append(append(head, `}`), okTask(`  terraform_cloud_workspace {`, `    execution_mode = "local"`, `  }`)...)...), "c.hcl:9", `task "web".terraform_cloud_workspace.execution_mode`, `"local" cannot be used`},
		{"agent without pool", lines(append(append(head, `}`), okTask(`  terraform_cloud_workspace {`, `    execution_mode = "agent"`, `  }`)...)...), "c.hcl:8", "agent_pool_id", "needs agent_pool_id or agent_pool_name"},
		{"pool without agent", lines(append(append(head, `}`), okTask(`  terraform_cloud_workspace {`, `    agent_pool_id = "apool-1"`, `  }`)...)...), "c.hcl:9", "terraform_cloud_workspace", `need execution_mode = "agent"`},
		{"unknown workspace field", lines(append(append(head, `}`), okTask(`  terraform_cloud_workspace {`, `    execution = "agent"`, `  }`)...)...), "c.hcl:9", "terraform_cloud_workspace.execution", "unknown field"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "c.hcl", tc.src)
			_, err := Load([]string{p})
			if err == nil {
				t.Fatal("loaded")
			}
			s := err.Error()
			if !strings.Contains(s, tc.where+":") && !strings.Contains(s, tc.where+",") || !strings.Contains(s, tc.field) || !strings.Contains(s, tc.msg) {
				t.Errorf("error = %s\nwant %s, %s, %s", s, tc.where, tc.field, tc.msg)
			}
			if strings.Contains(s, `token = "t"`) {
				t.Errorf("the token is in the error: %s", s)
			}
		})
	}
}
