package terraform

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/testutil"
)

// stubTerraform is a terraform that does nothing, quickly: version, init
// and workspace succeed; apply (with -json, its machine-readable UI)
// succeeds, or fails with a diagnostic when the inputs hold the word "fail".
const stubTerraform = `#!/bin/sh
case "$1" in
version) echo '{"terraform_version":"1.11.4","platform":"linux_amd64","provider_selections":{}}' ;;
apply)
  if grep -q fail terraform.tfvars; then
    echo '{"@level":"error","@message":"Error: boom","type":"diagnostic","diagnostic":{"severity":"error","summary":"boom","detail":"the stub failed"}}'
    exit 1
  fi
  echo '{"@level":"info","@message":"Apply complete! Resources: 1 added, 0 changed, 0 destroyed.","type":"change_summary","changes":{"add":1,"change":0,"remove":0,"operation":"apply"}}' ;;
esac
exit 0
`

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// Many applies, successful and failed, through the real driver (a Terraform
// process per apply, its pipes, the run log files and their rotation)
// leave the process with the file descriptors and goroutines it had, and
// at most KeepRunLogs run logs.
func TestDriverResourcesStable(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns hundreds of processes")
	}
	const runs = 300
	dir := t.TempDir()
	bin := filepath.Join(dir, "terraform")
	if err := os.WriteFile(bin, []byte(stubTerraform), 0o755); err != nil {
		t.Fatal(err)
	}
	o := localTask(t, dir, "fds", bin)
	o.Driver = config.TerraformDriver{Backend: o.Driver.Backend}
	d := mustNew(t, o)
	ctx := testCtx(t)
	if err := d.Init(ctx); err != nil {
		t.Fatal(err)
	}
	apply := func(i int) {
		key := "web"
		if i%3 == 0 {
			key = "fail"
		}
		_, err := d.Apply(ctx, run(fmt.Sprintf("run-%04d", i)), services(key))
		if (err != nil) != (i%3 == 0) {
			t.Fatalf("apply %d: %v", i, err)
		}
	}
	for i := 0; i < 5; i++ {
		apply(i)
	}
	runtime.GC()
	fds, goroutines := openFDs(t), runtime.NumGoroutine()
	for i := 5; i < runs; i++ {
		apply(i)
	}
	if got := openFDs(t); got > fds {
		t.Errorf("open file descriptors grew from %d to %d over %d applies", fds, got, runs)
	}
	// Goroutines of the last run may still be on their way out.
	for deadline := time.Now().Add(testutil.Scale(time.Second)); runtime.NumGoroutine() > goroutines && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got := runtime.NumGoroutine(); got > goroutines {
		t.Errorf("goroutines grew from %d to %d over %d applies", goroutines, got, runs)
	}
	logs, _ := filepath.Glob(filepath.Join(d.WorkDir(), logsDir, "run-*.log"))
	if len(logs) != DefaultKeepRunLogs {
		t.Errorf("%d run logs kept, want %d", len(logs), DefaultKeepRunLogs)
	}
}
