package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/testutil"
)

// refreshRig is a daemon with one task ("dev") of the device test
// provider (built from this checkout: testutil.DeviceMirror) under a real
// Consul and Terraform.
type refreshRig struct {
	c              *testutil.Consul
	p              *proc
	base, dev, mod string
	logs           string // the task's run logs
	want           map[string]string
}

// startRefreshRig starts the rig with the task's refresh policy and drift
// check interval ("" for none), instances web-1 and web-2 registered,
// and waits for their objects.
func startRefreshRig(t *testing.T, refresh, drift string) *refreshRig {
	t.Helper()
	skipShort(t)
	work := t.TempDir()
	r := &refreshRig{c: testutil.StartConsul(t), dev: filepath.Join(work, "device"), mod: filepath.Join(work, "module"),
		logs: filepath.Join(work, "sync-tasks", "dev", "logs"), want: map[string]string{}}
	rc := testutil.DeviceCLIConfig(t, work)
	for _, d := range []string{r.dev, r.mod} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, r.mod, "main.tf", deviceModule)
	driftBlock := ""
	if drift != "" {
		driftBlock = fmt.Sprintf("  drift_detection {\n    interval  = %q\n    remediate = true\n  }\n", drift)
	}
	port := testutil.FreePort(t)
	r.base = fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := writeFile(t, work, "config.hcl", deviceConfig("DEBUG", work, port, r.c.Addr, r.dev, "", fmt.Sprintf(`task {
  name      = "dev"
  module    = %q
  providers = ["device"]
  refresh   = %q
  condition "services" {
    names = ["web"]
  }
%s}
`, r.mod, refresh, driftBlock)))
	r.register(t, "web-1", 8001)
	r.register(t, "web-2", 8002)
	r.p = startCtsyncEnv(t, work, []string{"TF_CLI_CONFIG_FILE=" + rc}, "start", "-config-file", cfg)
	r.wait(t, "web-1 and web-2 registered")
	r.lastApply(t, "") // the first run recorded
	return r
}

func (r *refreshRig) register(t *testing.T, id string, port int) {
	t.Helper()
	r.c.RegisterService(t, &api.AgentServiceRegistration{ID: id, Name: "web", Address: "10.0.0.1", Port: port}, "passing")
	r.want[id] = fmt.Sprintf("10.0.0.1:%d", port)
}

func (r *refreshRig) deregister(t *testing.T, id string) {
	t.Helper()
	if err := r.c.Client.Agent().ServiceDeregister(id); err != nil {
		t.Fatal(err)
	}
	delete(r.want, id)
}

// wait waits for the device to hold what the catalog says.
func (r *refreshRig) wait(t *testing.T, what string) {
	t.Helper()
	waitObjects(t, r.p, r.dev, what, r.want)
}

// lastApply waits for a successful apply newer than the event prev (""
// for any) to be the task's latest event, and returns it with its run log.
func (r *refreshRig) lastApply(t *testing.T, prev string) (store.Event, string) {
	t.Helper()
	evs := waitEvents(t, r.base, "dev", 2*time.Minute, func(evs []store.Event) bool {
		return len(evs) > 0 && evs[0].ID != prev && evs[0].Kind == "apply" && evs[0].Success
	})
	b, err := os.ReadFile(filepath.Join(r.logs, evs[0].ID+".log"))
	if err != nil {
		t.Fatal(err)
	}
	return evs[0], string(b)
}

// newest is the id of the task's latest event ("" for none).
func (r *refreshRig) newest(t *testing.T) string {
	if evs := taskEvents(t, r.base, "dev"); len(evs) > 0 {
		return evs[0].ID
	}
	return ""
}

// reads counts the objects Terraform read (refreshed) in a run log.
func reads(log string) int { return strings.Count(log, "Refreshing state...") }

