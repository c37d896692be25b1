package e2e

// Enabling, disabling and deleting a task under high availability, leader
// and spread modes, against the real daemon, Consul and Terraform: when
// Consul refuses the task's record (its ACL policy made read-only for the
// cluster's task records), the request fails and nothing changed on any
// member, the record included; once Consul accepts it again the same
// requests succeed. A task deleted while it runs answers 409 "being
// deleted" to a create on every member until its run has ended.

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/testutil"
)

// ctsyncACL is what the daemons' token may do: everything they need.
const ctsyncACL = `
key_prefix "" { policy = "write" }
session_prefix "" { policy = "write" }
service_prefix "" { policy = "write" }
node_prefix "" { policy = "write" }
agent_prefix "" { policy = "write" }
operator = "read"
acl = "read"
`

func TestHAEnableAndDeleteAtomicEndToEnd(t *testing.T) {
	skipShort(t)
	for _, mode := range []string{"leader", "spread"} {
		t.Run(mode, func(t *testing.T) { haEnableDeleteAtomic(t, mode) })
	}
}

func haEnableDeleteAtomic(t *testing.T, mode string) {
	mgmt := "mgmt-" + uuid.NewString()
	c := newHAClusterWith(t, testutil.ConsulOptions{ACLToken: mgmt})
	acl := c.consul.Client.ACL()
	pol, _, err := acl.PolicyCreate(&api.ACLPolicy{Name: "ctsync", Rules: ctsyncACL}, nil)
	must(t, err)
	tok, _, err := acl.TokenCreate(&api.ACLToken{Policies: []*api.ACLTokenPolicyLink{{ID: pol.ID}}}, nil)
	must(t, err)
	withToken := func(cfg string) string {
		cfg = strings.Replace(cfg, "consul {\n", fmt.Sprintf("consul {\n  token = %q\n", tok.SecretID), 1)
		return strings.Replace(cfg, "backend \"consul\" {\n", fmt.Sprintf("backend \"consul\" {\n    access_token = %q\n", tok.SecretID), 1)
	}
	_, varFile := newTaskDir(t)
	for _, id := range []string{"cts-a", "cts-b"} {
		c.add(&haInstance{id: id}, func(in *haInstance) string {
			if mode == "spread" {
				return withToken(spreadHeader(in, c.consul.Addr, "DEBUG", "e2e"))
			}
			return withToken(haConfig(in, varFile))
		})
	}
	c.register("web-1", "web", 8001)
	for _, in := range c.insts {
		in.start(t)
	}
	// The members that serve the task: the leader, or every spread member
	// (a write sent to one that does not own the task is forwarded to its
	// owner).
	members := c.insts
	if mode == "leader" {
		members = []*haInstance{c.leading(60 * time.Second)}
	}
	writer := members[0]
	serving := func(what, path string) {
		t.Helper()
		testutil.Eventually(t, 90*time.Second, what, func() bool {
			for _, in := range members {
				if code, _, _ := haGet(in.port, path); code != http.StatusOK {
					return false
				}
			}
			return true
		})
	}
	serving("the members serving", "/v1/tasks")
	out := t.TempDir()
	// Sent again while the task has no owner yet (spread members still
	// joining: 503, retry) or a run of it is active (409).
	retried := func(method, path, body string) (int, []byte) {
		t.Helper()
		var code int
		var b []byte
		testutil.Eventually(t, 60*time.Second, method+" "+path+" answered", func() bool {
			code, b = haDo(t, method, writer.port, path, body)
			return code != http.StatusServiceUnavailable && code != http.StatusConflict
		})
		return code, b
	}
	code, b := retried("POST", "/v1/tasks", fmt.Sprintf(
		`{"task":{"name":"api-t","module":%q,"variables":{"dir":%q},"condition":{"services":{"names":["web"]}}}}`,
		module("services_file"), fmt.Sprintf("%q", out)))
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	waitServices(t, out, "web-1")
	serving("the task on every member", "/v1/tasks/api-t")

	kv := c.consul.Client.KV()
	pairs, _, err := kv.List("consul-terraform-sync/", nil)
	must(t, err)
	key := ""
	for _, p := range pairs {
		if strings.HasSuffix(p.Key, "/tasks/api-t") {
			key = p.Key
		}
	}
	if key == "" {
		t.Fatal("no record of api-t in consul")
	}
	record := func() []byte {
		t.Helper()
		p, _, err := kv.Get(key, nil)
		must(t, err)
		if p == nil {
			return nil
		}
		return p.Value
	}
	before := record()

	// The task records become read-only for the daemons.
	pol.Rules = ctsyncACL + fmt.Sprintf("key_prefix %q { policy = \"read\" }\n", strings.TrimSuffix(key, "api-t"))
	_, _, err = acl.PolicyUpdate(pol, nil)
	must(t, err)
	for _, in := range members {
		for _, req := range []struct{ method, path, body string }{
			{"PATCH", "/v1/tasks/api-t", `{"enabled":false}`},
			{"PATCH", "/v1/tasks/api-t?run=now", `{"enabled":false}`},
			{"DELETE", "/v1/tasks/api-t", ""},
		} {
			code, b := haDo(t, req.method, in.port, req.path, req.body)
			if code < 400 {
				t.Fatalf("%s %s on %s with the record read-only: %d %s", req.method, req.path, in.id, code, b)
			}
			t.Logf("%s %s on %s: %d %s", req.method, req.path, in.id, code, bytes.TrimSpace(b))
		}
	}
	for _, in := range members {
		code, _, b := haGet(in.port, "/v1/tasks/api-t")
		if code != http.StatusOK || !strings.Contains(string(b), `"enabled":true`) {
			t.Fatalf("%s after the refused changes: %d %s", in.id, code, b)
		}
	}
	if got := record(); !bytes.Equal(got, before) {
		t.Fatalf("the record changed:\n%s\nwas\n%s", got, before)
	}
	// Still enabled, and still running on changes.
	c.register("web-2", "web", 8002)
	waitServices(t, out, "web-1,web-2")

	// Consul takes the records again: the same requests succeed.
	pol.Rules = ctsyncACL
	_, _, err = acl.PolicyUpdate(pol, nil)
	must(t, err)
	if code, b := retried("PATCH", "/v1/tasks/api-t", `{"enabled":false}`); code != http.StatusOK {
		t.Fatalf("disable: %d %s", code, b)
	}
	if got := record(); !strings.Contains(string(got), `"enabled":false`) {
		t.Fatalf("the record after the disable: %s", got)
	}
	if code, b := retried("DELETE", "/v1/tasks/api-t", ""); code != http.StatusAccepted {
		t.Fatalf("delete: %d %s", code, b)
	}
	testutil.Eventually(t, 60*time.Second, "api-t gone from every member", func() bool {
		for _, in := range members {
			if code, _, _ := haGet(in.port, "/v1/tasks/api-t"); code != http.StatusNotFound {
				return false
			}
		}
		return true
	})

	// Deleted while its run goes on: its name answers 409 "being deleted"
	// on every member until the run has ended, then it can be created
	// again.
	gdir := t.TempDir()
	gated := fmt.Sprintf(`{"task":{"name":"slow","module":%q,"variables":{"dir":%q},"condition":{"services":{"names":["web"]}}}}`,
		module("gated"), fmt.Sprintf("%q", gdir))
	if code, b := retried("POST", "/v1/tasks", gated); code != http.StatusCreated {
		t.Fatalf("create the gated task: %d %s", code, b)
	}
	testutil.Eventually(t, 60*time.Second, "the gated run started", func() bool { return fileExistsAt(gdir, "started") })
	if code, b := haDo(t, "DELETE", writer.port, "/v1/tasks/slow", ""); code != http.StatusAccepted {
		t.Fatalf("delete during the run: %d %s", code, b)
	}
	for _, in := range members {
		code, b := haDo(t, "POST", in.port, "/v1/tasks", gated)
		if code != http.StatusConflict || !strings.Contains(string(b), "being deleted") {
			t.Fatalf("create on %s while deleting: %d %s", in.id, code, b)
		}
	}
	must(t, os.WriteFile(filepath.Join(gdir, "gate"), nil, 0o644))
	testutil.Eventually(t, 60*time.Second, "the name free again", func() bool {
		code, _ := haDo(t, "POST", writer.port, "/v1/tasks", gated)
		return code == http.StatusCreated
	})
}
