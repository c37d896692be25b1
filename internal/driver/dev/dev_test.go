package dev

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/task"
)

func TestDevelopmentDriverLogsAndChangesNothing(t *testing.T) {
	var buf bytes.Buffer
	d := New(task.Spec{Name: "web", Module: "./m", Variables: map[string]string{"dir": `"x"`}},
		slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	ctx := context.Background()
	if err := d.Init(ctx); err != nil {
		t.Fatal(err)
	}
	in := &task.Inputs{Services: map[string]task.Service{"web-1.n1.dc1": {ID: "web-1"}}, ConsulKV: map[string]string{"k": "v"},
		Nodes:       []task.Node{{Node: "node-1"}},
		Intentions:  []task.Intention{{SourceName: "web", DestinationName: "db", Action: "allow"}},
		TaskOutputs: map[string]json.RawMessage{"up": json.RawMessage(`{}`)}}
	res, err := d.Apply(ctx, driver.Run{ID: "r1"}, in)
	if err != nil || res.Changes || res.Add+res.Change+res.Destroy != 0 {
		t.Fatalf("apply: %+v %v", res, err)
	}
	if _, err := d.Destroy(ctx, driver.Run{ID: "r2"}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"would write the root module", "would run terraform apply", "web-1.n1.dc1", "consul_kv_keys=[k]",
		"variables=[dir]", "nodes=[node-1]", "intentions=[web->db:allow]", "task_outputs_of=[up]", "would run terraform destroy", `\"id\":\"web-1\"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}
