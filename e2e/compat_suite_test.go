package e2e

// The CTS compatibility suite: one ctsync daemon per Terraform-compatible
// binary (terraform, then tofu), with one task per condition × module input
// combination, against a real Consul agent. Fixture modules declare each
// CTS variable with its exact type and write what they receive as JSON; the
// tests compare that, field by field, with what CTS renders for the same
// catalog, built independently from Consul's own answers.
//
// The tasks share one Consul and one ctsync but never each other's data:
// every scenario uses its own service names and KV paths.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// compatSecrets are values that must never leak (see compat_secrets_test.go).
type compatSecrets struct {
	provider, consulToken string
}

// compatConfig is the suite's configuration. %[n] verbs: 1 work dir,
// 2 API port, 3 Consul address, 4 binary, 5 Consul token, 6 module dir,
// 7 fixture file dir.
const compatConfig = `
log_level   = "DEBUG"
working_dir = "%[1]s/sync-tasks"
port        = %[2]d

consul {
  address = "%[3]s"
  token   = "%[5]s"
}

buffer_period {
  enabled = false
}

driver "terraform" {
  path = "%[4]s"
  required_providers {
    echo = {
      source  = "ctsync/echo"
      version = "0.1.0"
    }
  }
}

terraform_provider "echo" {
  token    = "{{ key \"compat/secret\" }}"
  region   = "{{ env \"CTSYNC_COMPAT_REGION\" }}"
  retries  = 3
  insecure = true
  zones    = ["z1", "{{ key \"compat/zone@dc1\" }}"]
  labels = {
    team = "net"
    env  = "{{- env \"CTSYNC_COMPAT_REGION\" }}"
  }
  endpoint {
    url     = "https://example.test/{{ key \"compat/path\" }}"
    timeout = 2.5
  }
  task_env {
    CTSYNC_COMPAT_SECRET = "{{ key \"compat/secret\" }}"
  }
}

# Deprecated (CTS < 0.5) service blocks, referenced from a task's services
# list by ID, or by name when they have no id.
service {
  name                  = "dep-web"
  id                    = "dep-web-prod"
  filter                = "\"prod\" in Service.Tags"
  cts_user_defined_meta = { owner = "team-a" }
}

service {
  name       = "dep-db"
  datacenter = "dc1"
  cts_user_defined_meta {
    owner = "team-b"
  }
}

task {
  name   = "sn"
  module = "%[6]s/compat_services"
  variable_files = ["%[7]s/dir-sn.tfvars"]
  condition "services" {
    names                 = ["sn-web", "sn-api"]
    cts_user_defined_meta = { team = "net", tier = "1" }
  }
}

task {
  name   = "rx"
  module = "%[6]s/compat_services"
  variable_files = ["%[7]s/dir-rx.tfvars"]
  condition "services" {
    regexp = "^rx-"
  }
}

task {
  name   = "st"
  module = "%[6]s/compat_services"
  variable_files = ["%[7]s/dir-st.tfvars"]
  condition "services" {
    names  = ["st"]
    filter = "Checks.Status != \"none\""
  }
}

task {
  name   = "cat"
  module = "%[6]s/compat_catalog"
  variable_files = ["%[7]s/dir-cat.tfvars"]
  condition "catalog-services" {
    regexp = "^cat-"
  }
}

task {
  name   = "catmeta"
  module = "%[6]s/compat_catalog"
  variable_files = ["%[7]s/dir-catmeta.tfvars"]
  condition "catalog-services" {
    regexp     = "^cat-"
    datacenter = "dc1"
    node_meta  = { rack = "r1" }
  }
}

task {
  name   = "catmi"
  module = "%[6]s/compat_catalog"
  variable_files = ["%[7]s/dir-catmi.tfvars"]
  condition "catalog-services" {
    regexp = "^cm-"
  }
  module_input "services" {
    names = ["cm-web"]
  }
}

task {
  name   = "kvs"
  module = "%[6]s/compat_kv"
  variable_files = ["%[7]s/dir-kvs.tfvars"]
  condition "consul-kv" {
    path = "kvs/color"
  }
}

task {
  name   = "kvr"
  module = "%[6]s/compat_kv"
  variable_files = ["%[7]s/dir-kvr.tfvars"]
  condition "consul-kv" {
    path    = "kvr"
    recurse = true
  }
}

task {
  name   = "svkv"
  module = "%[6]s/compat_kv"
  variable_files = ["%[7]s/dir-svkv.tfvars"]
  condition "services" {
    names = ["svkv"]
  }
  module_input "consul-kv" {
    path    = "svkv/"
    recurse = true
  }
}

task {
  name   = "schsvc"
  module = "%[6]s/compat_services"
  variable_files = ["%[7]s/dir-schsvc.tfvars"]
  buffer_period {
    min = "1s"
  }
  condition "schedule" {
    cron = "*/2 * * * * * *"
  }
  module_input "services" {
    names = ["sch"]
  }
}

task {
  name   = "schkv"
  module = "%[6]s/compat_kv"
  variable_files = ["%[7]s/dir-schkv.tfvars"]
  condition "schedule" {
    cron = "*/2 * * * * * *"
  }
  source_input "consul-kv" {
    path = "schkv/k"
  }
}

task {
  name   = "ufs"
  module = "%[6]s/compat_services"
  variable_files = ["%[7]s/dir-ufs.tfvars"]
  condition "services" {
    names               = ["ufs"]
    use_as_module_input = false
  }
}

task {
  name   = "ufc"
  module = "%[6]s/compat_services"
  variable_files = ["%[7]s/dir-ufc.tfvars"]
  condition "catalog-services" {
    regexp              = "^ufc-"
    use_as_module_input = false
  }
}

task {
  name   = "ufk"
  module = "%[6]s/compat_services"
  variable_files = ["%[7]s/dir-ufk.tfvars"]
  condition "consul-kv" {
    path                = "ufk/k"
    source_includes_var = false
  }
}

task {
  name     = "dep"
  module   = "%[6]s/compat_services"
  variable_files = ["%[7]s/dir-dep.tfvars"]
  services = ["dep-web-prod", "dep-db", "dep-plain"]
}

task {
  name     = "depkv"
  source   = "%[6]s/compat_kv"
  variable_files = ["%[7]s/dir-depkv.tfvars"]
  services = ["dep-plain"]
  condition "consul-kv" {
    path = "depkv/k"
  }
}

task {
  name   = "vars"
  module = "%[6]s/compat_vars"
  variable_files = ["%[7]s/dir-vars.tfvars", "%[7]s/vars.tfvars", "%[7]s/vars.tfvars.json"]
  variables = {
    a_string = "inline wins"
  }
  condition "services" {
    names = ["vars"]
  }
}

task {
  name      = "prov"
  module    = "%[6]s/compat_provider"
  providers = ["echo"]
  variable_files = ["%[7]s/dir-prov.tfvars"]
  condition "services" {
    names = ["prov"]
  }
}
`

