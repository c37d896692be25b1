package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
)

// lines joins its arguments into a file, one per line, so that a test case
// can name the line it expects an error on by counting arguments.
func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }

type srcSpec struct{ name, content string }

func hclFile(content string) []srcSpec { return []srcSpec{{"c.hcl", content}} }

// okTask is a valid task with the given extra lines inserted after module
// (so these lines start at line 4).
func okTask(extra ...string) []string {
	out := []string{"task {", `  name = "web"`, `  module = "org/m/x"`}
	out = append(out, extra...)
	return append(out, `  condition "services" {`, `    names = ["web"]`, "  }", "}")
}

func TestLoadErrors(t *testing.T) {
	clearConsulEnv(t)
	tests := []struct {
		name  string
		files []srcSpec
		file  string // base name of the file the error must point at
		line  int
		field string // must be contained in the field path
		msg   string // must be contained in the message
	}{
		// unknown keys
		{"unknown top-level key", hclFile(lines(`log_level = "info"`, `bogus = 1`)), "c.hcl", 2, "bogus", "unknown top-level field"},
		{"typo gets a suggestion", hclFile(lines(`worknig_dir = "x"`)), "c.hcl", 1, "worknig_dir", `did you mean "working_dir"`},
		{"unknown key in task", hclFile(lines(okTask(`  colour = "red"`)...)), "c.hcl", 4, `task "web".colour`, "unknown field"},
		{"unknown key in condition", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  condition "services" {`, `    names = ["a"]`, `    nmes = ["b"]`, "  }", "}")),
			"c.hcl", 6, `task "web".condition "services".nmes`, `did you mean "names"`},
		{"unknown key in consul.tls", hclFile(lines("consul {", "  tls {", "    verify_incoming = true", "  }", "}")), "c.hcl", 3, "consul.tls.verify_incoming", "unknown field"},
		{"unknown block in task", hclFile(lines(okTask(`  lifecycle {`, `  }`)...)), "c.hcl", 4, `task "web".lifecycle`, "unknown field"},
		{"json unknown key in task", []srcSpec{{"c.json", lines(`{"task": {`, `  "name": "web",`, `  "module": "m",`, `  "colour": "red",`, `  "condition": {"services": {"names": ["a"]}}}}`)}},
			"c.json", 4, `task "web".colour`, "unknown field"},
		{"json unknown top-level key", []srcSpec{{"c.json", lines(`{`, `  "port": 1,`, `  "bogus": true`, `}`)}}, "c.json", 3, "bogus", "unknown top-level field"},

		// wrong types and shapes
		{"port not a number", hclFile(lines(`port = "eighty"`)), "c.hcl", 1, "port", "must be a whole number"},
		{"port out of range", hclFile(lines(`port = 70000`)), "c.hcl", 1, "port", "between 0 and 65535"},
		{"enabled not a bool", hclFile(lines(okTask(`  enabled = "maybe"`)...)), "c.hcl", 4, `task "web".enabled`, "must be a bool"},
		{"names not a list", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  condition "services" {`, `    names = { a = "web" }`, "  }", "}")),
			"c.hcl", 5, `task "web".condition "services".names`, "must be a list of strings"},
		{"providers not a list", hclFile(lines(okTask(`  providers = { a = 1 }`)...)), "c.hcl", 4, `task "web".providers`, "must be a list of strings"},
		{"block written as argument", hclFile(lines(`buffer_period = "5s"`)), "c.hcl", 1, "buffer_period", "must be a block"},
		{"argument written as block", hclFile(lines(okTask(`  description {`, `  }`)...)), "c.hcl", 4, `task "web".description`, "must be an argument"},
		{"json wrong type", []srcSpec{{"c.json", lines(`{`, `  "max_parallel_runs": [4, 5]`, `}`)}}, "c.json", 2, "max_parallel_runs", "must be a whole number"},
		{"condition without label", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  condition {`, "  }", "}")), "c.hcl", 4, `task "web".condition`, "exactly one label"},
		{"provider with two labels", hclFile(lines(`terraform_provider "a" "b" {`, "}")), "c.hcl", 1, "terraform_provider", "exactly one label"},
		{"task_env not a map", hclFile(lines(`terraform_provider "aws" {`, `  task_env = "A=b"`, "}")), "c.hcl", 2, `terraform_provider "aws".task_env`, "must be a map"},
		{"variables with a reference", hclFile(lines(okTask(`  variables = {`, `    a = var.x`, `  }`)...)), "c.hcl", 5, `task "web".variables.a`, "must be a literal value"},
		{"hcl syntax error", hclFile(lines(`port = 1`, `task {`, `  name = `, `}`)), "c.hcl", 3, "", "Invalid expression"},
		{"json syntax error", []srcSpec{{"c.json", lines(`{`, `  "port": 1,`, `}`)}}, "c.json", 2, "", "Trailing comma"},

		// values
		{"bad log level", hclFile(lines(`log_level = "verbose"`)), "c.hcl", 1, "log_level", "not a valid log level"},
		{"bad log format", hclFile(lines(`log_format = "xml"`)), "c.hcl", 1, "log_format", "not a valid log format"},
		{"max_parallel_runs zero", hclFile(lines(`max_parallel_runs = 0`)), "c.hcl", 1, "max_parallel_runs", "at least 1"},
		{"negative parallelism", hclFile(lines(okTask(`  parallelism = -1`)...)), "c.hcl", 4, `task "web".parallelism`, "cannot be negative"},
		{"bad duration", hclFile(lines(`buffer_period {`, `  min = "5 seconds"`, `}`)), "c.hcl", 2, "buffer_period.min", "not a valid duration"},
		{"bad transport duration", hclFile(lines("consul {", "  transport {", `    dial_timeout = "soon"`, "  }", "}")), "c.hcl", 3, "consul.transport.dial_timeout", "not a valid duration"},
		{"negative duration", hclFile(lines(okTask(`  buffer_period {`, `    max = "-1s"`, `  }`)...)), "c.hcl", 5, `task "web".buffer_period.max`, "cannot be negative"},
		{"task buffer max below min", hclFile(lines(okTask(`  buffer_period {`, `    min = "10s"`, `    max = "5s"`, `  }`)...)), "c.hcl", 6, `task "web".buffer_period.max`, "cannot be less than min"},
		{"global buffer max below min", hclFile(lines(`buffer_period {`, `  min = "1m"`, `  max = "30s"`, `}`)), "c.hcl", 3, "buffer_period.max", "cannot be less than min"},
		{"invalid task name", hclFile(lines("task {", `  name = "web site"`, `  module = "m"`, `  condition "services" {`, `    names = ["a"]`, "  }", "}")), "c.hcl", 2, `task "web site".name`, "not a valid task name"},

		// required fields
		{"missing name", hclFile(lines("task {", `  module = "m"`, `  condition "services" {`, `    names = ["a"]`, "  }", "}")), "c.hcl", 1, "task.name", "is required"},
		{"missing module", hclFile(lines("task {", `  name = "web"`, `  condition "services" {`, `    names = ["a"]`, "  }", "}")), "c.hcl", 1, `task "web".module`, "is required"},
		{"missing condition", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, "}")), "c.hcl", 1, `task "web".condition`, "configured with a condition block"},
		{"missing cron", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  condition "schedule" {`, "  }", "}")), "c.hcl", 4, `task "web".condition "schedule".cron`, "is required"},
		{"missing catalog regexp", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  condition "catalog-services" {`, `    datacenter = "dc1"`, "  }", "}")),
			"c.hcl", 4, `task "web".condition "catalog-services".regexp`, "is required"},
		{"missing kv path", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  condition "consul-kv" {`, "  }", "}")), "c.hcl", 4, `task "web".condition "consul-kv".path`, "is required"},
		{"missing module_input kv path", hclFile(lines(okTask(`  module_input "consul-kv" {`, `    recurse = true`, `  }`)...)), "c.hcl", 4, `task "web".module_input "consul-kv".path`, "is required"},
		{"names and regexp", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  condition "services" {`, `    names = ["a"]`, `    regexp = "a"`, "  }", "}")),
			"c.hcl", 4, `task "web".condition "services"`, "exactly one of regexp or names"},
		{"neither names nor regexp", hclFile(lines(okTask(`  module_input "services" {`, `  }`)...)), "c.hcl", 4, `task "web".module_input "services"`, "exactly one of regexp or names"},

		// conditions and module inputs
		{"two conditions", hclFile(lines(okTask(`  condition "consul-kv" {`, `    path = "a"`, `  }`)...)), "c.hcl", 7, `task "web".condition`, "only one condition"},
		{"two conditions json", []srcSpec{{"c.json", lines(`{"task": {"name": "web", "module": "m",`, `  "condition": {"services": {"names": ["a"]},`, `  "consul-kv": {"path": "p"}}}}`)}},
			"c.json", 3, `task "web".condition`, "only one condition"},
		{"unknown condition type", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  condition "checks" {`, "  }", "}")), "c.hcl", 4, `task "web".condition`, `"services", "catalog-services", "consul-kv", "schedule", "nodes", "intentions"`},
		{"catalog module_input", hclFile(lines(okTask(`  module_input "catalog-services" {`, `  }`)...)), "c.hcl", 4, `task "web".module_input`, `unknown module_input type "catalog-services"`},
		{"duplicate module_input", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  module_input "consul-kv" {`, `    path = "a"`, "  }", `  source_input "consul-kv" {`, `    path = "b"`, "  }",
			`  condition "services" {`, `    names = ["a"]`, "  }", "}")), "c.hcl", 7, `task "web".source_input "consul-kv"`, "only one module_input"},
		{"module_input duplicates condition", hclFile(lines(okTask(`  module_input "services" {`, `    names = ["b"]`, `  }`)...)), "c.hcl", 4, `task "web".module_input "services"`, "already provides the services variable"},
		{"bad services regexp", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  condition "services" {`, `    regexp = "web("`, "  }", "}")),
			"c.hcl", 5, `task "web".condition "services".regexp`, "does not compile"},
		{"bad catalog regexp", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  condition "catalog-services" {`, `    regexp = "[a-"`, "  }", "}")),
			"c.hcl", 5, `task "web".condition "catalog-services".regexp`, "does not compile"},
		{"bad module_input regexp", hclFile(lines(okTask(`  module_input "services" {`, `    regexp = "*"`, `  }`)...)), "c.hcl", 5, `task "web".module_input "services".regexp`, "does not compile"},
		{"bad cron", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  condition "schedule" {`, `    cron = "every day"`, "  }", "}")),
			"c.hcl", 5, `task "web".condition "schedule".cron`, "not a valid cron expression"},
		{"cron that never fires", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  condition "schedule" {`, `    cron = "0 0 0 30 2 * *"`, "  }", "}")),
			"c.hcl", 5, `task "web".condition "schedule".cron`, "never fires"},
		{"empty names entry", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  condition "services" {`, `    names = [`, `      "a",`, `      "",`, `    ]`, "  }", "}")),
			"c.hcl", 7, `task "web".condition "services".names[1]`, "cannot be empty"},

		// task-level rules
		{"duplicate task names", []srcSpec{
			{"a.hcl", lines(okTask()...)},
			{"b.hcl", lines("# second", "task {", `  name = "web"`, `  module = "m"`, `  condition "services" {`, `    names = ["a"]`, "  }", "}")},
		}, "b.hcl", 3, `task "web".name`, `duplicate task name "web": also declared at `},
		{"unknown provider alias", hclFile(lines(append([]string{`terraform_provider "aws" {`, "}"}, okTask(`  providers = [`, `    "aws.west",`, `  ]`)...)...)), "c.hcl", 7, `task "web".providers[0]`, `provider "aws.west" is not declared`},
		{"provider used twice", hclFile(lines(append([]string{`terraform_provider "aws" {`, "}", `terraform_provider "aws" {`, `  alias = "b"`, "}"}, okTask(`  providers = ["aws", "aws.b"]`)...)...)),
			"c.hcl", 9, `task "web".providers[1]`, "listed more than once"},
		{"unreadable variable file", hclFile(lines(okTask(`  variable_files = ["testdata/vars/nope.tfvars"]`)...)), "c.hcl", 4, `task "web".variable_files[0]`, `cannot read variable file "testdata/vars/nope.tfvars"`},
		{"variable file is a directory", hclFile(lines(okTask(`  variable_files = ["testdata/vars"]`)...)), "c.hcl", 4, `task "web".variable_files[0]`, `not a regular file`},
		{"unparsable variable file", hclFile(lines(okTask(`  variable_files = ["testdata/vars/bad.tfvars"]`)...)), "bad.tfvars", 1, `task "web".variable_files[0]`, ""},

		// driver
		{"remote backend", hclFile(lines(`driver "terraform" {`, `  backend "remote" {`, `    organization = "x"`, "  }", "}")), "c.hcl", 2, `driver "terraform".backend "remote"`, `the "remote" backend (HCP Terraform / Terraform Enterprise runs) is not supported`},
		{"http backend", hclFile(lines(`driver "terraform" {`, `  backend "http" {`, "  }", "}")), "c.hcl", 2, `driver "terraform".backend "http"`, "unsupported Terraform backend"},
		{"cloud backend", hclFile(lines(`driver "terraform" {`, `  backend "cloud" {`, "  }", "}")), "c.hcl", 2, `driver "terraform".backend "cloud"`, `the "cloud" backend (HCP Terraform / Terraform Enterprise runs) is not supported`},
		{"two backends across files", []srcSpec{
			{"a.hcl", lines(`driver "terraform" {`, `  backend "local" {`, "  }", "}")},
			{"b.hcl", lines(`driver "terraform" {`, `  backend "s3" {`, "  }", "}")},
		}, "b.hcl", 2, `driver "terraform".backend "s3"`, `only one backend can be configured; backend "local" is already configured at `},
		{"driver working_dir", hclFile(lines(`driver "terraform" {`, `  working_dir = "x"`, "}")), "c.hcl", 2, `driver "terraform".working_dir`, "removed in CTS 0.5"},
		{"terraform-cloud driver", hclFile(lines(`port = 1`, `driver "terraform-cloud" {`, "}")), "c.hcl", 2, `driver "terraform-cloud".organization`, "is required (or set TFC_ORGANIZATION)"},
		{"unknown driver", hclFile(lines(`driver "pulumi" {`, "}")), "c.hcl", 1, `driver "pulumi"`, "unsupported driver"},
		{"two terraform drivers", hclFile(lines(`driver "terraform" {`, "}", `driver "terraform" {`, "}")), "c.hcl", 3, `driver "terraform"`, "only one 'driver' block can be configured"},
		{"bad required_providers entry", hclFile(lines(`driver "terraform" {`, `  required_providers {`, `    aws = { sauce = "x" }`, "  }", "}")), "c.hcl", 3, `driver "terraform".required_providers.aws.sauce`, "unknown field"},

		// repeated singular blocks
		{"two consul blocks", hclFile(lines("consul {", "}", "consul {", "}")), "c.hcl", 3, "consul", "only one 'consul' block can be configured"},
		{"two tls blocks in consul", hclFile(lines("consul {", "  tls {", "  }", "  tls {", "  }", "}")), "c.hcl", 4, "consul.tls", "only one 'tls' block can be configured"},
		{"two task buffer_period blocks", hclFile(lines(okTask("  buffer_period {", "  }", "  buffer_period {", "  }")...)), "c.hcl", 6, `task "web".buffer_period`, "only one 'buffer_period' block"},

		// not supported (yet)
		{"api tls without key", hclFile(lines("tls {", `  cert = "x"`, "}")), "c.hcl", 1, "tls.key", "is required when TLS is enabled"},
		{"vault unknown field", hclFile(lines(`port = 1`, "vault {", `  adress = "x"`, "}")), "c.hcl", 3, "vault.adress", `did you mean "address"?`},
		{"vault lease duration", hclFile(lines("vault {", `  default_lease_duration = "10ms"`, "}")), "c.hcl", 2, "vault.default_lease_duration", "at least 1s"},
		{"two vault blocks", hclFile(lines("vault {", "}", "vault {", "}")), "c.hcl", 3, "vault", "only one 'vault' block can be configured"},
		{"syslog facility", hclFile(lines("syslog {", `  facility = "local9"`, "}")), "c.hcl", 2, "syslog.facility", `"LOCAL9" is not a syslog facility`},
		{"high_availability without cluster name", hclFile(lines("high_availability {", "  cluster {", "  }", "}")), "c.hcl", 1, "high_availability.cluster.name", "is required"},
		{"license", hclFile(lines("license {", "}")), "c.hcl", 1, "license", "CTS Enterprise feature and is not supported"},
		{"license_path", hclFile(lines(`license_path = "/x"`)), "c.hcl", 1, "license_path", "CTS Enterprise feature and is not supported"},
		{"client_type test", hclFile(lines(`client_type = "test"`)), "c.hcl", 1, "client_type", `use "development"`},
		{"client_type unknown", hclFile(lines(`port = 1`, `client_type = "printer"`)), "c.hcl", 2, "client_type", `is not a client type`},
		{"json vault", []srcSpec{{"c.json", lines(`{`, `  "vault": {"renew_token": "maybe"}`, `}`)}}, "c.json", 2, "vault.renew_token", `must be a bool`},
		{"provider block", hclFile(lines(`provider "aws" {`, "}")), "c.hcl", 1, "provider", "use terraform_provider"},
		{"task terraform_version", hclFile(lines(okTask(`  terraform_version = "1.0.0"`)...)), "c.hcl", 4, `task "web".terraform_version`, `needs driver "terraform-cloud"`},
		{"task terraform_cloud_workspace", hclFile(lines(okTask(`  terraform_cloud_workspace {`, `  }`)...)), "c.hcl", 4, `task "web".terraform_cloud_workspace`, `needs driver "terraform-cloud"`},

		// deprecated services list and service blocks
		{"services list and condition services", hclFile(lines(okTask(`  services = ["web"]`)...)), "c.hcl", 4, `task "web".services`, `cannot be used together with condition "services"`},
		{"services list and module_input services", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  services = ["a"]`, `  module_input "services" {`, `    names = ["b"]`, "  }", `  condition "consul-kv" {`, `    path = "k"`, "  }", "}")),
			"c.hcl", 4, `task "web".services`, `cannot be used together with module_input "services"`},
		{"services list empty entry", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  services = [`, `    "a",`, `    "",`, `  ]`, "}")), "c.hcl", 6, `task "web".services[1]`, "cannot be empty"},
		{"services list not a list", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  services = { a = 1 }`, "}")), "c.hcl", 4, `task "web".services`, "must be a list of strings"},
		{"service block without name", hclFile(lines(`port = 1`, "service {", `  id = "x"`, "}")), "c.hcl", 2, "service.name", "is required"},
		{"service block tag", hclFile(lines("service {", `  name = "web"`, `  tag = "prod"`, "}")), "c.hcl", 3, "service.tag", "was removed in CTS 0.4"},
		{"service block unknown field", hclFile(lines("service {", `  name = "web"`, `  filters = "x"`, "}")), "c.hcl", 3, "service.filters", `did you mean "filter"`},
		{"duplicate service IDs", []srcSpec{
			{"a.hcl", lines("service {", `  name = "web"`, "}")},
			{"b.hcl", lines("service {", `  name = "api"`, `  id = "web"`, "}")},
		}, "b.hcl", 3, "service", `service IDs must be unique: "web" is also the ID of the service block at `},
		{"duplicate service names without ids", hclFile(lines("service {", `  name = "web"`, "}", "service {", `  name = "web"`, `  datacenter = "dc2"`, "}")), "c.hcl", 4, "service", "service IDs must be unique"},
		{"services list and no condition and two sources of consul_kv", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  services = ["a"]`, `  module_input "consul-kv" {`, `    path = "a"`, "  }", `  module_input "consul-kv" {`, `    path = "b"`, "  }", "}")),
			"c.hcl", 8, `task "web".module_input "consul-kv"`, "only one module_input"},

		// one source per variable type, even when the condition does not render it
		{"condition services not rendered and module_input services", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  condition "services" {`, `    names = ["a"]`, `    use_as_module_input = false`, "  }", `  module_input "services" {`, `    names = ["b"]`, "  }", "}")),
			"c.hcl", 8, `task "web".module_input "services"`, "already provides the services variable"},
		{"condition consul-kv not rendered and module_input consul-kv", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  condition "consul-kv" {`, `    path = "a"`, `    use_as_module_input = false`, "  }", `  module_input "consul-kv" {`, `    path = "b"`, "  }", "}")),
			"c.hcl", 8, `task "web".module_input "consul-kv"`, "already provides the consul_kv variable"},
		{"catalog-services empty regexp", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  condition "catalog-services" {`, `    regexp = ""`, "  }", "}")),
			"c.hcl", 5, `task "web".condition "catalog-services".regexp`, "is required"},
		{"cron with seconds that never fires", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  condition "schedule" {`, `    cron = "0 0 0 1 1 * 2001"`, "  }", "}")),
			"c.hcl", 5, `task "web".condition "schedule".cron`, "never fires"},
		{"cron out of range", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  condition "schedule" {`, `    cron = "61 * * * * * *"`, "  }", "}")),
			"c.hcl", 5, `task "web".condition "schedule".cron`, "cron"},
		{"unknown module_input field", hclFile(lines(okTask(`  module_input "consul-kv" {`, `    path = "a"`, `    use_as_module_input = true`, `  }`)...)), "c.hcl", 6, `task "web".module_input "consul-kv".use_as_module_input`, "unknown field"},

		// template syntax
		{"template in consul", hclFile(lines("consul {", `  address = "{{ env \"ADDR\" }}"`, "}")), "c.hcl", 2, "consul.address", "only allowed inside terraform_provider blocks"},
		{"template in task module", hclFile(lines("task {", `  name = "web"`, `  module = "{{ key \"m\" }}"`, `  condition "services" {`, `    names = ["a"]`, "  }", "}")),
			"c.hcl", 3, `task "web".module`, "only allowed inside terraform_provider blocks"},
		{"template in variables", hclFile(lines(okTask(`  variables = {`, `    a = ["{{ env \"X\" }}"]`, `  }`)...)), "c.hcl", 5, `task "web".variables.a`, "only allowed inside terraform_provider blocks"},
		{"template in names", hclFile(lines("task {", `  name = "web"`, `  module = "m"`, `  condition "services" {`, `    names = ["{{ env \"X\" }}"]`, "  }", "}")),
			"c.hcl", 5, `task "web".condition "services".names[0]`, "only allowed inside terraform_provider blocks"},
		{"template in backend", hclFile(lines(`driver "terraform" {`, `  backend "consul" {`, `    access_token = "{{ env \"T\" }}"`, "  }", "}")), "c.hcl", 3, `driver "terraform".backend "consul".access_token`, "only allowed inside terraform_provider blocks"},
		{"template in json", []srcSpec{{"c.json", lines(`{`, `  "id": "{{ env \"HOST\" }}"`, `}`)}}, "c.json", 2, "id", "only allowed inside terraform_provider blocks"},

		// providers
		{"unsupported template function", hclFile(lines(`terraform_provider "aws" {`, `  token = "{{ keyOrDefault \"secret/aws\" \"x\" }}"`, "}")), "c.hcl", 2, `terraform_provider "aws".token`, "template action 1 is not supported"},
		{"vault in task_env without vault", hclFile(lines(`terraform_provider "aws" {`, `  task_env {`, `    TOKEN = "{{ with secret \"x\" }}{{ .Data.t }}{{ end }}"`, "  }", "}")), "c.hcl", 1, `terraform_provider "aws"`, "detected dynamic configuration using Vault: missing Vault configuration"},
		{"vault in provider argument without vault", hclFile(lines(`terraform_provider "aws" {`, `  region = "eu"`, `  secret_key = "{{ with secret \"aws/creds\" }}{{ .Data.data.key }}{{ end }}"`, "}")), "c.hcl", 3, `terraform_provider "aws".secret_key`, "detected dynamic configuration using Vault: missing Vault configuration"},
		{"vault disabled", hclFile(lines(`vault {`, `  address = "http://v:8200"`, `  enabled = false`, `}`, `terraform_provider "aws" {`, `  k = "{{ with secret \"a/b\" }}{{ .Data.k }}{{ end }}"`, "}")), "c.hcl", 6, `terraform_provider "aws".k`, "missing Vault configuration"},
		{"secret without end", hclFile(lines(`vault {`, `  address = "http://v:8200"`, `}`, `terraform_provider "aws" {`, `  k = "{{ with secret \"a/b\" }}{{ .Data.k }}"`, "}")), "c.hcl", 5, `terraform_provider "aws".k`, "without its {{ end }}"},
		{"field outside with", hclFile(lines(`terraform_provider "aws" {`, `  k = "{{ .Data.k }}"`, "}")), "c.hcl", 2, `terraform_provider "aws".k`, "only be used inside {{ with secret"},
		{"bad key datacenter nested", hclFile(lines(`terraform_provider "aws" {`, `  assume_role {`, `    role = "{{ key \"r@\" }}"`, "  }", "}")), "c.hcl", 3, `terraform_provider "aws".assume_role.role`, "needs a datacenter"},
		{"unterminated template in list", hclFile(lines(`terraform_provider "aws" {`, `  zones = ["a", "{{ env \"Z\""]`, "}")), "c.hcl", 2, `terraform_provider "aws".zones`, "unterminated template action"},
		{"duplicate provider", hclFile(lines(`terraform_provider "aws" {`, `  alias = "east"`, "}", `terraform_provider "aws" {`, `  alias = "east"`, "}")), "c.hcl", 4, `terraform_provider "aws"`, "duplicate provider configuration: aws.east"},
		{"duplicate provider across files", []srcSpec{
			{"a.hcl", lines(`terraform_provider "aws" {`, "}")},
			{"b.hcl", lines(`port = 1`, `terraform_provider "aws" {`, "}")},
		}, "b.hcl", 2, `terraform_provider "aws"`, "duplicate provider configuration: aws (first declared at "},
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			var paths []string
			for _, f := range tt.files {
				paths = append(paths, writeFile(t, dir, f.name, f.content))
			}
			cfg, err := Load(paths)
			if err == nil {
				t.Fatalf("no error; config %+v", cfg)
			}
			t.Log(err)
			list := AsList(err)
			if len(list) == 0 {
				t.Fatalf("error is not a config error: %T %v", err, err)
			}
			var found *Error
			for _, e := range list {
				if filepath.Base(e.Range.Filename) == tt.file && e.Range.Start.Line == tt.line &&
					strings.Contains(e.Field, tt.field) && strings.Contains(e.Msg, tt.msg) {
					found = e
					break
				}
			}
			if found == nil {
				t.Fatalf("want an error at %s:%d on field %q containing %q; got:\n%v", tt.file, tt.line, tt.field, tt.msg, err)
			}
			if pos := fmt.Sprintf("%s:%d: ", tt.file, tt.line); !strings.Contains(err.Error(), pos) {
				t.Errorf("message lacks %q: %v", pos, err)
			}
		})
	}
}

func TestDuplicateTaskNamesBothLocations(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	a := writeFile(t, dir, "a.hcl", lines(okTask()...))
	b := writeFile(t, dir, "b.hcl", lines(append([]string{"", ""}, okTask()...)...))
	_, err := Load([]string{a, b})
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if !strings.Contains(msg, "b.hcl:4: ") || !strings.Contains(msg, "a.hcl:1") {
		t.Errorf("error must name both locations: %v", msg)
	}
}

func TestLoadPaths(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	writeFile(t, dir, "only/notes.txt", "x")
	writeFile(t, dir, "only/empty.hcl", "  \n")
	writeFile(t, dir, "only/sub/a.hcl", "port = 1\n")
	odd := writeFile(t, dir, "conf.yaml", "port: 1\n")

	for name, tt := range map[string]struct {
		paths []string
		want  string
	}{
		"nil":           {nil, "no configuration files found"},
		"nothing found": {[]string{filepath.Join(dir, "only")}, "no configuration files found"},
		"missing path":  {[]string{filepath.Join(dir, "absent.hcl")}, "absent.hcl: cannot read configuration path: no such file or directory"},
		"wrong ext":     {[]string{odd}, "conf.yaml: configuration files must end in .hcl or .json"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(tt.paths)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want %q", err, tt.want)
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Errorf("error is not a *Error: %T", err)
			}
		})
	}
}

func TestManyErrorsAreAllReported(t *testing.T) {
	clearConsulEnv(t)
	f := writeFile(t, t.TempDir(), "m.hcl", lines(`port = "x"`, `bogus = 1`, `log_level = "loud"`))
	_, err := Load([]string{f})
	var es Errors
	if !errors.As(err, &es) || len(es) != 3 {
		t.Fatalf("want 3 errors, got %T: %v", err, err)
	}
	for i, want := range []string{"m.hcl:1: port:", "m.hcl:2: bogus:", "m.hcl:3: log_level:"} {
		if !strings.HasPrefix(filepath.Base(es[i].Error()), want) {
			t.Errorf("error %d = %v, want prefix %q", i, es[i], want)
		}
	}
	if got := strings.Count(err.Error(), "\n"); got != 2 {
		t.Errorf("want one line per error: %q", err.Error())
	}
	var one *Error
	if !errors.As(err, &one) || one != es[0] {
		t.Errorf("errors.As must find the first *Error")
	}
}

func TestErrorFormat(t *testing.T) {
	for _, tt := range []struct {
		e    Error
		want string
	}{
		{Error{Msg: "m"}, "m"},
		{Error{Field: "f", Msg: "m"}, "f: m"},
		{Error{Range: rangeAt("x.hcl", 0), Msg: "m"}, "x.hcl: m"},
		{Error{Range: rangeAt("x.hcl", 12), Field: "task.condition.services.names", Msg: "m"}, "x.hcl:12: task.condition.services.names: m"},
	} {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}

// TestSecretsStayOutOfErrors checks that values of secret fields never
// appear in error messages.
func TestSecretsStayOutOfErrors(t *testing.T) {
	clearConsulEnv(t)
	const secret = "s3cr3t-value"
	for name, content := range map[string]string{
		"token wrong type":     lines("consul {", `  token = ["`+secret+`", "x"]`, "}"),
		"token template":       lines("consul {", `  token = "`+secret+`{{ key \"X\" }}"`, "}"),
		"password wrong type":  lines("consul {", "  auth {", `    password = { p = "`+secret+`" }`, "  }", "}"),
		"provider dynamic":     lines(`terraform_provider "aws" {`, `  secret_key = "`+secret+`{{ keyOrDefault \"k\" \"d\" }}"`, "}"),
		"provider vault":       lines(`terraform_provider "aws" {`, `  secret_key = "`+secret+`{{ with secret \"k\" }}{{ .Data }}{{ end }}"`, "}"),
		"task_env wrong type":  lines(`terraform_provider "aws" {`, `  task_env = {`, `    K = ["`+secret+`", "x"]`, "  }", "}"),
		"task_env dynamic":     lines(`terraform_provider "aws" {`, `  task_env = {`, `    K = "`+secret+`{{ env }}"`, "  }", "}"),
		"backend template":     lines(`driver "terraform" {`, `  backend "s3" {`, `    secret_key = "`+secret+`{{ env \"X\" }}"`, "  }", "}"),
		"variable bad literal": lines(okTask(`  variables = {`, `    pw = "`+secret+`${var.x}"`, `  }`)...),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load([]string{writeFile(t, t.TempDir(), "s.hcl", content)})
			if err == nil {
				t.Fatal("no error")
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("secret leaked: %v", err)
			}
		})
	}
}

func rangeAt(file string, line int) hcl.Range {
	return hcl.Range{Filename: file, Start: hcl.Pos{Line: line, Column: 1}, End: hcl.Pos{Line: line, Column: 2}}
}
