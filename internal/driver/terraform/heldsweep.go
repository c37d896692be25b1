package terraform

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// holderFile, in the plan folder, names the process that holds plans
// there (its pid and host): written when a plan is held, read by
// sweepHeld.
const holderFile = "holder"

// swept holds the working directories (resolved) whose leftover held plans
// this process already removed. Held plans live in the memory of the
// process that made them, so the files found before this process's first
// driver of a task ran are leftovers of a process that is gone; a driver
// built again for the same task later (the task updated, provider values
// renewed) must not remove the plans this process holds.
var swept sync.Map

// sweepHeld removes, once per working directory and process, the held
// plans (their saved plan and inputs files: every value of their run,
// secrets included) that a previous daemon, stopped or killed while it
// held them, left in the plan folder, and the plan of a run it was killed
// in the middle of. A folder whose holder is another
// live process on this host (a second ctsync sharing the working
// directory) is left alone.
func (d *Driver) sweepHeld() { sweepHeldIn(d.workDir, d.realDir, d.log) }

// SweepHeldPlans removes, at start-up, the held plans a previous daemon
// left in the folders of root (the working_dir) whose task is not in
// configured (task name to working directory): the tasks created through
// the API, which the restarted daemon does not have (they live until it
// stops), so that no driver of theirs would ever remove them. The folders
// of configured tasks are swept by their drivers (sweepHeld).
func SweepHeldPlans(root string, configured map[string]string, log *slog.Logger) {
	mine := map[string]bool{}
	for _, dir := range configured {
		if abs, err := filepath.Abs(dir); err == nil {
			if real, err := filepath.EvalSymlinks(abs); err == nil {
				mine[real] = true
			}
		}
	}
	found, _ := filepath.Glob(filepath.Join(root, "*", planDirName))
	for _, f := range found {
		dir, err := filepath.Abs(filepath.Dir(f))
		if err != nil {
			continue
		}
		real, err := filepath.EvalSymlinks(dir)
		if err != nil || mine[real] {
			continue
		}
		sweepHeldIn(dir, real, log.With("task_dir", filepath.Base(dir)))
	}
}

// SweepHeldPlansOf removes, at start-up, the held plans a previous daemon
// left in the working directories dirs (task name to directory) of the
// configured tasks. A held plan's file is never kept over a restart: the
// plan a gate held is restored from its record in the store without it, so
// the task's driver, whose first verb would remove them (sweepHeld), may
// not start until the plan is decided.
func SweepHeldPlansOf(dirs map[string]string, log *slog.Logger) {
	for name, dir := range dirs {
		abs, err := filepath.Abs(dir)
		if err != nil {
			continue
		}
		real, err := filepath.EvalSymlinks(abs)
		if err != nil { // not there: nothing left in it
			continue
		}
		sweepHeldIn(abs, real, log.With("task_name", name))
	}
}

// sweepHeldIn is sweepHeld for the task directory workDir (realDir: with
// symbolic links resolved), logging to log.
func sweepHeldIn(workDir, realDir string, log *slog.Logger) {
	if _, done := swept.LoadOrStore(realDir, true); done {
		return
	}
	dir := filepath.Join(workDir, planDirName)
	if pid, host := readHolder(dir); pid > 0 && pid != os.Getpid() && host == hostname() && processAlive(pid) {
		log.Info("leaving the held plans in the working directory alone: another running ctsync holds them", "pid", pid)
		return
	}
	var files []string
	for _, pattern := range []string{heldPrefix + "*", "." + heldPrefix + "*"} { // "." : writeFileAtomic's temporary files
		m, _ := filepath.Glob(filepath.Join(dir, pattern))
		files = append(files, m...)
	}
	// A plan that is not held is removed when its run ends; one is left
	// only by a daemon killed while it planned (a plan file holds secrets).
	if _, err := os.Lstat(filepath.Join(dir, planFile)); err == nil {
		if err := os.Remove(filepath.Join(dir, planFile)); err != nil {
			log.Warn("cannot remove the plan file a previous ctsync left", "file", planFile, "error", err)
		} else {
			log.Info("removed the plan file a previous ctsync left while it planned", "file", planFile)
		}
	}
	plans := 0
	for _, f := range files {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			log.Warn("cannot remove a held plan file a previous ctsync left", "file", filepath.Base(f), "error", err)
			continue
		}
		if strings.HasSuffix(f, heldSuffix) {
			plans++
		}
	}
	if err := os.Remove(filepath.Join(dir, holderFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Warn("cannot remove the held plans' holder record", "error", err)
	}
	if len(files) > 0 {
		log.Info("removed the held plans a previous ctsync left in the working directory (held plans end with the process that held them)",
			"plans", plans, "files", len(files))
	} else {
		log.Debug("no held plans left in the working directory", "plans", 0)
	}
}

// recordHolder writes holderFile in the plan folder dir: this process
// holds plans there.
func recordHolder(dir string) error {
	_, err := writeFileAtomic(filepath.Join(dir, holderFile), fmt.Appendf(nil, "pid=%d\nhost=%s\n", os.Getpid(), hostname()), 0o600)
	return err
}

// readHolder reads holderFile in dir (zero pid: none or unreadable).
func readHolder(dir string) (pid int, host string) {
	b, err := os.ReadFile(filepath.Join(dir, holderFile))
	if err != nil {
		return 0, ""
	}
	if _, err := fmt.Sscanf(string(b), "pid=%d\nhost=%s\n", &pid, &host); err != nil {
		return 0, ""
	}
	return pid, host
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}
