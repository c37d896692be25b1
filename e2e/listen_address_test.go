package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// localNonLoopbackIP is an IPv4 address of one of this machine's
// interfaces that is not loopback, or "" when there is none.
func localNonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}

// getStatus is the status code of GET http://host:port/path, or the dial
// error.
func getStatus(host string, port int, path string) (int, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + net.JoinHostPort(host, fmt.Sprint(port)) + path)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// A daemon with address = "127.0.0.2:<port>" answers there, and not on
// 127.0.0.1 or another address of the machine (connection refused: it is
// not bound there); it runs its task (real Consul, real Terraform), the
// CLI reaches it with CTS_ADDRESS, it does not warn about an API open to
// the network, and it registers itself in Consul at 127.0.0.2 with a
// health check that passes there.
func TestListenAddressLoopbackOnly(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	out, varFile := newTaskDir(t)
	work := t.TempDir()
	port := testutil.FreePort(t)
	cfg := writeFile(t, work, "config.hcl", fmt.Sprintf(`
working_dir = %q
address     = "127.0.0.2:%d"
id          = "listen-test"
consul {
  address = %q
}
buffer_period {
  enabled = false
}
task {
  name           = "web-task"
  module         = %q
  variable_files = [%q]
  condition "services" {
    names = ["web"]
  }
}
`, filepath.Join(work, "sync-tasks"), port, c.Addr, module("services_file"), varFile))
	p := startCtsync(t, work, "start", "-config-file", cfg)
	testutil.Eventually(t, 60*time.Second, "the API on 127.0.0.2", func() bool {
		code, _ := getStatus("127.0.0.2", port, "/v1/health")
		return code == http.StatusOK
	})
	waitServices(t, out, "web-1")

	others := []string{"127.0.0.1"}
	if ip := localNonLoopbackIP(t); ip != "" {
		others = append(others, ip)
	}
	for _, host := range others {
		code, err := getStatus(host, port, "/v1/status")
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s:%d answered (status %d, error %v); the API is bound to 127.0.0.2 only", host, port, code, err)
		}
	}

	o, code := runCLI(ctsyncBin, []string{fmt.Sprintf("CTS_ADDRESS=http://127.0.0.2:%d", port)}, "", "status")
	if code != 0 || !strings.Contains(o, "web-task") {
		t.Errorf("ctsync status with CTS_ADDRESS=http://127.0.0.2:%d: exit %d\n%s", port, code, o)
	}
	p.waitOutput(t, 30*time.Second, "api listening", fmt.Sprintf("127.0.0.2:%d", port))
	if p.count("listens beyond loopback") > 0 {
		t.Errorf("warned about an API open to the network while bound to loopback:\n%s", p.out.String())
	}
	_, body := apiCall(t, "GET", fmt.Sprintf("http://127.0.0.2:%d/v1/status", port), "", nil)
	if strings.Contains(body, "warnings") {
		t.Errorf("GET /v1/status warns while bound to loopback: %s", body)
	}

	// The registration: the bound address and port, and the check calls
	// the API there (localhost would be refused), so it passes.
	var seen string
	deadline := time.Now().Add(90 * time.Second)
	for {
		svcs, err1 := c.Client.Agent().Services()
		checks, err2 := c.Client.Agent().Checks()
		if err1 == nil && err2 == nil {
			s, ch := svcs["listen-test"], checks["listen-test-health"]
			seen = fmt.Sprintf("service %+v, check %+v", s, ch)
			if s != nil && s.Address == "127.0.0.2" && s.Port == port && ch != nil && ch.Status == "passing" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("ctsync is not registered at 127.0.0.2:%d with a passing check within 90s: %s", port, seen)
		}
		time.Sleep(500 * time.Millisecond) // polling Consul's agent
	}
}

// Without address, port listens on every interface as in CTS: any local
// address answers, and the start-up warns that the API is open.
func TestListenPortEveryInterface(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	work := t.TempDir()
	port := testutil.FreePort(t)
	cfg := writeFile(t, work, "config.hcl", fmt.Sprintf(`
working_dir = %q
port        = %d
consul {
  address = %q
}
`, filepath.Join(work, "sync-tasks"), port, c.Addr))
	p := startCtsync(t, work, "start", "-config-file", cfg)
	hosts := []string{"127.0.0.1", "127.0.0.2"}
	if ip := localNonLoopbackIP(t); ip != "" {
		hosts = append(hosts, ip)
	}
	for _, host := range hosts {
		testutil.Eventually(t, 60*time.Second, "the API on "+host, func() bool {
			code, _ := getStatus(host, port, "/v1/health")
			return code == http.StatusOK
		})
	}
	p.waitOutput(t, 30*time.Second, "[WARN]", "listens beyond loopback")
}

// An address that is not an IP address stops `ctsync start` with exit
// code 15 and an error naming the file, the line and the field, and so
// does an address whose port disagrees with port.
func TestListenAddressInvalid(t *testing.T) {
	skipShort(t)
	for _, c := range []struct{ config, want string }{
		{"log_level = \"INFO\"\naddress   = \"localhost:8558\"\n", `bad.hcl:2: address: "localhost:8558" is not an IP address`},
		{"port    = 9000\naddress = \"127.0.0.1:8558\"\n", `bad.hcl:2: address: "127.0.0.1:8558" listens on port 8558, but port = 9000`},
	} {
		work := t.TempDir()
		cfg := writeFile(t, work, "bad.hcl", c.config)
		p := startCtsync(t, work, "start", "-config-file", cfg)
		if code := p.wait(t, 30*time.Second); code != 15 {
			t.Fatalf("exit code %d, want 15:\n%s", code, p.out.String())
		}
		if o := strings.ReplaceAll(p.out.String(), `\"`, `"`); !strings.Contains(o, c.want) {
			t.Errorf("the error lacks %q:\n%s", c.want, o)
		}
	}
}
