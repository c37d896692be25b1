package terraform

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// gatedModule creates one resource per service instance; each creation
// writes <dir>/started and waits until <dir>/go exists, so a test can act
// while the apply is in the middle.
const gatedModule = `
variable "services" {
  type = any
}

variable "gate_dir" {
  type = string
}

resource "terraform_data" "svc" {
  for_each = var.services
  input    = each.key

  provisioner "local-exec" {
    command = "touch ${var.gate_dir}/started; while [ ! -f ${var.gate_dir}/go ]; do sleep 0.05; done"
  }
}
`

// Consul, the state backend, goes away in the middle of an apply: the
// resources are created but Terraform cannot save the state and leaves it
// in errored.tfstate. The driver pushes it back once Consul answers again
// and reports the run applied; the state in Consul has the resources (a
// plan changes nothing). When Consul stays away longer than the push is
// retried, the run fails and the next run pushes the state first.
func TestStateSavedAfterBackendOutage(t *testing.T) {
	bin := needTerraform(t)
	consul := testutil.StartConsul(t)
	proxy := testutil.StartFaultProxy(t, consul.Addr)
	ctx := testCtx(t)
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	if err := os.MkdirAll(gate, 0o755); err != nil {
		t.Fatal(err)
	}
	o := Options{
		Spec: task.Spec{Name: "outage", Module: writeModule(t, dir, "gated", map[string]string{"main.tf": gatedModule}),
			Condition: servicesCondition("web"), Variables: map[string]string{"gate_dir": `"` + gate + `"`}},
		WorkDir: filepath.Join(dir, "outage"),
		Binary:  bin,
		Consul:  config.Consul{Address: "http://" + proxy.Addr, KVPath: "consul-terraform-sync/"},
	}
	d := mustNew(t, o)
	if err := d.Init(ctx); err != nil {
		t.Fatal(err)
	}
	errored := filepath.Join(d.WorkDir(), erroredState)

	// cut runs fn's apply with Consul refusing connections from the moment
	// the first resource is being created; heal is called once Terraform
	// has written errored.tfstate.
	cut := func(id string, in *task.Inputs, heal func()) (driver.Result, error) {
		os.Remove(filepath.Join(gate, "started"))
		os.Remove(filepath.Join(gate, "go"))
		type out struct {
			res driver.Result
			err error
		}
		done := make(chan out, 1)
		go func() {
			res, err := d.Apply(ctx, run(id), in)
			done <- out{res, err}
		}()
		testutil.Eventually(t, 60*time.Second, "the apply creates a resource", func() bool { return fileExists(filepath.Join(gate, "started")) })
		proxy.Refuse()
		if err := os.WriteFile(filepath.Join(gate, "go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 60*time.Second, "terraform writes "+erroredState, func() bool { return fileExists(errored) })
		heal()
		r := <-done
		return r.res, r.err
	}

	start := time.Now()
	res, err := cut("a1", services("web-1", "web-2"), proxy.Restore)
	t.Logf("MEASURED apply through the outage: %v", time.Since(start).Round(time.Millisecond))
	if err != nil || res.Add != 2 || !res.Changes {
		t.Fatalf("apply through the outage: %+v %v", res, err)
	}
	if fileExists(errored) {
		t.Fatal(erroredState + " is still there")
	}
	b, _ := os.ReadFile(res.LogPath)
	if !strings.Contains(string(b), "state push") || !strings.Contains(string(b), "the run has applied") {
		t.Fatalf("run log:\n%s", b)
	}
	if err := os.WriteFile(filepath.Join(gate, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := d.Plan(ctx, run("p1"), services("web-1", "web-2")); err != nil || p.Changes {
		t.Fatalf("plan after the outage: %+v %v", p, err)
	}

	// Consul stays away for longer than the push is retried: the run
	// fails, errored.tfstate stays; the next run pushes it first.
	bound := pushBound
	defer func() { pushBound = bound }()
	pushBound = 3 * time.Second
	res, err = cut("a2", services("web-1", "web-2", "web-3"), func() {})
	if err == nil {
		t.Fatalf("apply while Consul stays away: %+v", res)
	}
	if !fileExists(errored) {
		t.Fatal(erroredState + " is gone although it was not pushed")
	}
	proxy.Restore()
	pushBound = bound
	if err := os.WriteFile(filepath.Join(gate, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	p, err := d.Plan(ctx, run("p2"), services("web-1", "web-2", "web-3"))
	if err != nil || p.Changes || fileExists(errored) {
		b, _ := os.ReadFile(p.LogPath)
		t.Fatalf("plan after the state was pushed by the next run: %+v %v\n%s", p, err, b)
	}
	t.Logf("MEASURED the next run pushed the state in %v", time.Since(start).Round(time.Millisecond))
}

// A state the backend refuses for good (another lineage: not the state of
// this workspace any more) is moved aside with a warning, and the run goes
// on.
func TestErroredStateRefusedMovedAside(t *testing.T) {
	bin := needTerraform(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	d := mustNew(t, localTask(t, dir, "refused", bin))
	if _, err := d.Apply(ctx, run("a1"), services("web-1")); err != nil {
		t.Fatal(err)
	}
	st, err := os.ReadFile(filepath.Join(dir, "state", "workspaces", "refused", "terraform.tfstate"))
	if err != nil {
		t.Fatal(err)
	}
	var state map[string]any
	if err := json.Unmarshal(st, &state); err != nil {
		t.Fatal(err)
	}
	state["lineage"] = "00000000-0000-0000-0000-000000000000"
	state["serial"] = 99
	b, _ := json.Marshal(state)
	if err := os.WriteFile(filepath.Join(d.WorkDir(), erroredState), b, 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := d.Plan(ctx, run("p1"), services("web-1"))
	if err != nil || res.Changes {
		t.Fatalf("plan: %+v %v", res, err)
	}
	aside, _ := filepath.Glob(filepath.Join(d.WorkDir(), erroredState+".*.refused"))
	if fileExists(filepath.Join(d.WorkDir(), erroredState)) || len(aside) != 1 {
		t.Fatalf("the refused state is not moved aside: %v", aside)
	}
}

// An errored.tfstate that no push can ever save does not stop the task's
// runs. An empty one (Terraform had no state to save: `state push` answers
// "no state") is removed; a damaged one is moved aside
// (errored.tfstate.<unix time>.unreadable). Before, each run retried the
// push for pushBound and failed, so the task never applied again (a soak
// under chaos found a task stuck so, and its run outlasting the shutdown's
// grace period).
func TestErroredStateUnpushableDoesNotStopRuns(t *testing.T) {
	bin := needTerraform(t)
	ctx := testCtx(t)
	bound := pushBound
	defer func() { pushBound = bound }()
	pushBound = 20 * time.Second
	for _, tc := range []struct {
		name, content, aside string
	}{
		{"empty", "", ""},
		{"damaged", `{"version": 4, "lineage": `, ".*.unreadable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d := mustNew(t, localTask(t, dir, "unpushable-"+tc.name, bin))
			if _, err := d.Apply(ctx, run("a1"), services("web-1")); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d.WorkDir(), erroredState), []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			res, err := d.Apply(ctx, run("a2"), services("web-1", "web-2"))
			if err != nil {
				t.Fatalf("apply with an unpushable %s: %v", erroredState, err)
			}
			if took := time.Since(start); took >= pushBound {
				t.Errorf("the apply took %s: it retried a push that cannot succeed", took)
			}
			if !res.Changes {
				t.Errorf("apply: %+v, want the new instance applied", res)
			}
			if fileExists(filepath.Join(d.WorkDir(), erroredState)) {
				t.Fatalf("%s is still in the task's directory", erroredState)
			}
			aside, _ := filepath.Glob(filepath.Join(d.WorkDir(), erroredState+".*"))
			if tc.aside == "" && len(aside) != 0 {
				t.Errorf("an empty %s is moved aside instead of removed: %v", erroredState, aside)
			}
			if tc.aside != "" {
				kept, _ := filepath.Glob(filepath.Join(d.WorkDir(), erroredState+tc.aside))
				if len(kept) != 1 {
					t.Errorf("the damaged state is not moved aside: %v", aside)
				} else if b, _ := os.ReadFile(kept[0]); string(b) != tc.content {
					t.Errorf("the file moved aside holds %q, want %q", b, tc.content)
				}
			}
		})
	}
}
