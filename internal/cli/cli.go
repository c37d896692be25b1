// Package cli is ctsync's command line: `start` (the daemon, -once,
// -inspect), `task` sub-commands that talk to a running daemon's API, and
// `version`. Flag names, environment variables and exit codes follow CTS.
package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Exit codes, as CTS (17 is ctsync's).
const (
	ExitOK            = 0
	ExitError         = 11
	ExitInterrupt     = 12
	ExitRequiredFlags = 13
	ExitFlagParse     = 14
	ExitConfig        = 15
	ExitDriver        = 16
	// ExitHeld (ctsync): `task run` or `task delete -destroy` found its
	// plan held for approval by a safety gate: nothing was applied.
	ExitHeld = 17
)

// Version is the ctsync version; release builds set it with -ldflags.
var Version = "0.1.0-dev"

// Commit is the source revision; release builds set it with -ldflags.
var Commit = "unknown"

// MinTerraform is the lowest Terraform (or OpenTofu) version ctsync drives.
const MinTerraform = "0.14.0"

// Run runs the command line args (without the program name) and returns the
// process exit code.
func Run(args []string, stdout, stderr io.Writer) int {
	if autocomplete(stdout) { // complete.go
		return ExitOK
	}
	if code, ok := autocompleteSetup(args, stderr); ok {
		return code
	}
	if len(args) == 0 {
		usage(stderr)
		return ExitRequiredFlags
	}
	switch args[0] {
	case "-version", "-v", "--version", "version":
		printVersion(stdout)
		return ExitOK
	case "start":
		return runStart(args[1:], stdout, stderr)
	case "task":
		return runTask(args[1:], stdout, stderr)
	case "status":
		return runStatus(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return ExitOK
	}
	if strings.HasPrefix(args[0], "-") {
		// Flags without a sub-command: the deprecated CTS start-up form.
		// As in CTS, a help flag anywhere prints the usage, and a version
		// flag among the leading flags prints the version.
		if isHelp(args) {
			usage(stdout)
			return ExitOK
		}
		if leadingVersionFlag(args) {
			printVersion(stdout)
			return ExitOK
		}
		if !hasConfigFlag(args) {
			usage(stderr)
			return ExitRequiredFlags
		}
		fmt.Fprintf(stderr, "warning: running without a command is deprecated; use `%s start`\n", Name)
		return runStart(args, stdout, stderr)
	}
	fmt.Fprintf(stderr, "unknown command %q\n", args[0])
	if hint := didYouMean(args[0], commandNames(topCommands)); hint != "" {
		fmt.Fprintln(stderr, hint)
	}
	fmt.Fprintln(stderr)
	usage(stderr)
	return ExitFlagParse
}

// leadingVersionFlag reports whether a version flag (-v, -version,
// --version) comes among the flags before the first argument that is not
// one (where CTS's command line reads a version flag).
func leadingVersionFlag(args []string) bool {
	for _, a := range args {
		switch {
		case a == "-v" || a == "-version" || a == "--version":
			return true
		case !strings.HasPrefix(a, "-") || a == "--":
			return false
		}
	}
	return false
}

// hasConfigFlag reports whether args give a configuration file or
// directory (-config-file, -config-dir, with one or two dashes).
func hasConfigFlag(args []string) bool {
	for _, a := range args {
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if strings.HasPrefix(a, "config-file") || strings.HasPrefix(a, "config-dir") {
			return true
		}
	}
	return false
}

// Name is the program's name as invoked: the base name of os.Args[0],
// "consul-terraform-sync" when ctsync is installed under CTS's name to
// drop it in. Usage lines and -version use it.
var Name = programName(os.Args)

func programName(args []string) string {
	if len(args) == 0 {
		return "ctsync"
	}
	n := strings.TrimSuffix(filepath.Base(args[0]), ".exe")
	if n == "" || n == "." || n == string(filepath.Separator) {
		return "ctsync"
	}
	return n
}

func printVersion(w io.Writer) {
	b := readBuildInfo() // version.go
	fmt.Fprintf(w, "%s v%s (%s)\n", Name, b.version, b.commit)
	fmt.Fprintf(w, "Compatible with Terraform >= %s and OpenTofu >= 1.6.0\n", MinTerraform)
	fmt.Fprintf(w, "Build date: %s\nGo: %s %s\n", b.date, b.goVersion, b.platform)
	if Name != "ctsync" {
		fmt.Fprintln(w, "This is ctsync, a drop-in successor to Consul-Terraform-Sync.")
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `Usage CLI: %[1]s <command> [-help] [options]

  Keeps network infrastructure in sync with the Consul catalog by running
  Terraform (or OpenTofu) modules.

Commands:
    start      Starts the daemon; -once runs every task once, -inspect plans them
    status     Shows the tasks, their status, last run and next scheduled run
    task       Manages the tasks of a running daemon: create, delete, enable, disable, run, logs
    version    Prints the version

For a command's options, try '%[1]s <command> --help'.
`, Name)
}

// stringsFlag is a repeatable string flag.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

// newFlagSet returns a FlagSet that reports errors to stderr instead of
// exiting.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	collectFlagSet(stderr, fs) // complete.go
	return fs
}
