package terraform

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// runFile records, in the task's working directory while a driver verb
	// runs Terraform, the daemon's pid, the run marker and the process
	// group of each Terraform command. It is written before the first
	// command and removed after the last: found at start-up, it names what
	// a daemon killed without warning (kill -9, a crash, the OOM killer)
	// left running.
	runFile = ".ctsync-run"
	// markerEnv is set in the environment of every Terraform command of a
	// driver, to a value unique to it, and is inherited by everything
	// Terraform starts (provider plugins, provisioner shells and their
	// children). Only a process that carries it is ever ended as a
	// leftover: a process group id that the system gave to something else
	// since cannot carry it.
	markerEnv = "CTSYNC_RUN"
	// LeftoverStopTimeout is how long a leftover process group may take to
	// end after SIGTERM before it gets SIGKILL.
	LeftoverStopTimeout = 5 * time.Second
)

// newMarker returns a run marker: the task's name and 128 random bits.
func newMarker(task string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return task + ":" + hex.EncodeToString(b)
}

// running wraps one driver verb (Init, Plan, Apply, Destroy, Forget): it
// first ends what a killed daemon left running for this task (once per
// driver) and removes the held plans it left (once per process,
// sweepHeld), records the run (runFile), collects Terraform's TRACE log when
// persist_log is set, and stops Terraform and its children when ctx ends.
// The returned function undoes all of it, in reverse order. A verb called
// by another (Apply runs Init first) only adds the stop on ctx.
func (d *Driver) running(ctx context.Context) (end func()) {
	if d.inVerb {
		return d.stopOnCancel(ctx)
	}
	d.inVerb = true
	if !d.reaped {
		d.reaped = true
		d.endLeftovers()
		d.sweepHeld() // heldsweep.go
	}
	d.recordRun()
	stopLog := d.persistLog()
	release := d.stopOnCancel(ctx)
	return func() {
		d.inVerb = false
		release()
		stopLog()
		if err := os.Remove(filepath.Join(d.workDir, runFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			d.log.Warn("cannot remove the run record", "file", runFile, "error", err)
		}
	}
}

// recordRun writes runFile: the daemon's pid and the marker. The process
// group of each command is added as it starts (recordGroups).
func (d *Driver) recordRun() {
	d.recorded = nil
	text := fmt.Sprintf("daemon=%d\nmarker=%s\n", os.Getpid(), d.marker)
	if _, err := writeFileAtomic(filepath.Join(d.workDir, runFile), []byte(text), 0o600); err != nil {
		d.log.Warn("cannot record the run", "file", runFile, "error", err)
	}
}

// recordGroups adds the process groups of the Terraform commands now
// running for this task to runFile. The sink calls it when a command first
// writes output, which is before any resource (and so any provisioner) is
// touched.
func (d *Driver) recordGroups() {
	var groups []int
	for _, g := range terraformGroups(d.realDir) {
		if !slices.Contains(d.recorded, g) {
			groups = append(groups, g)
		}
	}
	if len(groups) == 0 {
		return
	}
	d.recorded = append(d.recorded, groups...)
	f, err := os.OpenFile(filepath.Join(d.workDir, runFile), os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	for _, g := range groups {
		fmt.Fprintf(f, "pgid=%d\n", g)
	}
}

// runRecord is what runFile holds.
type runRecord struct {
	daemon int
	marker string
	groups []int
}

func readRunRecord(path string) (runRecord, error) {
	var rec runRecord
	b, err := os.ReadFile(path)
	if err != nil {
		return rec, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "daemon":
			rec.daemon, _ = strconv.Atoi(v)
		case "marker":
			rec.marker = v
		case "pgid":
			if g, err := strconv.Atoi(v); err == nil && g > 1 && !slices.Contains(rec.groups, g) {
				rec.groups = append(rec.groups, g)
			}
		}
	}
	if rec.marker == "" {
		return rec, fmt.Errorf("%s: no marker", path)
	}
	return rec, nil
}

// endLeftovers ends the process groups that a previous daemon's run of
// this task left running, as recorded in runFile, and removes the record.
// A group is ended only if one of its processes carries the recorded
// marker in its environment (so a group id since reused by an unrelated
// program is left alone), and only if the daemon that started it is gone
// (a Terraform whose parent is the live daemon of the record is that
// daemon's, not a leftover). Processes with the marker that are in no
// recorded group (the daemon died before it could record one) are found
// by their working directory, the task's. The groups get SIGTERM, then
// SIGKILL after LeftoverStopTimeout.
func (d *Driver) endLeftovers() { endLeftoversIn(d.workDir, d.realDir, d.log) }

// endLeftoversIn is endLeftovers for the task directory workDir (realDir:
// with symbolic links resolved), logging to log.
func endLeftoversIn(workDir, realDir string, log *slog.Logger) {
	path := filepath.Join(workDir, runFile)
	rec, err := readRunRecord(path)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	defer os.Remove(path)
	if err != nil {
		log.Warn("ignoring an unreadable run record", "file", runFile, "error", err)
		return
	}
	groups := leftoverGroups(rec, realDir)
	if len(groups) == 0 {
		return
	}
	log.Warn("ending terraform processes that a previous ctsync left running for this task", "process_groups", groups)
	signalGroups(groups, syscall.SIGTERM)
	deadline := time.Now().Add(LeftoverStopTimeout)
	for time.Now().Before(deadline) && groupsAlive(groups) {
		time.Sleep(50 * time.Millisecond)
	}
	if groupsAlive(groups) {
		log.Warn("leftover terraform processes did not end after SIGTERM; killing them", "process_groups", groups, "timeout", LeftoverStopTimeout)
		signalGroups(groups, syscall.SIGKILL)
	}
}

// EndLeftovers ends, at start-up and before any task runs, what a killed
// daemon left running for any task, as a task's driver does before its
// first verb (endLeftovers): the run record of each directory of dirs
// (task name to working directory) and of each folder of root (the
// working_dir) that holds one is read, and its processes ended. A task
// that does not run here soon, or ever (disabled, led or owned by another
// member of a cluster, deleted), then keeps nothing running either.
func EndLeftovers(root string, dirs map[string]string, log *slog.Logger) {
	all := maps.Clone(dirs)
	if all == nil {
		all = map[string]string{}
	}
	found, _ := filepath.Glob(filepath.Join(root, "*", runFile))
	for _, f := range found {
		dir := filepath.Dir(f)
		if name := filepath.Base(dir); all[name] == "" {
			all[name] = dir
		}
	}
	for _, name := range slices.Sorted(maps.Keys(all)) {
		dir, err := filepath.Abs(all[name])
		if err != nil {
			continue
		}
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			continue // no such directory: nothing ran there
		}
		endLeftoversIn(dir, real, log.With("task_name", name))
	}
}

