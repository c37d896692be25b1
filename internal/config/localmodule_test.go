package config

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// A task whose local module folder does not exist is reported with the
// file and line of its module, in HCL and JSON files; an existing folder,
// a registry module and a file that is not a folder are told apart.
func TestCheckLocalModules(t *testing.T) {
	dir := t.TempDir()
	mod := t.TempDir()
	file := writeFile(t, dir, "main.tf", "")
	hclCfg := mustLoad(t, writeFile(t, dir, "c.hcl", fmt.Sprintf(`
task {
  name   = "ok"
  module = %q
  condition "services" { names = ["web"] }
}
task {
  name   = "registry"
  module = "hashicorp/x/y"
  condition "services" { names = ["web"] }
}
task {
  name   = "gone"
  module = "./no/such/module"
  condition "services" { names = ["web"] }
}
task {
  name   = "file"
  module = %q
  condition "services" { names = ["web"] }
}
`, mod, file)))
	err := hclCfg.CheckLocalModules()
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 2 ||
		!strings.HasPrefix(lines[0], filepath.Join(dir, "c.hcl")+`:14: task "gone".module: local module "./no/such/module" does not exist (a relative path is resolved against the directory ctsync runs in, `) ||
		lines[1] != filepath.Join(dir, "c.hcl")+`:19: task "file".module: local module "`+file+`" is not a directory` {
		t.Errorf("error:\n%v", err)
	}
	jsonCfg := mustLoad(t, writeFile(t, dir, "c.json", `{
  "task": [{
    "name": "gone",
    "module": "../no/such/module",
    "condition": {"services": {"names": ["web"]}}
  }]
}`))
	err = jsonCfg.CheckLocalModules()
	if err == nil || !strings.HasPrefix(err.Error(), filepath.Join(dir, "c.json")+`:4: task "gone".module: local module "../no/such/module" does not exist`) {
		t.Errorf("json: %v", err)
	}
	okCfg := mustLoad(t, writeFile(t, dir, "ok.hcl", fmt.Sprintf("task {\n  name = \"ok\"\n  module = %q\n  condition \"services\" { names = [\"web\"] }\n}\n", mod)))
	if err := okCfg.CheckLocalModules(); err != nil {
		t.Errorf("existing module: %v", err)
	}
}
