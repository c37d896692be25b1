package store

import (
	"fmt"
	"testing"
)

func TestMemoryHistoryBounded(t *testing.T) {
	m := NewMemory(3)
	for i := 0; i < 5; i++ {
		_ = m.AddEvent(t.Context(), Event{ID: fmt.Sprint(i), TaskName: "a", Success: true})
	}
	evs := m.Events("a")
	if len(evs) != 3 || evs[0].ID != "4" || evs[2].ID != "2" {
		t.Fatalf("want newest 3 events newest first, got %+v", evs)
	}
	_ = m.DeleteTask(t.Context(), "a")
	if len(m.Events("a")) != 0 {
		t.Fatal("events survived DeleteTask")
	}
}

func TestStatus(t *testing.T) {
	ok, bad := Event{Success: true}, Event{}
	cases := []struct {
		evs  []Event
		want string
	}{
		{nil, "unknown"},
		{[]Event{ok, bad}, "successful"},
		{[]Event{bad, ok, ok}, "errored"},
		{[]Event{bad, ok, bad}, "critical"},
		{[]Event{bad}, "errored"},
	}
	for i, c := range cases {
		if got := Status(c.evs); got != c.want {
			t.Errorf("case %d: got %s want %s", i, got, c.want)
		}
	}
}

func TestApplied(t *testing.T) {
	m := NewMemory(0)
	if m.Run("x").Applied != "" {
		t.Fatal("unexpected hash")
	}
	_ = m.FinishRun(t.Context(), "x", RunState{Applied: "h1"}, nil)
	if m.Run("x").Applied != "h1" {
		t.Fatal("hash not kept")
	}
}
