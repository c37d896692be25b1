package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/api/client"
	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
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

// approve asks for approval and reports whether the answer is exactly
// "yes"; action names it in the "Cancelled <action> task" line. An
// interrupt (ctx done) while waiting cancels. The question starts as CTS's
// ("Only 'yes' will be accepted to approve"), then says what any other
// answer does: it only cancels the command (CTS's "enter 'no' or leave
// blank to reject" suggested that a plan would be rejected).
func approve(ctx context.Context, u term, name, action string) (bool, error) {
	u.output("Only 'yes' will be accepted to approve; any other answer, or none, cancels: %s\n", cancelMeans(action))
	fmt.Fprint(u.out, "Enter a value: ")
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
		r.answer = ""
	}
	u.output("")
	if r.err != nil {
		return false, r.err
	}
	if r.answer != "yes" {
		u.output("Cancelled %s task '%s'", action, name)
		return false, nil
	}
	return true, nil
}

// cancelMeans says what cancelling action leaves as it is.
func cancelMeans(action string) string {
	switch action {
	case "creating":
		return "the task is not created."
	case "enabling":
		return "the task stays disabled."
	case "running":
		return "the task does not run now."
	case "deleting":
		return "the task is not deleted."
	case "approving the plan of", "rejecting the plan of":
		return "the plan stays held, neither approved nor rejected."
	}
	return "nothing is changed."
}

// approvePlan is CTS's question before a plan is applied (task enable and
// task create); verb is "Enabling" or "Creating".
func approvePlan(ctx context.Context, u term, name, verb string) (bool, error) {
	u.info("%s the task will perform the actions described above.", verb)
	u.output("Do you want to perform these actions for '%s'?", name)
	u.output(" - This action cannot be undone.")
	u.output(" - Consul-Terraform-Sync cannot guarantee Terraform will perform")
	u.output("   these exact actions if monitored services have changed.\n")
	return approve(ctx, u, name, strings.ToLower(verb))
}

// inspectAndApprove prints the plan the task's next apply would carry out
// (PATCH ?run=inspect, which changes nothing) and, when the plan has
// changes and autoApprove is off, asks for approval with approvePlan; verb
// is "Enabling" or "Running". It reports whether the plan has changes;
// code is the exit code to return at once (-1 to go on).
func inspectAndApprove(ctx context.Context, u term, cl *client.Client, name, verb string, autoApprove bool) (changes bool, code int) {
	resp, err := cl.UpdateTask(ctx, name, true, client.RunInspect)
	if err != nil {
		return false, u.fail(fmt.Sprintf("Error: unable to generate plan for '%s'", name), clientError(cl, err))
	}
	if resp.Inspect == nil {
		return false, u.fail(fmt.Sprintf("Error: unable to retrieve a plan for '%s'", name))
	}
	u.output("%s", resp.Inspect.Plan)
	if resp.Inspect.TFCRunURL != "" {
		u.output("Terraform Cloud Run URL: %s\n", resp.Inspect.TFCRunURL)
	}
	if !resp.Inspect.ChangesPresent || autoApprove {
		return resp.Inspect.ChangesPresent, -1
	}
	ok, err := approvePlan(ctx, u, name, verb)
	if err != nil {
		return true, u.fail(fmt.Sprintf("Error asking for approval: %s", err))
	}
	if !ok {
		return true, ExitOK
	}
	return true, -1
}

// inspectClient parses the flags and the task name of a command that plans
// the task first, prints CTS's first lines (before the client is made, as
// CTS) and makes the client; code is the exit code to return at once (-1
// to go on).
func (c *clientCmd) inspectClient(args []string, verb string) (string, *client.Client, int) {
	name, code := c.parseName(args)
	if code >= 0 {
		return "", nil, code
	}
	c.ui.info("Inspecting changes to resource if %s '%s'...\n", strings.ToLower(verb), name)
	c.ui.output("Generating plan that Consul-Terraform-Sync will use Terraform to execute\n")
	return c.clientFor(name)
}

