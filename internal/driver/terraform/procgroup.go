package terraform

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// DefaultStopTimeout is how long an interrupted Terraform (and everything
// it started) may take to stop after SIGINT before the whole process group
// is killed, when Options.StopTimeout is not set.
const DefaultStopTimeout = 10 * time.Second

// stopOnCancel arranges that when ctx ends before release is called, the
// Terraform command running for this task is stopped together with its
// children: terraform-exec starts Terraform as the leader of its own process
// group, and its provider plugins and local-exec provisioner shells stay in
// that group. The group gets SIGINT at once (what a terminal's Ctrl-C
// sends: Terraform stops gracefully) and SIGKILL after the stop timeout, or
// as soon as Terraform has exited, so that no provisioner outlives its run.
// release waits until that is done.
func (d *Driver) stopOnCancel(ctx context.Context) (release func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		groups := terraformGroups(d.realDir)
		signalGroups(groups, syscall.SIGINT)
		timer := time.NewTimer(d.opts.StopTimeout)
		defer timer.Stop()
		select {
		case <-done: // Terraform returned: kill what is left of its group
		case <-timer.C:
			d.log.Warn("terraform did not stop after an interrupt; killing it and its children", "timeout", d.opts.StopTimeout)
		}
		signalGroups(append(groups, terraformGroups(d.realDir)...), syscall.SIGKILL)
	}()
	return func() {
		close(done)
		<-stopped
	}
}

func signalGroups(groups []int, sig syscall.Signal) {
	for _, g := range groups {
		if g > 1 {
			_ = syscall.Kill(-g, sig)
		}
	}
}

// terraformGroups returns the process groups led by this process's
// children whose working directory is dir: the Terraform commands of the
// task whose directory that is (each task has its own directory).
func terraformGroups(dir string) []int {
	self := os.Getpid()
	var out []int
	for _, pid := range procPIDs() {
		ppid, pgid, ok := procStat(pid)
		if !ok || ppid != self || pgid != pid {
			continue
		}
		if procCwd(pid) == dir {
			out = append(out, pid)
		}
	}
	return out
}

// procPIDs lists the processes in /proc (none when it cannot be read).
func procPIDs() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	pids := make([]int, 0, len(ents))
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procCwd is the working directory of pid ("" when it cannot be read).
func procCwd(pid int) string {
	cwd, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "cwd"))
	return cwd
}

// procStat reads the parent and the process group of pid (readProcStat).
func procStat(pid int) (ppid, pgid int, ok bool) {
	st, ok := readProcStat(pid)
	return st.ppid, st.pgid, ok
}

// procStatus is what readProcStat reads.
type procStatus struct {
	state      byte // R, S, D, Z, ...
	ppid, pgid int
}

// readProcStat reads the state, parent and process group of pid from
// /proc/<pid>/stat ("pid (comm) state ppid pgrp ..."; comm may hold spaces
// and parentheses, so the fields are counted from the last ')').
func readProcStat(pid int) (procStatus, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStatus{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStatus{}, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 || len(f[0]) == 0 {
		return procStatus{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgid, err2 := strconv.Atoi(string(f[2]))
	return procStatus{state: f[0][0], ppid: ppid, pgid: pgid}, err1 == nil && err2 == nil
}
