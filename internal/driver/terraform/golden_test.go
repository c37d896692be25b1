package terraform

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/task"
)

var update = flag.Bool("update", false, "rewrite the testdata/*.golden files")

// generatedFiles are the files compared with golden copies, with the mode
// each must have. A file a scenario does not produce must not exist.
var generatedFiles = []struct {
	name string
	mode os.FileMode
}{
	{fileMain, 0o640},
	{fileVariables, 0o640},
	{fileModuleVars, 0o640},
	{fileInputs, 0o640},
	{fileProviders, 0o600},
	{fileModuleVarVals, 0o600},
}

func strp(s string) *string { return &s }

func servicesCondition(names ...string) task.Condition {
	return task.Condition{Services: &task.ServicesCondition{ServicesSelector: task.ServicesSelector{Names: names}, UseAsModuleInput: true}}
}

func sampleService(id, node string) task.Service {
	return task.Service{
		ID: id, Name: "web", Address: "10.0.0.1", Port: 8080,
		Meta: map[string]string{"version": "2"}, Tags: []string{"blue", "prod"},
		Status: "passing", Node: node, NodeID: "6f1c1c3e-0000-0000-0000-000000000001",
		NodeAddress: "10.0.0.1", NodeDatacenter: "dc1",
		NodeTaggedAddresses: map[string]string{"lan": "10.0.0.1"},
		NodeMeta:            map[string]string{"consul-network-segment": ""},
	}
}