// clientCmd is what every API command shares: its flags, its help and the
// client.
type clientCmd struct {
	name    string // "task enable"
	help    string // the text above the options, without the options
	fs      *flag.FlagSet
	flagOut strings.Builder
	cfg     client.Config
	envErr  error
	ui      term
}

// newClientCmd builds a command; usage is its usage line's arguments
// ("[options] <task name>") and about its description.
func newClientCmd(name, usage, about string, stdout, stderr io.Writer) *clientCmd {
	c := &clientCmd{name: name, ui: term{out: stdout, err: stderr}}
	c.help = fmt.Sprintf("Usage: %s %s [-help] %s\n\n%s", Name, name, usage, about)
	c.fs = flag.NewFlagSet(name, flag.ContinueOnError)
	c.fs.SetOutput(&c.flagOut)
	c.fs.Usage = func() {}
	c.cfg, c.envErr = client.ConfigFromEnv()
	c.cfg.RegisterFlags(c.fs)
	collectFlagSet(stderr, c.fs) // complete.go
	return c
}

// Help is the command's -help text: usage, description and the options
// with their defaults, in CTS's layout ("    -auto-approve [Default:
// false]", the description on the next line), as start's.
func (c *clientCmd) Help() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\nOptions:\n", c.help)
	writeOptions(&b, c.fs)
	return b.String()
}

// isHelp reports whether args ask for help (-h, -help or --help before a
// "--"): the help is printed instead of running the command, as CTS does.
func isHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// parse parses the flags, which come before the positional arguments as in
// CTS, and returns the positional arguments; code is the exit code to
// return at once (-1 to go on).
func (c *clientCmd) parse(args []string) (pos []string, code int) {
	if isHelp(args) {
		fmt.Fprintln(c.ui.out, strings.TrimSpace(c.Help()))
		return nil, ExitOK
	}
	if err := c.fs.Parse(args); err != nil {
		details := []string{err.Error()}
		if hint := flagHint(c.fs, err); hint != "" {
			details = append(details, hint)
		}
		c.ui.failCode(ExitFlagParse, fmt.Sprintf("Error: unsupported arguments in flags '%s'", strings.Join(args, ", ")),
			details...)
		c.ui.output("Please see --help information below for supported options:\n\n%s", strings.TrimSpace(c.Help()))
		return nil, ExitFlagParse
	}
	if c.envErr != nil {
		return nil, c.ui.failCode(ExitFlagParse, "Error: "+c.envErr.Error())
	}
	return c.fs.Args(), -1
}

// parseName parses the flags and the one positional argument, the task
// name; code is the exit code to return at once (-1 to go on).
func (c *clientCmd) parseName(args []string) (name string, code int) {
	pos, code := c.parse(args)
	if code >= 0 {
		return "", code
	}
	if name, ok := c.taskName(pos); ok {
		return name, -1
	}
	return "", ExitRequiredFlags
}

// nameAndClient parses the flags and the task name and makes the client;
// code is the exit code to return at once (-1 to go on).
func (c *clientCmd) nameAndClient(args []string) (string, *client.Client, int) {
	name, code := c.parseName(args)
	if code >= 0 {
		return "", nil, code
	}
	return c.clientFor(name)
}

// clientFor makes the client of a command on the task name; code is the
// exit code to return at once (-1 to go on).
func (c *clientCmd) clientFor(name string) (string, *client.Client, int) {
	cl, err := c.client()
	if err != nil {
		return "", nil, c.ui.fail(fmt.Sprintf("Error: unable to create client for '%s'", name), err.Error())
	}
	return name, cl, -1
}

