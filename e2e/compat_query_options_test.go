package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/consul/api"

	ctsconfig "github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/consul"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/task"
)

// Datacenter, namespace, filter and node_meta of every condition, module
// input and deprecated service block (and ctsync's peer and partition)
// reach Consul as query options, from
// the configuration file to the HTTP request (a dev agent has one
// datacenter and no namespaces, so a stub stands in for Consul). Runs
// without Consul, also with -short.
func TestCompatQueryOptions(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "c.hcl")
	if err := os.WriteFile(cfgFile, []byte(`
service {
  name       = "legacy"
  id         = "legacy-east"
  datacenter = "east"
  namespace  = "ns-legacy"
  filter     = "Service.Meta.v == \"1\""
}

task {
  name   = "names"
  module = "m"
  condition "services" {
    names      = ["web"]
    datacenter = "dc2"
    namespace  = "ns-a"
    filter     = "Service.Tags contains \"x\""
  }
}

task {
  name   = "regexp"
  module = "m"
  condition "services" {
    regexp     = "^api"
    datacenter = "dc3"
    namespace  = "ns-b"
  }
}

task {
  name   = "catalog"
  module = "m"
  condition "catalog-services" {
    regexp     = ".*"
    datacenter = "dc4"
    namespace  = "ns-c"
    node_meta  = { rack = "r1", zone = "z:1" }
  }
  module_input "services" {
    names      = ["db"]
    datacenter = "dc5"
    namespace  = "ns-d"
  }
}

task {
  name   = "kv"
  module = "m"
  condition "consul-kv" {
    path       = "app/cfg"
    recurse    = true
    datacenter = "dc6"
    namespace  = "ns-e"
  }
}

task {
  name   = "sched"
  module = "m"
  condition "schedule" {
    cron = "@hourly"
  }
  module_input "consul-kv" {
    path       = "one/key"
    datacenter = "dc7"
    namespace  = "ns-f"
  }
}

task {
  name     = "legacy"
  module   = "m"
  services = ["legacy-east", "plain"]
}

task {
  name   = "ext"
  module = "m"
  condition "services" {
    names     = ["cache"]
    status    = ["warning", "passing"]
    peer      = "east"
    partition = "p-a"
  }
  module_input "nodes" {
    datacenter = "dc8"
    filter     = "Meta.env == \"prod\""
    node_meta  = { rack = "r2" }
  }
  module_input "intentions" {
    datacenter = "dc9"
    namespace  = "ns-g"
    partition  = "p-b"
    source_services {
      regexp = ""
    }
  }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := ctsconfig.Load([]string{cfgFile})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	seen := map[string]url.Values{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path] = r.URL.Query()
		mu.Unlock()
		w.Header().Set("X-Consul-Index", "7")
		switch {
		case strings.HasPrefix(r.URL.Path, "/v1/kv/"):
			w.WriteHeader(http.StatusNotFound)
		case r.URL.Path == "/v1/catalog/services":
			fmt.Fprint(w, `{"api-1": [], "other": []}`)
		default:
			fmt.Fprint(w, `[]`)
		}
	}))
	defer srv.Close()
	client, err := consul.FromAPIConfig(&api.Config{Address: srv.URL, HttpClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}

	values := map[string]any{}
	ctx := context.Background()
	for i := range cfg.Tasks {
		s := &cfg.Tasks[i]
		for _, q := range reconcile.StaticQueries(s) {
			v, _, err := q.Fetch(ctx, client, 0)
			if err != nil {
				t.Fatalf("task %s: %s: %v", s.Name, q.Key(), err)
			}
			values[q.Key()] = v
		}
		// A regexp selector's health queries follow the catalog.
		get := func(k string) (any, bool) { v, ok := values[k]; return v, ok }
		for _, q := range reconcile.DynamicQueries(s, get) {
			if _, _, err := q.Fetch(ctx, client, 0); err != nil {
				t.Fatalf("task %s: %s: %v", s.Name, q.Key(), err)
			}
		}
	}

	want := map[string]map[string]string{
		"/v1/health/service/web":    {"dc": "dc2", "ns": "ns-a", "filter": `Service.Tags contains "x"`, "passing": "1"},
		"/v1/health/service/api-1":  {"dc": "dc3", "ns": "ns-b", "passing": "1"},
		"/v1/health/service/db":     {"dc": "dc5", "ns": "ns-d", "passing": "1"},
		"/v1/health/service/legacy": {"dc": "east", "ns": "ns-legacy", "filter": `Service.Meta.v == "1"`, "passing": "1"},
		"/v1/health/service/plain":  {"passing": "1"},
		"/v1/kv/app/cfg":            {"dc": "dc6", "ns": "ns-e", "recurse": ""},
		"/v1/kv/one/key":            {"dc": "dc7", "ns": "ns-f"},
		// ctsync extensions: a status choice other than passing alone is
		// applied to the answer, so no ?passing.
		"/v1/health/service/cache":      {"peer": "east", "partition": "p-a"},
		"/v1/catalog/nodes":             {"dc": "dc8", "filter": `Meta.env == "prod"`, "node-meta": "rack:r2"},
		"/v1/config/service-intentions": {"dc": "dc9", "ns": "ns-g", "partition": "p-b"},
	}
	for path, params := range want {
		got, ok := seen[path]
		if !ok {
			t.Errorf("no request for %s; requests: %v", path, keys(seen))
			continue
		}
		for k, v := range params {
			if !got.Has(k) || got.Get(k) != v {
				t.Errorf("%s: %s = %q (present %v), want %q", path, k, got.Get(k), got.Has(k), v)
			}
		}
		for k := range got {
			if _, expected := params[k]; !expected && k != "index" && k != "wait" {
				t.Errorf("%s: unexpected parameter %s=%q", path, k, got.Get(k))
			}
		}
	}
	// The catalog is read once per distinct option set: the regexp task's
	// (dc3/ns-b) and the catalog-services task's (dc4/ns-c/node_meta).
	catalogKeys := 0
	for _, s := range cfg.Tasks {
		for _, q := range reconcile.StaticQueries(&s) {
			if strings.HasPrefix(q.Key(), "catalog/services") {
				catalogKeys++
			}
		}
	}
	if catalogKeys != 2 {
		t.Errorf("%d catalog queries, want 2", catalogKeys)
	}
	if got := seen["/v1/catalog/services"]; got == nil {
		t.Error("no catalog request")
	}
	// The last catalog request seen is the catalog-services task's.
	cat := seen["/v1/catalog/services"]
	if cat.Get("dc") != "dc4" || cat.Get("ns") != "ns-c" || !slices.Equal(sorted(cat["node-meta"]), []string{"rack:r1", "zone:z:1"}) {
		t.Errorf("catalog-services request parameters = %v", cat)
	}
	// And the regexp task's catalog query carries its own options.
	var rx *task.Spec
	for i := range cfg.Tasks {
		if cfg.Tasks[i].Name == "regexp" {
			rx = &cfg.Tasks[i]
		}
	}
	for _, q := range reconcile.StaticQueries(rx) {
		if _, _, err := q.Fetch(ctx, client, 0); err != nil {
			t.Fatal(err)
		}
	}
	if cat := seen["/v1/catalog/services"]; cat.Get("dc") != "dc3" || cat.Get("ns") != "ns-b" || cat.Has("node-meta") {
		t.Errorf("regexp selector's catalog request parameters = %v", cat)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
