package terraform

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/task"
)

// stateJSON is a version 4 state with the given resources (each a JSON
// object of module, mode, type, name and instances).
func stateJSON(resources ...string) []byte {
	return []byte(`{"version":4,"terraform_version":"1.11.4","serial":3,"lineage":"x","outputs":{},"resources":[` +
		strings.Join(resources, ",") + `]}`)
}

func keyed(keys ...string) map[string][sha256.Size]byte {
	m := map[string][sha256.Size]byte{}
	for _, k := range keys {
		m[k] = sha256.Sum256([]byte(k))
	}
	return m
}

// The targets of a change, from the index of a state: the changed keys'
// instances of each resource (or module call) keyed by the services
// variable's keys, and every other resource whole; none when nothing is
// keyed by instance, or when the targets would cover over a quarter of
// the state.
func TestTargets(t *testing.T) {
	svcKeys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	perKey := func(module, typ, name string, keys ...string) string {
		var insts []string
		for _, k := range keys {
			insts = append(insts, `{"index_key":"`+k+`","schema_version":0,"attributes":{}}`)
		}
		return `{"module":"` + module + `","mode":"managed","type":"` + typ + `","name":"` + name +
			`","provider":"provider[\"registry.terraform.io/ctsync/device\"]","instances":[` + strings.Join(insts, ",") + `]}`
	}
	single := `{"mode":"managed","type":"terraform_data","name":"all","provider":"p","instances":[{"schema_version":0,"attributes":{}}]}`
	counted := `{"mode":"managed","type":"terraform_data","name":"n","provider":"p","instances":[{"index_key":0},{"index_key":1}]}`
	data := `{"mode":"data","type":"device_info","name":"d","provider":"p","instances":[{"schema_version":0}]}`
	inModule := func(mod string, keys ...string) string {
		var out []string
		for _, k := range keys {
			out = append(out, `{"module":"module.`+mod+`[\"`+k+`\"]","mode":"managed","type":"device_object","name":"o","provider":"p","instances":[{"schema_version":0,"attributes":{}}]}`)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		name    string
		state   []byte
		changed []string
		want    []string
		covered int
		why     string
	}{
		{name: "one changed key", state: stateJSON(perKey("", "device_object", "instance", svcKeys...)), changed: []string{"c"},
			want: []string{`device_object.instance["c"]`}, covered: 1},
		{name: "added, removed and changed keys", state: stateJSON(perKey("", "device_object", "instance", svcKeys...)),
			changed: []string{"a", "new", "h"}, why: "3 of the state's 8"},
		{name: "added key under the bound", state: stateJSON(perKey("", "device_object", "instance", svcKeys...), perKey("", "device_object", "second", svcKeys...)),
			changed: []string{"new", "a"},
			want:    []string{`device_object.instance["a"]`, `device_object.instance["new"]`, `device_object.second["a"]`, `device_object.second["new"]`}, covered: 4},
		{name: "aggregates always targeted", state: stateJSON(perKey("", "device_object", "instance", svcKeys...), single, counted, data,
			perKey("", "device_object", "x", svcKeys...), perKey("", "device_object", "y", svcKeys...), perKey("", "device_object", "other", "zz")),
			changed: []string{"b"},
			want:    []string{`device_object.instance["b"]`, "device_object.other", `device_object.x["b"]`, `device_object.y["b"]`, "terraform_data.all", "terraform_data.n"}, covered: 7},
		{name: "module for_each", state: stateJSON(inModule("svc", svcKeys...), perKey("module.plain", "device_object", "in", svcKeys...)),
			changed: []string{"d"},
			want:    []string{`module.plain.device_object.in["d"]`, `module.svc["d"]`}, covered: 2},
		{name: "count only: none", state: stateJSON(counted, single), changed: []string{"a"}, why: "no resource or module call"},
		{name: "other keys: none", state: stateJSON(perKey("", "device_object", "instance", "web", "db")), changed: []string{"a"}, why: "no resource or module call"},
		{name: "empty state: none", state: nil, changed: []string{"a"}, why: "no resource instances"},
		{name: "unsafe key: none", state: stateJSON(perKey("", "device_object", "instance", svcKeys...)), changed: []string{`a"b`}, why: "cannot be written"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, err := indexState(tc.state)
			if err != nil {
				t.Fatal(err)
			}
			got, covered, why := x.targets(keyed(svcKeys...), tc.changed)
			if !slices.Equal(got, tc.want) || covered != tc.covered || (tc.why != "" && !strings.Contains(why, tc.why)) {
				t.Fatalf("targets %q (cover %d, %q), want %q (cover %d, %q)", got, covered, why, tc.want, tc.covered, tc.why)
			}
		})
	}
}