// taskName checks that exactly one positional argument, the task name,
// was given, with CTS's messages.
func (c *clientCmd) taskName(args []string) (string, bool) {
	if len(args) == 1 {
		return args[0], true
	}
	details := []string{"No arguments were passed to the command"}
	if len(args) > 0 {
		details = []string{fmt.Sprintf("%d arguments were passed to the command: '%s'", len(args), strings.Join(args, ", ")),
			"All flags are required to appear before positional arguments if set\n"}
	}
	c.ui.failCode(ExitRequiredFlags, "Error: this command requires one argument: [options] <task name>",
		append(details, moreHelp(c.name))...)
	return "", false
}

func (c *clientCmd) client() (*client.Client, error) {
	cfg := c.cfg
	c.fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "port": // CTS's warning, to stderr
			fmt.Fprint(c.ui.err, prefixed(infoPrefix, "Warning: 'port' option is deprecated and will be removed in a later version. "+
				"It is preferred to use the 'http-addr' option instead.\n"))
		case "http-addr":
			// As in CTS, -http-addr given on the command line is the
			// whole address: -port only changes the address of
			// CTS_ADDRESS or the default.
			cfg.Port = 0
		}
	})
	return client.New(cfg)
}

// commandContext is cancelled by SIGINT/SIGTERM, so a long request (a run)
// can be abandoned.
func commandContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func taskUsage() string {
	return fmt.Sprintf(`Usage: %[1]s task <subcommand> [-help] [options]

  Manages the tasks of a running daemon through its API.

Subcommands:
    approve    Applies the plan a safety gate holds for a task (ctsync).
    create     Creates a new task.
    delete     Deletes an existing task.
    disable    Disables existing tasks from running.
    enable     Enables existing tasks to run.
    logs       Prints the Terraform output of a task's run (ctsync).
    reject     Drops the plan a safety gate holds for a task (ctsync).
    run        Shows a task's plan and applies it now (ctsync).
    update     Changes the settings of a task created through the API (ctsync).

For a subcommand's options, try '%[1]s task <subcommand> --help'.
`, Name)
}

// runTask handles `ctsync task <create|delete|enable|disable>`.
func runTask(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, taskUsage())
		return ExitRequiredFlags
	}
	for _, c := range taskCommands { // complete.go
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, taskUsage())
		return ExitOK
	}
	fmt.Fprintf(stderr, "unknown task subcommand %q\n", args[0])
	if hint := didYouMean(args[0], commandNames(taskCommands)); hint != "" {
		fmt.Fprintln(stderr, hint)
	}
	fmt.Fprintln(stderr)
	fmt.Fprint(stderr, taskUsage())
	return ExitFlagParse
}

// clientError is an API or connection error as the task commands print
// it, with CTS's hint for an HTTP client talking to an HTTPS server.
func clientError(cl *client.Client, err error) string {
	msg := err.Error()
	if strings.Contains(msg, "EOF") && strings.HasPrefix(cl.Address(), "http://") {
		msg += ". Scheme http was used, client may have sent an HTTP request to an HTTPS server. " +
			"This error can be caused by a client using HTTP to connect to a CTS server with TLS enabled, consider using HTTPS scheme instead"
	}
	return msg
}

func taskEnable(args []string, stdout, stderr io.Writer) int {
	c := newClientCmd("task enable", "[options] <task name>", `  Task Enable enables an existing task. The task is planned first; when the
  plan has changes, you are asked to approve them and the task is then
  applied at once. When it has none, the task is enabled without a run.
`, stdout, stderr)
	autoApprove := c.fs.Bool("auto-approve", false, "Skip interactive approval of inspect plan")
	name, cl, code := c.inspectClient(args, "Enabling")
	if code >= 0 {
		return code
	}
	u := c.ui
	ctx, cancel := commandContext()
	defer cancel()
	changes, code := inspectAndApprove(ctx, u, cl, name, "Enabling", *autoApprove)
	if code >= 0 {
		return code
	}
	if !changes {
		if _, err := cl.UpdateTask(ctx, name, true, client.RunDefault); err != nil {
			return u.fail(fmt.Sprintf("Error: unable to enable '%s'", name), clientError(cl, err))
		}
		u.info("'%s' enable complete!", name)
		return ExitOK
	}
	u.info("Enabling and running '%s'...\n", name)
	if _, err := cl.UpdateTask(ctx, name, true, client.RunNow); err != nil {
		return u.fail(fmt.Sprintf("Error: unable to enable and run '%s'", name), clientError(cl, err))
	}
	u.info("'%s' enable complete!", name)
	return ExitOK
}

