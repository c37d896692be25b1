package task

import "fmt"

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
}

// Policy is a task's policy block (a ctsync extension): Open Policy Agent
// Rego files evaluated on every plan; each message in data.ctsync.deny
// blocks the run.
type Policy struct {
	// Files are the Rego files; a relative path is relative to ctsync's
	// current directory, as variable_files and local module paths are.
	Files []string `json:"files"`
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
		if a.Expire < 0 {
			return fieldErr("approval.expire", "(%s) cannot be negative", a.Expire)
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
	}
	return nil
}
