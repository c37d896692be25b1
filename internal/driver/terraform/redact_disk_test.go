package terraform

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/redact"
)

// echoModule's provisioner prints the secret it finds in its environment.
const echoModule = `
variable "services" {
  type = any
}

resource "terraform_data" "echo" {
  provisioner "local-exec" {
    command = "echo \"whole: $ECHO_SECRET\""
  }
}
`

// The run log and terraform.log (persist_log) never hold a secret that a
// provisioner echoes, not even cut across two writes of the output: the
// files are redacted as they are written. (Terraform itself prefixes each
// chunk of a provisioner's output, so a secret the provisioner prints in
// two writes reaches the log as two lines: see redact's writer tests for
// secrets cut across writes of the output.)
func TestRunLogsRedactedOnDisk(t *testing.T) {
	bin := needTerraform(t)
	const secret = "Echo-S3cret-0123456789abcdef"
	dir := t.TempDir()
	o := localTask(t, dir, "echo", bin)
	o.Spec.Module = writeModule(t, dir, "mod-echo", map[string]string{"main.tf": echoModule})
	o.Env = map[string]string{"ECHO_SECRET": secret}
	o.Driver.PersistLog = true
	o.Redactor = redact.NewRedactor([]string{secret})
	d := mustNew(t, o)
	res, err := d.Apply(testCtx(t), run("r1"), services("web-1"))
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(res.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), redact.Redacted); n < 1 || !strings.Contains(string(log), "whole: "+redact.Redacted) {
		t.Errorf("the echoed secret is not shown redacted in the run log:\n%s", log)
	}
	tfLog, err := os.ReadFile(filepath.Join(d.WorkDir(), tfLogFile))
	if err != nil || len(tfLog) < 1000 {
		t.Errorf("terraform.log (%d bytes): %v", len(tfLog), err)
	}
	files := 0
	err = filepath.WalkDir(d.WorkDir(), func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !e.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if strings.Contains(string(b), secret) {
			t.Errorf("%s holds the secret:\n%s", path, b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.WorkDir(), runFile)); !os.IsNotExist(err) {
		t.Errorf("the run record is left after the run: %v", err)
	}
	t.Logf("%d files checked, run log %d bytes, terraform.log %d bytes", files, len(log), len(tfLog))
}
