package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/task"
)

// The deprecated CTS forms still work, each with a warning: a task's
// services list (alone it is the services condition; next to another
// condition it is the services module input), service blocks referenced by
// ID (or by name when they have no id), source for module, source_input.
func TestDeprecatedServicesList(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	f := writeFile(t, dir, "d.hcl", `
service {
  name                  = "web"
  id                    = "web-prod"
  datacenter            = "dc2"
  namespace             = "team"
  filter                = "Service.Tags contains \"prod\""
  description           = "production web"
  cts_user_defined_meta = { tier = "front" }
}
service {
  name = "db"
  cts_user_defined_meta {
    tier = "back"
  }
}
service {
  name   = "unused"
  filter = "x"
}

task {
  name     = "alone"
  source   = "org/m/x"
  services = ["web-prod", "db", "cache", "db"]
}

task {
  name     = "with-kv"
  module   = "org/m/x"
  services = ["cache", "api"]
  condition "consul-kv" {
    path = "k"
  }
}

task {
  name     = "with-catalog"
  module   = "org/m/x"
  source   = "ignored/because/module/is/set"
  services = ["web-prod"]
  condition "catalog-services" {
    regexp = "^web"
  }
  source_input "consul-kv" {
    path = "k"
  }
}
`)
	cfg := mustLoad(t, f)
	alone, withKV, withCatalog := cfg.Tasks[0], cfg.Tasks[1], cfg.Tasks[2]

	wantAlone := &task.ServicesCondition{UseAsModuleInput: true, ServicesSelector: task.ServicesSelector{
		Names: []string{"web", "db", "cache"},
		PerService: map[string]task.ServiceOptions{
			"web":   {Datacenter: "dc2", Namespace: "team", Filter: `Service.Tags contains "prod"`, CTSUserDefinedMeta: map[string]string{"tier": "front"}},
			"db":    {CTSUserDefinedMeta: map[string]string{"tier": "back"}},
			"cache": {},
		},
	}}
	if !reflect.DeepEqual(alone.Condition.Services, wantAlone) || alone.ModuleInput.Services != nil || alone.Module != "org/m/x" {
		t.Errorf("alone =\n%#v\nwant condition\n%#v", alone, wantAlone)
	}
	sel := alone.Condition.Services.ServicesSelector
	if o := sel.Options("web"); o.Datacenter != "dc2" || o.CTSUserDefinedMeta["tier"] != "front" {
		t.Errorf("Options(web) = %+v", o)
	}

	// Plain names only: exactly the shape of a module_input "services".
	if withKV.Condition.ConsulKV == nil || withKV.Condition.Services != nil ||
		!reflect.DeepEqual(withKV.ModuleInput.Services, &task.ServicesSelector{Names: []string{"cache", "api"}}) {
		t.Errorf("with-kv = %#v / %#v", withKV.Condition, withKV.ModuleInput.Services)
	}
	if withCatalog.Module != "org/m/x" || withCatalog.ModuleInput.Services == nil ||
		withCatalog.ModuleInput.Services.Options("web").Namespace != "team" || withCatalog.ModuleInput.ConsulKV == nil {
		t.Errorf("with-catalog = %#v", withCatalog)
	}

	warns := strings.Join(cfg.Warnings, "\n")
	for _, want := range []string{
		"d.hcl:2: service: is deprecated",
		"d.hcl:11: service: is deprecated",
		`d.hcl:25: task "alone".services: is deprecated`,
		`d.hcl:24: task "alone".source: is deprecated: use "module"`,
		`d.hcl:40: task "with-catalog".source: is deprecated and ignored: "module" is also set, and wins`,
		`d.hcl:45: task "with-catalog".source_input: is deprecated`,
	} {
		if !strings.Contains(warns, want) {
			t.Errorf("warnings lack %q:\n%s", want, warns)
		}
	}
	if r := cfg.Ranges["task.alone.condition.services.names[2]"]; r.Start.Line != 25 {
		t.Errorf("range of a list entry = %v", r)
	}
}

// Service blocks are merged across files like other lists: a task may
// refer to a block from another file.
func TestServiceBlockFromAnotherFile(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	a := writeFile(t, dir, "a.hcl", "task {\n  name = \"t\"\n  module = \"m\"\n  services = [\"api-east\"]\n}\n")
	b := writeFile(t, dir, "b.json", `{"service": [{"name": "api", "id": "api-east", "datacenter": "east"}]}`)
	cfg := mustLoad(t, a, b)
	c := cfg.Tasks[0].Condition.Services
	if c == nil || !reflect.DeepEqual(c.Names, []string{"api"}) || c.Options("api").Datacenter != "east" {
		t.Fatalf("condition = %#v", c)
	}
}

// The JSON form of the deprecated list.
func TestDeprecatedServicesListJSON(t *testing.T) {
	clearConsulEnv(t)
	f := writeFile(t, t.TempDir(), "d.json", `{"task": [{"name": "t", "module": "m", "services": ["a", "b"]}]}`)
	cfg := mustLoad(t, f)
	want := &task.ServicesCondition{UseAsModuleInput: true, ServicesSelector: task.ServicesSelector{Names: []string{"a", "b"}}}
	if !reflect.DeepEqual(cfg.Tasks[0].Condition.Services, want) {
		t.Fatalf("condition = %#v", cfg.Tasks[0].Condition.Services)
	}
}

// A task file (task create -task-file) may use the list too: entries are
// plain service names there.
func TestTaskFileServicesList(t *testing.T) {
	f := writeFile(t, t.TempDir(), "t.hcl", "task {\n  name = \"t\"\n  module = \"m\"\n  services = [\"web\"]\n}\n")
	s, warns, err := LoadTaskFileWarnings(f)
	if err != nil {
		t.Fatal(err)
	}
	if s.Condition.Services == nil || !reflect.DeepEqual(s.Condition.Services.Names, []string{"web"}) || len(warns) != 1 {
		t.Fatalf("spec %#v, warnings %v", s.Condition, warns)
	}
}
