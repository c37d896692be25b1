package terraform

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// deviceModule makes one object of the device test provider per service
// instance, named as the instance, holding its address and port.
const deviceModule = `terraform {
  required_providers {
    device = { source = "ctsync/device" }
  }
}

variable "services" {
  type = any
}

resource "device_object" "instance" {
  for_each = var.services
  name     = each.key
  value    = "${each.value.address}:${each.value.port}"
}
`

// deviceTask returns the Options of a task of deviceModule whose objects
// are files in the returned directory, with Terraform pointed at a mirror
// holding this checkout's device provider.
func deviceTask(t *testing.T, dir, name, bin string) (Options, string) {
	t.Helper()
	o := localTask(t, dir, name, bin)
	t.Setenv("TF_CLI_CONFIG_FILE", testutil.DeviceCLIConfig(t, dir))
	o.Spec.Module = writeModule(t, dir, "mod-"+name, map[string]string{"main.tf": deviceModule})
	dev := filepath.Join(dir, "device-"+name)
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	o.Spec.Providers = []string{"device"}
	o.Providers = []config.Provider{{Name: "device", Args: config.ProviderBody{Attrs: map[string]cty.Value{
		"dir": cty.StringVal(dev), "read_delay": cty.StringVal("0s"), "write_delay": cty.StringVal("0s")}}}}
	o.Driver.RequiredProviders = map[string]config.RequiredProvider{"device": {Source: "ctsync/device", Version: testutil.DeviceProviderVersion}}
	return o, dev
}

// instances are services web-<port> on 10.0.0.1:<port>.
func instances(ports ...int) *task.Inputs {
	in := &task.Inputs{Services: map[string]task.Service{}}
	for _, p := range ports {
		s := sampleService("", "node-1")
		s.Port = p
		s.ID = "web-" + strconv.Itoa(p)
		in.Services[s.ID] = s
	}
	return in
}