// Refresh policy "always" (CTS's behaviour): every catalog-triggered run
// reads every object the task manages before it plans.
func TestRefreshAlwaysEveryRun(t *testing.T) {
	r := startRefreshRig(t, "always", "")
	for i, step := range []func(){
		func() { r.register(t, "web-3", 8003) },
		func() { r.deregister(t, "web-1") },
		func() { r.register(t, "web-2", 9002) },
	} {
		before, objects := r.newest(t), len(r.want)
		step()
		r.wait(t, fmt.Sprintf("change %d", i))
		ev, log := r.lastApply(t, before)
		if reads(log) != objects || strings.Contains(log, "refresh skipped") || strings.Contains(log, "-target") || !strings.Contains(log, `refresh policy "always"`) {
			t.Fatalf("change %d (run %s): %d objects read, want %d; log:\n%s", i, ev.ID, reads(log), objects, log)
		}
		if ev.Refresh == "skipped" {
			t.Fatalf("change %d: event says the run did not refresh", i)
		}
	}
}

// Refresh policy "auto" with drift detection: an object deleted out of
// band is restored by the next drift check, whose plan reads every object.
func TestRefreshAutoDrift(t *testing.T) {
	r := startRefreshRig(t, "auto", "2s")
	if err := os.Remove(filepath.Join(r.dev, "web-1")); err != nil {
		t.Fatal(err)
	}
	r.wait(t, "web-1 deleted out of band, restored by a drift check")
	testutil.Eventually(t, 30*time.Second, "the drift logged", func() bool {
		return len(r.p.lines("drift detected", "task_name=dev", "add=1")) > 0
	})
}

// Refresh policy "auto": a run that applies a change of the module's code
// (with a catalog change) reads every object, whatever the age of the last
// full refresh.
func TestRefreshAutoModuleChange(t *testing.T) {
	r := startRefreshRig(t, "auto", "")
	before := r.newest(t)
	r.register(t, "web-3", 8003)
	r.wait(t, "web-3 registered")
	r.lastApply(t, before)

	before = r.newest(t)
	writeFile(t, r.mod, "main.tf", deviceModule+"\noutput \"objects\" {\n  value = length(device_object.instance)\n}\n")
	objects := len(r.want)
	r.register(t, "web-4", 8004)
	r.wait(t, "web-4 registered with the module changed")
	ev, log := r.lastApply(t, before)
	if !strings.Contains(ev.Trigger, "module changed") || reads(log) != objects || strings.Contains(log, "refresh skipped") {
		t.Fatalf("run %s (trigger %q) after the module changed: %d objects read, want %d; log:\n%s", ev.ID, ev.Trigger, reads(log), objects, log)
	}
}

// Refresh policy "auto": a catalog change is applied without reading the
// objects once a run has read them; an apply that fails because an object
// was deleted out of band meanwhile (the device refuses to update it) is
// applied again at once with a full refresh, in the same run, and
// succeeds.
func TestRefreshAutoCatalogChange(t *testing.T) {
	r := startRefreshRig(t, "auto", "")

	before := r.newest(t)
	r.register(t, "web-3", 8003)
	r.wait(t, "web-3 registered")
	ev, log := r.lastApply(t, before)
	if reads(log) != 0 || !strings.Contains(log, "refresh skipped (-refresh=false)") {
		t.Fatalf("catalog change (run %s): %d objects read, want none; log:\n%s", ev.ID, reads(log), log)
	}
	if ev.Refresh != "skipped" {
		t.Errorf("catalog change (run %s): event refresh = %q, want skipped", ev.ID, ev.Refresh)
	}

	// Fallback: web-2 deleted on the device, then changed in the catalog.
	if err := os.Remove(filepath.Join(r.dev, "web-2")); err != nil {
		t.Fatal(err)
	}
	before = r.newest(t)
	r.register(t, "web-2", 9002)
	r.wait(t, "web-2 changed after its object was deleted out of band")
	ev, log = r.lastApply(t, before)
	for _, want := range []string{"refresh skipped (-refresh=false)", "Cannot update the object", "apply without refresh failed",
		"applying again now with a full refresh"} {
		if !strings.Contains(log, want) {
			t.Errorf("fallback run %s: log lacks %q", ev.ID, want)
		}
	}
	if reads(log) != 3 {
		t.Errorf("fallback run %s: %d objects read, want 3", ev.ID, reads(log))
	}
	if ev.Refresh != "full" {
		t.Errorf("fallback run %s: event refresh = %q, want full", ev.ID, ev.Refresh)
	}
	if t.Failed() {
		t.Fatalf("log:\n%s", log)
	}
}

