package e2e

// Faults of Consul: down when ctsync starts, restarted and wiped while
// ctsync watches it.

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/testutil"
)

// Consul is not there when the daemon starts: it logs that it waits (with
// the address), keeps retrying, and converges once the agent comes up on
// that address: services and a consul-kv condition.
func TestFaultConsulDownAtStart(t *testing.T) {
	skipShort(t)
	c := testutil.NewConsul(t, testutil.ConsulOptions{HTTPPort: testutil.FreePort(t)})
	work := t.TempDir()
	webOut, kvOut := t.TempDir(), t.TempDir()
	cfg := writeFile(t, work, "config.hcl", faultConfig(t, c.Addr, filepath.Join(work, "sync-tasks"), testutil.FreePort(t), "",
		servicesTask(t, "web_task", "services_file", webOut, `"web"`),
		kvTask(t, "kv_task", kvOut, "fault/kv", false, `"web"`)))
	p := startCtsync(t, work, "start", "-config-file", cfg)

	line := p.waitOutput(t, 30*time.Second, "consul not reachable, retrying", "address=http://"+c.Addr)
	if !strings.Contains(line, "connection refused") {
		t.Errorf("the retry line does not say why: %s", line)
	}
	p.running(t)

	c.Start()
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	c.RegisterService(t, reg("web-2", "web", 8002), "critical")
	_, err := c.Client.KV().Put(&api.KVPair{Key: "fault/kv", Value: []byte("v1")}, nil)
	must(t, err)
	p.waitOutput(t, 30*time.Second, "consul reachable")
	waitConverged(t, c, webOut, "web")
	waitKV(t, kvOut, map[string]string{"fault/kv": "v1"})
	p.running(t)
}

// A terraform_provider block with {{ key }} needs Consul KV at start-up:
// with Consul unreachable the daemon waits for it (it used to fail at once
// with a configuration error), then resolves the key and converges. The
// agent is reached through a proxy that is closed at first, so the key is
// in KV before ctsync can read it.
func TestFaultConsulDownAtStartProviderKey(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	_, err := c.Client.KV().Put(&api.KVPair{Key: "fault/env", Value: []byte("from-kv")}, nil)
	must(t, err)
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	px := newProxy(t, c.Addr)

	work := t.TempDir()
	out := t.TempDir()
	provider := "terraform_provider \"local\" {\n  task_env {\n    FAULT_ENV = \"{{ key \\\"fault/env\\\" }}\"\n  }\n}\n"
	cfg := writeFile(t, work, "config.hcl", faultConfig(t, px.Addr, filepath.Join(work, "sync-tasks"), testutil.FreePort(t), provider,
		servicesTask(t, "web_task", "services_file", out, `"web"`, `providers = ["local"]`)))
	p := startCtsync(t, work, "start", "-config-file", cfg)

	p.waitOutput(t, 30*time.Second, "consul not reachable, retrying", "address=http://"+px.Addr)
	p.running(t)
	px.open()
	waitConverged(t, c, out, "web")
	c.RegisterService(t, reg("web-2", "web", 8002), "passing")
	waitConverged(t, c, out, "web")
}

// -once with Consul unreachable fails within its bound (CTSYNC_ONCE_WAIT,
// 2 minutes by default) with a clear error and exit code 11, with and
// without {{ key }} provider values to resolve first.
func TestFaultOnceConsulDown(t *testing.T) {
	skipShort(t)
	addr := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
	for _, tc := range []struct{ name, extra string }{
		{"plain", ""},
		{"provider_key", "terraform_provider \"local\" {\n  task_env {\n    FAULT_ENV = \"{{ key \\\"fault/env\\\" }}\"\n  }\n}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			out := t.TempDir()
			extraTask := ""
			if tc.extra != "" {
				extraTask = `providers = ["local"]`
			}
			cfg := writeFile(t, work, "config.hcl", faultConfig(t, addr, filepath.Join(work, "sync-tasks"), testutil.FreePort(t), tc.extra,
				servicesTask(t, "web_task", "services_file", out, `"web"`, extraTask)))
			start := time.Now()
			p := startCompat(t, work, []string{"CTSYNC_ONCE_WAIT=3s"}, "start", "-once", "-config-file", cfg)
			code := p.wait(t, 60*time.Second)
			if code != 11 {
				t.Fatalf("exit code %d, want 11; output:\n%s", code, p.out.String())
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("-once took %s with a 3s bound", d)
			}
			if ls := p.lines("consul is not reachable", "waited=3s"); len(ls) == 0 {
				t.Errorf("no clear error line:\n%s", p.out.String())
			}
			if p.count("consul not reachable, retrying") == 0 {
				t.Errorf("no retry line:\n%s", p.out.String())
			}
		})
	}
	// A bad bound is a configuration error.
	work := t.TempDir()
	cfg := writeFile(t, work, "config.hcl", faultConfig(t, addr, filepath.Join(work, "sync-tasks"), testutil.FreePort(t), "",
		servicesTask(t, "web_task", "services_file", t.TempDir(), `"web"`)))
	p := startCompat(t, work, []string{"CTSYNC_ONCE_WAIT=soon"}, "start", "-once", "-config-file", cfg)
	if code := p.wait(t, 30*time.Second); code != 15 || !strings.Contains(p.out.String(), "CTSYNC_ONCE_WAIT") {
		t.Fatalf("exit code %d, want 15 naming CTSYNC_ONCE_WAIT:\n%s", code, p.out.String())
	}
}

// Consul restarts and comes back empty (a dev agent keeps nothing): the
// services task and the consul-kv task follow the wiped catalog and KV,
// then the new data. State is kept locally, since the dev agent loses it.
func TestFaultConsulRestartWipesKV(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	work := t.TempDir()
	webOut, kvOut, prefOut := t.TempDir(), t.TempDir(), t.TempDir()
	backend := "driver \"terraform\" {\n  backend \"local\" {\n    path = \"" + filepath.Join(work, "state.tfstate") + "\"\n  }\n}\n"
	cfg := writeFile(t, work, "config.hcl", faultConfig(t, c.Addr, filepath.Join(work, "sync-tasks"), testutil.FreePort(t), backend,
		servicesTask(t, "web_task", "services_file", webOut, `"web"`),
		kvTask(t, "kv_task", kvOut, "fault/one", false, `"web"`),
		kvTask(t, "prefix_task", prefOut, "fault/dir", true, `"web"`)))
	put := func(k, v string) {
		t.Helper()
		_, err := c.Client.KV().Put(&api.KVPair{Key: k, Value: []byte(v)}, nil)
		must(t, err)
	}
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	c.RegisterService(t, reg("web-2", "web", 8002), "passing")
	put("fault/one", "before")
	put("fault/dir/a", "1")
	put("fault/dir/b", "2")
	p := startCtsync(t, work, "start", "-config-file", cfg)
	waitConverged(t, c, webOut, "web")
	waitKV(t, kvOut, map[string]string{"fault/one": "before"})
	waitKV(t, prefOut, map[string]string{"fault/dir/a": "1", "fault/dir/b": "2"})

	c.Restart()
	// Wiped: no instances, no keys.
	waitIDs(t, webOut, "")
	waitKV(t, kvOut, map[string]string{})
	waitKV(t, prefOut, map[string]string{})

	c.RegisterService(t, reg("web-9", "web", 8009), "passing")
	put("fault/one", "after")
	put("fault/dir/b", "3")
	waitConverged(t, c, webOut, "web")
	waitKV(t, kvOut, map[string]string{"fault/one": "after"})
	waitKV(t, prefOut, map[string]string{"fault/dir/b": "3"})
	p.running(t)
}