func goldenScenarios() map[string]struct {
	opts Options
	in   *task.Inputs
} {
	web1 := sampleService("web-1", "node-1")
	return map[string]struct {
		opts Options
		in   *task.Inputs
	}{
		// The smallest task: a services condition, default consul backend.
		"minimal": {
			opts: Options{
				Spec:   task.Spec{Name: "minimal", Module: "./modules/web", Condition: servicesCondition("web")},
				Consul: config.Consul{Address: "127.0.0.1:8500", KVPath: "consul-terraform-sync/"},
			},
			in: &task.Inputs{},
		},
		// Providers with nested and repeated nested blocks, required_providers
		// (one provider listed there, one not), variables, a description and
		// the default backend over TLS.
		"full": {
			opts: Options{
				Spec: task.Spec{
					Name: "full", Description: "Load balancer pools\nfor the web tier", Module: "example.com/org/lb/aws", Version: "1.2.3",
					Providers: []string{"zeta", "aws.east"},
					Variables: map[string]string{
						"pool_size": `3`,
						"labels":    `{ team = "net", "cost-center" = "42" }`,
						"zones":     `["a", "b"]`,
						"note":      `"literal $${not_interpolated} and %%{ not a directive }"`,
					},
					Condition: servicesCondition("web", "api"),
				},
				Consul: config.Consul{
					Address: "https://consul.example.com:8501", KVPath: "custom/path/terraform/",
					Token: "never-written-token",
					TLS:   config.ConsulTLS{Enabled: true, Verify: true, CACert: "/etc/consul/ca.pem", Cert: "/etc/consul/cert.pem", Key: "/etc/consul/key.pem"},
				},
				Driver: config.TerraformDriver{RequiredProviders: map[string]config.RequiredProvider{
					"aws":   {Source: "hashicorp/aws", Version: "~> 5.0"},
					"other": {Source: "example/other", Version: "1.0.0"},
				}},
				Providers: []config.Provider{
					{
						Name: "zeta", TaskEnv: map[string]string{"ZETA_TOKEN": "secret"},
						Args: config.ProviderBody{Attrs: map[string]cty.Value{"endpoint": cty.StringVal("https://zeta.local")}},
					},
					{
						Name: "aws", Alias: "east",
						Args: config.ProviderBody{
							Attrs: map[string]cty.Value{
								"region":              cty.StringVal("us-east-1"),
								"max_retries":         cty.NumberIntVal(5),
								"allowed_account_ids": cty.ListVal([]cty.Value{cty.StringVal("111"), cty.StringVal("222")}),
							},
							Blocks: []config.ProviderBlock{
								{Type: "assume_role", Body: config.ProviderBody{Attrs: map[string]cty.Value{
									"role_arn": cty.StringVal("arn:aws:iam::111:role/ctsync"),
								}}},
								{Type: "default_tags", Body: config.ProviderBody{Attrs: map[string]cty.Value{
									"tags": cty.ObjectVal(map[string]cty.Value{"owner": cty.StringVal("ctsync")}),
								}}},
								{Type: "endpoints", Body: config.ProviderBody{Attrs: map[string]cty.Value{"s3": cty.StringVal("http://s3.local")}}},
								{Type: "endpoints", Body: config.ProviderBody{
									Attrs: map[string]cty.Value{"sts": cty.StringVal("http://sts.local")},
									Blocks: []config.ProviderBlock{
										{Type: "retry", Body: config.ProviderBody{Attrs: map[string]cty.Value{"attempts": cty.NumberIntVal(2)}}},
									},
								}},
							},
						},
					},
				},
			},
			in: &task.Inputs{Services: map[string]task.Service{web1.Key(): web1}},
		},
		// A local backend: attributes are passed through, no consul defaults.
		"local_backend": {
			opts: Options{
				Spec: task.Spec{Name: "local_backend", Module: "../modules/web", Condition: task.Condition{Schedule: &task.ScheduleCondition{Cron: "* * * * *"}},
					ModuleInput: task.ModuleInputs{Services: &task.ServicesSelector{Regexp: strp("^web")}}},
				Consul: config.Consul{Address: "127.0.0.1:8500", Token: "never-written-token"},
				Driver: config.TerraformDriver{Backend: &config.Backend{Type: "local", Attrs: map[string]cty.Value{
					"path":          cty.StringVal("/var/lib/ctsync/state/terraform.tfstate"),
					"workspace_dir": cty.StringVal("/var/lib/ctsync/state/workspaces"),
				}}},
			},
			in: &task.Inputs{Services: map[string]task.Service{}},
		},
		// catalog_services condition used as input, plus a consul-kv
		// module_input; a partial consul backend gets the defaults merged in.
		"catalog_kv": {
			opts: Options{
				Spec: task.Spec{
					Name: "catalog_kv", Module: "./modules/catalog",
					Condition:   task.Condition{CatalogServices: &task.CatalogServicesCondition{Regexp: ".*", UseAsModuleInput: true}},
					ModuleInput: task.ModuleInputs{ConsulKV: &task.ConsulKVSelector{Path: "config/", Recurse: true}},
				},
				Consul: config.Consul{Address: "http://127.0.0.1:8500"},
				Driver: config.TerraformDriver{Backend: &config.Backend{Type: "consul", Attrs: map[string]cty.Value{
					"path": cty.StringVal("other/state"),
					"lock": cty.False,
				}}},
			},
			in: &task.Inputs{
				CatalogServices: map[string][]string{"api": {"v1"}, "web": nil, "consul": {}},
				ConsulKV:        map[string]string{"config/color": "blue", "config/size": "10"},
			},
		},
		// ctsync's nodes condition used as input and an intentions
		// module_input: two list-of-objects variables after services.
		"nodes_intentions": {
			opts: Options{
				Spec: task.Spec{
					Name: "nodes_intentions", Module: "./modules/fw",
					Condition: task.Condition{Nodes: &task.NodesCondition{UseAsModuleInput: true}},
					ModuleInput: task.ModuleInputs{Intentions: &task.IntentionsSelector{
						Destination: &task.NameMatch{Names: []string{"api"}}}},
				},
				Consul: config.Consul{Address: "127.0.0.1:8500"},
			},
			in: &task.Inputs{
				Nodes: []task.Node{
					{ID: "id-1", Node: "node-1", Address: "10.0.0.1", Datacenter: "dc1",
						TaggedAddresses: map[string]string{"lan": "10.0.0.1", "wan": "1.2.3.4"}, Meta: map[string]string{"rack": "r1"}},
					{ID: "id-2", Node: "node \"2\"", Address: "10.0.0.2", Datacenter: "dc1", TaggedAddresses: map[string]string{}, Meta: map[string]string{}},
				},
				Intentions: []task.Intention{
					{SourceName: "web", SourceType: "consul", DestinationName: "api", Action: "allow", Permissions: "[]", Precedence: 9, Meta: map[string]string{}},
					{SourceName: "*", SourceType: "consul", DestinationName: "api", Action: "", Precedence: 8, Description: "${not} %{interpolated}",
						Permissions: `[{"Action":"deny","HTTP":{"PathPrefix":"/admin"}}]`, Meta: map[string]string{"owner": "net"}},
				},
			},
		},
	}
}

