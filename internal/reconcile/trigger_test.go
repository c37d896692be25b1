package reconcile

import (
	"maps"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
	"github.com/ctsync/ctsync/internal/watch"
)

// Condition-only triggering (CTS semantics): a task runs when its
// condition's data changes; the data of its module inputs is read by that
// run, and recorded with it, but a change of it alone runs nothing.

func kvKey(path string) string { return watch.KV(path, true, "", "").Key() }

func catalogKey() string { return watch.CatalogServices(watch.CatalogOptions{}).Key() }

// catalog-services condition with a services module input: a new instance
// of a service (same names) does not run the task; a new name does, and
// that run reads the instances as they are now.
func TestModuleInputDoesNotTriggerCatalogServices(t *testing.T) {
	s := task.Spec{Name: "cat", Module: "./m", Enabled: true, BufferPeriod: &task.BufferPeriod{},
		Condition:   task.Condition{CatalogServices: &task.CatalogServicesCondition{Regexp: "^web", UseAsModuleInput: false}},
		ModuleInput: task.ModuleInputs{Services: &task.ServicesSelector{Names: []string{"api"}}}}
	h := start(t, 2, nil, s)
	h.w.Set(catalogKey(), map[string][]string{"api": {}})
	h.w.Set(healthKey("api"), []task.Service{})
	h.waitApplied(t, "cat") // the start-up run, once every query has data
	first := h.st.Run("cat")

	h.w.Set(healthKey("api"), []task.Service{inst("api-1", "api")})
	h.w.Set(catalogKey(), map[string][]string{"api": {"new-tag"}})
	h.noApply(t)

	h.w.Set(catalogKey(), map[string][]string{"api": {"new-tag"}, "web": {}})
	h.waitApplied(t, "cat")
	if got := h.rec.last("cat").Services; len(got) != 1 {
		t.Fatalf("the condition's run did not read the current module input: %+v", got)
	}
	// The run records what it used: the module input's digest is in the
	// recorded parts, and the event's inputs_hash covers it.
	testutil.WaitFor(t, "the run to be recorded", func() bool { return h.st.Run("cat").Applied != first.Applied })
	st := h.st.Run("cat")
	if st.Parts[driver.PartModuleInputs] == "" || st.Parts[driver.PartModuleInputs] == first.Parts[driver.PartModuleInputs] {
		t.Fatalf("module input digest not recorded with the run: %v (first %v)", st.Parts, first.Parts)
	}
	evs := h.st.Events("cat")
	if len(evs) == 0 || evs[0].InputsHash == st.Applied || evs[0].InputsHash == "" {
		t.Fatalf("event inputs_hash %q must cover the module inputs (trigger fingerprint %q)", evs[0].InputsHash, st.Applied)
	}
	if evs[0].Trigger != catalogKey() {
		t.Fatalf("trigger %q, want the condition's query", evs[0].Trigger)
	}
}

// services condition with a consul-kv module input; and the deprecated
// form, a task whose `services` list is its condition: a KV change alone
// does not run it, a change of the services does, with the current KV.
func TestModuleInputDoesNotTriggerServices(t *testing.T) {
	s := servicesTask("svc", "web")
	s.ModuleInput.ConsulKV = &task.ConsulKVSelector{Path: "cfg", Recurse: true}
	h := start(t, 2, nil, s)
	h.w.Set(kvKey("cfg"), map[string]string{})
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h.waitApplied(t, "svc")

	h.w.Set(kvKey("cfg"), map[string]string{"cfg/a": "1"})
	h.noApply(t)
	h.w.Set(kvKey("cfg"), map[string]string{"cfg/a": "2"})
	h.noApply(t)

	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web"), inst("web-2", "web")})
	h.waitApplied(t, "svc")
	if got := h.rec.last("svc").ConsulKV; !maps.Equal(got, map[string]string{"cfg/a": "2"}) {
		t.Fatalf("the run read consul_kv %v, want the current value", got)
	}
	h.noApply(t) // and once only
}