var compatTasks = []string{"sn", "rx", "st", "cat", "catmeta", "catmi", "kvs", "kvr", "svkv", "schsvc", "schkv",
	"ufs", "ufc", "ufk", "dep", "depkv", "vars", "prov"}

// compatRun is one running suite: Consul, ctsync and where each task's
// module writes.
type compatRun struct {
	c       *testutil.Consul
	p       *proc
	node    nodeInfo
	out     map[string]string // task -> the module's output dir
	work    string
	port    int
	secrets compatSecrets
}

func TestCompat(t *testing.T) {
	skipShort(t)
	for _, b := range compatBinaries(t) {
		t.Run(b.name, func(t *testing.T) {
			start := time.Now()
			r := startCompatRun(t, b)
			t.Run("services_names", r.servicesNames)
			t.Run("services_regexp", r.servicesRegexp)
			t.Run("services_status_aggregation", r.statusAggregation)
			t.Run("catalog_services", r.catalogServices)
			t.Run("catalog_services_node_meta", r.catalogNodeMeta)
			t.Run("catalog_services_module_input_services", r.catalogModuleInput)
			t.Run("consul_kv_single", r.kvSingle)
			t.Run("consul_kv_recurse", r.kvRecurse)
			t.Run("services_module_input_consul_kv", r.servicesModuleInputKV)
			t.Run("schedule_module_input_services", r.scheduleServices)
			t.Run("schedule_module_input_consul_kv", r.scheduleKV)
			t.Run("use_as_module_input_false", r.notRendered)
			t.Run("deprecated_services_list", r.deprecatedList)
			t.Run("deprecated_services_list_with_condition", r.deprecatedListWithCondition)
			t.Run("task_variables", r.taskVariables)
			t.Run("provider", r.provider)
			t.Run("secrets_stay_secret", r.secretsStaySecret)
			t.Logf("compatibility suite with %s: %s", b.name, time.Since(start).Round(time.Second))
		})
	}
}

