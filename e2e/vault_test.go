package e2e

// Vault: {{ with secret }} values of a terraform_provider block reach the
// provider (the echo test provider, through real Terraform), a Vault that is
// down at start makes the task wait (API up, the reason in its status) until
// it is back, a new version of the secret makes the task run again with the
// new value, and no secret value or the Vault token shows in ctsync's
// output, API answers, files (other than providers.auto.tfvars.json) or the
// Terraform state in Consul.

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ctsync/ctsync/internal/testutil"
	"github.com/ctsync/ctsync/internal/vault/vaulttest"
)

const vaultConfig = `
log_level   = "DEBUG"
working_dir = "%[1]s/sync-tasks"
port        = %[2]d

consul {
  address = "%[3]s"
}

vault {
  address                = "%[4]s"
  token                  = "%[5]s"
  default_lease_duration = "1s"
}

buffer_period {
  enabled = false
}

driver "terraform" {
  path = "%[6]s"
  log  = true
  required_providers {
    echo = {
      source  = "ctsync/echo"
      version = "0.1.0"
    }
  }
}

terraform_provider "echo" {
  token  = "{{ with secret \"secret/data/net\" }}{{ .Data.data.password }}{{ end }}"
  region = "eu-1"
  task_env {
    CTSYNC_COMPAT_SECRET = "{{ with secret \"kv1/net\" }}{{ .Data.api_key }}{{ end }}"
  }
}

task {
  name      = "prov"
  module    = "%[7]s"
  providers = ["echo"]
  variables = {
    dir = "%[8]s"
  }
  condition "services" {
    names = ["web"]
  }
}
`

func TestVaultSecretsReachProviderAndRotate(t *testing.T) {
	skipShort(t)
	v := vaulttest.Start(t)
	c := testutil.StartConsul(t)
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	pw1, pw2 := "V4ult-Pw1-"+uuid.NewString(), "V4ult-Pw2-"+uuid.NewString()
	apiKey := "V4ult-ApiKey-" + uuid.NewString()
	v.PutKV2(t, "net", map[string]any{"password": pw1})
	v.PutKV1(t, "net", map[string]any{"api_key": apiKey}, "")
	secrets := secretSet{"first password": pw1, "task_env secret": apiKey, "Vault token": v.Token}

	work, out := t.TempDir(), t.TempDir()
	port := testutil.FreePort(t)
	cfg := writeFile(t, work, "config.hcl", fmt.Sprintf(vaultConfig, work, port, c.Addr, v.Addr, v.Token,
		testutil.Binary(t, "terraform"), module("compat_provider"), out))
	tfEnv := []string{"TF_CLI_CONFIG_FILE=" + compatCLIConfig(t)}

	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	get := func(path string) []byte {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		secrets.check(t, "the API response to GET "+path, b)
		return b
	}

	if v.Fake() {
		v.SetDown(true)
	}
	p := startCompat(t, work, tfEnv, "start", "-config-file", cfg)
	if v.Fake() {
		// Vault down at start: the API serves, and the task's status says
		// why it waits (no failed run: nothing ran).
		testutil.Eventually(t, 60*time.Second, "the task's status saying it waits for Vault", func() bool {
			b := get("/v1/status/tasks/prov")
			return bytes.Contains(b, []byte(`"waiting":`)) && bytes.Contains(b, []byte("waiting for Vault"))
		})
		if evs := apiEvents(t, port, "prov"); len(evs) != 0 {
			t.Fatalf("waiting for Vault recorded runs: %+v", evs)
		}
		if b := get("/v1/health"); b == nil {
			t.Fatal("the API does not answer while Vault is down")
		}
		v.SetDown(false)
	}

	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	providerGot := func(want string) func() bool {
		return func() bool {
			var got struct {
				Token *string `json:"token_sha256"`
			}
			return readJSON(out, "provider.json", &got) && got.Token != nil && *got.Token == sum(want)
		}
	}
	testutil.Eventually(t, 120*time.Second, "the provider to receive the Vault secret", providerGot(pw1))
	// The provisioner that records task_env ends after the provider's file
	// is written: wait for it in its turn.
	testutil.Eventually(t, 60*time.Second, "task_env to receive the KV v1 secret", func() bool {
		env, _ := os.ReadFile(filepath.Join(out, "task_env.sha256"))
		return strings.TrimSpace(string(env)) == sum(apiKey)
	})

	// A new version of the secret: the task runs again with it.
	v.PutKV2(t, "net", map[string]any{"password": pw2})
	secrets["provider secret"] = pw2 // checkTree expects it in providers.auto.tfvars.json
	testutil.Eventually(t, 120*time.Second, "the provider to receive the rotated secret", providerGot(pw2))
	var evs []apiEvent
	testutil.Eventually(t, 60*time.Second, "a successful run triggered by the changed provider config", func() bool {
		evs = apiEvents(t, port, "prov")
		return len(evs) > 0 && evs[0].Success && strings.Contains(evs[0].Trigger, "provider config changed")
	})
	for _, path := range []string{"/v1/tasks", "/v1/tasks/prov", "/v1/status", "/v1/status/tasks",
		"/v1/status/tasks?include=events", "/v1/tasks/prov/events", "/metrics"} {
		get(path)
	}
	for _, ev := range evs {
		get("/v1/tasks/prov/events/" + ev.ID + "/log")
	}

	must(t, p.cmd.Process.Signal(os.Interrupt))
	p.wait(t, 60*time.Second)
	secrets.check(t, "ctsync's output (DEBUG)", []byte(p.out.String()))
	if !strings.Contains(p.out.String(), "vault secret changed") {
		t.Errorf("the rotation is not logged:\n%.3000s", p.out.String())
	}
	checkTree(t, secrets, work, map[string]bool{"config.hcl": true})
	kv, _, err := c.Client.KV().Get(stateKey("prov"), nil)
	if err != nil || kv == nil {
		t.Fatalf("state of prov: %v", err)
	}
	state := kv.Value
	if zr, err := gzip.NewReader(bytes.NewReader(state)); err == nil {
		if b, err := io.ReadAll(zr); err == nil {
			state = b
		}
	}
	secrets.check(t, "the Terraform state", state)
}
