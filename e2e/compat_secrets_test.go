package e2e

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// secretsStaySecret: the provider secret (read from Consul KV with
// {{ key }}, used as a provider argument and in task_env) and the Consul
// token appear nowhere but where they must: not in ctsync's output at DEBUG
// level, not in the run logs, not in any generated or written file except
// providers.auto.tfvars.json (mode 0600, the one file meant to hold them),
// not in the Terraform state, not in API responses.
func (r *compatRun) secretsStaySecret(t *testing.T) {
	secrets := map[string]string{"provider secret": r.secrets.provider, "Consul token": r.secrets.consulToken}
	check := func(where string, data []byte) {
		for what, s := range secrets {
			if bytes.Contains(data, []byte(s)) {
				t.Errorf("the %s appears in %s", what, where)
			}
		}
	}

	check("ctsync's output", []byte(r.p.out.String()))

	checked := 0
	err := filepath.WalkDir(r.work, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".plugin-cache", "providers": // provider binaries
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() == "config.hcl" { // holds the token: the operator wrote it there
			return nil
		}
		if d.Name() == "providers.auto.tfvars.json" {
			st, err := os.Stat(path)
			if err != nil {
				return err
			}
			if st.Mode().Perm() != 0o600 {
				t.Errorf("%s has mode %v, want 0600", path, st.Mode().Perm())
			}
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		rel, _ := filepath.Rel(r.work, path)
		check(rel, b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	prov := filepath.Join(r.work, "sync-tasks", "prov")
	for _, f := range []string{"main.tf", "variables.tf", "terraform.tfvars.json"} {
		if _, err := os.Stat(filepath.Join(prov, f)); err != nil {
			t.Errorf("expected generated file: %v", err)
		}
	}
	logs, _ := filepath.Glob(filepath.Join(prov, "*", "*.log"))
	if len(logs) == 0 || checked < 20 {
		t.Errorf("too little was checked: %d files, run logs %v", checked, logs)
	}
	// Positive control: the secret did reach the one file meant for it.
	if b, err := os.ReadFile(filepath.Join(prov, "providers.auto.tfvars.json")); err != nil ||
		!bytes.Contains(b, []byte(r.secrets.provider)) {
		t.Errorf("providers.auto.tfvars.json does not hold the resolved secret (err %v)", err)
	}

	// Terraform state of every task (consul backend, CTS location).
	for _, name := range compatTasks {
		kv, _, err := r.c.Client.KV().Get("consul-terraform-sync/terraform-env:"+name, nil)
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
		check("the Terraform state of "+name, state)
	}

	// The API.
	base := fmt.Sprintf("http://127.0.0.1:%d", r.port)
	for _, path := range []string{"/v1/tasks", "/v1/tasks/prov", "/v1/status/tasks", "/v1/status/tasks/prov?include=events",
		"/v1/tasks/prov/events", "/v1/status"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Errorf("GET %s: %v", path, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		check("the API response to GET "+path, b)
		if path == "/v1/tasks/prov" && resp.StatusCode == http.StatusOK && !strings.Contains(string(b), `"prov"`) {
			t.Errorf("GET %s: %s", path, b)
		}
	}
}