func taskDisable(args []string, stdout, stderr io.Writer) int {
	c := newClientCmd("task disable", "[options] <task name>", `  Task Disable disables an existing task: it no longer runs until it is
  enabled again.
`, stdout, stderr)
	name, code := c.parseName(args)
	if code >= 0 {
		return code
	}
	u := c.ui
	u.info("Waiting to disable '%s'...", name)
	u.output("")
	cl, err := c.client()
	if err != nil {
		return u.fail(fmt.Sprintf("Error: unable to create client for '%s'", name), err.Error())
	}
	ctx, cancel := commandContext()
	defer cancel()
	if _, err := cl.UpdateTask(ctx, name, false, client.RunDefault); err != nil {
		return u.fail(fmt.Sprintf("Error: unable to disable '%s'", name), clientError(cl, err))
	}
	u.info("'%s' disable complete!", name)
	return ExitOK
}

// readTaskFile reads the task of -task-file for task create and task
// update, printing the file's warnings: the task, or the exit code of a
// failure (-1: none).
func (c *clientCmd) readTaskFile(stderr io.Writer, path string) (task.Spec, int) {
	if path == "" {
		return task.Spec{}, c.ui.failCode(ExitRequiredFlags, "Error: unable to create request", "no task file provided", moreHelp(c.name))
	}
	spec, warns, err := config.LoadTaskFileWarnings(path)
	if err != nil {
		return task.Spec{}, c.ui.fail("Error: unable to create request", "unable to read task file", err.Error())
	}
	for _, w := range warns {
		fmt.Fprint(stderr, prefixed(infoPrefix, "Warning: "+w))
	}
	return spec, -1
}

func taskCreate(args []string, stdout, stderr io.Writer) int {
	c := newClientCmd("task create", "[options] -task-file=<task config>", `  Task Create creates a new task from a file holding one task block (HCL,
  or JSON for a .json file); it does not update an existing task. The
  variable_files of the task are read here and sent as its variables. The
  task is planned first; after approval it is created and applied at once.
`, stdout, stderr)
	autoApprove := c.fs.Bool("auto-approve", false, "Skip interactive approval of inspect plan")
	taskFile := c.fs.String("task-file", "", "[Required] A file containing the hcl or json definition of a task")
	pos, code := c.parse(args)
	if code >= 0 {
		return code
	}
	u := c.ui
	warnIgnored(stderr, pos)
	spec, code := c.readTaskFile(stderr, *taskFile)
	if code >= 0 {
		return code
	}
	cl, err := c.client()
	if err != nil {
		return u.fail("Error: unable to create client", err.Error())
	}
	ctx, cancel := commandContext()
	defer cancel()

	spec = api.TaskView(spec)
	u.info("Inspecting changes to resource if creating task '%s'...\n", spec.Name)
	u.output("Generating plan that Consul-Terraform-Sync will use Terraform to execute\n")
	resp, err := cl.CreateTask(ctx, client.RunInspect, spec)
	if err != nil {
		return u.fail(fmt.Sprintf("Error: unable to generate plan for '%s'", spec.Name), clientError(cl, err))
	}
	payload, _ := json.MarshalIndent(map[string]any{"task": spec}, "    ", "  ")
	u.output("Request ID: %s", resp.RequestID)
	u.output("Request Payload:")
	u.output("%s\n", payload)
	plan := ""
	if resp.Run != nil {
		plan = resp.Run.Plan
	}
	u.output("Plan: \n%s", plan)
	if resp.Run != nil && resp.Run.TFCRunURL != "" {
		u.output("Terraform Cloud Run URL: %s\n", resp.Run.TFCRunURL)
	}
	if !*autoApprove {
		ok, err := approvePlan(ctx, u, spec.Name, "Creating")
		if err != nil {
			return u.fail(fmt.Sprintf("Error asking for approval: %s", err))
		}
		if !ok {
			return ExitOK
		}
	}
	u.info("Creating and running task '%s'...", spec.Name)
	u.output("The task creation request has been sent to the CTS server.")
	u.output("Please be patient as it may take some time to see a confirmation that this task has completed.")
	u.output("Warning: Terminating this process will not stop task creation.\n")
	resp, err = cl.CreateTask(ctx, client.RunNow, spec)
	if err != nil {
		return u.fail(fmt.Sprintf("Error: unable to create '%s'", spec.Name), clientError(cl, err))
	}
	u.info("Task '%s' created", spec.Name)
	u.output("Request ID: '%s'", resp.RequestID)
	return ExitOK
}

