package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/task"
)

// updatingFake is the fake controller with an Update.
type updatingFake struct{ *fakeCtrl }

func (u updatingFake) Update(_ context.Context, s task.Spec) error {
	u.record("update %s size=%s", s.Name, s.Variables["size"])
	return nil
}

// `task update -task-file` sends the file's task as a PATCH with all its
// fields (variable_files read here); a name that is not the file's, a
// missing file flag and a task of the configuration files fail with
// their exit codes.
func TestTaskUpdate(t *testing.T) {
	f := newFakeCtrl(specNamed("new"), specNamed("file"))
	serveWith(t, api.Options{Controller: updatingFake{f}, FileTask: func(n string) bool { return n == "file" }})
	file := writeTaskFileNamed(t, "new")

	code, out, errOut := run(t, "", "task", "update", "-task-file", file)
	if code != ExitOK || !strings.Contains(out, "==> Task 'new' updated") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	wantCalls(t, f, "update new size=3")
	if code, _, _ := run(t, "", "task", "update", "-task-file", file, "new"); code != ExitOK {
		t.Errorf("with the file's name: exit %d", code)
	}

	if code, _, errOut := run(t, "", "task", "update", "-task-file", file, "other"); code != ExitRequiredFlags || !strings.Contains(errOut, "holds task 'new', not 'other'") {
		t.Errorf("another name: exit %d %s", code, errOut)
	}
	if code, _, errOut := run(t, "", "task", "update", "new"); code != ExitRequiredFlags || !strings.Contains(errOut, "no task file provided") {
		t.Errorf("no file: exit %d %s", code, errOut)
	}
	code, _, errOut = run(t, "", "task", "update", "-task-file", writeTaskFileNamed(t, "file"))
	if code != ExitError || !strings.Contains(errOut, "409") || !strings.Contains(errOut, "configuration files") {
		t.Errorf("a task of the files: exit %d %s", code, errOut)
	}
}
