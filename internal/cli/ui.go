package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// term writes the task commands' output in CTS's layout, which scripts
// written for CTS match line by line: an action or a result starts with
// "==> ", a detail is indented by four spaces, an error starts with
// "==> " and goes to stderr. As in CTS, only the first line of a
// multi-line message carries the prefix. ctsync's own additions are
// further lines in the same layout; CTS's lines are never changed.
type term struct {
	out, err io.Writer
}

const (
	infoPrefix   = "==> "
	outputPrefix = "    "
)

func prefixed(prefix, msg string) string {
	if msg == "" {
		return "\n"
	}
	return prefix + msg + "\n"
}

// info writes an action or a result ("==> Task 'web' created").
func (u term) info(format string, args ...any) {
	fmt.Fprint(u.out, prefixed(infoPrefix, fmt.Sprintf(format, args...)))
}

// output writes a detail line ("    Request ID: ..."); an empty message
// writes an empty line.
func (u term) output(format string, args ...any) {
	fmt.Fprint(u.out, prefixed(outputPrefix, fmt.Sprintf(format, args...)))
}

// fail writes an error headline and its details to stderr and returns
// ExitError.
func (u term) fail(headline string, details ...string) int {
	u.failCode(ExitError, headline, details...)
	return ExitError
}

// failCode is fail with another exit code.
func (u term) failCode(code int, headline string, details ...string) int {
	fmt.Fprint(u.err, prefixed(infoPrefix, headline))
	for _, d := range details {
		fmt.Fprint(u.err, prefixed(outputPrefix, d))
	}
	return code
}

// moreHelp is CTS's pointer to a command's help.
func moreHelp(command string) string {
	return fmt.Sprintf("For additional help try '%s %s --help'", Name, command)
}

// warnIgnored says that args, what follows the flags of a command that
// takes no positional argument, are not used: as in CTS, flag parsing
// stops at the first argument that is not a flag, and the command goes on.
func warnIgnored(w io.Writer, args []string) {
	if len(args) > 0 {
		fmt.Fprint(w, prefixed(infoPrefix, fmt.Sprintf("Warning: ignoring arguments after the flags: '%s'", strings.Join(args, ", "))))
	}
}

// writeOptions lists a command's flags in CTS's -help layout, the same for
// start and every task subcommand: each flag on its own line, indented by
// four spaces, with its default when it has one ("    -auto-approve
// [Default: false]"), then its description indented by eight, then an
// empty line. Flags come in name order (flag.VisitAll's).
func writeOptions(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		def := ""
		if f.DefValue != "" {
			def = " [Default: " + f.DefValue + "]"
		}
		fmt.Fprintf(w, "    -%s%s\n        %s\n\n", f.Name, def, f.Usage)
	})
}
