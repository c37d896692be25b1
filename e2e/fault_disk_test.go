package e2e

// Faults of the local disk: a task's working directory becomes read-only,
// or its file system fills up.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// makeReadOnly makes dir unwritable and returns the function that undoes
// it. As root (which ignores file modes) it bind-mounts dir read-only on
// itself; otherwise it removes the write permission. It skips the test
// when neither works.
func makeReadOnly(t *testing.T, dir string) (restore func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		must(t, os.Chmod(dir, 0o500))
		return func() { _ = os.Chmod(dir, 0o750) }
	}
	if out, err := exec.Command("mount", "--bind", dir, dir).CombinedOutput(); err != nil {
		t.Skipf("cannot bind-mount %s (%v: %s): no way to make it read-only for root", dir, err, out)
	}
	unmount := func() { _ = exec.Command("umount", dir).Run() }
	if out, err := exec.Command("mount", "-o", "remount,ro,bind", dir).CombinedOutput(); err != nil {
		unmount()
		t.Skipf("cannot remount %s read-only (%v: %s)", dir, err, out)
	}
	done := false
	restore = func() {
		if !done {
			done = true
			unmount()
		}
	}
	t.Cleanup(restore)
	return restore
}

// smallFS mounts a tmpfs of the given size on a new folder and returns it;
// it skips the test when mounting is not allowed (not root).
func smallFS(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := mountSmallFS(t, dir, size); err != nil {
		t.Skipf("%v: disk-full case needs root", err)
	}
	return dir
}

// mountSmallFS mounts a tmpfs of the given size on dir (unmounted when the
// test ends), or returns why it cannot.
func mountSmallFS(t *testing.T, dir, size string) error {
	t.Helper()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("cannot mount a tmpfs (%v: %s)", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return nil
}

// fill writes a file into dir until the file system is full and returns
// its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	must(t, err)
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			return p
		}
	}
}

// One task's working directory becomes read-only and another's file
// system fills up: their runs fail with an event that says so, a third
// task is unaffected, and both recover once the disk is usable again.
func TestFaultWorkingDirUnwritable(t *testing.T) {
	skipShort(t)
	c := testutil.StartConsul(t)
	work := t.TempDir()
	port := testutil.FreePort(t)
	roDir := filepath.Join(t.TempDir(), "ro")
	must(t, os.MkdirAll(roDir, 0o750))
	fullDir := smallFS(t, "2m")
	roOut, fullOut, steadyOut := t.TempDir(), t.TempDir(), t.TempDir()
	cfg := writeFile(t, work, "config.hcl", faultConfig(t, c.Addr, filepath.Join(work, "sync-tasks"), port, "",
		servicesTask(t, "readonly", "services_file", roOut, `"web"`, fmt.Sprintf("working_dir = %q", roDir)),
		servicesTask(t, "full", "services_file", fullOut, `"web"`, fmt.Sprintf("working_dir = %q", filepath.Join(fullDir, "full"))),
		servicesTask(t, "steady", "services_file", steadyOut, `"web"`)))
	c.RegisterService(t, reg("web-1", "web", 8001), "passing")
	p := startCtsync(t, work, "start", "-config-file", cfg)
	for _, out := range []string{roOut, fullOut, steadyOut} {
		waitConverged(t, c, out, "web")
	}

	restore := makeReadOnly(t, roDir)
	filler := fill(t, fullDir)
	c.RegisterService(t, reg("web-2", "web", 8002), "passing")
	waitConverged(t, c, steadyOut, "web")
	want := "read-only file system"
	if os.Geteuid() != 0 {
		want = "permission denied"
	}
	roMsg := waitFailedEvent(t, port, "readonly", 60*time.Second, want)
	fullMsg := waitFailedEvent(t, port, "full", 60*time.Second, "no space left on device")
	t.Logf("read-only: %s", roMsg)
	t.Logf("disk full: %s", fullMsg)
	for _, m := range []string{roMsg, fullMsg} {
		if !strings.HasPrefix(m, "apply: ") {
			t.Errorf("the event does not say which step failed: %q", m)
		}
	}
	p.waitOutput(t, 10*time.Second, "error applying task", "task_name=readonly")
	p.waitOutput(t, 10*time.Second, "error applying task", "task_name=full")

	restore()
	must(t, os.Remove(filler))
	c.RegisterService(t, reg("web-3", "web", 8003), "passing")
	for _, out := range []string{roOut, fullOut, steadyOut} {
		waitConverged(t, c, out, "web")
	}
	p.running(t)
}