func taskUpdate(args []string, stdout, stderr io.Writer) int {
	c := newClientCmd("task update", "[options] -task-file=<task config> [task name]", `  Task Update (ctsync) gives a task created through the API the settings
  of a file holding one task block (HCL, or JSON for a .json file), as
  task create reads it: every field of the task becomes the file's (the
  variable_files of the task are read here and sent as its variables).
  The task keeps its history; when its desired state changed, it runs as
  any change does. The task name, when given, must be the file's. A task
  of the daemon's configuration files cannot be changed this way (only
  enabled, with task enable and task disable): change the file and reload.
`, stdout, stderr)
	taskFile := c.fs.String("task-file", "", "[Required] A file containing the hcl or json definition of a task")
	pos, code := c.parse(args)
	if code >= 0 {
		return code
	}
	u := c.ui
	if len(pos) > 1 {
		return u.failCode(ExitRequiredFlags, "Error: this command takes at most one argument: [options] [task name]",
			fmt.Sprintf("%d arguments were passed to the command: '%s'", len(pos), strings.Join(pos, ", ")),
			"All flags are required to appear before positional arguments if set\n", moreHelp(c.name))
	}
	spec, code := c.readTaskFile(stderr, *taskFile)
	if code >= 0 {
		return code
	}
	if len(pos) == 1 && pos[0] != spec.Name {
		return u.failCode(ExitRequiredFlags, "Error: unable to create request",
			fmt.Sprintf("the task file holds task '%s', not '%s': a task's name cannot be changed", spec.Name, pos[0]), moreHelp(c.name))
	}
	cl, err := c.client()
	if err != nil {
		return u.fail("Error: unable to create client", err.Error())
	}
	ctx, cancel := commandContext()
	defer cancel()
	spec = api.TaskView(spec)
	u.info("Updating task '%s'...", spec.Name)
	if _, err := cl.PatchTask(ctx, spec.Name, spec, client.RunDefault); err != nil {
		return u.fail(fmt.Sprintf("Error: unable to update '%s'", spec.Name), clientError(cl, err))
	}
	u.info("Task '%s' updated", spec.Name)
	return ExitOK
}

