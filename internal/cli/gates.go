package cli

import (
	"context"
	"maps"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/policy"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/task"
)

// withPolicyDigest adds the digest of a task's policy files
// (driver.PartPolicy) to the parts of its desired state the driver gives:
// whatever the driver, editing a policy file makes the task plan again.
// A policy file that cannot be read fails the decision, naming the file.
func withPolicyDigest(desired reconcile.DesiredFunc) reconcile.DesiredFunc {
	return func(ctx context.Context, spec task.Spec) (map[string]string, error) {
		parts, err := desired(ctx, spec)
		if err != nil || spec.Policy == nil {
			return parts, err
		}
		h, err := policy.Hash(spec.Policy.Files)
		if err != nil {
			return nil, err
		}
		out := maps.Clone(parts)
		if out == nil {
			out = map[string]string{}
		}
		out[driver.PartPolicy] = h
		return out, nil
	}
}