// fileTimes are the modification times of the device's object files.
func fileTimes(t *testing.T, dir string) map[string]time.Time {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]time.Time{}
	for _, e := range ents {
		if info, err := e.Info(); err == nil && !strings.HasPrefix(e.Name(), ".") {
			m[e.Name()] = info.ModTime()
		}
	}
	return m
}

// Refresh policy "auto": a catalog change of one instance among eight is
// applied with a targeted apply (-target of that instance's object); its
// full check without refresh follows in a run of its own (trigger
// "check"); the other objects are neither read nor written. With a module
// whose every object depends on every instance (length(var.services)),
// the check applies the rest: the device ends as a full run leaves it. A
// second change made right after the first is applied before the first's
// check, which then checks both.
func TestRefreshAutoTargeted(t *testing.T) {
	r := startRefreshRig(t, "auto", "")
	for i := 3; i <= 8; i++ {
		r.register(t, fmt.Sprintf("web-%d", i), 8000+i)
	}
	r.wait(t, "web-1 to web-8 registered")
	r.quiet(t, `["web-8.`)  // the key: id.node.datacenter
	time.Sleep(time.Second) // a later modification time for the object written next

	before, times := r.newest(t), fileTimes(t, r.dev)
	r.register(t, "web-5", 9005)
	r.wait(t, "web-5 changed")
	runs := r.checked(t, before, 2)
	ev, log := runs[1].ev, runs[1].log
	if reads(log) != 0 || !strings.Contains(log, "targeted 1 of 8 resource instances") || !strings.Contains(log, "full check: pending") ||
		!strings.Contains(log, `device_object.instance["web-5.`) || ev.Refresh != "skipped" || strings.Contains(log, "full check: no further changes") {
		t.Fatalf("catalog change of web-5 (run %s, refresh %q): %d objects read; log:\n%s", ev.ID, ev.Refresh, reads(log), log)
	}
	if log := runs[0].log; reads(log) != 0 || !strings.Contains(log, "full check: no further changes") || strings.Contains(log, "-target") {
		t.Fatalf("check after the change of web-5 (run %s): %d objects read; log:\n%s", runs[0].ev.ID, reads(log), log)
	}
	// The runs' events (the API's) say what their logs say.
	if !strings.HasPrefix(ev.Targeted, "targeted 1 of 8 resource instances") || !strings.HasSuffix(ev.Targeted, "full check: pending") ||
		runs[0].ev.Targeted != "full check: no further changes" {
		t.Errorf("catalog change of web-5: events targeted %q (run %s), %q (check %s)", ev.Targeted, ev.ID, runs[0].ev.Targeted, runs[0].ev.ID)
	}
	for name, m := range fileTimes(t, r.dev) {
		if written := !m.Equal(times[name]); written != (name == "web-5") {
			t.Errorf("object %s written by the targeted run or its check: %v", name, written)
		}
	}

	// Every object depends on every instance: a module change (a full
	// run), then a registration, applied targeted and completed by the
	// check.
	before = r.newest(t)
	writeFile(t, r.mod, "main.tf", strings.Replace(deviceModule, `"${each.value.address}:${each.value.port}"`,
		`"${each.value.address}:${each.value.port}/${length(var.services)}"`, 1))
	r.register(t, "web-1", 9001)
	for id, v := range r.want {
		r.want[id] = v + "/8"
	}
	r.wait(t, "the module changed: every object with the count")
	r.quiet(t, "full refresh: the run is not a change of the task's Consul data alone") // the module changed

	before = r.newest(t)
	r.register(t, "web-9", 8009)
	for id, v := range r.want {
		r.want[id] = strings.TrimSuffix(v, "/8") + "/9"
	}
	r.want["web-9"] = "10.0.0.1:8009/9"
	r.wait(t, "web-9 registered: every object with the new count")
	runs = r.checked(t, before, 2)
	if log := runs[1].log; reads(log) != 0 || !strings.Contains(log, "targeted 1 of 8 resource instances") || !strings.Contains(log, "full check: pending") {
		t.Fatalf("registration with a dependent module (run %s): %d objects read; log:\n%s", runs[1].ev.ID, reads(log), log)
	}
	if log := runs[0].log; reads(log) != 0 || !strings.Contains(log, "full check: applied 8 further changes") {
		t.Fatalf("check of the registration (run %s): %d objects read; log:\n%s", runs[0].ev.ID, reads(log), log)
	}
	if runs[0].ev.Targeted != "full check: applied 8 further changes" {
		t.Errorf("check of the registration (run %s): event targeted %q", runs[0].ev.ID, runs[0].ev.Targeted)
	}

	// Two registrations, the second made as soon as the first reaches the
	// device: it is applied (targeted) before the first's check, which
	// then applies the rest of both.
	before = r.newest(t)
	r.register(t, "web-10", 8010)
	r.waitObject(t, "web-10")
	r.register(t, "web-11", 8011)
	r.waitObject(t, "web-11")
	for _, ev := range r.since(t, before) {
		if ev.Trigger == "check" {
			t.Fatalf("a check ran (event %s) before the second registration reached the device", ev.ID)
		}
	}
	for id, v := range r.want {
		r.want[id] = strings.TrimSuffix(v, "/9") + "/11"
	}
	r.want["web-10"], r.want["web-11"] = "10.0.0.1:8010/11", "10.0.0.1:8011/11"
	r.wait(t, "web-10 and web-11 registered: every object with the new count")
	runs = r.checked(t, before, 3)
	for i, key := range map[int]string{2: `["web-10.`, 1: `["web-11.`} {
		if log := runs[i].log; !strings.Contains(log, "targeted 1 of ") || !strings.Contains(log, "full check: pending") || !strings.Contains(log, key) {
			t.Fatalf("registration %s (run %s, trigger %q); log:\n%s", key, runs[i].ev.ID, runs[i].ev.Trigger, log)
		}
	}
	if log := runs[0].log; !strings.Contains(log, "full check: applied 10 further changes") {
		t.Fatalf("check of both registrations (run %s); log:\n%s", runs[0].ev.ID, log)
	}
}