func taskDelete(args []string, stdout, stderr io.Writer) int {
	c := newClientCmd("task delete", "[options] <task name>", `  Task Delete deletes an existing task. If the task is not running, it is
  deleted at once; otherwise it is deleted when its run ends. Without
  -destroy, the infrastructure the task manages is left as it is.
`, stdout, stderr)
	autoApprove := c.fs.Bool("auto-approve", false, "Skip interactive approval of deleting a task")
	destroy := c.fs.Bool("destroy", false, "Destroy the task's infrastructure (terraform destroy) and remove its state first.")
	name, code := c.parseName(args)
	if code >= 0 {
		return code
	}
	u := c.ui
	cl, err := c.client()
	if err != nil {
		return u.fail("Error: unable to create client", fmt.Sprintf("client could not be created for '%s'", name), err.Error())
	}
	ctx, cancel := commandContext()
	defer cancel()
	// As in CTS, the question comes first: an unknown task is the
	// DELETE's 404.
	if !*autoApprove {
		u.info("Do you want to delete '%s'?", name)
		u.output(" - This action cannot be undone.")
		if *destroy {
			u.output(" - The infrastructure managed by the task will be destroyed (terraform destroy) and its Terraform state removed.")
		} else {
			u.output(" - Deleting a task will not destroy the infrastructure managed by the task.")
		}
		u.output(" - If the task is not running, it will be deleted immediately.")
		u.output(" - If the task is running, it will be deleted once it has completed.")
		ok, err := approve(ctx, u, name, "deleting")
		if err != nil {
			return u.fail(fmt.Sprintf("Error asking for approval: %s", err))
		}
		if !ok {
			return ExitOK
		}
	}
	u.info("Marking task '%s' for deletion...\n", name)
	resp, err := cl.DeleteTaskResult(ctx, name, *destroy)
	if err != nil {
		return u.fail(fmt.Sprintf("Error: unable to delete '%s'", name), clientError(cl, err))
	}
	switch resp.Status {
	case api.DeleteHeld: // a safety gate holds the destroy plan
		return heldDestroy(u, name, resp)
	case api.DeleteDone:
		u.info("Task '%s' deleted: its infrastructure was destroyed and its Terraform state removed.", name)
		u.output("Request ID: %s", resp.RequestID)
		return ExitOK
	}
	u.info("Task '%s' has been marked for deletion and will be deleted when not running.", name)
	u.output("Request ID: %s", resp.RequestID)
	if *destroy {
		return waitDestroyed(ctx, u, cl, name)
	}
	return ExitOK
}

// heldDestroy reports a task delete -destroy whose destroy plan a safety
// gate holds: nothing was destroyed, the task is kept until the plan is
// approved, and how to approve it (exit ExitHeld).
func heldDestroy(u term, name string, resp api.DeleteTaskResponse) int {
	u.info("The destroy of '%s' is held for approval: nothing was destroyed and the task is kept (disabled).", name)
	if p := resp.Plan; p != nil {
		u.output("Plan %s: %d to destroy (of %d resources).", p.ID, p.Destroy, p.InState)
		u.output("Held because: %s", p.Reason)
		u.output("Approve it to destroy and delete the task: %s task approve -plan=%s %s", Name, p.ID, name)
		u.output("Reject it to keep the task: %s task reject %s", Name, name)
	}
	u.output("Request ID: %s", resp.RequestID)
	return ExitHeld
}

// destroyPoll is how often task delete -destroy asks how the destroy goes.
var destroyPoll = time.Second

// waitDestroyed waits for the end of a delete with destroy and reports
// it: the task gone (its status answers 404) is a finished destroy; the
// task still there and no longer deleting is a failed one, whose error is
// in its latest destroy event.
func waitDestroyed(ctx context.Context, u term, cl *client.Client, name string) int {
	u.info("Waiting for terraform destroy of task '%s' (Ctrl-C stops waiting, not the destroy)...", name)
	for {
		sts, err := cl.TaskStatuses(ctx, name, client.StatusQuery{IncludeEvents: true})
		switch {
		case client.IsNotFound(err):
			u.info("Task '%s' deleted: its infrastructure was destroyed and its Terraform state removed.", name)
			return ExitOK
		case ctx.Err() != nil:
			u.info("Stopped waiting: the destroy of task '%s' goes on in the daemon (see ctsync status).", name)
			return ExitInterrupt
		case err != nil:
			return u.fail(fmt.Sprintf("Error: unable to follow the destroy of '%s'", name), clientError(cl, err))
		}
		if ts := sts[name]; ts.Status != api.StatusDeleting {
			msg := "the deletion was abandoned (the daemon is stopping?)"
			for _, ev := range ts.Events {
				if ev.Kind == store.KindDestroy && !ev.Success && ev.Error != nil {
					msg = ev.Error.Message
					break
				}
			}
			return u.fail(fmt.Sprintf("Error: the destroy of '%s' failed: the task is kept, disabled", name), msg)
		}
		select {
		case <-ctx.Done():
		case <-time.After(destroyPoll):
		}
	}
}

