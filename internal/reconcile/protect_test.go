package reconcile

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/ctsync/ctsync/internal/redact"
)

// The strings of the variables of a task created through Create are shown
// as written in that task's view of the redactor only, from its creation
// to its removal; a Create refused because the name is taken leaves the
// existing task's view as it was.
func TestCreateProtectsTheTasksOwnView(t *testing.T) {
	const secret = "consul-acl-token-0123456789"
	red := redact.NewRedactor([]string{secret})
	h := start(t, 4, nil, servicesTask("cfg", "web"), func(o *Options) { o.Redactor = red })
	ctx := context.Background()
	shown := func(task string) bool { return red.ForTask(task).Redact(secret) == secret }

	api := servicesTask("api", "web")
	api.Variables = map[string]string{"v": strconv.Quote(secret)}
	if err := h.ctrl.Create(ctx, api, false); err != nil {
		t.Fatal(err)
	}
	if !shown("api") {
		t.Error("the task's own view redacts its variable's value")
	}
	if shown("cfg") || shown("") || red.Redact(secret) != redact.Redacted {
		t.Error("another task's view, or the plain one, shows the value")
	}

	taken := servicesTask("cfg", "web")
	taken.Variables = map[string]string{"v": strconv.Quote(secret)}
	if err := h.ctrl.Create(ctx, taken, false); !errors.Is(err, ErrExists) {
		t.Fatalf("create of a taken name: %v", err)
	}
	if shown("cfg") {
		t.Error("a refused create changed the existing task's view")
	}

	if err := h.ctrl.Delete(ctx, "api", false); err != nil {
		t.Fatal(err)
	}
	if shown("api") {
		t.Error("a deleted task's view still shows the value")
	}
}
