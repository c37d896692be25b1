package task

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
	// Files are the Rego files, relative to the config file's folder when
	// not absolute (resolved at load).
	Files []string `json:"files"`
}
