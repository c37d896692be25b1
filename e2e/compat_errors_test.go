package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// Invalid CTS configurations stop `ctsync start` with exit code 15 and an
// error naming the file, the line and the field, before anything runs.
func TestCompatBadConfigAtStart(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	task := func(body string) string {
		return "task {\n  name   = \"t\"\n  module = \"./m\"\n" + body + "}\n"
	}
	tests := []struct {
		name, config string
		line         int
		want         []string
	}{
		{"cron that never fires", task("  condition \"schedule\" {\n    cron = \"0 0 0 30 2 * *\"\n  }\n"), 5,
			[]string{`task "t".condition "schedule".cron`, "never fires"}},
		{"cron that does not parse", task("  condition \"schedule\" {\n    cron = \"every monday\"\n  }\n"), 5,
			[]string{`task "t".condition "schedule".cron`, "not a valid cron expression"}},
		{"regexp that does not compile", task("  condition \"catalog-services\" {\n    regexp = \"web[\"\n  }\n"), 5,
			[]string{`task "t".condition "catalog-services".regexp`, "does not compile"}},
		{"services regexp that does not compile", task("  condition \"services\" {\n    regexp = \"(web\"\n  }\n"), 5,
			[]string{`task "t".condition "services".regexp`, "does not compile"}},
		{"unreadable variable file", task("  variable_files = [\"/nonexistent/vars.tfvars\"]\n  condition \"services\" {\n    names = [\"web\"]\n  }\n"), 4,
			[]string{`task "t".variable_files[0]`, `cannot read variable file "/nonexistent/vars.tfvars"`}},
		{"services list and condition services", task("  services = [\"web\"]\n  condition \"services\" {\n    names = [\"api\"]\n  }\n"), 4,
			[]string{`task "t".services`, `cannot be used together with condition "services"`}},
		{"condition and module_input of the same type", task("  condition \"consul-kv\" {\n    path = \"a\"\n    use_as_module_input = false\n  }\n  module_input \"consul-kv\" {\n    path = \"b\"\n  }\n"), 8,
			[]string{`task "t".module_input "consul-kv"`, "already provides the consul_kv variable"}},
		{"two module_inputs of the same type", task("  condition \"schedule\" {\n    cron = \"@daily\"\n  }\n  module_input \"services\" {\n    names = [\"a\"]\n  }\n  module_input \"services\" {\n    names = [\"b\"]\n  }\n"), 10,
			[]string{`task "t".module_input "services"`, "only one module_input"}},
		{"no condition", task(""), 1,
			[]string{`task "t".condition`, "task should be configured with a condition block"}},
		{"module_input catalog-services", task("  condition \"schedule\" {\n    cron = \"@daily\"\n  }\n  module_input \"catalog-services\" {\n    regexp = \".*\"\n  }\n"), 7,
			[]string{`task "t".module_input`, `unknown module_input type "catalog-services"`}},
		{"vault secret in a provider", "terraform_provider \"aws\" {\n  region = \"eu\"\n  secret_key = \"{{ with secret \\\"aws/creds\\\" }}{{ .Data.data.key }}{{ end }}\"\n}\n", 3,
			[]string{`terraform_provider "aws".secret_key`, "missing Vault configuration"}},
		{"remote backend", "driver \"terraform\" {\n  backend \"remote\" {\n    organization = \"x\"\n  }\n}\n", 2,
			[]string{`driver "terraform".backend "remote"`, "not supported"}},
		{"cloud backend", "driver \"terraform\" {\n  backend \"cloud\" {\n  }\n}\n", 2,
			[]string{`driver "terraform".backend "cloud"`, "not supported"}},
		{"missing KV key for a provider", fmt.Sprintf("consul {\n  address = %q\n}\nterraform_provider \"aws\" {\n  token = \"{{ key \\\"no/such/key\\\" }}\"\n}\n", c.Addr), 5,
			[]string{`terraform_provider "aws".token`, `Consul KV key "no/such/key" does not exist`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			work := t.TempDir()
			cfg := writeFile(t, work, "bad.hcl", tt.config)
			p := startCompat(t, work, nil, "start", "-config-file", cfg)
			if code := p.wait(t, 30*time.Second); code != 15 {
				t.Fatalf("exit code %d, want 15:\n%s", code, p.out.String())
			}
			out := strings.ReplaceAll(p.out.String(), `\"`, `"`)
			if !regexp.MustCompile(regexp.QuoteMeta(fmt.Sprintf("bad.hcl:%d: ", tt.line))).MatchString(out) {
				t.Errorf("the error does not name bad.hcl:%d:\n%s", tt.line, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("the error lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, "executing task") {
				t.Errorf("a task ran")
			}
		})
	}
}