func startCompatRun(t *testing.T, b compatBinary) *compatRun {
	t.Helper()
	c := testutil.StartConsul(t)
	r := &compatRun{c: c, out: map[string]string{}, work: t.TempDir(), port: testutil.FreePort(t),
		secrets: compatSecrets{
			provider:    fmt.Sprintf("Pr0vider-S3cret-%d", time.Now().UnixNano()),
			consulToken: fmt.Sprintf("C0nsul-T0ken-%d", time.Now().UnixNano()),
		}}
	r.node = agentNode(t, c)
	fixtures := filepath.Join(r.work, "fixtures")
	if err := os.MkdirAll(fixtures, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range compatTasks {
		r.out[name] = filepath.Join(r.work, "out", name)
		if err := os.MkdirAll(r.out[name], 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, fixtures, "dir-"+name+".tfvars", fmt.Sprintf("dir = %q\n", r.out[name]))
	}
	writeFile(t, fixtures, "vars.tfvars", `
a_string  = "from the tfvars file"
a_number  = 42
a_bool    = true
a_list    = ["b", "a", "c"]
a_map     = { x = 1, y = 2.5 }
an_object = {
  name  = "obj"
  port  = 8080
  tags  = ["t2", "t1"]
  inner = { on = true }
}
`)
	writeFile(t, fixtures, "vars.tfvars.json", `{"a_number": 7, "a_string": "from the JSON file"}`)

	r.seed(t)
	cfg := writeFile(t, r.work, "config.hcl", fmt.Sprintf(compatConfig, r.work, r.port, c.Addr, b.path,
		r.secrets.consulToken, filepath.Join(testutil.RepoRoot(), "e2e", "testdata", "modules"), fixtures))
	r.p = startCompat(t, r.work, []string{
		"TF_CLI_CONFIG_FILE=" + compatCLIConfig(t),
		"CTSYNC_COMPAT_REGION=eu-test-1",
	}, "start", "-config-file", cfg)
	for _, name := range compatTasks {
		testutil.Eventually(t, 3*time.Minute, "the first successful run of task "+name, func() bool {
			return len(r.p.lines(` task completed: `, "task_name="+name+" ")) > 0
		})
	}
	// On a loaded machine Terraform may fail a run for reasons of its own
	// (a provider plugin slow to start); the controller retries, and the
	// checks below look at what the modules finally received.
	if failed := r.p.lines(` error applying task: `); len(failed) > 0 {
		t.Logf("runs failed and were retried:\n%s", strings.Join(failed, "\n"))
	}
	if !strings.Contains(r.p.out.String(), "using terraform binary") || !strings.Contains(r.p.out.String(), b.path) {
		t.Fatalf("ctsync does not use %s", b.path)
	}
	return r
}

// Fixture services and keys, registered before ctsync starts.
var (
	snWeb1  = svc{id: "sn-web-1", name: "sn-web", address: "10.1.1.1", port: 8080, tags: []string{"zeta", "alpha", "mid"}, meta: map[string]string{"version": "2"}, status: api.HealthPassing}
	snWeb2  = svc{id: "sn-web-2", name: "sn-web", port: 8081, status: api.HealthPassing} // no address, tags or meta
	snWeb3  = svc{id: "sn-web-3", name: "sn-web", address: "10.1.1.3", port: 8083, status: api.HealthCritical}
	snAPI1  = svc{id: "sn-api-1", name: "sn-api", address: "10.1.2.1", port: 9090, tags: []string{"v1"}} // no check at all
	snOther = svc{id: "sn-other-1", name: "sn-other", port: 1, status: api.HealthPassing}

	rxA1 = svc{id: "rx-a-1", name: "rx-a", port: 1, status: api.HealthPassing}
	rxB1 = svc{id: "rx-b-1", name: "rx-b", port: 2, tags: []string{"b"}, status: api.HealthPassing}
	rxB2 = svc{id: "rx-b-2", name: "rx-b", port: 3, status: api.HealthCritical}
	xrx  = svc{id: "xrx-1", name: "xrx", port: 4, status: api.HealthPassing}

	stPass  = svc{id: "st-pass", name: "st", port: 1, status: api.HealthPassing}
	stWarn  = svc{id: "st-warn", name: "st", port: 2, status: api.HealthWarning}
	stCrit  = svc{id: "st-crit", name: "st", port: 3, status: api.HealthCritical}
	stMaint = svc{id: "st-maint", name: "st", port: 4, status: api.HealthPassing}

	catA1 = svc{id: "cat-a-1", name: "cat-a", port: 1, tags: []string{"t2", "t1"}, status: api.HealthPassing}
	catA2 = svc{id: "cat-a-2", name: "cat-a", port: 2, tags: []string{"t1"}, status: api.HealthCritical}
	catB1 = svc{id: "cat-b-1", name: "cat-b", port: 3}

	cmWeb1 = svc{id: "cm-web-1", name: "cm-web", port: 1, tags: []string{"w"}, status: api.HealthPassing}
	cmDB1  = svc{id: "cm-db-1", name: "cm-db", port: 2, status: api.HealthPassing}

	svkv1 = svc{id: "svkv-1", name: "svkv", port: 1, status: api.HealthPassing}
	sch1  = svc{id: "sch-1", name: "sch", port: 1, status: api.HealthPassing}
	ufs1  = svc{id: "ufs-1", name: "ufs", port: 1, status: api.HealthPassing}
	ufc1  = svc{id: "ufc-a-1", name: "ufc-a", port: 1, status: api.HealthPassing}

	depWebProd = svc{id: "dep-web-1", name: "dep-web", port: 1, tags: []string{"prod"}, status: api.HealthPassing}
	depWebDev  = svc{id: "dep-web-2", name: "dep-web", port: 2, tags: []string{"dev"}, status: api.HealthPassing}
	depDB      = svc{id: "dep-db-1", name: "dep-db", port: 3, status: api.HealthPassing}
	depPlain   = svc{id: "dep-plain-1", name: "dep-plain", port: 4, meta: map[string]string{"m": "v"}, status: api.HealthPassing}
)

func (r *compatRun) seed(t *testing.T) {
	t.Helper()
	for _, s := range []svc{snWeb1, snWeb2, snWeb3, snAPI1, snOther, rxA1, rxB1, rxB2, xrx, stPass, stWarn, stCrit, stMaint,
		catA1, catA2, catB1, cmWeb1, cmDB1, svkv1, sch1, ufs1, ufc1, depWebProd, depWebDev, depDB, depPlain} {
		s.register(t, r.c)
	}
	if err := r.c.Client.Agent().EnableServiceMaintenance(stMaint.id, "compat test"); err != nil {
		t.Fatal(err)
	}
	// A service on another node, with node meta, for catalog-services node_meta.
	if _, err := r.c.Client.Catalog().Register(&api.CatalogRegistration{Node: "rack-node", Address: "10.5.5.5",
		NodeMeta: map[string]string{"rack": "r1"},
		Service:  &api.AgentService{ID: "cat-ext-1", Service: "cat-ext", Tags: []string{"z", "a"}, Port: 5}}, nil); err != nil {
		t.Fatal(err)
	}
	r.put(t, "compat/secret", r.secrets.provider)
	r.put(t, "compat/zone", "zone-b")
	r.put(t, "compat/path", "p/q")
	r.put(t, "kvr/a", "1")
	r.put(t, "kvr/b/c", "quote \" and\nnewline")
	r.put(t, "kvrx/other", "not under kvr/ but shares the prefix string")
	r.put(t, "svkv/x", "1")
	r.put(t, "schkv/k", "v1")
}

func (r *compatRun) put(t *testing.T, k, v string) {
	t.Helper()
	if _, err := r.c.Client.KV().Put(&api.KVPair{Key: k, Value: []byte(v)}, nil); err != nil {
		t.Fatal(err)
	}
}

func (r *compatRun) del(t *testing.T, k string) {
	t.Helper()
	if _, err := r.c.Client.KV().Delete(k, nil); err != nil {
		t.Fatal(err)
	}
}

func (r *compatRun) deregister(t *testing.T, id string) {
	t.Helper()
	if err := r.c.Client.Agent().ServiceDeregister(id); err != nil {
		t.Fatal(err)
	}
}

func (r *compatRun) want(userMeta map[string]string, ss ...svc) map[string]task.Service {
	out := map[string]task.Service{}
	for _, s := range ss {
		out[s.key(r.node)] = s.rendered(r.node, api.HealthPassing, userMeta)
	}
	return out
}

// condition "services" with names: passing instances only, the CTS key
// format, address fallback to the node address, sorted tags, {} for nil
// maps, node fields and the task's cts_user_defined_meta on every entry.
func (r *compatRun) servicesNames(t *testing.T) {
	meta := map[string]string{"team": "net", "tier": "1"}
	checkServices(t, r.out["sn"], r.want(meta, snWeb1, snWeb2, snAPI1))

	web3 := snWeb3 // the fixtures are shared by the terraform and tofu runs: copy
	web3.status = api.HealthPassing
	r.c.SetCheck(t, web3.id, api.HealthPassing, "")
	checkServices(t, r.out["sn"], r.want(meta, snWeb1, snWeb2, web3, snAPI1))

	r.deregister(t, snWeb1.id)
	checkServices(t, r.out["sn"], r.want(meta, snWeb2, web3, snAPI1))
}

// condition "services" with regexp: follows the catalog (a new matching
// service name is picked up without a restart).
func (r *compatRun) servicesRegexp(t *testing.T) {
	checkServices(t, r.out["rx"], r.want(nil, rxA1, rxB1))
	rxC1 := svc{id: "rx-c-1", name: "rx-c", port: 7, tags: []string{"new"}, status: api.HealthPassing}
	rxC1.register(t, r.c)
	checkServices(t, r.out["rx"], r.want(nil, rxA1, rxB1, rxC1))
	r.deregister(t, rxA1.id)
	checkServices(t, r.out["rx"], r.want(nil, rxB1, rxC1))
}

// A filter that mentions Checks.Status lifts the passing-only rule, and
// status is the aggregate of the instance's checks (maintenance > critical >
// warning > passing).
func (r *compatRun) statusAggregation(t *testing.T) {
	want := map[string]task.Service{
		stPass.key(r.node):  stPass.rendered(r.node, api.HealthPassing, nil),
		stWarn.key(r.node):  stWarn.rendered(r.node, api.HealthWarning, nil),
		stCrit.key(r.node):  stCrit.rendered(r.node, api.HealthCritical, nil),
		stMaint.key(r.node): stMaint.rendered(r.node, api.HealthMaint, nil),
	}
	checkServices(t, r.out["st"], want)
}

// condition "catalog-services": catalog_services is map(list(string)) with
// sorted tags; only a change of the matching name set triggers, and a tag
// change reaches the next run's inputs.
func (r *compatRun) catalogServices(t *testing.T) {
	dir := r.out["cat"]
	waitJSON(t, dir, "catalog_services.json", map[string][]string{"cat-a": {"t1", "t2"}, "cat-b": {}, "cat-ext": {"a", "z"}})
	waitJSON(t, dir, "services.json", map[string]task.Service{})
	settle(t, r.p, "cat")
	runs := r.p.successes("cat")

	// A tag change only: no run. ctsync says when it saw the change and
	// did not trigger.
	seen := r.p.countLog("catalog-services: the set of names is the same; not triggering", "cat")
	b1 := catB1
	b1.tags = []string{"new-tag"}
	b1.register(t, r.c)
	testutil.Eventually(t, 60*time.Second, "ctsync to consider the tag change", func() bool {
		return r.p.countLog("catalog-services: the set of names is the same; not triggering", "cat") > seen
	})
	if n := r.p.successes("cat") - runs; n != 0 || r.p.runs("cat") != r.p.successes("cat") {
		t.Fatalf("a tag change ran task cat (%d runs)", n)
	}

	// A new name: one run, and it carries the earlier tag change too.
	catC1 := svc{id: "cat-c-1", name: "cat-c", port: 9}
	catC1.register(t, r.c)
	waitJSON(t, dir, "catalog_services.json", map[string][]string{"cat-a": {"t1", "t2"}, "cat-b": {"new-tag"}, "cat-c": {}, "cat-ext": {"a", "z"}})
	settle(t, r.p, "cat")
	if n := r.p.successes("cat") - runs; n != 1 {
		t.Fatalf("%d runs for a tag change and a new name, want 1", n)
	}

	// The last instance of a name goes: a run.
	r.deregister(t, catC1.id)
	waitJSON(t, dir, "catalog_services.json", map[string][]string{"cat-a": {"t1", "t2"}, "cat-b": {"new-tag"}, "cat-ext": {"a", "z"}})
	// One instance of a name with two goes: the names and tags are the
	// same, so the answer is too; ctsync says it read it and told nobody.
	settle(t, r.p, "cat")
	runs = r.p.successes("cat")
	unchanged := func() int { return len(r.p.lines("consul answer unchanged; not notifying", "key=catalog/services ")) }
	seen = unchanged()
	r.deregister(t, catA2.id)
	testutil.Eventually(t, 60*time.Second, "ctsync to read the catalog without the instance that left", func() bool {
		return unchanged() > seen
	})
	if n := r.p.successes("cat") - runs; n != 0 || r.p.runs("cat") != r.p.successes("cat") {
		t.Fatalf("one of two instances of a name left and task cat ran (%d runs)", n)
	}
}

// catalog-services node_meta and datacenter are query options.
func (r *compatRun) catalogNodeMeta(t *testing.T) {
	waitJSON(t, r.out["catmeta"], "catalog_services.json", map[string][]string{"cat-ext": {"a", "z"}})
}

// catalog-services condition with a services module input: both variables.
// A module input change (a new instance, the same names) does not run the
// task (CTS: module inputs never trigger); ctsync says it saw it. A new
// matching name does, and that run reads the instances as they are then.
func (r *compatRun) catalogModuleInput(t *testing.T) {
	dir := r.out["catmi"]
	waitJSON(t, dir, "catalog_services.json", map[string][]string{"cm-db": {}, "cm-web": {"w"}})
	checkServices(t, dir, r.want(nil, cmWeb1))
	settle(t, r.p, "catmi")
	runs := r.p.successes("catmi")
	seen := r.p.countLog(moduleInputUnchanged, "catmi")
	cmWeb2 := svc{id: "cm-web-2", name: "cm-web", port: 3, tags: []string{"w"}, status: api.HealthPassing}
	cmWeb2.register(t, r.c)
	testutil.Eventually(t, 60*time.Second, "ctsync to consider the module input change", func() bool {
		return r.p.countLog(moduleInputUnchanged, "catmi") > seen
	})
	settle(t, r.p, "catmi")
	if n := r.p.successes("catmi") - runs; n != 0 {
		t.Fatalf("a module input change ran task catmi (%d runs)", n)
	}
	checkServices(t, dir, r.want(nil, cmWeb1)) // not re-rendered

	cmNew := svc{id: "cm-new-1", name: "cm-new", port: 4, status: api.HealthPassing}
	cmNew.register(t, r.c)
	waitJSON(t, dir, "catalog_services.json", map[string][]string{"cm-db": {}, "cm-new": {}, "cm-web": {"w"}})
	checkServices(t, dir, r.want(nil, cmWeb1, cmWeb2))
	settle(t, r.p, "catmi")
	if n := r.p.successes("catmi") - runs; n != 1 {
		t.Fatalf("%d runs for a module input change then a new name, want 1", n)
	}
}

// moduleInputUnchanged is what ctsync logs (debug) when only a module
// input's data changed: the task is not triggered.
const moduleInputUnchanged = "module input changed; not triggering"

// condition "consul-kv" on one key: {} while it does not exist; created,
// changed and deleted each trigger.
func (r *compatRun) kvSingle(t *testing.T) {
	dir := r.out["kvs"]
	waitJSON(t, dir, "consul_kv.json", map[string]string{})
	waitJSON(t, dir, "services.json", map[string]task.Service{})
	settle(t, r.p, "kvs")
	runs := r.p.successes("kvs")
	r.put(t, "kvs/color", "red")
	waitJSON(t, dir, "consul_kv.json", map[string]string{"kvs/color": "red"})
	r.put(t, "kvs/color", "blue")
	waitJSON(t, dir, "consul_kv.json", map[string]string{"kvs/color": "blue"})
	r.put(t, "kvs/colorful", "a longer key is not this key")
	r.del(t, "kvs/color")
	waitJSON(t, dir, "consul_kv.json", map[string]string{})
	settle(t, r.p, "kvs")
	if n := r.p.successes("kvs") - runs; n != 3 {
		t.Fatalf("%d runs for create, change, delete; want 3", n)
	}
}

// condition "consul-kv" with recurse: every key under the prefix, full key
// paths, raw values.
func (r *compatRun) kvRecurse(t *testing.T) {
	dir := r.out["kvr"]
	waitJSON(t, dir, "consul_kv.json", map[string]string{"kvr/a": "1", "kvr/b/c": "quote \" and\nnewline",
		"kvrx/other": "not under kvr/ but shares the prefix string"})
	r.put(t, "kvr/d", "4")
	waitJSON(t, dir, "consul_kv.json", map[string]string{"kvr/a": "1", "kvr/b/c": "quote \" and\nnewline", "kvr/d": "4",
		"kvrx/other": "not under kvr/ but shares the prefix string"})
	r.del(t, "kvr/a")
	waitJSON(t, dir, "consul_kv.json", map[string]string{"kvr/b/c": "quote \" and\nnewline", "kvr/d": "4",
		"kvrx/other": "not under kvr/ but shares the prefix string"})
}

// condition "services" with module_input "consul-kv": both variables. A
// KV change alone does not run the task; a change of the condition's
// services does, with the KV as it is then.
func (r *compatRun) servicesModuleInputKV(t *testing.T) {
	dir := r.out["svkv"]
	checkServices(t, dir, r.want(nil, svkv1))
	waitJSON(t, dir, "consul_kv.json", map[string]string{"svkv/x": "1"})
	settle(t, r.p, "svkv")
	runs := r.p.successes("svkv")
	seen := r.p.countLog(moduleInputUnchanged, "svkv")
	r.put(t, "svkv/y", "2")
	testutil.Eventually(t, 60*time.Second, "ctsync to consider the KV change", func() bool {
		return r.p.countLog(moduleInputUnchanged, "svkv") > seen
	})
	settle(t, r.p, "svkv")
	if n := r.p.successes("svkv") - runs; n != 0 {
		t.Fatalf("a module input change ran task svkv (%d runs)", n)
	}
	waitJSON(t, dir, "consul_kv.json", map[string]string{"svkv/x": "1"})

	svkv2 := svc{id: "svkv-2", name: "svkv", port: 2, status: api.HealthPassing}
	svkv2.register(t, r.c)
	checkServices(t, dir, r.want(nil, svkv1, svkv2))
	waitJSON(t, dir, "consul_kv.json", map[string]string{"svkv/x": "1", "svkv/y": "2"})
	settle(t, r.p, "svkv")
	if n := r.p.successes("svkv") - runs; n != 1 {
		t.Fatalf("%d runs for a KV change then a new instance, want 1", n)
	}
}

// condition "schedule" with module_input "services": runs on the cron
// (seconds field) only, with the current inputs; a tick with unchanged
// inputs still runs Terraform, as CTS does (the apply changes nothing);
// buffer_period is ignored with a warning.
func (r *compatRun) scheduleServices(t *testing.T) {
	dir := r.out["schsvc"]
	checkServices(t, dir, r.want(nil, sch1))
	sch2 := svc{id: "sch-2", name: "sch", port: 2, status: api.HealthPassing}
	sch2.register(t, r.c)
	checkServices(t, dir, r.want(nil, sch1, sch2))
	checkScheduleTriggers(t, r.p, "schsvc")
	// A tick with unchanged inputs runs Terraform, which finds nothing to
	// change: an apply event of the schedule with an empty plan.
	testutil.Eventually(t, 30*time.Second, `an apply with nothing to change on a tick`, func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/tasks/schsvc/events", r.port))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var body struct {
			Events []struct {
				Kind    string `json:"kind"`
				Trigger string `json:"trigger"`
				Success bool   `json:"success"`
				Plan    *struct {
					Add, Change, Destroy int
				} `json:"plan"`
			} `json:"events"`
		}
		if json.NewDecoder(resp.Body).Decode(&body) != nil {
			return false
		}
		for _, ev := range body.Events {
			if ev.Kind == "apply" && ev.Trigger == "schedule" && ev.Success && ev.Plan != nil &&
				ev.Plan.Add+ev.Plan.Change+ev.Plan.Destroy == 0 {
				return true
			}
		}
		return false
	})
	if len(r.p.lines(`task "schsvc".buffer_period: is ignored for schedule tasks`)) == 0 {
		t.Fatal("no warning about buffer_period on a schedule task")
	}
}

