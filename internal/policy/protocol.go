package policy

import "encoding/json"

// The protocol between the daemon and its policy helper (ctsync-policy):
//
//	ctsync-policy check FILE...  compiles the files; the answer's errors
//	                             are what is wrong with them (none: fine)
//	ctsync-policy eval           reads a Request (JSON) on stdin and
//	                             evaluates the files on its plan
//	ctsync-policy version        prints its version, protocol and OPA's
//
// check and eval write one Answer (JSON) on stdout and exit 0 when they
// wrote one, whatever its content; any other exit status, or an answer
// that does not decode, is a failure of the helper. A helper that does not
// speak the request's protocol answers with Error.Kind "protocol" and its
// own Protocol; the daemon refuses an answer of another protocol.

// ProtocolVersion is the version of the protocol this ctsync and its
// helper speak. It changes when a field changes meaning or is removed.
const ProtocolVersion = 1

// Request is what the daemon sends `ctsync-policy eval` on stdin.
type Request struct {
	Protocol int      `json:"protocol"`
	Files    []string `json:"files"`
	// TimeoutMS is the policy's timeout in milliseconds: the helper stops
	// the evaluation past it. The daemon's own limit, the same timeout
	// counted from before the helper's start, kills the helper.
	TimeoutMS int64 `json:"timeout_ms"`
	Input     Input `json:"input"`
	// Plan is input.plan: `terraform show -json` of the plan.
	Plan json.RawMessage `json:"plan"`
}

// Answer is what the helper writes on stdout.
type Answer struct {
	Protocol int `json:"protocol"`
	// Deny are the deny messages, sorted, of an evaluation that gave a
	// verdict: [] lets the plan through; null or absent is no verdict.
	Deny []string `json:"deny"`
	// Errors are the problems of the policy files (read, parse, compile),
	// with file, line and column: no verdict.
	Errors []*Error `json:"errors,omitempty"`
	// Error is an evaluation that gave no verdict.
	Error *AnswerError `json:"error,omitempty"`
}

// AnswerError is an evaluation that gave no verdict.
type AnswerError struct {
	// Kind is "eval" (a runtime error of the policy, a plan that is not
	// JSON, a deny value that is not a set of strings), "timeout" (the
	// request's time ran out), "request" (a request that does not decode)
	// or "protocol" (a protocol the helper does not speak).
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// The kinds of AnswerError.
const (
	KindEval     = "eval"
	KindTimeout  = "timeout"
	KindRequest  = "request"
	KindProtocol = "protocol"
)
