package cli

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"
)

// A shell's completion request (COMP_LINE, bash's complete -C) is answered
// with the commands, task subcommands and flags the commands accept.
func TestCompletion(t *testing.T) {
	cases := []struct {
		line string
		want []string
	}{
		{"ctsync ", []string{"start", "status", "task", "version"}},
		{"ctsync st", []string{"start", "status"}},
		{"ctsync task ", []string{"approve", "create", "delete", "disable", "enable", "logs", "reject", "run", "update"}},
		{"ctsync task run -a", []string{"-auto-approve"}},
		{"ctsync task delete -d", []string{"-destroy"}},
		{"ctsync start -i", []string{"-inspect", "-inspect-task"}},
		{"ctsync start -log", []string{"-log-format"}},
		{"ctsync -autocomplete-", []string{"-autocomplete-install", "-autocomplete-uninstall"}},
	}
	for _, c := range cases {
		t.Run(c.line, func(t *testing.T) {
			t.Setenv("COMP_LINE", c.line)
			t.Setenv("COMP_POINT", "")
			var out, errOut bytes.Buffer
			if code := Run(nil, &out, &errOut); code != ExitOK {
				t.Fatalf("exit %d: %s", code, errOut.String())
			}
			got := strings.Fields(out.String())
			slices.Sort(got)
			if !slices.Equal(got, c.want) {
				t.Fatalf("completions of %q = %v, want %v", c.line, got, c.want)
			}
		})
	}
}

// commandFlags reads a command's flags from the flag sets it builds.
func TestCommandFlags(t *testing.T) {
	names := func(run func([]string, io.Writer, io.Writer) int) []string {
		var out []string
		for _, f := range commandFlags(run) {
			out = append(out, f.Name)
		}
		return out
	}
	if got := names(runStart); !slices.Contains(got, "config-file") || !slices.Contains(got, "log-format") {
		t.Fatalf("start's flags: %v", got)
	}
	if got := names(taskRun); !slices.Contains(got, "auto-approve") || !slices.Contains(got, "http-addr") || slices.Contains(got, "destroy") {
		t.Fatalf("task run's flags: %v", got)
	}
	if got := commandFlags(nil); got != nil {
		t.Fatalf("version's flags: %v", got)
	}
}

// -autocomplete-install and -autocomplete-uninstall work where CTS reads
// them: before the command or as flags of start; both at once is an error.
func TestAutocompleteSetup(t *testing.T) {
	var calls []string
	oldI, oldU := installCompletion, uninstallCompletion
	t.Cleanup(func() { installCompletion, uninstallCompletion = oldI, oldU })
	installCompletion = func(name string) error { calls = append(calls, "install "+name); return nil }
	uninstallCompletion = func(name string) error { calls = append(calls, "uninstall "+name); return nil }
	for _, c := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"-autocomplete-install"}, "install ctsync", ExitOK},
		{[]string{"start", "-autocomplete-install"}, "install ctsync", ExitOK},
		{[]string{"start", "--autocomplete-uninstall"}, "uninstall ctsync", ExitOK},
		{[]string{"-autocomplete-uninstall"}, "uninstall ctsync", ExitOK},
		{[]string{"-autocomplete-install", "-autocomplete-uninstall"}, "", ExitError},
	} {
		calls = nil
		code, _, stderr := run(t, "", c.args...)
		if got := strings.Join(calls, ";"); code != c.code || got != c.want {
			t.Errorf("%v: exit %d, calls %q, want %d, %q (stderr %q)", c.args, code, got, c.code, c.want, stderr)
		}
		if c.code == ExitError && !strings.Contains(stderr, "Error executing CLI: Either the autocomplete install or uninstall flag may be specified, but not both.") {
			t.Errorf("%v: stderr %q", c.args, stderr)
		}
	}
	// After "--" they are arguments, not flags.
	calls = nil
	if code, _, _ := run(t, "", "start", "--", "-autocomplete-install"); len(calls) != 0 || code == ExitOK {
		t.Errorf("start -- -autocomplete-install: exit %d, calls %v", code, calls)
	}
}
