package gate

import "errors"

// Errors an approval's decision returns (the API maps them to statuses;
// the controller wraps them with the task's and the plan's names). A
// *SupersededError is the third kind.
var (
	// ErrNoPlan: the task holds no plan (it has never been held, or its
	// held plan was applied since).
	ErrNoPlan = errors.New("no held plan")
	// ErrStalePlan: the id names another plan than the task's held one,
	// or a plan that is no longer pending (approved, rejected, expired).
	ErrStalePlan = errors.New("not the pending plan")
)
