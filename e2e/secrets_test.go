package e2e

// Secrets stay secret: the Consul ACL token, provider secrets (read from
// Consul KV with {{ key }}, as a provider argument and in task_env), the
// API token and the API's TLS private key never appear in ctsync's output
// (DEBUG level, JSON and text formats, Terraform output forwarded with
// log = true), API responses (tasks, status, events, run logs, metrics,
// errors, inspect plans), CLI output (-h included), error messages, or any
// file in the working directory other than providers.auto.tfvars.json
// (mode 0600, the one file meant to hold provider secrets).

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/api/testcerts"
	"github.com/ctsync/ctsync/internal/testutil"
)

// secretSet is every value that must not leak, by what it is.
type secretSet map[string]string

// leaks returns what of the secrets data contains.
func (s secretSet) leaks(data []byte) []string {
	var out []string
	for what, v := range s {
		if bytes.Contains(data, []byte(v)) {
			out = append(out, what)
		}
	}
	return out
}

// check fails the test if data holds a secret.
func (s secretSet) check(t *testing.T, where string, data []byte) {
	t.Helper()
	for _, what := range s.leaks(data) {
		t.Errorf("the %s appears in %s", what, where)
	}
}

// pemBody returns the base64 lines of a PEM file (what would show if its
// content leaked), each as a secret.
func pemBody(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); len(l) >= 16 && !strings.HasPrefix(l, "-----") {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no PEM body in %s", path)
	}
	return out
}

const secretsConfig = `
log_level   = "DEBUG"
log_format  = "%[8]s"
working_dir = "%[1]s/sync-tasks"
port        = %[2]d

tls {
  enabled         = true
  cert            = "%[9]s"
  key             = "%[10]s"
  ca_cert         = "%[11]s"
  verify_incoming = true
}

consul {
  address = "%[3]s"
  token   = "%[5]s"
}

buffer_period {
  enabled = false
}

api_auth {
  token {
    name   = "ops"
    secret = "%[12]s"
    access = "write"
  }
}

driver "terraform" {
  path        = "%[4]s"
  log         = true
  persist_log = true
  required_providers {
    echo = {
      source  = "ctsync/echo"
      version = "0.1.0"
    }
  }
}

terraform_provider "echo" {
  token  = "{{ key \"secrets/provider\" }}"
  region = "eu-1"
  task_env {
    CTSYNC_COMPAT_SECRET = "{{ key \"secrets/env\" }}"
  }
}

task {
  name           = "prov"
  module         = "%[6]s/compat_provider"
  providers      = ["echo"]
  variable_files = ["%[7]s"]
  condition "services" {
    names = ["web"]
  }
}

task {
  name      = "broken"
  module    = "%[6]s/failing"
  providers = ["echo"]
  condition "services" {
    names = ["web"]
  }
}
`