// loggedRun is a run's event and its run log.
type loggedRun struct {
	ev  store.Event
	log string
}

// since is the task's events newer than the event prev, newest first.
func (r *refreshRig) since(t *testing.T, prev string) []store.Event {
	t.Helper()
	evs := taskEvents(t, r.base, "dev")
	for i, ev := range evs {
		if ev.ID == prev {
			return evs[:i]
		}
	}
	return evs
}

// checked waits until the n runs after the event prev are recorded, the
// newest a successful full check (trigger "check") and the others
// successful changes, and returns them with their logs, newest first.
func (r *refreshRig) checked(t *testing.T, prev string, n int) []loggedRun {
	t.Helper()
	var runs []loggedRun
	testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("%d runs, the last a check", n), func() bool {
		evs := r.since(t, prev)
		if len(evs) < n || evs[0].Trigger != "check" {
			return false
		}
		if len(evs) > n {
			t.Fatalf("%d runs, want %d: %+v", len(evs), n, evs)
		}
		runs = nil
		for i, ev := range evs {
			if !ev.Success || ev.Kind != "apply" || (i > 0) == (ev.Trigger == "check") {
				t.Fatalf("run %d of %d (%s): success %v, kind %s, trigger %q", i, n, ev.ID, ev.Success, ev.Kind, ev.Trigger)
			}
			b, err := os.ReadFile(filepath.Join(r.logs, ev.ID+".log"))
			if err != nil {
				t.Fatal(err)
			}
			runs = append(runs, loggedRun{ev, string(b)})
		}
		return true
	})
	return runs
}

// quiet waits until a run whose log holds marker is recorded and the
// newest run leaves no check due.
func (r *refreshRig) quiet(t *testing.T, marker string) {
	t.Helper()
	testutil.Eventually(t, 2*time.Minute, "the runs recorded, no check due", func() bool {
		evs := taskEvents(t, r.base, "dev")
		seen := false
		for i, ev := range evs {
			b, _ := os.ReadFile(filepath.Join(r.logs, ev.ID+".log"))
			if i == 0 && (!ev.Success || ev.Kind != "apply" || strings.Contains(string(b), "full check: pending")) {
				return false
			}
			seen = seen || strings.Contains(string(b), marker)
		}
		return seen
	})
}

// waitObject waits for the device to hold an object of the id.
func (r *refreshRig) waitObject(t *testing.T, id string) {
	t.Helper()
	testutil.Eventually(t, 2*time.Minute, "the object "+id, func() bool { return deviceObjects(t, r.dev)[id] != "" })
}
