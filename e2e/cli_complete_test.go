package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctsync/ctsync/internal/testutil"
)

// -autocomplete-install adds bash's `complete -C <binary> ctsync` to the
// user's .bashrc and start -autocomplete-uninstall removes it again, leaving the
// rest of the file as it was; a second install fails and says why.
//
// The completion library finds the home directory in the password
// database, not in $HOME: to touch only a temporary home, ctsync runs as a
// user that has no entry there (a user namespace), built without cgo so
// that the lookup falls back to $HOME.
func TestCLIAutocompleteInstall(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "ctsync")
	build := exec.Command("go", "build", "-o", bin, "./cmd/ctsync")
	build.Dir = testutil.RepoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building ctsync without cgo: %v\n%s", err, out)
	}
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	const original = "# the user's own settings\nalias ll='ls -l'\n"
	rc := writeFile(t, home, ".bashrc", original)
	run := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"HOME=" + home, "USER=ctsync-test", "PATH=" + os.Getenv("PATH")}
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 54321, HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 54321, HostID: os.Getgid(), Size: 1}},
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("version"); err != nil {
		t.Skipf("cannot run ctsync in a user namespace here: %v %s", err, out)
	}

	line := "complete -C " + bin + " ctsync"
	if out, err := run("-autocomplete-install"); err != nil {
		t.Fatalf("-autocomplete-install: %v\n%s", err, out)
	}
	if got := readFile(t, rc); got != original+"\n"+line+"\n" && got != original+line+"\n" {
		t.Fatalf(".bashrc after -autocomplete-install:\n%s", got)
	}
	if out, err := run("-autocomplete-install"); err == nil || !strings.Contains(out, "already installed in "+rc) {
		t.Fatalf("second -autocomplete-install: %v\n%s", err, out)
	}
	// As in CTS, also a flag of start.
	if out, err := run("start", "-autocomplete-uninstall"); err != nil {
		t.Fatalf("-autocomplete-uninstall: %v\n%s", err, out)
	}
	if got := readFile(t, rc); strings.Contains(got, "complete -C") || !strings.HasPrefix(got, original) {
		t.Fatalf(".bashrc after -autocomplete-uninstall:\n%s", got)
	}

	// The line installed works: bash calls the binary with COMP_LINE.
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "COMP_LINE=ctsync task ru", "COMP_POINT=17")
	if out, err := cmd.Output(); err != nil || strings.TrimSpace(string(out)) != "run" {
		t.Fatalf("completion of 'ctsync task ru': %v %q", err, out)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
