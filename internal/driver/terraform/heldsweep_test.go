package terraform

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The held plans a daemon killed while holding them left in the task's
// working directory (a saved plan holds every value of its run) are
// removed when the next daemon's driver of the task starts, once: not by a
// driver built again in the same process, which may hold plans there, nor
// while another live ctsync on this host holds them. With real Terraform.
func TestSweepHeld(t *testing.T) {
	bin := needTerraform(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	rec := &recorder{}
	o := localTask(t, dir, "sweep", bin)
	o.Logger = slog.New(rec)
	d := mustNew(t, o)
	p, err := d.PlanHeld(ctx, run("p1"), services("web-1"))
	if err != nil {
		t.Fatal(err)
	}
	planDir := filepath.Dir(p.Ref)
	inputs := strings.TrimSuffix(p.Ref, heldSuffix) + heldInputs
	held := func() bool { return fileExists(p.Ref) && fileExists(inputs) }
	if !held() {
		t.Fatal("the held plan's files are missing")
	}
	if pid, host := readHolder(planDir); pid != os.Getpid() || host != hostname() {
		t.Fatalf("holder record: pid %d host %q", pid, host)
	}

	// The driver built again in this process (as when the task's provider
	// values are renewed) keeps the plan this process holds.
	if err := mustNew(t, o).Init(ctx); err != nil {
		t.Fatal(err)
	}
	if !held() {
		t.Fatal("a driver built again removed a plan its process holds")
	}

	// A new process (forgetting that this one swept) while another live
	// ctsync on this host holds the plans: they stay.
	restart := func() *Driver {
		t.Helper()
		swept.Delete(d.realDir)
		nd := mustNew(t, o)
		if err := nd.Init(ctx); err != nil {
			t.Fatal(err)
		}
		return nd
	}
	writeHolder := func(pid int) {
		t.Helper()
		b := fmt.Appendf(nil, "pid=%d\nhost=%s\n", pid, hostname())
		if err := os.WriteFile(filepath.Join(planDir, holderFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeHolder(os.Getppid())
	restart()
	if !held() {
		t.Fatal("the plans another live ctsync holds were removed")
	}

	// The holder is gone (killed): its plans, a temporary file of one and
	// the holder record are removed, and the log says how many.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	writeHolder(gone.Process.Pid)
	tmp := filepath.Join(planDir, "."+heldPrefix+"p0"+heldInputs+".tmp-1")
	if err := os.WriteFile(tmp, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// And the plan of a run it was killed in the middle of.
	midPlan := filepath.Join(planDir, planFile)
	if err := os.WriteFile(midPlan, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	rec.recs = nil
	rec.mu.Unlock()
	nd := restart()
	if fileExists(p.Ref) || fileExists(inputs) || fileExists(tmp) || fileExists(midPlan) || fileExists(filepath.Join(planDir, holderFile)) {
		t.Fatal("leftover held plan files remain after the restart")
	}
	var line string
	rec.mu.Lock()
	for _, r := range rec.recs {
		if strings.Contains(r.Message, "removed the held plans") {
			r.Attrs(func(a slog.Attr) bool {
				line += " " + a.String()
				return true
			})
		}
	}
	rec.mu.Unlock()
	if !strings.Contains(line, "plans=1") || !strings.Contains(line, "files=3") {
		t.Fatalf("the removal's log line: %q", line)
	}

	// The task holds plans again as before.
	if p2, err := nd.PlanHeld(ctx, run("p2"), services("web-1")); err != nil || !fileExists(p2.Ref) {
		t.Fatalf("a new held plan: %v", err)
	}
}

// At start-up the held plans left in the folders of tasks the daemon does
// not have (created through the API before it stopped) are removed
// (SweepHeldPlans), then those of the configured tasks (SweepHeldPlansOf).
func TestSweepHeldPlansOfUnknownTasks(t *testing.T) {
	root := t.TempDir()
	write := func(task string) []string {
		dir := filepath.Join(root, task, planDirName)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		var files []string
		for _, f := range []string{heldPrefix + "r1" + heldSuffix, heldPrefix + "r1" + heldInputs} {
			p := filepath.Join(dir, f)
			if err := os.WriteFile(p, []byte("secret"), 0o600); err != nil {
				t.Fatal(err)
			}
			files = append(files, p)
		}
		return files
	}
	api, configured := write("api-task"), write("conf-task")
	var logs strings.Builder
	SweepHeldPlans(root, map[string]string{"conf-task": filepath.Join(root, "conf-task")}, slog.New(slog.NewTextHandler(&logs, nil)))
	for _, f := range api {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s of a task the daemon does not have is still there", f)
		}
	}
	for _, f := range configured {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s of a configured task was removed at start-up (its driver sweeps it): %v", f, err)
		}
	}
	if !strings.Contains(logs.String(), "plans=1") || !strings.Contains(logs.String(), "task_dir=api-task") {
		t.Errorf("the sweep is not logged with its count and folder:\n%s", logs.String())
	}
	// Then those of the configured tasks (SweepHeldPlansOf): a held plan
	// restored from the store has no file, and its task's driver may not
	// start before it is decided.
	logs.Reset()
	SweepHeldPlansOf(map[string]string{"conf-task": filepath.Join(root, "conf-task"), "gone": filepath.Join(root, "gone")},
		slog.New(slog.NewTextHandler(&logs, nil)))
	for _, f := range configured {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s of a configured task is still there", f)
		}
	}
	if !strings.Contains(logs.String(), "plans=1") || !strings.Contains(logs.String(), "task_name=conf-task") {
		t.Errorf("the sweep of a configured task is not logged with its count and name:\n%s", logs.String())
	}
}
