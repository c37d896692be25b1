package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/api/client"
	"github.com/ctsync/ctsync/internal/config"
)

// Stdin is where the task commands read approval answers; tests replace it.
var Stdin io.Reader = os.Stdin

// readAnswer reads one line from Stdin, a byte at a time so that nothing
// after the line is consumed.
func readAnswer() (string, error) {
	var line []byte
	b := make([]byte, 1)
	for {
		n, err := Stdin.Read(b)
		if n == 1 {
			if b[0] == '\n' {
				break
			}
			line = append(line, b[0])
		}
		if errors.Is(err, io.EOF) {
			break // what was read is the answer; nothing at all rejects
		}
		if err != nil {
			return "", err
		}
	}
	return strings.TrimSpace(string(line)), nil
}

// approvePrompt is CTS's prompt text; scripts may match on it.
const approvePrompt = "Only 'yes' will be accepted to approve, enter 'no' or leave blank to reject.\nEnter a value: "

// approve asks question and reports whether the answer is exactly "yes".
// An interrupt (ctx done) while waiting rejects.
func approve(ctx context.Context, w io.Writer, question string) (bool, error) {
	fmt.Fprintf(w, "\n%s\n%s", question, approvePrompt)
	type result struct {
		answer string
		err    error
	}
	got := make(chan result, 1)
	go func() {
		a, err := readAnswer()
		got <- result{a, err}
	}()
	var r result
	select {
	case r = <-got:
	case <-ctx.Done():
		fmt.Fprintln(w)
		return false, nil
	}
	fmt.Fprintln(w)
	if r.err != nil {
		return false, fmt.Errorf("reading the answer: %w", r.err)
	}
	return r.answer == "yes", nil
}

// parseArgs parses flags that may come before or after positional
// arguments ("task enable NAME -auto-approve" works too).
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// clientCmd is what every API command shares: its flags and the client.
type clientCmd struct {
	name   string
	fs     *flag.FlagSet
	cfg    client.Config
	envErr error
	stdout io.Writer
	stderr io.Writer
}

func newClientCmd(name, usage string, stdout, stderr io.Writer) *clientCmd {
	c := &clientCmd{name: name, fs: newFlagSet(name, stderr), stdout: stdout, stderr: stderr}
	c.cfg, c.envErr = client.ConfigFromEnv()
	c.cfg.RegisterFlags(c.fs)
	c.fs.Usage = func() {
		fmt.Fprint(stderr, named(usage))
		fmt.Fprintln(stderr, "\nOptions:")
		printFlags(stderr, c.fs)
	}
	return c
}

// printFlags lists a command's flags with their defaults the way CTS does
// ("-auto-approve [Default: false]"), each followed by its description.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		def := f.DefValue
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(w, "\n  -%s [Default: %s]\n      %s\n", f.Name, def, f.Usage)
	})
}

// parse parses args and checks the number of positional arguments; it
// returns the exit code to use when it fails (-1 when it succeeded).
func (c *clientCmd) parse(args []string, wantArgs int, what string) ([]string, int) {
	pos, err := parseArgs(c.fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, ExitOK
		}
		return nil, ExitFlagParse
	}
	if c.envErr != nil {
		fmt.Fprintf(c.stderr, "Error: %v\n", c.envErr)
		return nil, ExitFlagParse
	}
	if wantArgs >= 0 && len(pos) != wantArgs {
		switch {
		case len(pos) < wantArgs:
			fmt.Fprintf(c.stderr, "Error: %s requires %s\n\n", c.name, what)
			c.fs.Usage()
			return nil, ExitRequiredFlags
		default:
			fmt.Fprintf(c.stderr, "Error: %s takes %s; unexpected arguments: %s\n", c.name, what, strings.Join(pos[wantArgs:], " "))
			return nil, ExitFlagParse
		}
	}
	return pos, -1
}

func (c *clientCmd) client() (*client.Client, error) {
	return client.New(c.cfg)
}

// errorf prints an error in the CLI's format and returns ExitError.
func (c *clientCmd) errorf(format string, args ...any) int {
	fmt.Fprintf(c.stderr, "Error: "+format+"\n", args...)
	return ExitError
}

// commandContext is cancelled by SIGINT/SIGTERM, so a long request (a run)
// can be abandoned.
func commandContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

const taskUsage = `Usage: ctsync task <subcommand> [options]

Manage the tasks of a running ctsync daemon through its API.

Subcommands:
    create     Create a task from a task file (plans it first)
    delete     Delete a task
    disable    Disable a task
    enable     Enable a task (plans it first)

Run 'ctsync task <subcommand> -h' for a subcommand's options.
`

