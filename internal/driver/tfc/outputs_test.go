package tfc

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/testutil"
)

// A task whose outputs another task receives (chaining) gets its module's
// outputs, sensitive ones included, from the workspace's state after a
// remote apply.
func TestOTFOutputs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs OTF")
	}
	o := testutil.StartOTF(t)
	ctx := context.Background()
	d := otfDriver(t, o, "up", func(opts *Options) { opts.Spec.ExportOutputs = true })
	res, err := d.Apply(ctx, driver.Run{ID: "r1"}, inputs("web-1", "web-2"))
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	var got map[string]any
	if err := json.Unmarshal(res.Outputs, &got); err != nil {
		t.Fatalf("outputs %s: %v", res.Outputs, err)
	}
	if got["ids"] != "v1:web-1,web-2" || got["secret"] != "s3cret" {
		t.Fatalf("outputs = %s", res.Outputs)
	}
	// Without ExportOutputs nothing is read.
	plain := otfDriver(t, o, "plain", nil)
	res, err = plain.Apply(ctx, driver.Run{ID: "r2"}, inputs("web-1"))
	if err != nil || res.Outputs != nil {
		t.Fatalf("apply without ExportOutputs: outputs %s, error %v", res.Outputs, err)
	}
}
