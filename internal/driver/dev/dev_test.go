package dev

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

// A held plan changes nothing and is applied once; a discarded one is
// stale.
func TestDevelopmentDriverHeldPlan(t *testing.T) {
	d := New(task.Spec{Name: "web"}, nil)
	ctx := context.Background()
	p, err := d.PlanHeld(ctx, driver.Run{ID: "p1"}, &task.Inputs{})
	if err != nil || p.Changes || p.ID != "p1" || !json.Valid(p.JSON) {
		t.Fatalf("held: %+v %v", p, err)
	}
	if res, err := d.ApplyPlan(ctx, driver.Run{ID: "a1"}, p); err != nil || res.Changes {
		t.Fatalf("apply: %+v %v", res, err)
	}
	if _, err := d.ApplyPlan(ctx, driver.Run{ID: "a2"}, p); !errors.Is(err, driver.ErrPlanStale) {
		t.Fatalf("applied twice: %v", err)
	}
	p, _ = d.PlanHeld(ctx, driver.Run{ID: "p2"}, &task.Inputs{})
	if err := d.DiscardPlan(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ApplyPlan(ctx, driver.Run{ID: "a3"}, p); !errors.Is(err, driver.ErrPlanStale) {
		t.Fatalf("a discarded plan: %v", err)
	}
}
