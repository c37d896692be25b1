package e2e

// Resource hygiene of the real daemon: many real Terraform runs leave its
// file descriptors and goroutines where they were.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// openFDsOf counts the open file descriptors of a process.
func openFDsOf(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Skipf("cannot read /proc/%d/fd: %v", pid, err)
	}
	return len(ents)
}

// goroutinesOf reads go_goroutines from the daemon's /metrics, or -1.
func goroutinesOf(port int) int {
	g, _ := runtimeOf(port)
	return g
}

// runtimeOf reads go_goroutines and go_memstats_heap_inuse_bytes (in MiB)
// from the daemon's /metrics; -1 for what it could not read.
func runtimeOf(port int) (goroutines int, heapMiB float64) {
	goroutines, heapMiB = -1, -1
	// A bound: the soak asks processes that may have just been stopped.
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			if n, err := strconv.ParseFloat(v, 64); err == nil {
				goroutines = int(n)
			}
		}
		if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_inuse_bytes "); ok {
			if n, err := strconv.ParseFloat(v, 64); err == nil {
				heapMiB = n / (1 << 20)
			}
		}
	}
	return
}

// 50 real Terraform applies (forced through POST /v1/tasks/{name}/run,
// every third one failing) leave the daemon with the file descriptors and
// goroutines it had after the first few.
func TestFaultDaemonResourcesStable(t *testing.T) {
	skipShort(t)
	const runs = 50
	c := testutil.StartConsul(t)
	work := t.TempDir()
	out := t.TempDir()
	port := testutil.FreePort(t)
	cfg := writeFile(t, work, "config.hcl", faultConfig(t, c.Addr, filepath.Join(work, "sync-tasks"), port, "",
		servicesTask(t, "loop", "services_file", out, `"web"`),
		servicesTask(t, "failing", "failing", t.TempDir(), `"web"`)))
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	p := startCtsync(t, work, "start", "-config-file", cfg)
	waitConverged(t, c, out, "web")
	waitFailedEvent(t, port, "failing", 60*time.Second, "Error")
	pid := p.cmd.Process.Pid

	hc := &http.Client{Timeout: 2 * time.Minute}
	runTask := func(name string) {
		t.Helper()
		testutil.Eventually(t, 60*time.Second, "a run of "+name, func() bool {
			resp, err := hc.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/tasks/%s/run", port, name), "application/json", nil)
			if err != nil {
				t.Fatalf("run %s: %v", name, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusConflict:
				return false // a retry of the failing task is running
			case name == "loop" && resp.StatusCode != http.StatusOK:
				t.Fatalf("run %s: %d %s", name, resp.StatusCode, b)
			}
			return true
		})
	}
	for i := 0; i < 3; i++ {
		runTask("loop")
	}
	fds, goroutines := openFDsOf(t, pid), goroutinesOf(port)
	start := time.Now()
	for i := 0; i < runs; i++ {
		name := "loop"
		if i%3 == 2 {
			name = "failing"
		}
		runTask(name)
	}
	t.Logf("%d runs in %s", runs, time.Since(start).Round(time.Millisecond))
	// The daemon's own connections (API keep-alive, Consul) may move by
	// one or two; a leak per run would show as dozens.
	var gotFDs, gotG int
	testutil.Eventually(t, 30*time.Second, "file descriptors and goroutines back to their level", func() bool {
		gotFDs, gotG = openFDsOf(t, pid), goroutinesOf(port)
		return gotFDs <= fds+2 && (goroutines < 0 || gotG <= goroutines+5)
	})
	t.Logf("file descriptors %d -> %d, goroutines %d -> %d", fds, gotFDs, goroutines, gotG)
	p.running(t)
}
