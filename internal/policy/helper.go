package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ctsync/ctsync/internal/depth"
	"github.com/ctsync/ctsync/internal/task"
)

// HelperName is the policy helper's executable.
const HelperName = "ctsync-policy"

// CheckTimeout bounds `ctsync-policy check` at configuration load.
const CheckTimeout = time.Minute

// maxAnswer bounds the helper's answer (deny messages are short lines).
const maxAnswer = 16 << 20

// HelperError is a failure of the policy helper itself: not found, not
// executable, crashed, an answer that is not one, another protocol. The
// verdict is unknown: the plan is not applied.
type HelperError struct {
	Path string // the executable, or HelperName when none was found
	Msg  string
}

func (e *HelperError) Error() string {
	return "policy helper " + e.Path + ": " + e.Msg
}

// findHelper finds the helper; the tests replace it.
var findHelper = FindHelper

// FindHelper returns the policy helper's path: ctsync-policy in the
// directory of the running executable (where every package installs it),
// else the first ctsync-policy in PATH. The error is a *HelperError
// naming where it looked.
func FindHelper() (string, error) {
	var looked []string
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		p := filepath.Join(filepath.Dir(exe), HelperName)
		fi, err := os.Stat(p)
		switch {
		case err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 == 0:
			return "", &HelperError{Path: p, Msg: fmt.Sprintf("is not executable (mode %v): the plan cannot be checked, so it is not applied", fi.Mode().Perm())}
		case err == nil && fi.Mode().IsRegular():
			return p, nil
		}
		looked = append(looked, filepath.Dir(exe)+" (next to "+filepath.Base(exe)+")")
	}
	if p, err := exec.LookPath(HelperName); err == nil {
		return p, nil
	}
	looked = append(looked, "PATH")
	return "", &HelperError{Path: HelperName, Msg: "not found in " + strings.Join(looked, " nor in ") +
		": it evaluates the tasks' policy blocks and ships with ctsync (install it next to the ctsync executable)"}
}

// Check compiles the policy files with the helper, without keeping the
// result: the check made when the configuration is loaded. A problem of
// the files is Errors (file, line, column); a failure of the helper is a
// *HelperError.
func Check(files []string) error {
	if len(files) == 0 {
		return Errors{{Msg: "no policy files"}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), CheckTimeout)
	defer cancel()
	ans, path, err := runHelper(ctx, append([]string{"check"}, files...), nil)
	if err != nil {
		if ctx.Err() != nil {
			return &HelperError{Path: path, Msg: fmt.Sprintf("did not check the policy files within %s", CheckTimeout)}
		}
		return err
	}
	if ans.Error != nil {
		return &HelperError{Path: path, Msg: fmt.Sprintf("%s error: %s", ans.Error.Kind, ans.Error.Message)}
	}
	if len(ans.Errors) > 0 {
		return Errors(ans.Errors)
	}
	return nil
}