func TestGoldenFiles(t *testing.T) {
	for name, sc := range goldenScenarios() {
		t.Run(name, func(t *testing.T) {
			opts := sc.opts
			opts.WorkDir = filepath.Join(t.TempDir(), name)
			opts.Binary = "/nonexistent/terraform" // generation runs no command
			d, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.writeRootModule(); err != nil {
				t.Fatal(err)
			}
			if err := d.writeInputs(sc.in); err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(d.WorkDir())
			if err != nil || st.Mode().Perm() != 0o750 {
				t.Errorf("working dir mode = %v (%v), want 0750", st.Mode().Perm(), err)
			}
			for _, f := range generatedFiles {
				got, err := os.ReadFile(filepath.Join(d.WorkDir(), f.name))
				golden := filepath.Join("testdata", name+"."+f.name+".golden")
				if os.IsNotExist(err) {
					if _, gerr := os.Stat(golden); gerr == nil {
						if *update {
							os.Remove(golden)
							continue
						}
						t.Errorf("%s was not generated but %s exists", f.name, golden)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if st, _ := os.Stat(filepath.Join(d.WorkDir(), f.name)); st.Mode().Perm() != f.mode {
					t.Errorf("%s has mode %v, want %v", f.name, st.Mode().Perm(), f.mode)
				}
				if strings.Contains(string(got), "never-written-token") {
					t.Errorf("%s contains the Consul token", f.name)
				}
				if *update {
					if err := os.WriteFile(golden, got, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (run go test -update to create it)", err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s differs from %s (run go test -update after checking the change):\n--- got ---\n%s\n--- want ---\n%s", f.name, golden, got, want)
				}
			}
		})
	}
}

// Regenerating an unchanged task must leave the files byte-for-byte (and
// mtime) identical, and a different map iteration order must not matter.
func TestRegenerateIsStable(t *testing.T) {
	sc := goldenScenarios()["full"]
	dir := filepath.Join(t.TempDir(), "full")
	var hashes []string
	var mtimes []time.Time
	for i := 0; i < 5; i++ {
		opts := sc.opts
		opts.WorkDir = dir
		opts.Binary = "/nonexistent/terraform"
		d, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		h, err := d.writeRootModule()
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, string(h))
		st, err := os.Stat(filepath.Join(dir, fileMain))
		if err != nil {
			t.Fatal(err)
		}
		mtimes = append(mtimes, st.ModTime())
	}
	for i := range hashes {
		if hashes[i] != hashes[0] || !mtimes[i].Equal(mtimes[0]) {
			t.Fatalf("run %d: module hash or main.tf mtime changed on regeneration", i)
		}
	}
}

// Files a task no longer needs are removed when it is regenerated.
func TestStaleFilesRemoved(t *testing.T) {
	sc := goldenScenarios()["full"]
	opts := sc.opts
	opts.WorkDir = t.TempDir()
	opts.Binary = "/nonexistent/terraform"
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.writeRootModule(); err != nil {
		t.Fatal(err)
	}
	opts.Spec.Variables = nil
	opts.Providers = nil
	d, err = New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.writeRootModule(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{fileModuleVars, fileModuleVarVals, fileProviders} {
		if fileExists(filepath.Join(opts.WorkDir, f)) {
			t.Errorf("%s should have been removed", f)
		}
	}
}