// condition "schedule" with module_input "consul-kv" (written with the
// deprecated source_input).
func (r *compatRun) scheduleKV(t *testing.T) {
	dir := r.out["schkv"]
	waitJSON(t, dir, "consul_kv.json", map[string]string{"schkv/k": "v1"})
	waitJSON(t, dir, "services.json", map[string]task.Service{})
	r.put(t, "schkv/k", "v2")
	waitJSON(t, dir, "consul_kv.json", map[string]string{"schkv/k": "v2"})
	checkScheduleTriggers(t, r.p, "schkv")
}

// use_as_module_input = false: the variable is not passed (services is {},
// and catalog_services and consul_kv are not even declared by the fixture
// module), but a change still runs the task, as in CTS.
func (r *compatRun) notRendered(t *testing.T) {
	for _, name := range []string{"ufs", "ufc", "ufk"} {
		waitJSON(t, r.out[name], "services.json", map[string]task.Service{})
	}
	settle(t, r.p, "ufs")
	runs := r.p.runs("ufs")
	svc{id: "ufs-2", name: "ufs", port: 2, status: api.HealthPassing}.register(t, r.c)
	waitRuns(t, r.p, "ufs", runs+1)

	settle(t, r.p, "ufc")
	runs = r.p.runs("ufc")
	svc{id: "ufc-b-1", name: "ufc-b", port: 2}.register(t, r.c)
	waitRuns(t, r.p, "ufc", runs+1)

	settle(t, r.p, "ufk")
	runs = r.p.runs("ufk")
	r.put(t, "ufk/k", "x")
	waitRuns(t, r.p, "ufk", runs+1)
	for _, name := range []string{"ufs", "ufc", "ufk"} {
		waitJSON(t, r.out[name], "services.json", map[string]task.Service{})
	}
	for _, f := range []string{"catalog_services.json", "consul_kv.json"} {
		if _, err := os.Stat(filepath.Join(r.out["ufc"], f)); err == nil {
			t.Fatalf("%s written", f)
		}
	}
	// The generated root module does not declare or pass them either.
	for name, v := range map[string]string{"ufc": "catalog_services", "ufk": "consul_kv"} {
		b, err := os.ReadFile(filepath.Join(r.work, "sync-tasks", name, "main.tf"))
		if err != nil || strings.Contains(string(b), v) {
			t.Fatalf("%s/main.tf passes %s (err %v)", name, v, err)
		}
	}
}

