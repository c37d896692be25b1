package terraform

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"
)

// ExportOutput is the root output that holds the module's outputs of a
// task whose outputs another task receives (task.Spec.ExportOutputs).
const ExportOutput = "ctsync_outputs"

// readOutputs returns the module's outputs after an apply, as a JSON object
// (name to value), read with `terraform output -json`.
func (d *Driver) readOutputs(ctx context.Context) (json.RawMessage, error) {
	outs, err := d.tf.Output(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the module's outputs: %w", err)
	}
	o, ok := outs[ExportOutput]
	if !ok || len(o.Value) == 0 || string(o.Value) == "null" {
		return json.RawMessage("{}"), nil
	}
	return o.Value, nil
}

// taskOutputsText renders the task_outputs variable: an object with, for
// each named task, its outputs (a JSON object, "{}" when none were
// recorded), in name order.
func taskOutputsText(names []string, outputs map[string]json.RawMessage) ([]byte, error) {
	vals := map[string]cty.Value{}
	for _, n := range slices.Sorted(slices.Values(names)) {
		raw := outputs[n]
		if len(raw) == 0 {
			raw = json.RawMessage("{}")
		}
		ty, err := ctyjson.ImpliedType(raw)
		if err != nil {
			return nil, fmt.Errorf("the recorded outputs of task %q are not valid JSON: %w", n, err)
		}
		v, err := ctyjson.Unmarshal(raw, ty)
		if err != nil {
			return nil, fmt.Errorf("the recorded outputs of task %q: %w", n, err)
		}
		vals[n] = v
	}
	return hclwrite.TokensForValue(cty.ObjectVal(vals)).Bytes(), nil
}
