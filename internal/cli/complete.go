package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/posener/complete"
	"github.com/posener/complete/cmd/install"
)

// command is a command or a task subcommand and the function that runs it
// (nil for version, which has no flags).
type command struct {
	name string
	run  func(args []string, stdout, stderr io.Writer) int
}

// topCommands are ctsync's commands; taskCommands the task subcommands.
var (
	topCommands = []command{{"start", runStart}, {"status", runStatus}, {"task", runTask}, {"version", nil}}

	taskCommands = []command{{"approve", taskApprove}, {"create", taskCreate}, {"delete", taskDelete}, {"disable", taskDisable},
		{"enable", taskEnable}, {"logs", taskLogs}, {"reject", taskReject}, {"run", taskRun}, {"update", taskUpdate}}
)

func commandNames(cmds []command) []string {
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.name
	}
	return names
}

// flagCollector is the stderr given to a command asked for its help by
// commandFlags: newFlagSet and newClientCmd hand it the flag sets they
// build, and whatever is written to it is dropped.
type flagCollector struct{ sets []*flag.FlagSet }

func (*flagCollector) Write(p []byte) (int, error) { return len(p), nil }

// collectFlagSet gives fs to the flagCollector, when w is one.
func collectFlagSet(w io.Writer, fs *flag.FlagSet) {
	if fc, ok := w.(*flagCollector); ok {
		fc.sets = append(fc.sets, fs)
	}
}

// commandFlags returns the flags of a command: those of the flag sets it
// builds when asked for its help, so that they cannot differ from what the
// command accepts.
func commandFlags(run func(args []string, stdout, stderr io.Writer) int) []*flag.Flag {
	if run == nil {
		return nil
	}
	fc := &flagCollector{}
	run([]string{"-help"}, io.Discard, fc)
	var flags []*flag.Flag
	for _, fs := range fc.sets {
		fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f) })
	}
	return flags
}

// Top-level flags that set up shell completion, as CTS's.
const (
	flagAutocompleteInstall   = "autocomplete-install"
	flagAutocompleteUninstall = "autocomplete-uninstall"
)

// completionFlags returns the predictions of a command's flags: file and
// directory names for the flags that take them.
func completionFlags(run func(args []string, stdout, stderr io.Writer) int) complete.Flags {
	out := complete.Flags{"-help": complete.PredictNothing}
	for _, f := range commandFlags(run) {
		var p complete.Predictor = complete.PredictAnything
		switch {
		case isBoolFlag(f):
			p = complete.PredictNothing
		case f.Name == "config-dir" || f.Name == "ca-path":
			p = complete.PredictDirs("*")
		case strings.HasSuffix(f.Name, "-file") || strings.HasSuffix(f.Name, "-cert") || strings.HasSuffix(f.Name, "-key"):
			p = complete.PredictFiles("*")
		}
		out["-"+f.Name] = p
	}
	return out
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// completer is the completion of the whole command line.
func completer(stdout io.Writer) *complete.Complete {
	root := complete.Command{Sub: complete.Commands{}, Flags: complete.Flags{
		"-help": complete.PredictNothing, "-version": complete.PredictNothing,
		"-" + flagAutocompleteInstall: complete.PredictNothing, "-" + flagAutocompleteUninstall: complete.PredictNothing,
	}}
	for _, c := range topCommands {
		sub := complete.Command{Flags: completionFlags(c.run)}
		if c.name == "task" {
			sub = complete.Command{Sub: complete.Commands{}, Flags: complete.Flags{"-help": complete.PredictNothing}}
			for _, t := range taskCommands {
				sub.Sub[t.name] = complete.Command{Flags: completionFlags(t.run)}
			}
		}
		root.Sub[c.name] = sub
	}
	cp := complete.New(Name, root)
	cp.Out = stdout
	return cp
}

// autocomplete answers a shell's completion request (COMP_LINE set, the
// shell's `complete -C` protocol) and reports whether it was one.
func autocomplete(stdout io.Writer) bool {
	if os.Getenv("COMP_LINE") == "" {
		return false
	}
	return completer(stdout).Complete()
}

// The completion library's installer, replaced by tests.
var (
	installCompletion   = install.Install
	uninstallCompletion = install.Uninstall
)

// autocompleteSetup handles -autocomplete-install and
// -autocomplete-uninstall as CTS (whose command-line library reads them
// anywhere before a "--", so also as flags of start): the line
// `complete -C <this binary> <name>` is added to (or removed from) the rc
// files of the user's bash, zsh and fish. ok is false when args hold
// neither flag.
func autocompleteSetup(args []string, stderr io.Writer) (code int, ok bool) {
	var doInstall, doUninstall bool
	for _, a := range args {
		if a == "--" {
			break
		}
		switch a {
		case "-" + flagAutocompleteInstall, "--" + flagAutocompleteInstall:
			doInstall = true
		case "-" + flagAutocompleteUninstall, "--" + flagAutocompleteUninstall:
			doUninstall = true
		}
	}
	var err error
	switch {
	case doInstall && doUninstall:
		err = errors.New("Either the autocomplete install or uninstall flag may be specified, but not both.")
	case doInstall:
		err = installCompletion(Name)
	case doUninstall:
		err = uninstallCompletion(Name)
	default:
		return 0, false
	}
	if err != nil {
		fmt.Fprintf(stderr, "Error executing CLI: %s\n", err)
		return ExitError, true
	}
	return ExitOK, true
}
