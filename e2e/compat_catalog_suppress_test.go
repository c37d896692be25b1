package e2e

// CTS's scenario for a catalog-services condition that must not trigger
// (TestCondition_CatalogServices_SuppressTriggers), with its four cases:
// the condition rendered as module input or not, and the change that must
// not trigger being a second instance of a service already there, or a
// second instance with a new tag. The task also reads both services' health
// through module_input "services". Such a change runs nothing and leaves
// terraform.tfvars as it was; the next real trigger (a new service) runs
// the task once, with everything that changed since.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/testutil"
)

// catalogSameNames is ctsync's debug line when a catalog-services
// condition's query changed but not the set of names it matches.
const catalogSameNames = "catalog-services: the set of names is the same; not triggering"

type suppressCase struct {
	name    string
	input   bool // use_as_module_input
	tags    bool // the second instance brings a new tag
	api, db string
	out     string
}

func (c *suppressCase) tags3() (first, second, third []string) {
	if !c.tags {
		return nil, nil, nil
	}
	return []string{"tag_a"}, []string{"tag_b"}, []string{"tag_c"}
}

func (c *suppressCase) taskHCL() string {
	mod := "compat_services"
	if c.input {
		mod = "compat_catalog"
	}
	return fmt.Sprintf(`
task {
  name      = %q
  module    = %q
  variables = { dir = %q }
  condition "catalog-services" {
    regexp              = "^%s$|^%s$"
    use_as_module_input = %t
  }
  module_input "services" {
    names = [%q, %q]
  }
}
`, c.name, module(mod), c.out, c.api, c.db, c.input, c.api, c.db)
}

// statusEventCount is CTS's count of a task's events:
// /v1/status/tasks/<name>?include=events.
func statusEventCount(t *testing.T, port int, name string) int {
	t.Helper()
	code, _, body := haGet(port, "/v1/status/tasks/"+name+"?include=events")
	if code != http.StatusOK {
		t.Fatalf("status of %s: %d %s", name, code, body)
	}
	var st map[string]struct {
		Events []struct {
			Success bool `json:"success"`
		} `json:"events"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("status of %s: %v: %s", name, err, body)
	}
	return len(st[name].Events)
}

type fileState struct {
	body []byte
	mod  time.Time
}

func readState(t *testing.T, path string) fileState {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fileState{b, fi.ModTime()}
}

func TestCompatCatalogServicesSuppressTriggers(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	dir := t.TempDir()
	port := testutil.FreePort(t)
	work := filepath.Join(dir, "sync-tasks")
	cases := []*suppressCase{
		{name: "input_true_instances", input: true},
		{name: "input_true_tags", input: true, tags: true},
		{name: "input_false_instances"},
		{name: "input_false_tags", tags: true},
	}
	cfg := fmt.Sprintf("log_level = \"DEBUG\"\nworking_dir = %q\nport = %d\nconsul {\n  address = %q\n}\nbuffer_period {\n  enabled = false\n}\n",
		work, port, c.Addr)
	register := func(id, name string, tags []string) {
		c.RegisterService(t, &api.AgentServiceRegistration{ID: id, Name: name, Port: 80, Tags: tags}, "")
	}
	for i, k := range cases {
		k.api, k.db, k.out = fmt.Sprintf("api%d", i), fmt.Sprintf("db%d", i), t.TempDir()
		cfg += k.taskHCL()
		first, _, _ := k.tags3()
		register(k.api+"-1", k.api, first)
	}
	p := startCtsync(t, dir, "start", "-config-file", writeFile(t, dir, "config.hcl", cfg))

	// 0. The start-up run of each task, with the first api instance.
	testutil.Eventually(t, 90*time.Second, "the API", func() bool {
		code, _, _ := haGet(port, "/v1/status")
		return code == http.StatusOK
	})
	for _, k := range cases {
		testutil.Eventually(t, 90*time.Second, k.name+"'s start-up run", func() bool {
			return statusEventCount(t, port, k.name) == 1 && tfvarsIDs(work, k.name) == k.api+"-1"
		})
		waitServices(t, k.out, k.api+"-1")
		if k.input {
			first, _, _ := k.tags3()
			waitJSON(t, k.out, "catalog_services.json", map[string][]string{k.api: orEmpty(first)})
		}
	}
	tfvars := map[string]fileState{}
	for _, k := range cases {
		tfvars[k.name] = readState(t, filepath.Join(work, k.name, "terraform.tfvars"))
	}

	// 1. A second instance of the api service (with a new tag in the tags
	// cases): ctsync sees it (its debug lines) and runs nothing.
	inputs, names := map[string]int{}, map[string]int{}
	for _, k := range cases {
		inputs[k.name], names[k.name] = p.countLog(moduleInputUnchanged, k.name), p.countLog(catalogSameNames, k.name)
		_, second, _ := k.tags3()
		register(k.api+"-2", k.api, second)
	}
	for _, k := range cases {
		testutil.Eventually(t, 60*time.Second, k.name+": ctsync to see the second instance", func() bool {
			return p.countLog(moduleInputUnchanged, k.name) > inputs[k.name]
		})
		if k.tags {
			testutil.Eventually(t, 60*time.Second, k.name+": ctsync to see the new tag", func() bool {
				return p.countLog(catalogSameNames, k.name) > names[k.name]
			})
		}
	}
	for _, k := range cases {
		if n := statusEventCount(t, port, k.name); n != 1 {
			t.Errorf("%s: %d events after a new instance of an existing service, want 1 (no run)", k.name, n)
		}
		path := filepath.Join(work, k.name, "terraform.tfvars")
		if now := readState(t, path); !bytes.Equal(now.body, tfvars[k.name].body) || !now.mod.Equal(tfvars[k.name].mod) {
			t.Errorf("%s: terraform.tfvars rewritten without a run:\n%s", k.name, now.body)
		}
		if got := tfvarsIDs(work, k.name); got != k.api+"-1" {
			t.Errorf("%s: terraform.tfvars has %s, want %s-1 only", k.name, got, k.api)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// 2. A new service: each task runs once, with the second api instance
	// (and its tag) and the new service.
	for _, k := range cases {
		_, _, third := k.tags3()
		register(k.db+"-1", k.db, third)
	}
	for _, k := range cases {
		testutil.Eventually(t, 90*time.Second, k.name+"'s run for the new service", func() bool {
			return statusEventCount(t, port, k.name) >= 2
		})
		want := []string{k.api + "-1", k.api + "-2", k.db + "-1"}
		if got := tfvarsIDs(work, k.name); got != strings.Join(want, ",") {
			t.Errorf("%s: terraform.tfvars has instances %s, want %s", k.name, got, strings.Join(want, ","))
		}
		tf, _ := os.ReadFile(filepath.Join(work, k.name, "terraform.tfvars"))
		if k.tags {
			for _, tag := range []string{"tag_a", "tag_b", "tag_c"} {
				if !bytes.Contains(tf, []byte(`"`+tag+`"`)) {
					t.Errorf("%s: terraform.tfvars lacks %s:\n%s", k.name, tag, tf)
				}
			}
		}
		waitServices(t, k.out, strings.Join(want, ","))
		if k.input {
			first, second, third := k.tags3()
			apiTags := append(orEmpty(first), second...)
			slices.Sort(apiTags)
			waitJSON(t, k.out, "catalog_services.json", map[string][]string{k.api: apiTags, k.db: orEmpty(third)})
		}
		if n := statusEventCount(t, port, k.name); n != 2 {
			t.Errorf("%s: %d events after one new service, want 2", k.name, n)
		}
	}
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