// runTask handles `ctsync task <create|delete|enable|disable>`.
func runTask(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, named(taskUsage))
		return ExitRequiredFlags
	}
	switch args[0] {
	case "enable":
		return taskEnable(args[1:], stdout, stderr)
	case "disable":
		return taskDisable(args[1:], stdout, stderr)
	case "create":
		return taskCreate(args[1:], stdout, stderr)
	case "delete":
		return taskDelete(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, named(taskUsage))
		return ExitOK
	}
	fmt.Fprintf(stderr, "unknown task subcommand %q\n\n", args[0])
	fmt.Fprint(stderr, named(taskUsage))
	return ExitFlagParse
}

// ctsComplete is the line CTS ends a successful task command with
// ("'web' enable complete!"); scripts look for it, so it comes last.
const ctsComplete = "'%s' %s complete!\n"

func printPlan(w io.Writer, plan string) {
	plan = strings.TrimRight(plan, "\n")
	if plan == "" {
		plan = "(the plan printed nothing)"
	}
	fmt.Fprintf(w, "%s\n", plan)
}

func taskEnable(args []string, stdout, stderr io.Writer) int {
	c := newClientCmd("task enable", `Usage: ctsync task enable [options] <task name>

Enables a task. The task is planned first; when the plan has changes you
are asked to approve them, and the task is then applied at once.
`, stdout, stderr)
	autoApprove := c.fs.Bool("auto-approve", false, "Skip the approval prompt.")
	pos, code := c.parse(args, 1, "one argument: the task name")
	if code >= 0 {
		return code
	}
	name := pos[0]
	cl, err := c.client()
	if err != nil {
		return c.errorf("%v", err)
	}
	ctx, cancel := commandContext()
	defer cancel()

	fmt.Fprintf(stdout, "==> Inspecting changes to resources if task '%s' is enabled...\n\n", name)
	resp, err := cl.UpdateTask(ctx, name, true, client.RunInspect)
	if err != nil {
		return c.errorf("unable to inspect task '%s': %v", name, err)
	}
	if resp.Inspect != nil {
		printPlan(stdout, resp.Inspect.Plan)
	}
	if resp.Inspect == nil || !resp.Inspect.ChangesPresent {
		if _, err := cl.UpdateTask(ctx, name, true, client.RunDefault); err != nil {
			return c.errorf("unable to enable task '%s': %v", name, err)
		}
		fmt.Fprintf(stdout, "\n==> Task '%s' enabled: no changes to apply.\n", name)
		fmt.Fprintf(stdout, ctsComplete, name, "enable")
		return ExitOK
	}
	if !*autoApprove {
		ok, err := approve(ctx, stdout, fmt.Sprintf("Enable task '%s' and apply the changes above?", name))
		if err != nil {
			return c.errorf("%v", err)
		}
		if !ok {
			fmt.Fprintf(stdout, "Cancelled enabling task '%s'\n", name)
			return ExitOK
		}
	}
	fmt.Fprintf(stdout, "\n==> Enabling and running task '%s'...\n", name)
	if _, err := cl.UpdateTask(ctx, name, true, client.RunNow); err != nil {
		return c.errorf("unable to enable task '%s': %v", name, err)
	}
	fmt.Fprintf(stdout, "==> Task '%s' enabled and applied.\n", name)
	fmt.Fprintf(stdout, ctsComplete, name, "enable")
	return ExitOK
}

func taskDisable(args []string, stdout, stderr io.Writer) int {
	c := newClientCmd("task disable", `Usage: ctsync task disable [options] <task name>

Disables a task: it stops running until it is enabled again.
`, stdout, stderr)
	pos, code := c.parse(args, 1, "one argument: the task name")
	if code >= 0 {
		return code
	}
	name := pos[0]
	cl, err := c.client()
	if err != nil {
		return c.errorf("%v", err)
	}
	ctx, cancel := commandContext()
	defer cancel()
	fmt.Fprintf(stdout, "==> Disabling task '%s'...\n", name)
	if _, err := cl.UpdateTask(ctx, name, false, client.RunDefault); err != nil {
		return c.errorf("unable to disable task '%s': %v", name, err)
	}
	fmt.Fprintf(stdout, "==> Task '%s' disabled.\n", name)
	fmt.Fprintf(stdout, ctsComplete, name, "disable")
	return ExitOK
}

