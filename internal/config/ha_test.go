package config

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestHADefaultsAndFields(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()

	cfg := mustLoad(t, writeFile(t, dir, "none.hcl", `port = 1`))
	if cfg.HA != nil {
		t.Fatalf("HA without a high_availability block: %+v", cfg.HA)
	}

	cfg = mustLoad(t, writeFile(t, dir, "min.hcl", "high_availability {\n  cluster {\n    name = \"prod\"\n  }\n}\n"))
	want := HA{ClusterName: "prod", ParentPath: DefaultHAParentPath, SessionTTL: 15 * time.Second, Weight: 1}
	if cfg.HA == nil || *cfg.HA != want {
		t.Fatalf("defaults: got %+v, want %+v", cfg.HA, want)
	}
	if got := cfg.HA.Prefix(); got != "consul-terraform-sync/prod" {
		t.Fatalf("Prefix() = %q", got)
	}

	cfg = mustLoad(t, writeFile(t, dir, "full.hcl", `
id = "cts-01"
high_availability {
  cluster {
    name = "prod"
    storage "consul" {
      parent_path = "/teams/net/"
      namespace   = "ns1"
      session_ttl = "30s"
    }
  }
  instance {
    address = "cts-01.example.com"
  }
  rerun_all_on_failover = true
}
`))
	want = HA{ClusterName: "prod", ParentPath: "/teams/net/", Namespace: "ns1", SessionTTL: 30 * time.Second,
		InstanceAddress: "cts-01.example.com", RerunAllOnFailover: true, Weight: 1}
	if *cfg.HA != want {
		t.Fatalf("full: got %+v, want %+v", *cfg.HA, want)
	}
	if got := cfg.HA.Prefix(); got != "teams/net/prod" {
		t.Fatalf("Prefix() = %q", got)
	}
	if cfg.ID != "cts-01" {
		t.Fatalf("id = %q", cfg.ID)
	}

	// JSON, and a later file overriding a scalar of an earlier one.
	j := writeFile(t, dir, "a.json", `{"high_availability": {"cluster": {"name": "prod",
	  "storage": {"consul": {"session_ttl": "20s"}}}, "instance": {"address": "10.0.0.1"}}}`)
	h := writeFile(t, dir, "b.hcl", "high_availability {\n  instance {\n    address = \"10.0.0.2\"\n  }\n}\n")
	cfg = mustLoad(t, j, h)
	want = HA{ClusterName: "prod", ParentPath: DefaultHAParentPath, SessionTTL: 20 * time.Second, InstanceAddress: "10.0.0.2", Weight: 1}
	if *cfg.HA != want {
		t.Fatalf("json + merge: got %+v, want %+v", *cfg.HA, want)
	}
}

func TestAPITLS(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	cfg := mustLoad(t, writeFile(t, dir, "a.hcl", "tls {\n  cert = \"c.pem\"\n  key = \"k.pem\"\n}\n"))
	if want := (APITLS{Enabled: true, Cert: "c.pem", Key: "k.pem"}); cfg.TLS != want {
		t.Fatalf("implicit enable: got %+v", cfg.TLS)
	}
	cfg = mustLoad(t, writeFile(t, dir, "b.hcl", "tls {\n  enabled = false\n  cert = \"c.pem\"\n}\n"))
	if cfg.TLS.Enabled {
		t.Fatalf("enabled = false must win: %+v", cfg.TLS)
	}
	cfg = mustLoad(t, writeFile(t, dir, "c.hcl", "tls {\n  cert = \"c.pem\"\n  key = \"k.pem\"\n  verify_incoming = true\n  ca_cert = \"ca.pem\"\n  ca_path = \"cas\"\n}\n"))
	if want := (APITLS{Enabled: true, Cert: "c.pem", Key: "k.pem", VerifyIncoming: true, CACert: "ca.pem", CAPath: "cas"}); cfg.TLS != want {
		t.Fatalf("mtls: got %+v", cfg.TLS)
	}
	if len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], "c.hcl:6: tls.ca_path: is ignored: ca_cert is set too") {
		t.Fatalf("want a warning that ca_cert wins, got %q", cfg.Warnings)
	}
	cfg = mustLoad(t, writeFile(t, dir, "d.json", `{"tls": {"enabled": true, "cert": "c", "key": "k", "verify_incoming": true, "ca_path": "cas"}}`))
	if want := (APITLS{Enabled: true, Cert: "c", Key: "k", VerifyIncoming: true, CAPath: "cas"}); cfg.TLS != want {
		t.Fatalf("json: got %+v", cfg.TLS)
	}
}

