package terraform

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

type fakeLocks struct {
	mu      sync.Mutex
	records []string // task key session member
}

func (f *fakeLocks) RecordStateLock(_ context.Context, taskName, key, session, member string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.records = append(f.records, strings.Join([]string{taskName, key, session, member}, " "))
	return nil
}

func (f *fakeLocks) ClearStateLock(context.Context, string, string) (store.ClearedLock, bool, error) {
	return store.ClearedLock{}, false, nil
}

func lockDriver(locks StateLocks, b config.Backend) *Driver {
	return &Driver{
		opts: Options{Spec: task.Spec{Name: "web"}, StateLocks: locks, Instance: "cts-a"},
		mod:  &rootModule{backend: b},
		log:  slog.New(slog.DiscardHandler),
	}
}

// The lock key is the consul backend's: the workspace (the task) state
// path plus "/.lock"; there is none for another backend, with locking off,
// or without StateLocks.
func TestStateLockKey(t *testing.T) {
	consul := func(attrs map[string]cty.Value) config.Backend { return config.Backend{Type: "consul", Attrs: attrs} }
	path := map[string]cty.Value{"path": cty.StringVal("consul-terraform-sync/terraform")}
	for _, c := range []struct {
		name  string
		d     *Driver
		want  string
		wants bool
	}{
		{"default", lockDriver(&fakeLocks{}, consul(path)), "consul-terraform-sync/terraform-env:web/.lock", true},
		{"lock off", lockDriver(&fakeLocks{}, consul(map[string]cty.Value{"path": path["path"], "lock": cty.False})), "", false},
		{"lock on", lockDriver(&fakeLocks{}, consul(map[string]cty.Value{"path": path["path"], "lock": cty.True})), "consul-terraform-sync/terraform-env:web/.lock", true},
		{"s3", lockDriver(&fakeLocks{}, config.Backend{Type: "s3", Attrs: path}), "", false},
		{"no records", lockDriver(nil, consul(path)), "", false},
	} {
		got, ok := c.d.stateLockKey()
		if got != c.want || ok != c.wants {
			t.Errorf("%s: stateLockKey() = %q, %v; want %q, %v", c.name, got, ok, c.want, c.wants)
		}
	}
}

// Terraform's log, in pieces of any size, is scanned for the consul lock
// session line; each session is recorded once it is seen whole.
func TestLockWatchRecordsSessions(t *testing.T) {
	f := &fakeLocks{}
	d := lockDriver(f, config.Backend{Type: "consul"})
	w := newLockWatch(d, "p-env:web/.lock")
	log := "2026-11-29T01:00:00.000Z [INFO]  backend/local: starting Apply operation\n" +
		"2026-11-29T01:00:00.100Z [INFO]  created consul lock session 0c5a1bbf-2d36-6a36-54a1-8f6c3b37ab51\n" +
		"2026-11-29T01:00:00.200Z [INFO]  apply calling Apply\n" +
		"2026-11-29T01:00:05.000Z [INFO]  created consul lock session 7e1f52f4-1f0b-4a5b-9f45-0d6a3c2b1e00\n"
	for i := 0; i < len(log); i += 7 {
		if _, err := w.Write([]byte(log[i:min(i+7, len(log))])); err != nil {
			t.Fatal(err)
		}
	}
	w.close()
	want := []string{
		"web p-env:web/.lock 0c5a1bbf-2d36-6a36-54a1-8f6c3b37ab51 cts-a",
		"web p-env:web/.lock 7e1f52f4-1f0b-4a5b-9f45-0d6a3c2b1e00 cts-a",
	}
	if strings.Join(f.records, "\n") != strings.Join(want, "\n") {
		t.Errorf("records:\n%s\nwant:\n%s", strings.Join(f.records, "\n"), strings.Join(want, "\n"))
	}
}
