// Command ctsync-policy is ctsync's policy helper: it evaluates a task's
// Open Policy Agent policies (Rego v1) on a plan, for the daemon, which
// runs it for every evaluation and does not link OPA itself (see
// internal/policy for the protocol, docs/security.md).
//
//	ctsync-policy check FILE...   compile the files; a JSON answer on stdout
//	ctsync-policy eval            a JSON request on stdin, a JSON answer on stdout
//	ctsync-policy version         its version, protocol and OPA's
//
// check and eval exit 0 when they wrote an answer, 2 on a usage error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ctsync/ctsync/internal/policy"
	"github.com/ctsync/ctsync/internal/policy/engine"
)

// Version, Commit and BuildDate are stamped by the build (scripts/version.sh
// ldflags), as ctsync's.
var Version, Commit, BuildDate = "0.0.0-dev", "", ""

// maxRequest bounds a request (a plan of 10,000 resources is ~20 MB).
const maxRequest = 1 << 30

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: ctsync-policy check FILE... | eval | version")
		return 2
	}
	var ans policy.Answer
	switch args[0] {
	case "version", "-version", "--version":
		fmt.Fprintf(stdout, "ctsync-policy v%s (protocol %d, OPA %s)\n", Version, policy.ProtocolVersion, engine.OPAVersion)
		if Commit != "" {
			fmt.Fprintf(stdout, "commit %s, built %s\n", Commit, BuildDate)
		}
		return 0
	case "check":
		ans = check(args[1:])
	case "eval":
		if len(args) > 1 {
			fmt.Fprintln(stderr, "ctsync-policy eval takes no arguments: the request is read on stdin")
			return 2
		}
		ans = eval(stdin)
	default:
		fmt.Fprintf(stderr, "ctsync-policy: unknown command %q (check, eval, version)\n", args[0])
		return 2
	}
	ans.Protocol = policy.ProtocolVersion
	if err := json.NewEncoder(stdout).Encode(ans); err != nil {
		fmt.Fprintln(stderr, "ctsync-policy: writing the answer:", err)
		return 1
	}
	return 0
}

func check(files []string) policy.Answer {
	var ans policy.Answer
	if err := engine.Check(files); err != nil {
		ans.Errors = fileErrors(err)
	}
	return ans
}

func eval(stdin io.Reader) policy.Answer {
	var req policy.Request
	b, err := io.ReadAll(io.LimitReader(stdin, maxRequest+1))
	if err == nil && len(b) > maxRequest {
		err = fmt.Errorf("larger than %d bytes", maxRequest)
	}
	if err == nil {
		err = json.Unmarshal(b, &req)
	}
	if err != nil {
		return policy.Answer{Error: &policy.AnswerError{Kind: policy.KindRequest, Message: "the request: " + err.Error()}}
	}
	b = nil
	if req.Protocol != policy.ProtocolVersion {
		return policy.Answer{Error: &policy.AnswerError{Kind: policy.KindProtocol,
			Message: fmt.Sprintf("the request is of protocol %d; this ctsync-policy (%s) speaks %d", req.Protocol, Version, policy.ProtocolVersion)}}
	}
	set, err := engine.Load(context.Background(), req.Files)
	if err != nil {
		return policy.Answer{Errors: fileErrors(err)}
	}
	msgs, err := set.EvalWithin(context.Background(), time.Duration(req.TimeoutMS)*time.Millisecond, req.Plan, req.Input)
	var te *policy.TimeoutError
	switch {
	case errors.As(err, &te):
		return policy.Answer{Error: &policy.AnswerError{Kind: policy.KindTimeout, Message: err.Error()}}
	case err != nil:
		return policy.Answer{Error: &policy.AnswerError{Kind: policy.KindEval, Message: err.Error()}}
	}
	if msgs == nil {
		msgs = []string{}
	}
	return policy.Answer{Deny: msgs}
}

// fileErrors is a load error as the answer's errors.
func fileErrors(err error) []*policy.Error {
	var es policy.Errors
	if errors.As(err, &es) {
		return es
	}
	return []*policy.Error{{Msg: err.Error()}}
}
