package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestMemoryRemoteRun(t *testing.T) {
	m := NewMemory(0)
	if _, ok := m.RemoteRun("web"); ok {
		t.Fatal("a record before any was written")
	}
	r := RemoteRun{Op: "apply", Digest: "d1", ConfigurationVersion: "cv-1", Run: "r1"}
	_ = m.SetRemoteRun(t.Context(), "web", r)
	r.ID = "run-1"
	_ = m.SetRemoteRun(t.Context(), "web", r)
	if got, ok := m.RemoteRun("web"); !ok || got != r {
		t.Fatalf("record = %+v, %v", got, ok)
	}
	_ = m.DeleteTask(t.Context(), "web")
	if _, ok := m.RemoteRun("web"); ok {
		t.Fatal("the record survived DeleteTask")
	}
}

// The record is in Consul (a new leader's Load reads it), its write is
// fenced like every other, and it goes with the task.
func TestConsulKVRemoteRun(t *testing.T) {
	c := startConsul(t)
	ctx := context.Background()
	prefix := "consul-terraform-sync/prod/state"
	s := NewConsulKV(c.Client, ConsulKVOptions{Prefix: prefix})
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	r := RemoteRun{Op: "apply", Digest: "d1", ConfigurationVersion: "cv-1", ID: "run-1", Run: "r1", At: time.Unix(1700000000, 0).UTC()}
	if err := s.SetRemoteRun(t.Context(), "web/a", r); err != nil {
		t.Fatal(err)
	}
	next := NewConsulKV(c.Client, ConsulKVOptions{Prefix: prefix})
	if err := next.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if got, ok := next.RemoteRun("web/a"); !ok || got != r {
		t.Fatalf("loaded record = %+v, %v", got, ok)
	}

	next = NewConsulKV(c.Client, ConsulKVOptions{Prefix: prefix, Fence: func(string) (string, string, bool) { return "", "", false }})
	must(t, next.Load(ctx))
	if err := next.SetRemoteRun(t.Context(), "web/a", RemoteRun{Op: "apply", Digest: "d2"}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("fenced write: %v", err)
	}
	if got, _ := next.RemoteRun("web/a"); got != r {
		t.Fatalf("a refused write changed the cache: %+v", got)
	}

	if err := s.DeleteTask(t.Context(), "web/a"); err != nil {
		t.Fatal(err)
	}
	if ks := keys(t, c.Client, prefix+"/remote/"); len(ks) != 0 {
		t.Fatalf("keys left after DeleteTask: %v", ks)
	}
	if _, ok := s.RemoteRun("web/a"); ok {
		t.Fatal("the cached record survived DeleteTask")
	}
}
