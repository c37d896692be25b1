// Package testutil starts the real components tests need: a Consul dev agent
// on loopback with free ports, and the Terraform binary and provider mirror
// prepared by scripts/tools.sh.
package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// RepoRoot returns the repository root (the folder holding go.mod).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// ToolsDir is where scripts/tools.sh caches binaries and the provider mirror.
func ToolsDir() string {
	if d := os.Getenv("CTSYNC_TOOLS"); d != "" {
		return d
	}
	return filepath.Join(RepoRoot(), ".tools")
}

// Binary finds a tool: .tools/bin first, then PATH. It fails the test with
// a hint when the tool is missing.
func Binary(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(ToolsDir(), "bin", name)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	t.Fatalf("%s not found in %s or on PATH: run scripts/tools.sh first", name, filepath.Join(ToolsDir(), "bin"))
	return ""
}

// TerraformEnv returns environment variables that make terraform use the
// provider mirror from scripts/tools.sh and never call home.
func TerraformEnv() []string {
	return []string{
		"TF_CLI_CONFIG_FILE=" + filepath.Join(ToolsDir(), "terraformrc"),
		"CHECKPOINT_DISABLE=1",
		"TF_IN_AUTOMATION=1",
	}
}

// SetTerraformEnv applies TerraformEnv to the test process.
func SetTerraformEnv(t testing.TB) {
	for _, kv := range TerraformEnv() {
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				t.Setenv(kv[:i], kv[i+1:])
				break
			}
		}
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Consul is a running `consul agent -dev` on loopback.
type Consul struct {
	// Addr is host:port of the HTTP API.
	Addr   string
	Client *api.Client

	t       testing.TB
	bin     string
	args    []string
	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	logs    *bytes.Buffer
	stopped bool
	// fixedHTTP: the caller chose the HTTP port, so a retry keeps it.
	fixedHTTP bool
	token     string
}

// StartConsul starts a dev agent with free ports and waits until it has a
// leader. It is stopped when the test ends.
func StartConsul(t testing.TB) *Consul {
	t.Helper()
	return StartConsulWith(t, ConsulOptions{})
}

func (c *Consul) start() {
	c.t.Helper()
	// Another agent starting at the same time (tests of other packages run
	// in parallel) may take one of the ports FreePort found free. Then the
	// agent exits at once: pick new server and serf ports and try again.
	for attempt := 1; ; attempt++ {
		c.launch()
		err := c.waitReady()
		if err == nil {
			return
		}
		if attempt < 5 && errors.Is(err, errPortTaken) {
			c.reassignPorts()
			continue
		}
		c.t.Fatalf("%v", err)
	}
}

func (c *Consul) launch() {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.logs = &bytes.Buffer{}
	cmd := exec.Command(c.bin, c.args...)
	cmd.Stdout = c.logs
	cmd.Stderr = c.logs
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start consul: %v", err)
	}
	c.cmd = cmd
	c.done = make(chan struct{})
	c.stopped = false
	done := c.done
	go func() { _ = cmd.Wait(); close(done) }()
}

// errPortTaken: the agent could not bind one of its ports.
var errPortTaken = errors.New("a port was taken")

// reassignPorts gives the agent new ports; the HTTP port changes only when
// the test did not choose it (it may have handed it out already).
func (c *Consul) reassignPorts() {
	for i := 0; i+1 < len(c.args); i++ {
		switch c.args[i] {
		case "-server-port", "-serf-lan-port", "-serf-wan-port":
			c.args[i+1] = strconv.Itoa(FreePort(c.t))
		case "-grpc-tls-port":
			if c.args[i+1] != "-1" {
				c.args[i+1] = strconv.Itoa(FreePort(c.t))
			}
		case "-http-port":
			if c.fixedHTTP {
				continue
			}
			p := FreePort(c.t)
			c.args[i+1] = strconv.Itoa(p)
			c.Addr = fmt.Sprintf("127.0.0.1:%d", p)
			cli, err := api.NewClient(&api.Config{Address: c.Addr, Token: c.token})
			if err != nil {
				c.t.Fatalf("consul client: %v", err)
			}
			c.Client = cli
		}
	}
}

func (c *Consul) WaitReady() {
	c.t.Helper()
	if err := c.waitReady(); err != nil {
		c.t.Fatalf("%v", err)
	}
}

func (c *Consul) waitReady() error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-c.done:
			logs := c.logs.String()
			// Two of the free ports can also coincide ("... already
			// configured for HTTP"): new ports fix that too.
			if strings.Contains(logs, "address already in use") || strings.Contains(logs, "already configured for") {
				return fmt.Errorf("%w: %s", errPortTaken, logs)
			}
			return fmt.Errorf("consul exited early:\n%s", logs)
		default:
		}
		resp, err := http.Get("http://" + c.Addr + "/v1/status/leader")
		if err == nil {
			var b [128]byte
			n, _ := resp.Body.Read(b[:])
			resp.Body.Close()
			if resp.StatusCode == 200 && n > 2 && string(b[:n]) != `""` && c.nodeRegistered() {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("consul at %s not ready after 30s:\n%s", c.Addr, c.logs.String())
}

// nodeRegistered reports whether the agent's own node is in the catalog:
// until it is, creating a session fails ("Missing node registration").
func (c *Consul) nodeRegistered() bool {
	self, err := c.Client.Agent().Self()
	if err != nil {
		return false
	}
	cfg, _ := self["Config"]
	name, _ := cfg["NodeName"].(string)
	if name == "" {
		return false
	}
	node, _, err := c.Client.Catalog().Node(name, nil)
	return err == nil && node != nil && node.Node != nil
}

// Stop stops the agent (idempotent).
func (c *Consul) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped || c.cmd == nil {
		return
	}
	c.stopped = true
	_ = c.cmd.Process.Kill()
	<-c.done
}

// Restart stops the agent and starts a fresh one on the same ports. A dev
// agent keeps no data, so the catalog and KV start empty again.
func (c *Consul) Restart() {
	c.t.Helper()
	c.Stop()
	c.start()
}

// RegisterService registers a service instance through the agent API, with a
// TTL check in the given status when status is not empty.
func (c *Consul) RegisterService(t testing.TB, reg *api.AgentServiceRegistration, status string) {
	t.Helper()
	if status != "" {
		reg.Check = &api.AgentServiceCheck{CheckID: "check-" + reg.ID, TTL: "10m", Status: status}
	}
	if err := c.Client.Agent().ServiceRegister(reg); err != nil {
		t.Fatalf("register %s: %v", reg.ID, err)
	}
}

// SetCheck updates the TTL check of a service registered with a status.
func (c *Consul) SetCheck(t testing.TB, serviceID, status, output string) {
	t.Helper()
	if err := c.Client.Agent().UpdateTTL("check-"+serviceID, output, status); err != nil {
		t.Fatalf("update check of %s: %v", serviceID, err)
	}
}