// The deprecated services list with service blocks: per-service filter and
// cts_user_defined_meta, blocks referenced by ID or by name, plain names.
func (r *compatRun) deprecatedList(t *testing.T) {
	dir := r.out["dep"]
	want := map[string]task.Service{
		depWebProd.key(r.node): depWebProd.rendered(r.node, api.HealthPassing, map[string]string{"owner": "team-a"}),
		depDB.key(r.node):      depDB.rendered(r.node, api.HealthPassing, map[string]string{"owner": "team-b"}),
		depPlain.key(r.node):   depPlain.rendered(r.node, api.HealthPassing, nil),
	}
	checkServices(t, dir, want)
	for _, w := range []string{"service: is deprecated", `task "dep".services: is deprecated`} {
		if len(r.p.lines(w)) == 0 {
			t.Errorf("no deprecation warning %q", w)
		}
	}
	// The list is the task's condition: a change runs it.
	prod2 := svc{id: "dep-web-3", name: "dep-web", port: 5, tags: []string{"prod", "eu"}, status: api.HealthPassing}
	prod2.register(t, r.c)
	want[prod2.key(r.node)] = prod2.rendered(r.node, api.HealthPassing, map[string]string{"owner": "team-a"})
	checkServices(t, dir, want)
}

// The deprecated list next to another condition provides the services
// module input; the deprecated source names the module.
func (r *compatRun) deprecatedListWithCondition(t *testing.T) {
	dir := r.out["depkv"]
	checkServices(t, dir, r.want(nil, depPlain))
	waitJSON(t, dir, "consul_kv.json", map[string]string{})
	r.put(t, "depkv/k", "on")
	waitJSON(t, dir, "consul_kv.json", map[string]string{"depkv/k": "on"})
	if len(r.p.lines(`task "depkv".source: is deprecated`)) == 0 {
		t.Error("no deprecation warning for source")
	}
}