// Evaluate evaluates the policy files, as they are now (the ones Hash
// covered), on a plan (the JSON of `terraform show -json`) within timeout
// (<= 0: task.DefaultPolicyTimeout), which covers starting the helper.
// It returns the deny messages, sorted; none: the plan may be applied.
// Any error (the files do not compile: Errors; a plan that is not JSON; a
// deny value that is not a string; a policy that fails at run time; the
// time limit: *TimeoutError; the context ending: ErrCancelled; the
// helper failing: *HelperError) means the verdict is unknown: the caller
// must not apply.
func Evaluate(ctx context.Context, files []string, timeout time.Duration, plan []byte, in Input) ([]string, error) {
	if timeout <= 0 {
		timeout = task.DefaultPolicyTimeout
	}
	if err := depth.JSON(plan, MaxPlanDepth, false); err != nil {
		return nil, fmt.Errorf("policy: the plan's JSON %v", err)
	}
	if !json.Valid(plan) {
		return nil, errors.New("policy: the plan is not valid JSON")
	}
	te := &TimeoutError{Files: slices.Clone(files), Timeout: timeout}
	ectx, cancel := context.WithTimeoutCause(ctx, timeout, te)
	defer cancel()
	// The request is written around the plan, which is not copied.
	head, err := json.Marshal(Request{Protocol: ProtocolVersion, Files: files, TimeoutMS: timeout.Milliseconds(), Input: in})
	if err != nil {
		return nil, fmt.Errorf("policy: request: %w", err)
	}
	cut := bytes.LastIndex(head, []byte(`"plan":`))
	if cut < 0 {
		return nil, errors.New("policy: request: no plan field")
	}
	stdin := io.MultiReader(bytes.NewReader(head[:cut+len(`"plan":`)]), bytes.NewReader(plan), strings.NewReader("}"))
	ans, path, err := runHelper(ectx, []string{"eval"}, stdin)
	switch {
	case ctx.Err() != nil:
		if c := context.Cause(ctx); c != nil && !errors.Is(c, ctx.Err()) {
			return nil, fmt.Errorf("%w: %w", ErrCancelled, c)
		}
		return nil, fmt.Errorf("%w: %w", ErrCancelled, ctx.Err())
	case ectx.Err() != nil && errors.Is(context.Cause(ectx), te):
		return nil, te
	case err != nil:
		return nil, err
	case len(ans.Errors) > 0:
		return nil, Errors(ans.Errors)
	case ans.Error != nil && ans.Error.Kind == KindTimeout:
		return nil, te
	case ans.Error != nil && ans.Error.Kind == KindEval:
		return nil, errors.New(ans.Error.Message)
	case ans.Error != nil:
		return nil, &HelperError{Path: path, Msg: fmt.Sprintf("%s error: %s", ans.Error.Kind, ans.Error.Message)}
	case ans.Deny == nil:
		return nil, &HelperError{Path: path, Msg: "answered without a verdict (no deny list): the plan is not applied"}
	}
	return ans.Deny, nil
}

// runHelper runs the helper with args and stdin and decodes its answer.
// It returns the helper's path (HelperName when it was not found).
func runHelper(ctx context.Context, args []string, stdin io.Reader) (*Answer, string, error) {
	path, err := findHelper()
	if err != nil {
		return nil, HelperName, err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = helperEnv()
	cmd.Stdin = stdin
	var stdout, stderr capped
	stdout.max, stderr.max = maxAnswer, 4096
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Its own process group, killed whole: a wrapper script's children
	// must not keep running (or keep its output open) past the limit.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	if ctx.Err() != nil {
		return nil, path, ctx.Err()
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return nil, path, &HelperError{Path: path, Msg: "cannot be run: " + pe.Err.Error()}
		}
		msg := "failed: " + err.Error()
		if tail := strings.TrimSpace(stderr.String()); tail != "" {
			msg += ": " + tail
		}
		return nil, path, &HelperError{Path: path, Msg: msg}
	}
	if stdout.over {
		return nil, path, &HelperError{Path: path, Msg: fmt.Sprintf("answered more than %d bytes", maxAnswer)}
	}
	var ans Answer
	if err := json.Unmarshal(stdout.Bytes(), &ans); err != nil {
		return nil, path, &HelperError{Path: path, Msg: fmt.Sprintf("gave an answer that is not its protocol's JSON (%v): %q", err, clip(stdout.Bytes(), 200))}
	}
	if ans.Protocol != ProtocolVersion {
		return nil, path, &HelperError{Path: path, Msg: fmt.Sprintf("speaks protocol %d, this ctsync speaks %d: install the ctsync-policy of the same release as ctsync", ans.Protocol, ProtocolVersion)}
	}
	return &ans, path, nil
}

// helperEnv is the helper's environment: none of the daemon's (its
// tokens), only what tunes the Go runtime and where temporary files go.
func helperEnv() []string {
	env := []string{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GOGC", "GOMEMLIMIT", "GOMAXPROCS", "GODEBUG", "GOTRACEBACK", "TMPDIR":
			env = append(env, kv)
		}
	}
	return env
}

func clip(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// capped is a buffer that keeps at most max bytes.
type capped struct {
	bytes.Buffer
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); len(p) > room {
		c.over = true
		c.Buffer.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return c.Buffer.Write(p)
}