// A condition with use_as_module_input = false still triggers; module
// inputs still do not, whatever the condition renders.
func TestUnrenderedConditionTriggersModuleInputDoesNot(t *testing.T) {
	s := task.Spec{Name: "kv", Module: "./m", Enabled: true, BufferPeriod: &task.BufferPeriod{},
		Condition: task.Condition{ConsulKV: &task.ConsulKVCondition{
			ConsulKVSelector: task.ConsulKVSelector{Path: "key", Recurse: true}, UseAsModuleInput: false}},
		ModuleInput: task.ModuleInputs{Services: &task.ServicesSelector{Names: []string{"api"}}}}
	h := start(t, 2, nil, s)
	h.w.Set(kvKey("key"), map[string]string{})
	h.w.Set(healthKey("api"), []task.Service{})
	h.waitApplied(t, "kv")
	h.w.Set(healthKey("api"), []task.Service{inst("api-1", "api")})
	h.noApply(t)
	h.w.Set(kvKey("key"), map[string]string{"key": "value"})
	h.waitApplied(t, "kv")
	if in := h.rec.last("kv"); len(in.Services) != 1 || in.ConsulKV != nil {
		t.Fatalf("inputs %+v: want the api instance and no consul_kv", in)
	}
}

// A failed task stays dirty and is retried; the retry reads the module
// input as it is then.
func TestRetryReadsCurrentModuleInput(t *testing.T) {
	s := servicesTask("r", "web")
	s.ModuleInput.ConsulKV = &task.ConsulKVSelector{Path: "cfg", Recurse: true}
	h := start(t, 2, []string{"r"}, s)
	gate := h.gates["r"]
	h.w.Set(kvKey("cfg"), map[string]string{"cfg/a": "1"})
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	testutil.WaitFor(t, "the first run to start", func() bool { h.mu.Lock(); defer h.mu.Unlock(); return h.drv["r"] != nil })
	h.mu.Lock()
	d := h.drv["r"]
	h.mu.Unlock()
	d.failing.Store(true)
	waitRunning(t, h.rec, "r")
	h.w.Set(kvKey("cfg"), map[string]string{"cfg/a": "2"}) // during the failing run
	gate <- struct{}{}
	h.waitApplied(t, "r") // the failed run
	testutil.WaitFor(t, "the failure to be recorded", func() bool { return h.st.Run("r").Dirty() })
	d.failing.Store(false)
	waitRunning(t, h.rec, "r") // the retry
	gate <- struct{}{}
	h.waitApplied(t, "r")
	if got := h.rec.last("r").ConsulKV; got["cfg/a"] != "2" {
		t.Fatalf("the retry read %v, want the current module input", got)
	}
	testutil.WaitFor(t, "the retry's success to be recorded", func() bool { return !h.st.Run("r").Dirty() && h.st.Run("r").Applied != "" })
}

// A restart (the same store) with only module input data changed in
// between runs nothing: the condition did not change.
func TestRestartWithChangedModuleInputRunsNothing(t *testing.T) {
	s := servicesTask("svc", "web")
	s.ModuleInput.ConsulKV = &task.ConsulKVSelector{Path: "cfg", Recurse: true}
	h := start(t, 2, nil, s)
	h.w.Set(kvKey("cfg"), map[string]string{"cfg/a": "1"})
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h.waitApplied(t, "svc")
	testutil.WaitFor(t, "the run to be recorded", func() bool { return h.st.Run("svc").Applied != "" })
	h.cancel()
	<-h.done

	st := h.st
	h2 := start(t, 2, nil, s, func(o *Options) { o.Store = st })
	h2.w.Set(kvKey("cfg"), map[string]string{"cfg/a": "2"})
	h2.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h2.noApply(t)
	if n := h2.rec.count("svc"); n != 0 {
		t.Fatalf("%d runs after a restart with only module input data changed", n)
	}
}

// A drift check is skipped while the module input data differs from what
// the last apply used: its plan would show that change, not drift.
func TestDriftCheckWaitsWhileModuleInputMoved(t *testing.T) {
	s := servicesTask("d", "web")
	s.ModuleInput.ConsulKV = &task.ConsulKVSelector{Path: "cfg", Recurse: true}
	s.DriftDetection = &task.DriftDetection{Interval: task.Duration(time.Second)}
	h := start(t, 2, nil, s)
	h.w.Set(kvKey("cfg"), map[string]string{"cfg/a": "1"})
	h.w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	h.waitApplied(t, "d")
	h.w.Set(kvKey("cfg"), map[string]string{"cfg/a": "2"}) // before the first check (1s)
	base := h.ctrl.src.driftWakes.Load()
	testutil.WaitFor(t, "drift checks to come due twice", func() bool { return h.ctrl.src.driftWakes.Load() >= base+2 })
	for _, ev := range h.st.Events("d") {
		if ev.Kind == store.KindDrift {
			t.Fatalf("a drift check ran with moved module inputs: %+v", ev)
		}
	}
}