// variable_files (HCL and JSON, later files win) and variables (win over
// files), with string, number, bool, list, map and object types.
func (r *compatRun) taskVariables(t *testing.T) {
	waitJSON(t, r.out["vars"], "vars.json", map[string]any{
		"a_string":  "inline wins",
		"a_number":  float64(7),
		"a_bool":    true,
		"a_list":    []any{"b", "a", "c"},
		"a_map":     map[string]any{"x": float64(1), "y": 2.5},
		"an_object": map[string]any{"name": "obj", "port": float64(8080), "tags": []any{"t2", "t1"}, "inner": map[string]any{"on": true}},
		"untyped":   "default value",
	})
}

// terraform_provider: every argument type, a nested block, {{ env }} and
// {{ key }} (resolved once at start-up), task_env reaching Terraform.
func (r *compatRun) provider(t *testing.T) {
	dir := r.out["prov"]
	waitJSON(t, dir, "provider.json", map[string]any{
		"token_sha256": sha256Hex(r.secrets.provider),
		"region":       "eu-test-1",
		"retries":      "3",
		"insecure":     true,
		"zones":        []any{"z1", "zone-b"},
		"labels":       map[string]any{"team": "net", "env": "eu-test-1"},
		"endpoint":     map[string]any{"url": "https://example.test/p/q", "timeout": "2.5"},
	})
	testutil.Eventually(t, 30*time.Second, "task_env digest", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "task_env.sha256"))
		return strings.TrimSpace(string(b)) == sha256Hex(r.secrets.provider)
	})
}

// checkScheduleTriggers: a schedule task runs on its ticks (and in the
// start-up pass that runs every task once, as CTS's once phase does), never
// because its module input changed.
func checkScheduleTriggers(t *testing.T, p *proc, taskName string) {
	t.Helper()
	for _, l := range p.lines(` executing task: `, "task_name="+taskName+" ") {
		if !strings.Contains(l, "trigger=schedule") && !strings.Contains(l, "trigger=start") {
			t.Fatalf("a schedule task ran for another reason than its schedule: %s", l)
		}
	}
}