// runLog reads a run's log file.
func runLog(t *testing.T, res driver.Result) string {
	t.Helper()
	b, err := os.ReadFile(res.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// reads counts the objects Terraform read (refreshed) in a run's log.
func reads(log string) int { return strings.Count(log, "Refreshing state...") }

// plans counts the plans Terraform made in a run's log: each ends with its
// summary line.
func plans(log string) int {
	n := 0
	for _, l := range strings.Split(log, "\n") {
		if strings.HasPrefix(l, "Plan: ") || strings.HasPrefix(l, "No changes.") {
			n++
		}
	}
	return n
}

// objects reads the device: object name -> value.
func objects(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = string(b)
	}
	return m
}

func apply(t *testing.T, ctx context.Context, d *Driver, id string, data bool, in *task.Inputs) (driver.Result, string) {
	t.Helper()
	res, err := d.Apply(ctx, driver.Run{ID: id, DataChange: data}, in)
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	return res, runLog(t, res)
}

func newDeviceDriver(t *testing.T, o Options) *Driver {
	t.Helper()
	d := mustNew(t, o)
	if err := d.Init(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	return d
}

func wantObjects(t *testing.T, what, dev string, want map[string]string) {
	t.Helper()
	got := objects(t, dev)
	if len(got) != len(want) {
		t.Fatalf("%s: device holds %v, want %v", what, got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: device holds %v, want %v", what, got, want)
		}
	}
}

// Under the refresh policy "auto" (the default), an apply of a data change
// skips Terraform's refresh once a run has refreshed: the device's objects
// are not read. The first run, a run that is not a data change alone, and
// every plan (drift checks) read them all.
func TestRefreshAutoSkipsDataChange(t *testing.T) {
	bin := needTerraform(t)
	ctx := testCtx(t)
	o, dev := deviceTask(t, t.TempDir(), "auto", bin)
	d := newDeviceDriver(t, o)

	res, log := apply(t, ctx, d, "first", true, instances(1, 2))
	if res.Refresh != driver.RefreshFull || !strings.Contains(log, "full refresh: first run") {
		t.Fatalf("first run: refresh %q, log:\n%s", res.Refresh, log)
	}
	res, log = apply(t, ctx, d, "second", false, instances(1, 2))
	if res.Refresh != driver.RefreshFull || reads(log) != 2 {
		t.Fatalf("a run that is not a data change: refresh %q, %d reads, log:\n%s", res.Refresh, reads(log), log)
	}
	res, log = apply(t, ctx, d, "change", true, instances(1, 2, 3))
	if res.Refresh != driver.RefreshSkipped || reads(log) != 0 || !strings.Contains(log, "refresh skipped (-refresh=false)") {
		t.Fatalf("data change: refresh %q, %d reads, log:\n%s", res.Refresh, reads(log), log)
	}
	wantObjects(t, "after the data change", dev, map[string]string{"web-1": "10.0.0.1:1", "web-2": "10.0.0.1:2", "web-3": "10.0.0.1:3"})

	// A drift check reads every object, and finds one deleted out of band;
	// the next data change refreshes, and restores it.
	if err := os.Remove(filepath.Join(dev, "web-2")); err != nil {
		t.Fatal(err)
	}
	pres, err := d.Plan(ctx, driver.Run{ID: "drift"}, instances(1, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	if log := runLog(t, pres); pres.Refresh != driver.RefreshFull || reads(log) != 3 || pres.Add != 1 {
		t.Fatalf("drift check: refresh %q, %d reads, add %d, log:\n%s", pres.Refresh, reads(log), pres.Add, log)
	}
	res, log = apply(t, ctx, d, "after-drift", true, instances(1, 2, 3, 4))
	if res.Refresh != driver.RefreshFull || reads(log) != 3 || !strings.Contains(log, "a plan found changes") {
		t.Fatalf("data change after drift was found: refresh %q, %d reads, log:\n%s", res.Refresh, reads(log), log)
	}
	wantObjects(t, "drift restored", dev, map[string]string{"web-1": "10.0.0.1:1", "web-2": "10.0.0.1:2", "web-3": "10.0.0.1:3", "web-4": "10.0.0.1:4"})

	// A drift check without changes confirms the state: skipping again.
	if pres, err = d.Plan(ctx, driver.Run{ID: "clean"}, instances(1, 2, 3, 4)); err != nil || pres.Changes {
		t.Fatalf("clean drift check: %v, changes %v", err, pres.Changes)
	}
	if res, log = apply(t, ctx, d, "again", true, instances(1, 3, 4)); res.Refresh != driver.RefreshSkipped || reads(log) != 0 {
		t.Fatalf("data change after a clean drift check: refresh %q, %d reads, log:\n%s", res.Refresh, reads(log), log)
	}
	wantObjects(t, "web-2 deregistered", dev, map[string]string{"web-1": "10.0.0.1:1", "web-3": "10.0.0.1:3", "web-4": "10.0.0.1:4"})

	// The last full refresh too old: refresh.
	d.refresh.at = time.Now().Add(-MaxRefreshAge - time.Minute)
	if res, log = apply(t, ctx, d, "old", true, instances(1, 3)); res.Refresh != driver.RefreshFull || reads(log) != 3 || !strings.Contains(log, "old (at most 1h0m0s)") {
		t.Fatalf("last refresh too old: refresh %q, %d reads, log:\n%s", res.Refresh, reads(log), log)
	}
}

// An apply without refresh that fails because the state it planned from
// is stale (an object deleted out of band, which the device refuses to
// update) is applied again at once, in the same run, with a full refresh:
// the object is created again and the run succeeds.
func TestRefreshAutoFallback(t *testing.T) {
	bin := needTerraform(t)
	ctx := testCtx(t)
	o, dev := deviceTask(t, t.TempDir(), "fallback", bin)
	d := newDeviceDriver(t, o)
	apply(t, ctx, d, "first", true, instances(1, 2))

	if err := os.Remove(filepath.Join(dev, "web-1")); err != nil {
		t.Fatal(err)
	}
	in := instances(1, 2)
	s := in.Services["web-1"]
	s.Address = "10.0.0.9"
	in.Services["web-1"] = s
	res, log := apply(t, ctx, d, "update", true, in)
	if res.Refresh != driver.RefreshFull || plans(log) != 2 || reads(log) != 2 {
		t.Fatalf("fallback: refresh %q, %d plans, %d reads, log:\n%s", res.Refresh, plans(log), reads(log), log)
	}
	for _, want := range []string{"refresh skipped (-refresh=false)", "Cannot update the object", "apply without refresh failed", "applying again now with a full refresh"} {
		if !strings.Contains(log, want) {
			t.Errorf("run log lacks %q:\n%s", want, log)
		}
	}
	if res.Add != 1 {
		t.Errorf("counts of the run: add %d change %d, want the retry's (1 add)", res.Add, res.Change)
	}
	wantObjects(t, "after the fallback", dev, map[string]string{"web-1": "10.0.0.9:1", "web-2": "10.0.0.1:2"})
	// The retry refreshed: the next data change skips again.
	if res, log = apply(t, ctx, d, "next", true, instances(2)); res.Refresh != driver.RefreshSkipped || reads(log) != 0 {
		t.Fatalf("after the fallback: refresh %q, %d reads, log:\n%s", res.Refresh, reads(log), log)
	}
}

// A failed run, and a module changed since the last full refresh, make the
// next data change refresh.
func TestRefreshAfterFailureAndModuleChange(t *testing.T) {
	bin := needTerraform(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	o, _ := deviceTask(t, dir, "mod", bin)
	d := newDeviceDriver(t, o)
	apply(t, ctx, d, "first", true, instances(1))

	bad := instances(1)
	bad.Services["bad/name"] = bad.Services["web-1"] // the provider refuses a name with a slash
	if _, err := d.Apply(ctx, driver.Run{ID: "fails", DataChange: true}, bad); err == nil {
		t.Fatal("an apply of an invalid object name succeeded")
	}
	res, log := apply(t, ctx, d, "after-failure", true, instances(1, 2))
	if res.Refresh != driver.RefreshFull || !strings.Contains(log, "a run failed") {
		t.Fatalf("after a failure: refresh %q, log:\n%s", res.Refresh, log)
	}
	if res, _ = apply(t, ctx, d, "skips", true, instances(1, 2, 3)); res.Refresh != driver.RefreshSkipped {
		t.Fatal("a data change after a successful refresh refreshed")
	}

	writeModule(t, dir, "mod-mod", map[string]string{"main.tf": deviceModule + "\noutput \"count\" {\n  value = length(var.services)\n}\n"})
	res, log = apply(t, ctx, d, "module", true, instances(1, 2, 3))
	if res.Refresh != driver.RefreshFull || reads(log) != 3 || !strings.Contains(log, "the module changed") {
		t.Fatalf("after a module change: refresh %q, %d reads, log:\n%s", res.Refresh, reads(log), log)
	}
	if res, _ = apply(t, ctx, d, "skips-again", true, instances(1, 2)); res.Refresh != driver.RefreshSkipped {
		t.Fatal("a data change after the module's refresh refreshed")
	}
	// A working directory initialised anew (a new driver after a module
	// source, provider or backend change, or Init finding it changed):
	// the first run refreshes.
	if err := os.Remove(filepath.Join(d.WorkDir(), fingerprintFile)); err != nil {
		t.Fatal(err)
	}
	if err := d.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if res, log = apply(t, ctx, d, "reinit", true, instances(1)); res.Refresh != driver.RefreshFull || !strings.Contains(log, "re-initialised") {
		t.Fatalf("after re-init: refresh %q, log:\n%s", res.Refresh, log)
	}
}

// Under the refresh policy "always" every run reads every object, as in
// CTS: the task's setting, or the driver block's when the task has none;
// a task's "auto" wins over the driver block's "always".
func TestRefreshAlways(t *testing.T) {
	bin := needTerraform(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name          string
		spec, drv     string
		wantRefreshed bool
	}{
		{"task", task.RefreshAlways, "", true},
		{"driver", "", task.RefreshAlways, true},
		{"override", task.RefreshAuto, task.RefreshAlways, false},
	} {
		o, _ := deviceTask(t, dir, tc.name, bin)
		o.Spec.Refresh, o.Driver.Refresh = tc.spec, tc.drv
		d := newDeviceDriver(t, o)
		apply(t, ctx, d, "first", true, instances(1, 2))
		for i, in := range []*task.Inputs{instances(1, 2, 3), instances(2, 3)} {
			res, log := apply(t, ctx, d, "change-"+strconv.Itoa(i), true, in)
			if (res.Refresh == driver.RefreshFull) != tc.wantRefreshed || (reads(log) > 0) != tc.wantRefreshed {
				t.Fatalf("%s: data change %d: refresh %q (%d reads), want %v; log:\n%s", tc.name, i, res.Refresh, reads(log), tc.wantRefreshed, log)
			}
		}
	}
}

// A run plans once and applies that plan: an ungated apply is one
// `terraform apply` (its own plan), a gated one applies the saved plan
// without planning again. Two plans in a run would read every object twice
// and could apply something other than what was planned (or approved).
func TestPlanOnce(t *testing.T) {
	bin := needTerraform(t)
	ctx := testCtx(t)
	o, dev := deviceTask(t, t.TempDir(), "once", bin)
	o.Spec.Refresh = task.RefreshAlways
	d := newDeviceDriver(t, o)
	apply(t, ctx, d, "first", false, instances(1, 2))

	res, log := apply(t, ctx, d, "ungated", false, instances(1, 2, 3))
	if plans(log) != 1 || reads(log) != 2 || strings.Count(log, "terraform apply") != 1 || strings.Contains(log, "terraform plan") {
		t.Fatalf("ungated apply: %d plans, %d reads; log:\n%s", plans(log), reads(log), log)
	}
	if res.Add != 1 {
		t.Fatalf("ungated apply: add %d", res.Add)
	}

	hp, err := d.PlanHeld(ctx, driver.Run{ID: "gated"}, instances(1, 3))
	if err != nil {
		t.Fatal(err)
	}
	if hp.Result.Refresh != driver.RefreshFull {
		t.Error("a held plan did not refresh")
	}
	res, err = d.ApplyPlan(ctx, driver.Run{ID: "gated"}, hp)
	if err != nil {
		t.Fatal(err)
	}
	if res.LogPath != hp.Result.LogPath {
		t.Fatalf("the plan and its apply have different logs: %s, %s", hp.Result.LogPath, res.LogPath)
	}
	log = runLog(t, res)
	if plans(log) != 1 || reads(log) != 3 || strings.Count(log, "terraform plan") != 1 || strings.Count(log, "terraform apply") != 1 {
		t.Fatalf("gated run: %d plans, %d reads; log:\n%s", plans(log), reads(log), log)
	}
	wantObjects(t, "gated run applied", dev, map[string]string{"web-1": "10.0.0.1:1", "web-3": "10.0.0.1:3"})
}

// The decision alone, without Terraform: what makes a run refresh, in the
// order the run log gives the reason.
func TestSkipRefreshDecision(t *testing.T) {
	dir := t.TempDir()
	src := writeModule(t, dir, "mod", map[string]string{"main.tf": deviceModule})
	d := &Driver{opts: Options{Spec: task.Spec{Name: "t", Module: src}, WorkDir: filepath.Join(dir, "t")}}
	now := time.Now()
	data := driver.Run{ID: "r", DataChange: true}
	check := func(what string, run driver.Run, wantSkip bool, wantWhy string) {
		t.Helper()
		skip, why := d.skipRefresh(run, now)
		if skip != wantSkip || !strings.Contains(why, wantWhy) {
			t.Errorf("%s: skip %v (%s), want %v (%s)", what, skip, why, wantSkip, wantWhy)
		}
	}
	check("first run", data, false, "first run")
	d.refreshed(now.Add(-time.Minute))
	check("data change", data, true, "refresh skipped (-refresh=false)")
	check("not a data change", driver.Run{ID: "r"}, false, "not a change of the task's Consul data alone")
	d.opts.Driver.Refresh = task.RefreshAlways
	check("driver block always", data, false, `refresh policy "always"`)
	d.opts.Spec.Refresh = task.RefreshAuto
	check("task auto over driver always", data, true, "refresh skipped")
	d.refreshFailed()
	check("after a failure", data, false, "a run failed")
	d.refreshed(now.Add(-MaxRefreshAge))
	check("an hour old", data, false, "old (at most 1h0m0s)")
	d.refreshed(now.Add(-time.Second))
	writeModule(t, dir, "mod", map[string]string{"main.tf": deviceModule + "\n# changed\n"})
	check("module changed", data, false, "the module changed")
	d.refreshed(now)
	d.reinitialised()
	check("re-initialised", data, false, "first run since the driver started or re-initialised")
}