func TestSecretsNeverLeak(t *testing.T) {
	skipShort(t)
	token := "acl-" + uuid.NewString()
	c := testutil.StartConsulWith(t, testutil.ConsulOptions{ACLToken: token})
	secrets := secretSet{
		"Consul ACL token":       token,
		"provider secret":        "Pr0vider-S3cret-" + uuid.NewString(),
		"task_env secret":        "T4skEnv-S3cret-" + uuid.NewString(),
		"wrong Consul ACL token": "acl-wrong-" + uuid.NewString(),
		"API token":              "api-T0ken-" + uuid.NewString(),
	}
	for _, kv := range [][2]string{{"secrets/provider", secrets["provider secret"]}, {"secrets/env", secrets["task_env secret"]}} {
		_, err := c.Client.KV().Put(&api.KVPair{Key: kv[0], Value: []byte(kv[1])}, nil)
		must(t, err)
	}
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	certs := testcerts.Generate(t)
	for i, l := range pemBody(t, certs.ServerKey) {
		secrets[fmt.Sprintf("API TLS key (line %d)", i+1)] = l
	}
	for i, l := range pemBody(t, certs.ClientKey) {
		secrets[fmt.Sprintf("client TLS key (line %d)", i+1)] = l
	}

	work := t.TempDir()
	out := t.TempDir()
	port := testutil.FreePort(t)
	varFile := writeFile(t, out, "task.tfvars", fmt.Sprintf("dir = %q\n", out))
	render := func(format, consulToken string, port int) string {
		return fmt.Sprintf(secretsConfig, work, port, c.Addr, testutil.Binary(t, "terraform"), consulToken,
			filepath.Join(testutil.RepoRoot(), "e2e", "testdata", "modules"), varFile, format,
			certs.ServerCert, certs.ServerKey, certs.CACert, secrets["API token"])
	}
	cfg := writeFile(t, work, "config.hcl", render("json", token, port))
	tfEnv := []string{"TF_CLI_CONFIG_FILE=" + compatCLIConfig(t)}
	p := startCompat(t, work, tfEnv, "start", "-config-file", cfg)

	// Positive controls: the secrets did reach the provider and Terraform.
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	testutil.Eventually(t, 90*time.Second, "the provider to receive its secrets", func() bool {
		var got struct {
			Token *string `json:"token_sha256"`
		}
		env, _ := os.ReadFile(filepath.Join(out, "task_env.sha256"))
		return readJSON(out, "provider.json", &got) && got.Token != nil && *got.Token == sum(secrets["provider secret"]) &&
			strings.TrimSpace(string(env)) == sum(secrets["task_env secret"])
	})

	// The API over mutual TLS: every read endpoint, run logs, errors,
	// a run through the API and an inspect plan of a task using the
	// provider.
	hc := mtlsClient(t, certs)
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	call := func(method, path, body string) []byte {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		must(t, err)
		req.Header.Set("Authorization", "Bearer "+secrets["API token"])
		resp, err := hc.Do(req)
		if err != nil {
			t.Errorf("%s %s: %v", method, path, err)
			return nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		secrets.check(t, fmt.Sprintf("the API response to %s %s (%d)", method, path, resp.StatusCode), b)
		return b
	}
	waitFailed := func() {
		testutil.Eventually(t, 60*time.Second, "a failed run of broken", func() bool {
			var evs struct {
				Events []apiEvent `json:"events"`
			}
			return json.Unmarshal(call("GET", "/v1/tasks/broken/events", ""), &evs) == nil &&
				len(evs.Events) > 0 && !evs.Events[0].Success
		})
	}
	waitFailed()
	call("POST", "/v1/tasks/prov/run", "")
	call("POST", "/v1/tasks/broken/run", "")
	call("POST", "/v1/tasks?run=inspect", `{"task": {"name": "probe", "module": "`+module("compat_provider")+
		`", "providers": ["echo"], "variables": {"dir": "`+t.TempDir()+`"}, "condition": {"services": {"names": ["web"]}}}}`)
	call("POST", "/v1/tasks", `{"task": {"name": "bad", "providers": ["echo"], "module": 1}}`)
	call("POST", "/v1/tasks", `{"task": {"name": "bad2", "module": "x", "providers": ["nope.alias"], "condition": {"services": {"names": ["web"]}}}}`)
	call("PATCH", "/v1/tasks/prov", `{"enabled": "yes"}`)
	call("GET", "/v1/tasks/nope", "")
	for _, path := range []string{"/v1/tasks", "/v1/tasks/prov", "/v1/tasks/broken", "/v1/status", "/v1/status/tasks",
		"/v1/status/tasks?include=events", "/v1/health", "/metrics", "/ui/", "/"} {
		call("GET", path, "")
	}
	// The run logs of both tasks, fetched once at least three runs are
	// recorded: prov's first run may still be going on a loaded machine
	// (the POSTs above then answer 409), and broken's failures go on being
	// retried, each with its log.
	logs := 0
	testutil.Eventually(t, 2*time.Minute, "three run logs of prov and broken", func() bool {
		logs = 0
		for _, name := range []string{"prov", "broken"} {
			var evs struct {
				Events []apiEvent `json:"events"`
			}
			if err := json.Unmarshal(call("GET", "/v1/tasks/"+name+"/events", ""), &evs); err != nil {
				t.Fatalf("events of %s: %v", name, err)
			}
			for _, ev := range evs.Events {
				if len(call("GET", "/v1/tasks/"+name+"/events/"+ev.ID+"/log", "")) > 0 {
					logs++
				}
			}
		}
		return logs >= 3
	})

	// The CLI, through the same API.
	cli := func(args ...string) {
		t.Helper()
		cmd := exec.Command(ctsyncBin, withFlags(args, "-http-addr", base, "-ca-cert", certs.CACert,
			"-client-cert", certs.ClientCert, "-client-key", certs.ClientKey)...)
		cmd.Env = append(os.Environ(), "CTS_TOKEN="+secrets["API token"])
		b, _ := cmd.CombinedOutput()
		secrets.check(t, "the output of ctsync "+strings.Join(args, " "), b)
	}
	cli("status")
	cli("status", "-h")
	cli("task", "disable", "broken")

	// Stop the daemon (shutdown logging included) and check its output.
	must(t, p.cmd.Process.Signal(os.Interrupt))
	p.wait(t, 60*time.Second)
	secrets.check(t, "ctsync's output (DEBUG, log_format json)", []byte(p.out.String()))
	if !strings.Contains(p.out.String(), `"level":"DEBUG"`) {
		t.Errorf("no DEBUG output in JSON format:\n%.2000s", p.out.String())
	}

	// -once in text format, then with a wrong token: errors must not show
	// either token.
	textCfg := writeFile(t, work, "text.hcl", render("text", token, testutil.FreePort(t)))
	p = startCompat(t, work, tfEnv, "start", "-once", "-config-file", textCfg)
	if code := p.wait(t, 3*time.Minute); code == 0 {
		t.Errorf("-once exited 0 with a failing task")
	}
	secrets.check(t, "ctsync -once's output (DEBUG, text)", []byte(p.out.String()))
	if !strings.Contains(p.out.String(), "[DEBUG]") {
		t.Errorf("no DEBUG output in text format")
	}
	wrongCfg := writeFile(t, work, "wrong.hcl", render("text", secrets["wrong Consul ACL token"], testutil.FreePort(t)))
	p = startCompat(t, work, append(tfEnv, "CTSYNC_ONCE_WAIT=10s"), "start", "-once", "-config-file", wrongCfg)
	if code := p.wait(t, 60*time.Second); code == 0 {
		t.Errorf("-once with a wrong ACL token exited 0")
	}
	secrets.check(t, "ctsync's output with a wrong ACL token", []byte(p.out.String()))
	if !strings.Contains(p.out.String(), "ACL not found") && !strings.Contains(p.out.String(), "Permission denied") {
		t.Errorf("the wrong token's failure is not explained:\n%s", p.out.String())
	}

	// Every file ctsync and Terraform wrote.
	checked := checkTree(t, secrets, work, map[string]bool{"config.hcl": true, "text.hcl": true, "wrong.hcl": true})
	checked += checkTree(t, secrets, out, nil)
	t.Logf("%d files and %d run logs checked", checked, logs)
	if checked < 20 {
		t.Errorf("only %d files checked", checked)
	}
	// The Terraform state, in Consul at the CTS location.
	for _, name := range []string{"prov", "broken"} {
		kv, _, err := c.Client.KV().Get(stateKey(name), nil)
		if err != nil || kv == nil {
			t.Errorf("state of %s: %v", name, err)
			continue
		}
		state := kv.Value
		if zr, err := gzip.NewReader(bytes.NewReader(state)); err == nil {
			if b, err := io.ReadAll(zr); err == nil {
				state = b
			}
		}
		secrets.check(t, "the Terraform state of "+name, state)
	}
}

// checkTree checks every file under root for secrets, except the named
// configuration files (the operator wrote the token there), provider
// binaries, and providers.auto.tfvars.json, which must hold the provider
// secret and be readable by the owner only. It returns how many files it
// read.
func checkTree(t *testing.T, secrets secretSet, root string, skip map[string]bool) int {
	t.Helper()
	n, sawProviders := 0, false
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".plugin-cache", "providers":
				return filepath.SkipDir
			}
			return nil
		}
		if skip[d.Name()] || d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.Name() == "providers.auto.tfvars.json" {
			sawProviders = true
			st, err := os.Stat(path)
			if err != nil {
				return err
			}
			if st.Mode().Perm() != 0o600 {
				t.Errorf("%s has mode %v, want 0600", rel, st.Mode().Perm())
			}
			if !bytes.Contains(b, []byte(secrets["provider secret"])) {
				t.Errorf("%s does not hold the provider secret", rel)
			}
			return nil
		}
		n++
		secrets.check(t, rel, b)
		return nil
	})
	must(t, err)
	if skip != nil && !sawProviders {
		t.Errorf("no providers.auto.tfvars.json under %s", root)
	}
	return n
}

// mtlsClient is an HTTPS client that trusts the test CA and presents the
// client certificate.
func mtlsClient(t *testing.T, certs testcerts.Files) *http.Client {
	t.Helper()
	ca, err := os.ReadFile(certs.CACert)
	must(t, err)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(certs.ClientCert, certs.ClientKey)
	must(t, err)
	return &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}}
}
