package terraform

import (
	"bytes"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// parentWithGroup starts a shell whose child leads its own process group
// (as terraform-exec starts Terraform): the shell stands for ctsync, the
// child for its Terraform. done is closed when the shell has exited, which
// it does once the child is gone.
func parentWithGroup(t *testing.T) (pid int, done chan struct{}) {
	t.Helper()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid is not installed")
	}
	cmd := exec.Command("sh", "-c", "setsid sleep 120 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done = make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		for _, g := range childGroups(cmd.Process.Pid, 0) {
			_ = syscall.Kill(-g, syscall.SIGKILL)
		}
		<-done
	})
	deadline := time.Now().Add(testutil.Scale(30 * time.Second))
	for len(childGroups(cmd.Process.Pid, 0)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the shell's child never led its own process group")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cmd.Process.Pid, done
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A parent that stops sending keep-alives (a stopped ctsync) has the
// process groups of its children killed after the timeout; one that keeps
// sending them does not.
func TestWatchdogKillsWhenKeepAlivesStop(t *testing.T) {
	pid, done := parentWithGroup(t)
	r, w := io.Pipe()
	var logw syncBuf
	ended := make(chan int)
	go func() { ended <- runWatchdog(r, pid, 400*time.Millisecond, &logw) }()
	// Keep-alives for 1.5 s: nothing is killed.
	for i := 0; i < 15; i++ {
		if _, err := io.WriteString(w, "k\n"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case <-done:
		t.Fatalf("the child was killed while keep-alives came: %s", logw.String())
	default:
	}
	stopped := time.Now()
	select {
	case <-done:
	case <-time.After(testutil.Scale(30 * time.Second)):
		t.Fatal("the child still runs 30 s after the keep-alives stopped")
	}
	if d := time.Since(stopped); d < 300*time.Millisecond {
		t.Errorf("killed %s after the last keep-alive, before the 400ms timeout", d)
	}
	if !strings.Contains(logw.String(), "no keep-alive from ctsync") {
		t.Errorf("the watchdog did not say why it killed: %q", logw.String())
	}
	w.Close()
	if code := <-ended; code != 0 {
		t.Errorf("watchdog exited %d", code)
	}
}

// When the parent's pipe closes (ctsync exited or was killed), the groups
// seen while it ran are killed at once.
func TestWatchdogKillsWhenParentGoes(t *testing.T) {
	pid, done := parentWithGroup(t)
	r, w := io.Pipe()
	var logw syncBuf
	ended := make(chan int)
	go func() { ended <- runWatchdog(r, pid, time.Minute, &logw) }()
	_, _ = io.WriteString(w, "k\n")
	w.Close()
	select {
	case code := <-ended:
		if code != 0 {
			t.Errorf("watchdog exited %d", code)
		}
	case <-time.After(testutil.Scale(30 * time.Second)):
		t.Fatal("the watchdog did not end with its pipe")
	}
	select {
	case <-done:
	case <-time.After(testutil.Scale(30 * time.Second)):
		t.Fatal("the child still runs 30 s after the parent's pipe closed")
	}
	if !strings.Contains(logw.String(), "ctsync exited") {
		t.Errorf("the watchdog did not say why it killed: %q", logw.String())
	}
}