// taskLogs is `task logs NAME [-run ID]` (ctsync): the Terraform output of
// the task's latest run, or of the run given, on stdout; which run it is
// goes to stderr.
func taskLogs(args []string, stdout, stderr io.Writer) int {
	c := newClientCmd("task logs", "[options] <task name>", `  Task Logs prints the whole Terraform output (init, plan, apply) of a run
  of a task: its latest run, or the one given with -run (run ids are in
  the task's events: GET /v1/tasks/<name>/events). A log is kept on the
  instance that ran the task, for the task's last 20 runs.
`, stdout, stderr)
	runID := c.fs.String("run", "", "The id of the run (default: the latest run).")
	name, code := c.parseName(args)
	if code >= 0 {
		return code
	}
	u := c.ui
	cl, err := c.client()
	if err != nil {
		return u.fail("Error: unable to create client", err.Error())
	}
	ctx, cancel := commandContext()
	defer cancel()
	id := *runID
	if id == "" {
		evs, err := cl.Events(ctx, name)
		if err != nil {
			return u.fail(fmt.Sprintf("Error: unable to read the runs of '%s'", name), clientError(cl, err))
		}
		if len(evs) == 0 {
			return u.fail(fmt.Sprintf("Error: task '%s' has no runs yet", name))
		}
		ev := evs[0] // newest first
		result := "succeeded"
		if !ev.Success {
			result = "failed"
		}
		id = ev.ID
		fmt.Fprint(stderr, prefixed(infoPrefix, fmt.Sprintf("Latest run of '%s': %s, %s %s, started %s",
			name, id, ev.Kind, result, ev.StartTime.Local().Format("2006-01-02 15:04:05"))))
	}
	text, err := cl.EventLog(ctx, name, id)
	if err != nil {
		return u.fail(fmt.Sprintf("Error: unable to read the log of run '%s' of '%s'", id, name), clientError(cl, err))
	}
	fmt.Fprint(stdout, text)
	if text != "" && !strings.HasSuffix(text, "\n") {
		fmt.Fprintln(stdout)
	}
	return ExitOK
}