// leftoverGroups returns the process groups of rec that may be ended: see
// endLeftovers.
func leftoverGroups(rec runRecord, dir string) []int {
	if rec.daemon > 1 && rec.daemon != os.Getpid() && processAlive(rec.daemon) {
		// The daemon that wrote the record still runs (two daemons sharing
		// a working directory): its Terraform is not a leftover.
		for _, g := range rec.groups {
			if ppid, _, ok := procStat(g); ok && ppid == rec.daemon {
				return nil
			}
		}
	}
	var out []int
	for _, pid := range procPIDs() {
		if pid == os.Getpid() {
			continue
		}
		_, pgid, ok := procStat(pid)
		if !ok || pgid <= 1 || slices.Contains(out, pgid) {
			continue
		}
		if !slices.Contains(rec.groups, pgid) && procCwd(pid) != dir {
			continue
		}
		if hasMarker(pid, rec.marker) {
			out = append(out, pgid)
		}
	}
	return out
}

// hasMarker reports whether the environment of pid holds markerEnv=marker.
func hasMarker(pid int, marker string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	want := []byte(markerEnv + "=" + marker)
	for _, kv := range bytes.Split(b, []byte{0}) {
		if bytes.Equal(kv, want) {
			return true
		}
	}
	return false
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// groupsAlive reports whether any of the groups still has a process that
// is not a zombie waiting for its parent.
func groupsAlive(groups []int) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readProcStat(pid); ok && st.state != 'Z' && slices.Contains(groups, st.pgid) {
			return true
		}
	}
	return false
}