func TestModuleStep(t *testing.T) {
	for _, tc := range []struct {
		addr, call string
		key        any
		keyed      bool
	}{
		{"", "", nil, false},
		{"module.a", "module.a", nil, false},
		{`module.a["x"]`, "module.a", "x", true},
		{`module.a.module.b["web-1.node"].module.c`, "module.a.module.b", "web-1.node", true},
		{"module.a[3].module.b", "module.a", int64(3), true},
	} {
		call, key, keyed, err := moduleStep(tc.addr)
		if err != nil || call != tc.call || key != tc.key || keyed != tc.keyed {
			t.Errorf("%q: %q %v %v %v, want %q %v %v", tc.addr, call, key, keyed, err, tc.call, tc.key, tc.keyed)
		}
	}
	for _, bad := range []string{"resource.x", "module", `module["x"]`} {
		if _, _, _, err := moduleStep(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if _, err := indexState([]byte(`{"version":3}`)); err == nil {
		t.Error("a version 3 state was read")
	}
}

func TestChangedKeys(t *testing.T) {
	in := instances(1, 2, 3)
	prev, rest, err := inputDigests(in)
	if err != nil {
		t.Fatal(err)
	}
	in2 := instances(1, 3, 4)
	s := in2.Services["web-3"]
	s.Tags = []string{"new"}
	in2.Services["web-3"] = s
	cur, rest2, _ := inputDigests(in2)
	if got := changedKeys(prev, cur); !slices.Equal(got, []string{"web-2", "web-3", "web-4"}) {
		t.Fatalf("changed keys %q", got)
	}
	if rest != rest2 {
		t.Fatal("the services alone changed, the rest's digest differs")
	}
	in2.ConsulKV = map[string]string{"k": "v"}
	if _, rest3, _ := inputDigests(in2); rest3 == rest {
		t.Fatal("a KV change left the rest's digest as it was")
	}
}

// lengthModule's objects each depend on every instance (the count of
// instances is in every value): a change of one instance changes them all.
const lengthModule = `terraform {
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
  value    = "${each.value.address}:${each.value.port}/${length(var.services)}"
}
`

func mtimes(t *testing.T, dev string) map[string]time.Time {
	t.Helper()
	ents, err := os.ReadDir(dev)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]time.Time{}
	for _, e := range ents {
		st, err := os.Stat(filepath.Join(dev, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = st.ModTime()
	}
	return m
}

// A data change of one instance among eight, under "auto", is planned with
// -target first: the changed instance's object is written, the others are
// neither read nor written; the full check that follows finds nothing
// more. The first run, and a run that changes KV data too, are not
// targeted.
func TestTargetedDataChange(t *testing.T) {
	bin := needTerraform(t)
	ctx := testCtx(t)
	o, dev := deviceTask(t, t.TempDir(), "targeted", bin)
	d := newDeviceDriver(t, o)
	ports := []int{1, 2, 3, 4, 5, 6, 7, 8}

	res, log := apply(t, ctx, d, "first", true, instances(ports...))
	if res.Targeted != "" || strings.Contains(log, "-target") {
		t.Fatalf("first run targeted: %q\n%s", res.Targeted, log)
	}
	before := mtimes(t, dev)
	time.Sleep(20 * time.Millisecond) // a later mtime for a written file
	in := instances(ports...)
	s := in.Services["web-3"]
	s.Address = "10.0.0.9"
	in.Services["web-3"] = s
	res, log = apply(t, ctx, d, "one", true, in)
	if res.Refresh != driver.RefreshSkipped || reads(log) != 0 || plans(log) != 2 {
		t.Fatalf("targeted run: refresh %q, %d reads, %d plans; log:\n%s", res.Refresh, reads(log), plans(log), log)
	}
	if want := "targeted 1 of 8 resource instances (1 changed instance of the services variable); full check: no further changes"; res.Targeted != want || !strings.Contains(log, want) {
		t.Fatalf("Result.Targeted %q, want %q; log:\n%s", res.Targeted, want, log)
	}
	if !strings.Contains(log, `device_object.instance["web-3"]`) || res.Change != 1 || res.Add+res.Destroy != 0 {
		t.Fatalf("counts %d/%d/%d; log:\n%s", res.Add, res.Change, res.Destroy, log)
	}
	after := mtimes(t, dev)
	for name, m := range after {
		if changed := !m.Equal(before[name]); changed != (name == "web-3") {
			t.Errorf("object %s: written %v", name, changed)
		}
	}
	if len(res.Phases) != 3 || res.Phases[2].Name != "check" {
		t.Errorf("phases %+v", res.Phases)
	}

	// An instance added and one removed: targeted too.
	in = instances(1, 2, 4, 5, 6, 7, 9)
	in.Services["web-3"] = s
	res, _ = apply(t, ctx, d, "add-remove", true, in)
	if !strings.HasPrefix(res.Targeted, "targeted 2 of 8") || res.Add != 1 || res.Destroy != 1 {
		t.Fatalf("add and remove: %q, counts %d/%d/%d", res.Targeted, res.Add, res.Change, res.Destroy)
	}
	wantObjects(t, "after add and remove", dev, map[string]string{"web-1": "10.0.0.1:1", "web-2": "10.0.0.1:2", "web-3": "10.0.0.9:3",
		"web-4": "10.0.0.1:4", "web-5": "10.0.0.1:5", "web-6": "10.0.0.1:6", "web-7": "10.0.0.1:7", "web-9": "10.0.0.1:9"}) // web-8 removed

	// KV data changed with the instance: no targeting.
	delete(in.Services, "web-9")
	in.ConsulKV = map[string]string{"k": "v"}
	res, log = apply(t, ctx, d, "kv", true, in)
	if res.Targeted != "" || !strings.Contains(log, "not targeted: inputs other than the services variable changed") || res.Refresh != driver.RefreshSkipped {
		t.Fatalf("KV change: targeted %q, refresh %q; log:\n%s", res.Targeted, res.Refresh, log)
	}

	// A restarted daemon (a new driver): the first run is not targeted.
	d2 := newDeviceDriver(t, o)
	d2.refresh = d.refresh
	in.Services["web-9"] = in.Services["web-1"]
	res, log = apply(t, ctx, d2, "new-driver", true, in)
	if res.Targeted != "" || !strings.Contains(log, "not targeted: no successful apply") {
		t.Fatalf("new driver: targeted %q; log:\n%s", res.Targeted, log)
	}
}

// A module whose every object depends on every instance: the targeted
// plan writes the changed instance's object, and the full check applies
// the rest in the same run, leaving what an untargeted run leaves.
func TestTargetedDependentModule(t *testing.T) {
	bin := needTerraform(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	o, dev := deviceTask(t, dir, "length", bin)
	o.Spec.Module = writeModule(t, dir, "mod-length", map[string]string{"main.tf": lengthModule})
	d := newDeviceDriver(t, o)
	apply(t, ctx, d, "first", true, instances(1, 2, 3, 4, 5, 6, 7, 8))

	res, log := apply(t, ctx, d, "add", true, instances(1, 2, 3, 4, 5, 6, 7, 8, 9))
	if !strings.HasPrefix(res.Targeted, "targeted 1 of 8") || !strings.HasSuffix(res.Targeted, "full check: applied 8 further changes") {
		t.Fatalf("Result.Targeted %q; log:\n%s", res.Targeted, log)
	}
	if res.Add != 1 || res.Change != 8 {
		t.Fatalf("counts %d/%d/%d, want 1 added and 8 changed", res.Add, res.Change, res.Destroy)
	}
	want := map[string]string{}
	for p := 1; p <= 9; p++ {
		want["web-"+string(rune('0'+p))] = "10.0.0.1:" + string(rune('0'+p)) + "/9"
	}
	wantObjects(t, "after the full check", dev, want)
	// The state is what a full run leaves: a plan finds nothing.
	if pres, err := d.Plan(ctx, driver.Run{ID: "check"}, instances(1, 2, 3, 4, 5, 6, 7, 8, 9)); err != nil || pres.Changes {
		t.Fatalf("plan after the targeted run: %v, changes %v", err, pres.Changes)
	}
}

// A targeted run whose apply fails (the changed object was deleted out of
// band: the device refuses its update) falls back to an untargeted apply
// with a full refresh in the same run, which creates it again.
func TestTargetedFallback(t *testing.T) {
	bin := needTerraform(t)
	ctx := testCtx(t)
	o, dev := deviceTask(t, t.TempDir(), "tfallback", bin)
	d := newDeviceDriver(t, o)
	apply(t, ctx, d, "first", true, instances(1, 2, 3, 4, 5, 6, 7, 8))
	if err := os.Remove(filepath.Join(dev, "web-2")); err != nil {
		t.Fatal(err)
	}
	in := instances(1, 2, 3, 4, 5, 6, 7, 8)
	s := in.Services["web-2"]
	s.Address = "10.0.0.7"
	in.Services["web-2"] = s
	res, log := apply(t, ctx, d, "update", true, in)
	if res.Refresh != driver.RefreshFull || res.Targeted != "" || reads(log) != 8 {
		t.Fatalf("fallback: refresh %q, targeted %q, %d reads; log:\n%s", res.Refresh, res.Targeted, reads(log), log)
	}
	for _, w := range []string{"targeted: applying 1 of the state's 8", "Cannot update the object", "applying again now with a full refresh"} {
		if !strings.Contains(log, w) {
			t.Errorf("run log lacks %q:\n%s", w, log)
		}
	}
	if got := objects(t, dev)["web-2"]; got != "10.0.0.7:2" {
		t.Fatalf("web-2 holds %q", got)
	}
}

// A targeted run whose full check is deferred (driver.Run.DeferCheck)
// stops after its targeted apply: the changed instance's object is
// written, the objects that depend on every instance are left as they
// were, and the result says a check is due. The check (driver.Run.Check)
// applies the rest, untargeted and without refresh. A check due for
// longer than MaxCheckDelay makes the next data change a full apply
// without refresh, which clears it.
func TestTargetedDeferCheck(t *testing.T) {
	bin := needTerraform(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	o, dev := deviceTask(t, dir, "deferred", bin)
	o.Spec.Module = writeModule(t, dir, "mod-length", map[string]string{"main.tf": lengthModule})
	d := newDeviceDriver(t, o)
	apply(t, ctx, d, "first", true, instances(1, 2, 3, 4, 5, 6, 7, 8))
	objs := func(n int) map[string]string {
		m := map[string]string{}
		for p := 1; p <= n; p++ {
			m[fmt.Sprintf("web-%d", p)] = fmt.Sprintf("10.0.0.1:%d/%d", p, n)
		}
		return m
	}
	run := func(id string, r driver.Run, in *task.Inputs) (driver.Result, string) {
		t.Helper()
		r.ID = id
		res, err := d.Apply(ctx, r, in)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return res, runLog(t, res)
	}

	res, log := run("add", driver.Run{DataChange: true, DeferCheck: true}, instances(1, 2, 3, 4, 5, 6, 7, 8, 9))
	if want := "targeted 1 of 8 resource instances (1 changed instance of the services variable); full check: pending"; res.Targeted != want || !res.CheckDue {
		t.Fatalf("deferred: Result.Targeted %q, CheckDue %v; log:\n%s", res.Targeted, res.CheckDue, log)
	}
	if plans(log) != 1 || reads(log) != 0 || res.Add != 1 || res.Change != 0 || !strings.Contains(log, "apply -refresh=false -target (1 address)") {
		t.Fatalf("deferred: %d plans, %d reads, counts %d/%d/%d; log:\n%s", plans(log), reads(log), res.Add, res.Change, res.Destroy, log)
	}
	want := objs(8)
	want["web-9"] = "10.0.0.1:9/9"
	wantObjects(t, "after the targeted apply", dev, want)
	if d.checkDue.IsZero() {
		t.Fatal("the driver keeps no check due")
	}

	res, log = run("check", driver.Run{Check: true}, instances(1, 2, 3, 4, 5, 6, 7, 8, 9))
	if res.Targeted != "full check: applied 8 further changes" || res.CheckDue || res.Refresh != driver.RefreshSkipped || reads(log) != 0 || strings.Contains(log, "-target") {
		t.Fatalf("check: Result.Targeted %q, CheckDue %v, refresh %q; log:\n%s", res.Targeted, res.CheckDue, res.Refresh, log)
	}
	wantObjects(t, "after the check", dev, objs(9))
	if !d.checkDue.IsZero() {
		t.Fatal("the check left a check due")
	}
	res, _ = run("check-again", driver.Run{Check: true}, instances(1, 2, 3, 4, 5, 6, 7, 8, 9))
	if res.Targeted != "full check: no further changes" || res.Changes {
		t.Fatalf("second check: %q, changes %v", res.Targeted, res.Changes)
	}

	// A check due for longer than the bound: the data change is a full
	// apply without refresh.
	res, _ = run("add-10", driver.Run{DataChange: true, DeferCheck: true}, instances(1, 2, 3, 4, 5, 6, 7, 8, 9, 10))
	if !res.CheckDue {
		t.Fatalf("targeted again: %q", res.Targeted)
	}
	d.checkDue = time.Now().Add(-MaxCheckDelay - time.Second)
	res, log = run("add-11", driver.Run{DataChange: true, DeferCheck: true}, instances(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11))
	if res.CheckDue || res.Targeted != "" || res.Refresh != driver.RefreshSkipped || !strings.Contains(log, "not targeted: a full check has been due for 5m") {
		t.Fatalf("past the bound: Result.Targeted %q, CheckDue %v, refresh %q; log:\n%s", res.Targeted, res.CheckDue, res.Refresh, log)
	}
	wantObjects(t, "after the full run", dev, objs(11))
	if !d.checkDue.IsZero() {
		t.Fatal("the full run left a check due")
	}
}