func TestHAAndTLSErrors(t *testing.T) {
	clearConsulEnv(t)
	tests := []struct {
		name  string
		src   string
		line  int
		field string
		msg   string
	}{
		{"no cluster name", "high_availability {\n  instance {\n    address = \"a\"\n  }\n}\n", 1, "high_availability.cluster.name", "is required"},
		{"empty cluster name", "high_availability {\n  cluster {\n    name = \"\"\n  }\n}\n", 3, "high_availability.cluster.name", "cannot be empty"},
		{"slash in cluster name", "high_availability {\n  cluster {\n    name = \"a/b\"\n  }\n}\n", 3, "high_availability.cluster.name", "not a valid cluster name"},
		{"ttl below consul minimum", "high_availability {\n  cluster {\n    name = \"c\"\n    storage \"consul\" {\n      session_ttl = \"5s\"\n    }\n  }\n}\n",
			5, `high_availability.cluster.storage "consul".session_ttl`, "must be at least 10s"},
		{"bad ttl", "high_availability {\n  cluster {\n    name = \"c\"\n    storage \"consul\" {\n      session_ttl = \"soon\"\n    }\n  }\n}\n",
			5, `high_availability.cluster.storage "consul".session_ttl`, "not a valid duration"},
		{"other storage", "high_availability {\n  cluster {\n    name = \"c\"\n    storage \"raft\" {\n    }\n  }\n}\n",
			4, `high_availability.cluster.storage "raft"`, `the only storage is "consul"`},
		{"unknown key", "high_availability {\n  cluster {\n    name = \"c\"\n    nmae = \"d\"\n  }\n}\n", 4, "high_availability.cluster.nmae", `did you mean "name"`},
		{"two blocks", "high_availability {\n  cluster {\n    name = \"c\"\n  }\n}\nhigh_availability {\n}\n", 6, "high_availability", "only one 'high_availability' block"},
		{"local backend", "driver \"terraform\" {\n  backend \"local\" {\n    path = \"x\"\n  }\n}\nhigh_availability {\n  cluster {\n    name = \"c\"\n  }\n}\n",
			2, `backend "local"`, "cannot be used with high_availability"},
		{"consul backend without locking", "driver \"terraform\" {\n  backend \"consul\" {\n    lock = false\n  }\n}\nhigh_availability {\n  cluster {\n    name = \"c\"\n  }\n}\n",
			2, `backend "consul".lock`, "accept_unlocked_backend"},
		{"s3 backend without locking", "driver \"terraform\" {\n  backend \"s3\" {\n    bucket = \"b\"\n    key = \"k\"\n    region = \"r\"\n  }\n}\nhigh_availability {\n  cluster {\n    name = \"c\"\n  }\n}\n",
			2, `backend "s3".use_lockfile`, "does not lock the Terraform state"},
		{"unlocked backend not acknowledged", "driver \"terraform\" {\n  backend \"s3\" {\n    bucket = \"b\"\n    use_lockfile = false\n  }\n}\nhigh_availability {\n  cluster {\n    name = \"c\"\n  }\n  accept_unlocked_backend = false\n}\n",
			2, `backend "s3"`, "only ctsync's own fencing"},
		{"weight zero", "high_availability {\n  cluster {\n    name = \"c\"\n    spread_tasks = true\n  }\n  instance {\n    weight = 0\n  }\n}\n",
			7, "high_availability.instance.weight", "must be between 1 and 1000"},
		{"weight not a number", "high_availability {\n  cluster {\n    name = \"c\"\n    spread_tasks = true\n  }\n  instance {\n    weight = \"big\"\n  }\n}\n",
			7, "high_availability.instance.weight", ""},
		{"spread_tasks not a bool", "high_availability {\n  cluster {\n    name = \"c\"\n    spread_tasks = \"yes please\"\n  }\n}\n",
			4, "high_availability.cluster.spread_tasks", ""},
		{"tls without cert", "tls {\n  key = \"k\"\n}\n", 1, "tls.cert", "is required when TLS is enabled"},
		{"verify_incoming without ca", "tls {\n  cert = \"c\"\n  key = \"k\"\n  verify_incoming = true\n}\n", 4, "tls.verify_incoming", "needs ca_cert or ca_path"},
		{"tls unknown key", "tls {\n  cert = \"c\"\n  key = \"k\"\n  verify_outgoing = true\n}\n", 4, "tls.verify_outgoing", "unknown field"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "c.hcl", tc.src)
			_, err := Load([]string{p})
			if err == nil {
				t.Fatal("no error")
			}
			for _, e := range AsList(err) {
				if e.Range.Start.Line == tc.line && strings.Contains(e.Field, tc.field) && strings.Contains(e.Msg, tc.msg) &&
					strings.HasSuffix(e.Range.Filename, "c.hcl") {
					if !strings.Contains(e.Error(), "c.hcl:") {
						t.Fatalf("error without file:line: %v", e)
					}
					return
				}
			}
			t.Fatalf("want an error at c.hcl:%d on %q containing %q; got:\n%v", tc.line, tc.field, tc.msg, err)
		})
	}
}

