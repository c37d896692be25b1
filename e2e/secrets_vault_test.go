package e2e

// Secrets from Vault outside terraform_provider blocks (the secrets test
// extended to Vault values): the Consul ACL token, an api_auth token and a
// webhook header are read with {{ with secret }}; the daemon reads Consul
// with the token (ACLs on, default deny), the API accepts the token, the
// webhook receives the header; a new version of the secret replaces the
// API token (the old one is refused) and the header; and no value, old or
// new, nor the Vault token, shows in ctsync's output, API answers or files.

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ctsync/ctsync/internal/testutil"
	"github.com/ctsync/ctsync/internal/vault/vaulttest"
)

const vaultFieldsConfig = `
log_level   = "DEBUG"
working_dir = "%[1]s/sync-tasks"
port        = %[2]d

consul {
  address = "%[3]s"
  token   = "{{ with secret \"secret/data/ctsync\" }}{{ .Data.data.consul }}{{ end }}"
}

vault {
  address                = "%[4]s"
  token                  = "%[5]s"
  default_lease_duration = "1s"
}

buffer_period {
  enabled = false
}

api_auth {
  token {
    name   = "ops"
    secret = "{{ with secret \"secret/data/ctsync\" }}{{ .Data.data.api }}{{ end }}"
    access = "write"
  }
}

notification "webhook" {
  name    = "hook"
  url     = "%[6]s"
  events  = ["failed"]
  retries = 0
  headers = {
    Authorization = "Bearer {{ with secret \"secret/data/ctsync\" }}{{ .Data.data.hook }}{{ end }}"
  }
}

driver "terraform" {
  path = "%[7]s"
  log  = true
}

task {
  name   = "broken"
  module = "%[8]s"
  condition "services" {
    names = ["web"]
  }
}
`

func TestVaultSecretFieldsNeverLeak(t *testing.T) {
	skipShort(t)
	v := vaulttest.Start(t)
	aclToken := "acl-" + uuid.NewString()
	c := testutil.StartConsulWith(t, testutil.ConsulOptions{ACLToken: aclToken})
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	api1, api2 := "V4ult-Api1-"+uuid.NewString(), "V4ult-Api2-"+uuid.NewString()
	hook1, hook2 := "V4ult-Hook1-"+uuid.NewString(), "V4ult-Hook2-"+uuid.NewString()
	v.PutKV2(t, "ctsync", map[string]any{"consul": aclToken, "api": api1, "hook": hook1})
	secrets := secretSet{"Consul ACL token": aclToken, "first API token": api1, "second API token": api2,
		"first webhook header": hook1, "second webhook header": hook2, "Vault token": v.Token}

	var (
		mu    sync.Mutex
		auths []string
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		secrets.check(t, "a webhook notification's body", body)
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
	}))
	defer hook.Close()
	received := func(h string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return slices.Contains(auths, "Bearer "+h)
		}
	}

	work := t.TempDir()
	port := testutil.FreePort(t)
	// The configuration (which holds the Vault token) is kept out of the
	// working directory, whose every file is checked.
	cfg := writeFile(t, t.TempDir(), "config.hcl", fmt.Sprintf(vaultFieldsConfig, work, port, c.Addr, v.Addr, v.Token,
		hook.URL, testutil.Binary(t, "terraform"), module("failing")))
	p := startCompat(t, work, nil, "start", "-config-file", cfg)

	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	call := func(method, path, token string) int {
		t.Helper()
		req, err := http.NewRequest(method, base+path, nil)
		must(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		secrets.check(t, fmt.Sprintf("the API response to %s %s", method, path), b)
		return resp.StatusCode
	}

	// The Consul token works (the task reads the catalog and runs; its
	// failure is notified with the header), and so does the API token.
	testutil.Eventually(t, 90*time.Second, "the webhook to receive the first header", received(hook1))
	if code := call("GET", "/v1/tasks/broken", api1); code != http.StatusOK {
		t.Fatalf("GET with the API token from Vault: %d", code)
	}
	if code := call("GET", "/v1/tasks/broken", api2); code != http.StatusUnauthorized {
		t.Fatalf("GET with a token not yet in Vault: %d, want 401", code)
	}

	// Rotation: the new API token works and the old one is refused; the
	// next notification carries the new header.
	v.PutKV2(t, "ctsync", map[string]any{"consul": aclToken, "api": api2, "hook": hook2})
	testutil.Eventually(t, 60*time.Second, "the rotated API token to be accepted", func() bool {
		return call("GET", "/v1/tasks/broken", api2) == http.StatusOK
	})
	if code := call("GET", "/v1/tasks/broken", api1); code != http.StatusUnauthorized {
		t.Errorf("the old API token still works after rotation: %d", code)
	}
	testutil.Eventually(t, 60*time.Second, "the webhook to receive the rotated header", func() bool {
		call("POST", "/v1/tasks/broken/run", api2)
		return received(hook2)()
	})
	for _, path := range []string{"/v1/tasks", "/v1/status", "/v1/status/tasks?include=events", "/v1/tasks/broken/events", "/metrics"} {
		call("GET", path, api2)
	}

	must(t, p.cmd.Process.Signal(os.Interrupt))
	p.wait(t, 60*time.Second)
	out := p.out.String()
	secrets.check(t, "ctsync's output (DEBUG)", []byte(out))
	for _, want := range []string{"the API token's new secret is in use", "the webhook header's new value"} {
		if !strings.Contains(out, want) {
			t.Errorf("the rotation is not logged (%q):\n%.3000s", want, out)
		}
	}
	if n := checkTree(t, secrets, work, nil); n < 3 {
		t.Errorf("only %d files checked", n)
	}
}