// taskRun is `task run NAME` (ctsync): the plan of the task is shown and,
// after approval, the task is applied now (POST /v1/tasks/{name}/run, as
// the dashboard's "Run now"), even if its inputs did not change since its
// last apply; the run's result is reported.
func taskRun(args []string, stdout, stderr io.Writer) int {
	c := newClientCmd("task run", "[options] <task name>", `  Task Run applies a task now, even if what it watches did not change. The
  task is planned first; when the plan has changes, you are asked to
  approve them. The command waits for the run and reports its result; the
  run's Terraform output is then read with 'ctsync task logs'.
`, stdout, stderr)
	autoApprove := c.fs.Bool("auto-approve", false, "Skip interactive approval of inspect plan")
	name, cl, code := c.inspectClient(args, "Running")
	if code >= 0 {
		return code
	}
	u := c.ui
	ctx, cancel := commandContext()
	defer cancel()
	if _, code := inspectAndApprove(ctx, u, cl, name, "Running", *autoApprove); code >= 0 {
		return code
	}
	u.info("Running '%s' (Ctrl-C stops waiting, not the run)...\n", name)
	resp, err := cl.RunTask(ctx, name)
	if err != nil && ctx.Err() != nil {
		u.info("Stopped waiting: the run of '%s' goes on in the daemon (see %s status %s).", name, Name, name)
		return ExitInterrupt
	}
	if err != nil {
		details := []string{clientError(cl, err)}
		// A failed apply answers 500 naming its run; the run's event has
		// the error in one line, instead of Terraform's whole one.
		var ce *client.Error
		if errors.As(err, &ce) && ce.StatusCode == http.StatusInternalServerError {
			if evs, evErr := cl.Events(ctx, name); evErr == nil {
				for _, ev := range evs {
					if ev.ID != "" && !ev.Success && strings.Contains(ce.Message, "(run "+ev.ID+")") {
						details = runLines(name, ev)
						break
					}
				}
			}
		}
		return u.fail(fmt.Sprintf("Error: the run of '%s' failed", name), details...)
	}
	switch {
	case resp.Status == api.RunHeld:
		return heldRun(u, name, resp)
	case resp.Event == nil && resp.Status != "":
		msg := resp.Message
		if msg == "" {
			msg = "the daemon recorded no run"
		}
		return u.fail(fmt.Sprintf("Error: '%s' did not run", name), fmt.Sprintf("Run %s: %s", orDash(resp.RunID), msg))
	case resp.Event == nil: // a daemon older than run ids
		u.info("'%s' run complete!", name)
		return ExitOK
	}
	ev := *resp.Event
	if !ev.Success {
		return u.fail(fmt.Sprintf("Error: the run of '%s' failed", name), runLines(name, ev)...)
	}
	u.info("'%s' run complete!", name)
	for _, l := range runLines(name, ev) {
		u.output("%s", l)
	}
	return ExitOK
}

// heldRun reports a run of task run whose plan a safety gate holds:
// nothing was applied, and how to approve it (exit ExitHeld).
func heldRun(u term, name string, resp api.RunTaskResponse) int {
	reason, id := resp.Message, resp.RunID
	if p := resp.Plan; p != nil {
		reason, id = p.Reason, p.ID
	}
	u.info("'%s' held for approval: run %s applied nothing", name, orDash(resp.RunID))
	if p := resp.Plan; p != nil && !p.Created.IsZero() {
		u.output("Plan %s: %d to add, %d to change, %d to destroy.", p.ID, p.Add, p.Change, p.Destroy)
	}
	u.output("Held because: %s", reason)
	u.output("Approve it: %s task approve -plan=%s %s (or reject it: %s task reject %s)", Name, id, name, Name, name)
	return ExitHeld
}

// runLines describe a run for task run: its id, what it did and how long
// it took, its plan, its error and where its Terraform output is.
func runLines(name string, ev store.Event) []string {
	result := "succeeded"
	if !ev.Success {
		result = "failed"
	}
	lines := []string{fmt.Sprintf("Run %s: %s %s in %s", ev.ID, ev.Kind, result,
		ev.EndTime.Sub(ev.StartTime).Round(100*time.Millisecond))}
	if ev.Plan != nil {
		lines = append(lines, fmt.Sprintf("Plan: %d to add, %d to change, %d to destroy.", ev.Plan.Add, ev.Plan.Change, ev.Plan.Destroy))
	}
	switch {
	case ev.ErrorSummary != "":
		lines = append(lines, ev.ErrorSummary)
	case ev.Error != nil:
		lines = append(lines, ev.Error.Message)
	}
	if ev.Refresh == "skipped" {
		lines = append(lines, `Refresh: skipped (-refresh=false; refresh policy "auto")`)
	}
	if ev.Targeted != "" {
		lines = append(lines, "Targeted: "+ev.Targeted)
	}
	if ev.TFCRunURL != "" {
		lines = append(lines, "Terraform Cloud Run URL: "+ev.TFCRunURL)
	}
	return append(lines, fmt.Sprintf("Its Terraform output: %s task logs -run=%s %s", Name, ev.ID, name))
}
