package task

import (
	"fmt"
	"time"
)

// Approval is a task's approval block (a ctsync extension): which runs wait
// for an operator before they apply. A nil *Approval on a Spec means no
// gate.
type Approval struct {
	// Required holds every run whose plan has changes.
	Required bool `json:"required"`
	// MaxDestroy holds a plan that destroys more resources than this; nil
	// means no limit (0 holds any destroy).
	MaxDestroy *int `json:"max_destroy,omitempty"`
	// MaxDestroyPercent holds a plan that destroys more than this share
	// (0-100) of the resources in the task's state; nil means no limit.
	MaxDestroyPercent *int `json:"max_destroy_percent,omitempty"`
	// Expire drops a held plan not approved within it (the task stays
	// held until the next change); 0 means never.
	Expire Duration `json:"expire,omitempty"`
	// Window makes MaxDestroy and MaxDestroyPercent judge the destroys
	// applied within it plus the plan's, against the most resources the
	// task managed within it; nil means DefaultWindow, 0 judges each plan
	// alone (EffectiveWindow).
	Window *Duration `json:"window,omitempty"`
	// MaxReplace holds a plan that replaces more resources than this (a
	// replacement, delete-then-create or create-then-delete of one
	// address, is not a destroy for MaxDestroy and MaxDestroyPercent);
	// nil means no limit.
	MaxReplace *int `json:"max_replace,omitempty"`
}

// DefaultWindow is approval.window when the block does not set it. An hour
// covers the drains seen in incidents (a sync tool or a restarted agent
// deregistering instances one by one, each change applied within seconds
// to minutes of the previous one) many times over, and is short enough
// that ordinary scaling down spread over a day is judged in small parts.
const DefaultWindow = time.Hour

// MaxWindow is the longest approval.window accepted: the store keeps one
// entry per apply within the window.
const MaxWindow = 7 * 24 * time.Hour

// EffectiveWindow is the window the destroy rules judge over: Window, or
// DefaultWindow when it is not set; 0: each plan alone.
func (a *Approval) EffectiveWindow() time.Duration {
	if a == nil {
		return 0
	}
	if a.Window == nil {
		return DefaultWindow
	}
	return a.Window.D()
}

// CheckWindow is approval.window's rule for a value that is set, the same
// for a configuration file and a request to the API.
func CheckWindow(v time.Duration) error {
	switch {
	case v < 0:
		return fmt.Errorf("(%s) cannot be negative (\"0s\" judges each plan alone)", v)
	case v > 0 && v < time.Second:
		return fmt.Errorf("(%s) must be at least 1s, or \"0s\" to judge each plan alone", v)
	case v > MaxWindow:
		return fmt.Errorf("(%s) must be at most %s", v, MaxWindow)
	}
	return nil
}

// Policy is a task's policy block (a ctsync extension): Open Policy Agent
// Rego files evaluated on every plan; each message in data.ctsync.deny
// blocks the run.
type Policy struct {
	// Files are the Rego files; a relative path is relative to ctsync's
	// current directory, as variable_files and local module paths are.
	Files []string `json:"files"`
	// Timeout bounds one evaluation of the files on a plan; past it the
	// run is denied. 0 means DefaultPolicyTimeout.
	Timeout Duration `json:"timeout,omitempty"`
}

// DefaultPolicyTimeout is how long a policy evaluation may take when the
// policy block sets no timeout; MaxPolicyTimeout is the longest timeout
// accepted (an evaluation holds one of the run slots).
const (
	DefaultPolicyTimeout = 5 * time.Second
	MaxPolicyTimeout     = 10 * time.Minute
)

// EvalTimeout is the time limit of one evaluation of the policy.
func (p *Policy) EvalTimeout() time.Duration {
	if p == nil || p.Timeout <= 0 {
		return DefaultPolicyTimeout
	}
	return p.Timeout.D()
}

// CheckPolicyTimeout is policy.timeout's rule for a value that is set.
func CheckPolicyTimeout(v time.Duration) error {
	if v <= 0 || v > MaxPolicyTimeout {
		return fmt.Errorf("(%s) must be longer than 0 and at most %s (leave it out for %s)", v, MaxPolicyTimeout, DefaultPolicyTimeout)
	}
	return nil
}

// MinExpire is the shortest approval.expire: a plan that expired sooner
// could not be approved by anyone.
const MinExpire = time.Second

// CheckExpire is approval.expire's rule for a value that is set, the same
// for a configuration file and a request to the API (ParseExpire).
func CheckExpire(v time.Duration) error {
	switch {
	case v < 0:
		return fmt.Errorf("(%s) cannot be negative", v)
	case v == 0:
		return fmt.Errorf("must be longer than 0 (leave it out and a held plan waits until it is approved or rejected)")
	case v < MinExpire:
		return fmt.Errorf("(%s) must be at least %s: a plan that expires sooner cannot be approved", v, MinExpire)
	}
	return nil
}

// ParseExpire reads approval.expire as a configuration file or a request
// gives it: a Go duration ("24h", "30m"), then CheckExpire.
func ParseExpire(s string) (time.Duration, error) {
	v, err := ParseDuration(s)
	if err != nil {
		return 0, err
	}
	return v, CheckExpire(v)
}

// ParseDuration reads a duration as the configuration files write one: a
// Go duration string such as "5s" or "1m30s".
func ParseDuration(s string) (time.Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a valid duration (use a Go duration such as \"5s\" or \"1m30s\")", s)
	}
	return v, nil
}

// validateGates checks the approval and policy blocks' own rules (the
// files' contents are checked where they are read: configuration load).
func (s *Spec) validateGates() error {
	if a := s.Approval; a != nil {
		if a.MaxDestroy != nil && *a.MaxDestroy < 0 {
			return fieldErr("approval.max_destroy", "(%d) cannot be negative (0 holds any plan that destroys a resource)", *a.MaxDestroy)
		}
		if p := a.MaxDestroyPercent; p != nil && (*p < 0 || *p > 100) {
			return fieldErr("approval.max_destroy_percent", "(%d) must be between 0 and 100", *p)
		}
		if a.MaxReplace != nil && *a.MaxReplace < 0 {
			return fieldErr("approval.max_replace", "(%d) cannot be negative (0 holds any plan that replaces a resource)", *a.MaxReplace)
		}
		if a.Window != nil {
			if err := CheckWindow(a.Window.D()); err != nil {
				return fieldErr("approval.window", "%v", err)
			}
		}
		if a.Expire != 0 {
			if err := CheckExpire(a.Expire.D()); err != nil {
				return fieldErr("approval.expire", "%v", err)
			}
		}
	}
	if p := s.Policy; p != nil {
		if len(p.Files) == 0 {
			return fieldErr("policy.files", "is required: the Rego files to evaluate on every plan")
		}
		for i, f := range p.Files {
			if f == "" {
				return fieldErr(fmt.Sprintf("policy.files[%d]", i), "cannot be empty")
			}
		}
		if p.Timeout != 0 {
			if err := CheckPolicyTimeout(p.Timeout.D()); err != nil {
				return fieldErr("policy.timeout", "%v", err)
			}
		}
	}
	return nil
}
