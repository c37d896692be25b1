package gate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	tfjson "github.com/hashicorp/terraform-json"
)

// Masked is what a sensitive value becomes in the canonical form of a
// plan's changes (ChangesDigest): it is never hashed in clear.
const Masked = "(sensitive value)"

// ChangesDigest is the digest of a plan's resource changes as the operator
// sees them, from the plan's JSON form (`terraform show -json`): sha256
// over a canonical form of each change (address, actions, the values
// before and after, which of the values after are unknown yet), in address
// order. A value Terraform marks sensitive is replaced by Masked before
// anything is hashed, and redact (nil: none) is applied to every other
// string, so that a secret never reaches the hash's input (a hash of a
// low-entropy secret would give it away). Two plans with the same digest
// make the same changes: an approval of one holds for the other (a held
// plan made again after a restart).
func ChangesDigest(planJSON []byte, redact func(string) string) (string, error) {
	b, err := canonicalChanges(planJSON, redact)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// canonicalChange is one resource change as ChangesDigest hashes it.
type canonicalChange struct {
	Address string   `json:"address"`
	Actions []string `json:"actions"`
	Before  any      `json:"before"`
	After   any      `json:"after"`
	Unknown any      `json:"after_unknown,omitempty"`
}

// canonicalChanges is the input of ChangesDigest's hash: the changes as
// JSON (object keys sorted by encoding/json), sensitive values masked.
func canonicalChanges(planJSON []byte, redact func(string) string) ([]byte, error) {
	if len(planJSON) == 0 {
		return nil, fmt.Errorf("the plan has no JSON form")
	}
	// Only the resource changes are read (not through tfjson.Plan, which
	// refuses a plan without a format version it knows: the digest of a
	// newer Terraform's plan is still the digest of its changes).
	var p struct {
		ResourceChanges []*tfjson.ResourceChange `json:"resource_changes"`
	}
	if err := json.Unmarshal(planJSON, &p); err != nil {
		return nil, fmt.Errorf("reading the plan's JSON: %w", err)
	}
	if redact == nil {
		redact = func(s string) string { return s }
	}
	out := make([]canonicalChange, 0, len(p.ResourceChanges))
	for _, rc := range p.ResourceChanges {
		if rc == nil || rc.Change == nil || rc.Change.Actions.NoOp() || rc.Change.Actions.Read() {
			continue // not a change the plan makes
		}
		acts := make([]string, len(rc.Change.Actions))
		for i, a := range rc.Change.Actions {
			acts[i] = string(a)
		}
		out = append(out, canonicalChange{Address: rc.Address, Actions: acts,
			Before:  mask(rc.Change.Before, rc.Change.BeforeSensitive, redact),
			After:   mask(rc.Change.After, rc.Change.AfterSensitive, redact),
			Unknown: rc.Change.AfterUnknown})
	}
	slices.SortFunc(out, func(a, b canonicalChange) int { return strings.Compare(a.Address, b.Address) })
	return json.Marshal(out)
}

// mask returns v with every value that the sensitivity mask s (Terraform's
// before_sensitive / after_sensitive: true, or an object or array of the
// same shape as v) marks replaced by Masked, and redact applied to every
// other string.
func mask(v, s any, redact func(string) string) any {
	if b, ok := s.(bool); ok && b {
		if v == nil {
			return nil
		}
		return Masked
	}
	switch x := v.(type) {
	case map[string]any:
		sm, _ := s.(map[string]any)
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = mask(e, sm[k], redact)
		}
		return out
	case []any:
		sl, _ := s.([]any)
		out := make([]any, len(x))
		for i, e := range x {
			var si any
			if i < len(sl) {
				si = sl[i]
			}
			out[i] = mask(e, si, redact)
		}
		return out
	case string:
		return redact(x)
	}
	return v
}