func taskCreate(args []string, stdout, stderr io.Writer) int {
	c := newClientCmd("task create", `Usage: ctsync task create [options] -task-file=<file>

Creates a task from a file holding one task block (HCL, or JSON for a
.json file). variable_files are read here and sent as variables. The task
is planned first; after approval it is created and applied at once.
`, stdout, stderr)
	autoApprove := c.fs.Bool("auto-approve", false, "Skip the approval prompt.")
	taskFile := c.fs.String("task-file", "", "The file holding the task block. Required.")
	if _, code := c.parse(args, 0, "no arguments (use -task-file)"); code >= 0 {
		return code
	}
	if *taskFile == "" {
		fmt.Fprintf(stderr, "Error: the -task-file flag is required\n\n")
		c.fs.Usage()
		return ExitRequiredFlags
	}
	spec, warns, err := config.LoadTaskFileWarnings(*taskFile)
	if err != nil {
		return c.errorf("reading the task file:\n%v", err)
	}
	for _, w := range warns {
		fmt.Fprintf(stderr, "Warning: %s\n", w)
	}
	cl, err := c.client()
	if err != nil {
		return c.errorf("%v", err)
	}
	ctx, cancel := commandContext()
	defer cancel()

	spec = api.TaskView(spec)
	payload, _ := json.MarshalIndent(map[string]any{"task": spec}, "  ", "  ")
	fmt.Fprintf(stdout, "==> Inspecting changes to resources if task '%s' is created...\n\n", spec.Name)
	resp, err := cl.CreateTask(ctx, client.RunInspect, spec)
	if err != nil {
		return c.errorf("unable to inspect task '%s': %v", spec.Name, err)
	}
	if resp.Run != nil {
		printPlan(stdout, resp.Run.Plan)
	}
	fmt.Fprintf(stdout, "\n  Request ID: %s\n  Request Payload:\n  %s\n", resp.RequestID, payload)
	if !*autoApprove {
		ok, err := approve(ctx, stdout, fmt.Sprintf("Create task '%s' and apply the changes above?", spec.Name))
		if err != nil {
			return c.errorf("%v", err)
		}
		if !ok {
			fmt.Fprintf(stdout, "Cancelled creating task '%s'\n", spec.Name)
			return ExitOK
		}
	}
	fmt.Fprintf(stdout, "\n==> Creating and running task '%s'...\n", spec.Name)
	resp, err = cl.CreateTask(ctx, client.RunNow, spec)
	if err != nil {
		return c.errorf("unable to create task '%s': %v", spec.Name, err)
	}
	fmt.Fprintf(stdout, "  Request ID: %s\n==> Task '%s' created and applied.\n", resp.RequestID, spec.Name)
	fmt.Fprintf(stdout, ctsComplete, spec.Name, "create")
	return ExitOK
}

func taskDelete(args []string, stdout, stderr io.Writer) int {
	c := newClientCmd("task delete", `Usage: ctsync task delete [options] <task name>

Deletes a task. A running task is deleted when its run ends. Without
-destroy the infrastructure the task created is left as it is.
`, stdout, stderr)
	autoApprove := c.fs.Bool("auto-approve", false, "Skip the approval prompt.")
	destroy := c.fs.Bool("destroy", false, "Destroy the task's infrastructure (terraform destroy) and remove its state first.")
	pos, code := c.parse(args, 1, "one argument: the task name")
	if code >= 0 {
		return code
	}
	name := pos[0]
	cl, err := c.client()
	if err != nil {
		return c.errorf("%v", err)
	}
	ctx, cancel := commandContext()
	defer cancel()
	if _, err := cl.Task(ctx, name); err != nil {
		return c.errorf("unable to delete task '%s': %v", name, err)
	}
	if !*autoApprove {
		notes := "  - This action cannot be undone.\n"
		if *destroy {
			notes += "  - The infrastructure managed by the task will be destroyed (terraform destroy) and its Terraform state removed.\n"
		} else {
			notes += "  - Deleting the task will not destroy the infrastructure managed by the task.\n"
		}
		notes += "  - A task that is running is deleted when its run ends."
		ok, err := approve(ctx, stdout, fmt.Sprintf("Delete task '%s'?\n%s", name, notes))
		if err != nil {
			return c.errorf("%v", err)
		}
		if !ok {
			fmt.Fprintf(stdout, "Cancelled deleting task '%s'\n", name)
			return ExitOK
		}
	}
	id, err := cl.DeleteTask(ctx, name, *destroy)
	if err != nil {
		return c.errorf("unable to delete task '%s': %v", name, err)
	}
	fmt.Fprintf(stdout, "==> Task '%s' marked for deletion; it is removed when it is not running.\n  Request ID: %s\n", name, id)
	fmt.Fprintf(stdout, ctsComplete, name, "delete")
	return ExitOK
}