// A backend whose locking is disabled is accepted under high_availability
// only with accept_unlocked_backend; backends that lock are accepted as is.
func TestHAUnlockedBackendAcknowledged(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	ha := "high_availability {\n  cluster {\n    name = \"c\"\n  }\n%s\n}\n"
	for name, src := range map[string]string{
		"acknowledged": "driver \"terraform\" {\n  backend \"consul\" {\n    lock = false\n  }\n}\n" + fmt.Sprintf(ha, "  accept_unlocked_backend = true"),
		"s3 lockfile":  "driver \"terraform\" {\n  backend \"s3\" {\n    bucket = \"b\"\n    use_lockfile = true\n  }\n}\n" + fmt.Sprintf(ha, ""),
		"s3 dynamodb":  "driver \"terraform\" {\n  backend \"s3\" {\n    bucket = \"b\"\n    dynamodb_table = \"locks\"\n  }\n}\n" + fmt.Sprintf(ha, ""),
		"consul lock":  "driver \"terraform\" {\n  backend \"consul\" {\n    lock = true\n  }\n}\n" + fmt.Sprintf(ha, ""),
		"gcs":          "driver \"terraform\" {\n  backend \"gcs\" {\n    bucket = \"b\"\n  }\n}\n" + fmt.Sprintf(ha, ""),
	} {
		cfg := mustLoad(t, writeFile(t, dir, strings.ReplaceAll(name, " ", "-")+".hcl", src))
		if want := name == "acknowledged"; cfg.HA.AcceptUnlockedBackend != want {
			t.Errorf("%s: AcceptUnlockedBackend = %v", name, cfg.HA.AcceptUnlockedBackend)
		}
	}
}

// spread_tasks and instance.weight, in HCL (read with HCL 1, as CTS reads
// files: here in a form only HCL 1 accepts, a one-line block with commas)
// and JSON.
func TestHASpreadTasks(t *testing.T) {
	clearConsulEnv(t)
	dir := t.TempDir()
	cfg := mustLoad(t, writeFile(t, dir, "spread.hcl", `high_availability {
  cluster {
    name         = "prod"
    spread_tasks = true
  }
  instance { address = "cts-01", weight = 3 }
}
`))
	want := HA{ClusterName: "prod", ParentPath: DefaultHAParentPath, SessionTTL: 15 * time.Second,
		InstanceAddress: "cts-01", SpreadTasks: true, Weight: 3}
	if *cfg.HA != want {
		t.Fatalf("got %+v, want %+v", *cfg.HA, want)
	}
	cfg = mustLoad(t, writeFile(t, dir, "spread.json",
		`{"high_availability": {"cluster": {"name": "prod", "spread_tasks": true}, "instance": {"weight": 2}}}`))
	if !cfg.HA.SpreadTasks || cfg.HA.Weight != 2 {
		t.Fatalf("json: %+v", *cfg.HA)
	}
	cfg = mustLoad(t, writeFile(t, dir, "plain.hcl", "high_availability {\n  cluster {\n    name = \"prod\"\n  }\n}\n"))
	if cfg.HA.SpreadTasks || cfg.HA.Weight != 1 {
		t.Fatalf("defaults: %+v", *cfg.HA)
	}
}
