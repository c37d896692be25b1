package e2e

// The -help of every task subcommand, from the built binary installed under
// CTS's name, as CTS's own end-to-end suite reads it (TestE2E_TaskCommand_Help):
// the usage line, then each option as "-name [Default: value]" with its
// description on the next line.

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestCompatTaskCommandHelp(t *testing.T) {
	cts := filepath.Join(t.TempDir(), "consul-terraform-sync")
	must(t, os.Symlink(ctsyncBin, cts))
	// An option entry: the flag and its default, its description, an
	// empty line (none after the last one).
	entry := regexp.MustCompile(`^    -[a-z][a-z-]*( \[Default: [^\]\n]+\])?\n        \S[^\n]*\n(\n|\z)`)
	for _, c := range []struct {
		cmd   string
		usage string
		want  []string
	}{
		// CTS's four cases.
		{"enable", "[options] <task name>", []string{"-auto-approve [Default: false]"}},
		{"disable", "[options] <task name>", nil},
		{"delete", "[options] <task name>", []string{"-auto-approve [Default: false]"}},
		{"create", "[options] -task-file=<task config>", []string{"-auto-approve [Default: false]"}},
		// ctsync's own subcommands share the layout.
		{"run", "[options] <task name>", []string{"-auto-approve [Default: false]"}},
		{"approve", "[options] <task name>", nil},
		{"reject", "[options] <task name>", nil},
		{"logs", "[options] <task name>", nil},
	} {
		t.Run(c.cmd, func(t *testing.T) {
			out, code := runCLI(cts, []string{"CTS_ADDRESS="}, "", "task", c.cmd, "-help")
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			usage := "Usage: consul-terraform-sync task " + c.cmd + " [-help] " + c.usage + "\n"
			if !strings.HasPrefix(out, usage) {
				t.Errorf("does not start with %q:\n%s", usage, out)
			}
			want := append(c.want,
				"\n    -http-addr [Default: http://localhost:8558]\n        The address of the ctsync API",
				"\n    -ssl-verify [Default: true]\n",
				"\n    -ca-cert\n        ")
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("lacks %q:\n%s", w, out)
				}
			}
			_, opts, ok := strings.Cut(out, "\nOptions:\n")
			if !ok {
				t.Fatalf("no options:\n%s", out)
			}
			for n := 1; opts != ""; n++ {
				m := entry.FindString(opts)
				if m == "" {
					t.Fatalf("option %d is not in CTS's layout:\n%q", n, opts)
				}
				opts = opts[len(m):]
			}
		})
	}
}
