package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func openTestBolt(t *testing.T, path string, history int) *Bolt {
	t.Helper()
	b, err := OpenBolt(path, history, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBoltHistorySurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), HistoryFile)
	logFile := filepath.Join(t.TempDir(), "run.log")
	if err := os.WriteFile(logFile, []byte("log"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := openTestBolt(t, path, 3)
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 5 {
		ev := Event{ID: fmt.Sprint(i), TaskName: "web", Success: i%2 == 0, StartTime: start.Add(time.Duration(i) * time.Minute),
			Plan: &PlanSummary{Add: i}, LogPath: logFile}
		if i == 4 {
			if err := b.FinishRun(t.Context(), "web", RunState{Applied: "h"}, &ev); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := b.AddEvent(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
	}
	_ = b.AddEvent(t.Context(), Event{ID: "x", TaskName: "other/task"})
	if got := b.Events("web"); len(got) != 3 || got[0].ID != "4" {
		t.Fatalf("before reopen: %+v", got)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = openTestBolt(t, path, 3)
	got := b.Events("web")
	if len(got) != 3 || got[0].ID != "4" || got[1].ID != "3" || got[2].ID != "2" {
		t.Fatalf("after reopen want events 4,3,2, got %+v", got)
	}
	if got[0].Plan == nil || got[0].Plan.Add != 4 || !got[0].StartTime.Equal(start.Add(4*time.Minute)) || got[0].LogPath != logFile {
		t.Fatalf("event not kept whole: %+v", got[0])
	}
	if st := b.Run("web"); st.Applied != "h" || st.InFlight != "" {
		t.Fatalf("the run state did not survive the reopen: %+v", st)
	}
	if len(b.Events("other/task")) != 1 {
		t.Fatal("a task name with a slash lost its event")
	}
	if err := b.DeleteTask(t.Context(), "web"); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()

	// A smaller history keeps the newest.
	b = openTestBolt(t, path, 1)
	defer b.Close()
	if n := len(b.Events("web")); n != 0 {
		t.Fatalf("deleted task has %d events after reopen", n)
	}
	if got := b.Events("other/task"); len(got) != 1 || got[0].ID != "x" {
		t.Fatalf("other task: %+v", got)
	}
}

func TestBoltTrimsOnSmallerHistory(t *testing.T) {
	path := filepath.Join(t.TempDir(), HistoryFile)
	b := openTestBolt(t, path, 10)
	for i := range 6 {
		_ = b.AddEvent(t.Context(), Event{ID: fmt.Sprint(i), TaskName: "a"})
	}
	_ = b.Close()
	b = openTestBolt(t, path, 2)
	if got := b.Events("a"); len(got) != 2 || got[0].ID != "5" || got[1].ID != "4" {
		t.Fatalf("got %+v", got)
	}
	_ = b.Close()
	b = openTestBolt(t, path, 10) // trimmed in the file, not only in memory
	defer b.Close()
	if n := len(b.Events("a")); n != 2 {
		t.Fatalf("want 2 events left in the file, got %d", n)
	}
}

func TestBoltInUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), HistoryFile)
	b := openTestBolt(t, path, 0)
	defer b.Close()
	_, err := OpenBolt(path, 0, nil)
	if !errors.Is(err, ErrHistoryInUse) {
		t.Fatalf("want ErrHistoryInUse, got %v", err)
	}
}

func TestBoltUnreadableFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), HistoryFile)
	if err := os.WriteFile(path, []byte("not a database, but long enough to be read as one........................"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenBolt(path, 0, nil); err == nil {
		t.Fatal("want an error for a file that is not a database")
	}
}

// A history that cannot be written to disk (full, read-only) is kept in
// memory: the run's outcome is still recorded.
func TestBoltWriteFailureKeepsTheRunInMemory(t *testing.T) {
	b := openTestBolt(t, filepath.Join(t.TempDir(), HistoryFile), 0)
	_ = b.db.Close() // every write fails from now on
	if err := b.FinishRun(t.Context(), "a", RunState{Applied: "h"}, &Event{ID: "1", TaskName: "a", Success: true}); err != nil {
		t.Fatalf("FinishRun: %v", err)
	}
	if b.Run("a").Applied != "h" || len(b.Events("a")) != 1 {
		t.Fatalf("state %+v, events %+v", b.Run("a"), b.Events("a"))
	}
	if err := b.AddEvent(t.Context(), Event{ID: "2", TaskName: "a"}); err != nil || len(b.Events("a")) != 2 {
		t.Fatalf("AddEvent: %v", err)
	}
	if err := b.DeleteTask(t.Context(), "a"); err != nil || len(b.Events("a")) != 0 {
		t.Fatalf("DeleteTask: %v", err)
	}
}
