package e2e

// Helpers of the fault, hostile-input and secrets tests
// (fault_*_test.go, hostile_*_test.go, secrets_*_test.go).

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// tcpProxy forwards a fixed loopback port to a target address, and can be
// closed (refusing connections and cutting the open ones, as a Consul that
// is down or unreachable would) and opened again on the same port.
type tcpProxy struct {
	t      *testing.T
	Addr   string // 127.0.0.1:port, what ctsync is pointed at
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// newProxy reserves a port for target; it starts closed.
func newProxy(t *testing.T, target string) *tcpProxy {
	p := &tcpProxy{t: t, Addr: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)), target: target,
		conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() {
		p.close()
		p.wg.Wait()
	})
	return p
}

// open starts accepting connections and forwarding them.
func (p *tcpProxy) open() {
	p.t.Helper()
	ln, err := net.Listen("tcp", p.Addr)
	if err != nil {
		p.t.Fatalf("proxy listen on %s: %v", p.Addr, err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.forward(c) })
		}
	})
}

func (p *tcpProxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // closed meanwhile
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// close stops listening and cuts every forwarded connection.
func (p *tcpProxy) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
}

// waitOutput waits until the process output contains every one of subs
// (on one line), failing the test if the process exits first.
func (p *proc) waitOutput(t *testing.T, timeout time.Duration, subs ...string) string {
	t.Helper()
	var line string
	testutil.Eventually(t, timeout, fmt.Sprintf("ctsync output with %q", subs), func() bool {
		if ls := p.lines(subs...); len(ls) > 0 {
			line = ls[0]
			return true
		}
		select {
		case <-p.done:
			t.Fatalf("ctsync exited (code %d) before printing %q:\n%s", p.code, subs, p.out.String())
		default:
		}
		return false
	})
	return line
}

// running fails the test if the process has exited.
func (p *proc) running(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("ctsync exited with code %d:\n%s", p.code, p.out.String())
	default:
	}
}

// catalogIDs is what Consul itself says: the IDs of the passing instances
// of a service, sorted and joined as waitServices expects them.
func catalogIDs(t *testing.T, c *testutil.Consul, service string) string {
	t.Helper()
	entries, _, err := c.Client.Health().Service(service, "", true, nil)
	if err != nil {
		t.Fatalf("health of %s: %v", service, err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Service.ID)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// waitConverged waits until the module's services.json in out has exactly
// the passing instances Consul has for service: the final infrastructure
// matches the final catalog.
func waitConverged(t *testing.T, c *testutil.Consul, out, service string) {
	t.Helper()
	waitIDs(t, out, catalogIDs(t, c, service))
}

// waitIDs waits until the module's services.json in out has exactly the
// given IDs (sorted, comma-separated). Unlike waitServices it reads past a
// file Terraform is still writing (local_file does not write atomically).
func waitIDs(t *testing.T, out, want string) map[string]task.Service {
	t.Helper()
	var got map[string]task.Service
	testutil.Eventually(t, 60*time.Second, "module output with services "+want, func() bool {
		got = nil
		return readJSON(out, "services.json", &got) && ids(got) == want
	})
	return got
}

// waitKV waits until the module's consul_kv.json in out equals want.
func waitKV(t *testing.T, out string, want map[string]string) {
	t.Helper()
	var got map[string]string
	testutil.Eventually(t, 60*time.Second, fmt.Sprintf("consul_kv.json = %q", want), func() bool {
		got = nil
		return readJSON(out, "consul_kv.json", &got) && fmt.Sprint(got) == fmt.Sprint(want)
	})
}

// apiEvents returns a task's events from the daemon's API.
func apiEvents(t *testing.T, port int, taskName string) []apiEvent {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/tasks/%s/events", port, taskName))
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var body struct {
		Events []apiEvent `json:"events"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil {
		return nil
	}
	return body.Events
}

// apiEvent is the part of an event the fault tests look at.
type apiEvent struct {
	ID      string `json:"id"`
	Success bool   `json:"success"`
	Trigger string `json:"trigger"`
	Error   *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// waitFailedEvent waits for a failed event of the task whose error message
// contains every one of subs, and returns that message.
func waitFailedEvent(t *testing.T, port int, taskName string, timeout time.Duration, subs ...string) string {
	t.Helper()
	var msg string
	testutil.Eventually(t, timeout, fmt.Sprintf("a failed event of %s mentioning %q", taskName, subs), func() bool {
	next:
		for _, ev := range apiEvents(t, port, taskName) {
			if ev.Success || ev.Error == nil {
				continue
			}
			for _, s := range subs {
				if !strings.Contains(ev.Error.Message, s) {
					continue next
				}
			}
			msg = ev.Error.Message
			return true
		}
		return false
	})
	return msg
}

// faultConfig is the usual test configuration (see config) with an API
// port the test knows and extra top-level HCL appended.
func faultConfig(t *testing.T, consulAddr, workDir string, port int, extra string, tasks ...string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "log_level = \"DEBUG\"\nworking_dir = %q\nport = %d\n\nconsul {\n  address = %q\n}\n\nbuffer_period {\n  enabled = false\n}\n%s\n",
		workDir, port, consulAddr, extra)
	for _, tk := range tasks {
		b.WriteString("\n" + tk + "\n")
	}
	return b.String()
}

// servicesTask is a task block: module services_file (or mod) on the
// named services, writing into out.
func servicesTask(t *testing.T, name, mod, out, services string, extra ...string) string {
	t.Helper()
	vf := writeFile(t, out, "task.tfvars", fmt.Sprintf("dir = %q\n", out))
	return fmt.Sprintf("task {\n  name = %q\n  module = %q\n  variable_files = [%q]\n  %s\n  condition \"services\" {\n    names = [%s]\n  }\n}",
		name, module(mod), vf, strings.Join(extra, "\n  "), services)
}

// kvTask is a task block: module compat_kv triggered by the consul-kv
// condition on path (recurse as given), with the services of names as a
// module input, writing into out.
func kvTask(t *testing.T, name, out, path string, recurse bool, services string) string {
	t.Helper()
	vf := writeFile(t, out, "task.tfvars", fmt.Sprintf("dir = %q\n", out))
	return fmt.Sprintf("task {\n  name = %q\n  module = %q\n  variable_files = [%q]\n  condition \"consul-kv\" {\n    path = %q\n    recurse = %t\n    use_as_module_input = true\n  }\n  module_input \"services\" {\n    names = [%s]\n  }\n}",
		name, module("compat_kv"), vf, path, recurse, services)
}

// must fails the test on an error.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fileExistsAt reports whether path exists.
func fileExistsAt(path ...string) bool {
	_, err := os.Stat(filepath.Join(path...))
	return err == nil
}
