package terraform

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

// startGroup starts `sh -c 'sleep 300 & wait'` as the leader of its own
// process group in dir, with env added, as Terraform runs with its
// provisioner children.
func startGroup(t *testing.T, dir string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "sleep 300 & wait")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	// Wait for the child, so that the group has two processes.
	testutil.Eventually(t, 10*time.Second, "the group's child", func() bool {
		n := 0
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			var pid int
			if _, err := fmt.Sscan(e.Name(), &pid); err == nil {
				if st, ok := readProcStat(pid); ok && st.pgid == cmd.Process.Pid && st.state != 'Z' {
					n++
				}
			}
		}
		return n >= 2
	})
	return cmd
}

// At a driver's first verb, the process groups that a killed daemon's run
// left (recorded in the run file) are ended, but only those whose
// processes carry the recorded marker: a group whose id the system gave to
// another program is left alone.
func TestEndLeftovers(t *testing.T) {
	dir := t.TempDir()
	o := localTask(t, dir, "left", "/bin/true")
	d := mustNew(t, o)
	const marker = "left:0123456789abcdef"
	ours := startGroup(t, d.realDir, markerEnv+"="+marker)
	other := startGroup(t, d.realDir, markerEnv+"=left:another")
	// A dead daemon: a pid that is not running.
	rec := fmt.Sprintf("daemon=%d\nmarker=%s\npgid=%d\npgid=%d\n", deadPid(t), marker, ours.Process.Pid, other.Process.Pid)
	if err := os.WriteFile(filepath.Join(d.workDir, runFile), []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	d.endLeftovers()
	if groupsAlive([]int{ours.Process.Pid}) {
		t.Error("the leftover group still runs")
	}
	if !groupsAlive([]int{other.Process.Pid}) {
		t.Error("a group without the marker was ended")
	}
	if _, err := os.Stat(filepath.Join(d.workDir, runFile)); !os.IsNotExist(err) {
		t.Errorf("the run file is still there: %v", err)
	}
	t.Logf("leftover ended in %s", time.Since(start).Round(time.Millisecond))
}

// deadPid returns the pid of a process that has exited.
func deadPid(t *testing.T) int {
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// At start-up, without any driver: the leftovers of every folder of the
// working directory holding a run record (a task that is deleted, disabled
// or run by another member) and of a configured task's own working_dir are
// ended and their records removed; a folder without a record is left
// alone.
func TestEndLeftoversAtStart(t *testing.T) {
	root := t.TempDir()
	own := t.TempDir() // a task's working_dir outside root
	quiet := filepath.Join(root, "quiet")
	for _, d := range []string{filepath.Join(root, "gone"), quiet} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	var groups []*exec.Cmd
	for _, dir := range []string{filepath.Join(root, "gone"), own} {
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			t.Fatal(err)
		}
		marker := "m:" + filepath.Base(dir)
		g := startGroup(t, real, markerEnv+"="+marker)
		groups = append(groups, g)
		rec := fmt.Sprintf("daemon=%d\nmarker=%s\npgid=%d\n", deadPid(t), marker, g.Process.Pid)
		if err := os.WriteFile(filepath.Join(dir, runFile), []byte(rec), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	bystander := startGroup(t, quiet, markerEnv+"=m:quiet")
	EndLeftovers(root, map[string]string{"own": own, "quiet": quiet, "missing": filepath.Join(root, "missing")}, slog.New(slog.DiscardHandler))
	for i, g := range groups {
		if groupsAlive([]int{g.Process.Pid}) {
			t.Errorf("leftover %d still runs", i)
		}
	}
	if !groupsAlive([]int{bystander.Process.Pid}) {
		t.Error("a group of a folder without a run record was ended")
	}
	for _, dir := range []string{filepath.Join(root, "gone"), own} {
		if _, err := os.Stat(filepath.Join(dir, runFile)); !os.IsNotExist(err) {
			t.Errorf("%s: the run record is still there: %v", dir, err)
		}
	}
}
