package terraform

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// With real Terraform and Consul: each command's lock session is recorded;
// a lock held by a recorded session (a Terraform an earlier owner ran, now
// stopped) is cleared before the next command, which then applies at once;
// a lock held by anyone else is left alone and the run fails as locked.
func TestStateLockRecordedAndCleared(t *testing.T) {
	bin := needTerraform(t)
	consul := testutil.StartConsul(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	kv := store.NewConsulKV(consul.Client, store.ConsulKVOptions{Prefix: "p/state"})
	if err := kv.Load(ctx); err != nil {
		t.Fatal(err)
	}
	src := writeModule(t, dir, "mod", map[string]string{"main.tf": builtinModule})
	o := Options{
		Spec:       task.Spec{Name: "consul-task", Module: src, Condition: servicesCondition("web")},
		WorkDir:    filepath.Join(dir, "consul-task"),
		Binary:     bin,
		Consul:     config.Consul{Address: "http://" + consul.Addr, KVPath: "consul-terraform-sync/"},
		StateLocks: kv,
		Instance:   "cts-a",
	}
	const key = "consul-terraform-sync/terraform-env:consul-task/.lock"
	record := func() store.StateLock {
		t.Helper()
		p, _, err := consul.Client.KV().Get("p/state/tflock/consul-task", nil)
		if err != nil || p == nil {
			t.Fatalf("no lock record: %v", err)
		}
		var r store.StateLock
		if err := json.Unmarshal(p.Value, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	d := mustNew(t, o)
	if _, err := d.Apply(ctx, run("a1"), services("web-1")); err != nil {
		t.Fatal(err)
	}
	if r := record(); r.Key != key || r.Member != "cts-a" || len(r.Session) != 36 {
		t.Fatalf("record after an apply: %+v", r)
	}

	// A stopped Terraform's lock (recorded; its session lives on with a
	// 5 s lock-delay, as Terraform's do).
	lockWith := func(name string) string {
		t.Helper()
		s, _, err := consul.Client.Session().Create(&api.SessionEntry{Name: name, TTL: "15s", LockDelay: 5 * time.Second}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ok, _, err := consul.Client.KV().Acquire(&api.KVPair{Key: key, Session: s, Flags: api.LockFlagValue}, nil); err != nil || !ok {
			t.Fatalf("lock: %v %v", ok, err)
		}
		_, err = consul.Client.KV().Put(&api.KVPair{Key: "consul-terraform-sync/terraform-env:consul-task/.lockinfo",
			Value: []byte(`{"ID":"` + s + `","Operation":"OperationTypeApply","Who":"someone@host","Created":"2026-11-29T01:00:00Z"}`)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	stale := lockWith("Consul API Lock")
	if err := kv.RecordStateLock(ctx, "consul-task", key, stale, "cts-b"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := d.Apply(ctx, run("a2"), services("web-1", "web-2"))
	if err != nil {
		t.Fatalf("apply behind a stopped run's recorded lock: %v", err)
	}
	if !res.Changes {
		t.Fatalf("the apply behind the cleared lock changed nothing: %+v", res)
	}
	t.Logf("apply behind a stopped run's lock took %s", time.Since(start).Round(time.Millisecond))
	if se, _, _ := consul.Client.Session().Info(stale, nil); se != nil {
		t.Errorf("the cleared lock's session %s still exists", stale)
	}
	if r := record(); r.Session == stale {
		t.Errorf("the apply's own lock session was not recorded")
	}

	// Someone else's lock: never touched.
	other := lockWith("by hand")
	_, err = d.Apply(ctx, run("a3"), services("web-1", "web-2", "web-3"))
	if !errors.Is(err, driver.ErrStateLocked) {
		t.Fatalf("apply behind someone else's lock: %v, want ErrStateLocked", err)
	}
	p, _, _ := consul.Client.KV().Get(key, nil)
	if p == nil || p.Session != other {
		t.Fatalf("someone else's lock was touched: %+v", p)
	}
}
