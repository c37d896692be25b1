package e2e

// The daemon speaks systemd's notify protocol (the packaged unit is
// Type=notify): READY=1 once the API listens and the watches answered,
// RELOADING=1 then READY=1 around a SIGHUP reload, STOPPING=1 on shutdown.
// The test plays systemd: it listens on a datagram socket named by
// NOTIFY_SOCKET, as systemd does for the service it starts.

import (
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

func TestSystemdNotify(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	work := t.TempDir()
	cfgText := config(t, c.Addr, filepath.Join(work, "sync-tasks"),
		taskSpec{name: "web-task", module: module("services_file"), services: `"web"`})
	port := regexp.MustCompile(`(?m)^port = (\d+)$`).FindStringSubmatch(cfgText)[1]
	cfg := writeFile(t, work, "config.hcl", cfgText)

	sock, next := notifySocket(t)

	p := startCtsyncEnv(t, work, []string{"NOTIFY_SOCKET=" + sock}, "start", "-config-file", cfg)
	next("READY=1")
	// Ready means the API answers.
	resp, err := http.Get("http://127.0.0.1:" + port + "/v1/health")
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/v1/health after READY=1: %d", resp.StatusCode)
	}

	must(t, p.cmd.Process.Signal(syscall.SIGHUP))
	if m := next("RELOADING=1"); !strings.Contains(m, "MONOTONIC_USEC=") {
		t.Errorf("RELOADING=1 without MONOTONIC_USEC: %q", m)
	}
	next("READY=1")

	must(t, p.cmd.Process.Signal(syscall.SIGTERM))
	next("STOPPING=1")
	if code := p.wait(t, time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
}

// A SIGHUP while ctsync still waits for Consul (systemctl reload during
// the start) reloads and does not kill it; READY=1 waits for Consul.
func TestSystemdNotifyWaitsForConsul(t *testing.T) {
	skipShort(t)
	work := t.TempDir()
	down := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t)) // nothing listens
	cfgText := config(t, down, filepath.Join(work, "sync-tasks"))
	port := regexp.MustCompile(`(?m)^port = (\d+)$`).FindStringSubmatch(cfgText)[1]
	cfg := writeFile(t, work, "config.hcl", cfgText)
	sock, next := notifySocket(t)
	p := startCtsyncEnv(t, work, []string{"NOTIFY_SOCKET=" + sock}, "start", "-config-file", cfg)
	health := func() bool {
		resp, err := http.Get("http://127.0.0.1:" + port + "/v1/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	}
	testutil.Eventually(t, 30*time.Second, "the API to answer", health)
	must(t, p.cmd.Process.Signal(syscall.SIGHUP))
	testutil.Eventually(t, 30*time.Second, "the reload to be logged", func() bool {
		return strings.Contains(p.out.String(), "reloaded")
	})
	if !health() {
		t.Fatalf("the API stopped answering after SIGHUP:\n%s", p.out.String())
	}
	must(t, p.cmd.Process.Signal(syscall.SIGTERM))
	next("STOPPING=1") // the first notification: no READY=1 without Consul
	p.wait(t, time.Minute)
}

// notifySocket plays systemd's side of the notify protocol: a datagram
// socket for NOTIFY_SOCKET, and next, which waits for the next
// notification and checks that it has want.
func notifySocket(t *testing.T) (string, func(want string) string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	must(t, err)
	t.Cleanup(func() { conn.Close() })
	msgs := make(chan string, 16)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := conn.ReadFromUnix(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	return sock, func(want string) string {
		t.Helper()
		select {
		case m, ok := <-msgs:
			if !ok || !strings.Contains(m, want) {
				t.Fatalf("notification %q, want one with %s", m, want)
			}
			return m
		case <-time.After(testutil.Scale(60 * time.Second)):
			t.Fatalf("no %s notification", want)
		}
		return ""
	}
}
