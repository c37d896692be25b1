package store

import (
	"reflect"
	"testing"
	"time"
)

func TestDestroyWindowWith(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	var w DestroyWindow
	w = w.With(WindowEntry{At: at(0), Destroyed: 1, Before: 10, After: 9}, time.Hour)
	w = w.With(WindowEntry{At: at(20), Destroyed: 1, Before: 9, After: 8}, time.Hour)
	// Out of order (two instances recording in a race): kept in time order.
	w = w.With(WindowEntry{At: at(10), Destroyed: 2, Before: 9, After: 9}, time.Hour)
	if got := []time.Time{w.Entries[0].At, w.Entries[1].At, w.Entries[2].At}; !reflect.DeepEqual(got, []time.Time{at(0), at(10), at(20)}) {
		t.Fatalf("order %v", got)
	}
	// An entry exactly a window old stays; one older goes.
	w2 := w.With(WindowEntry{At: at(60), Destroyed: 0, Before: 8, After: 8}, time.Hour)
	if len(w2.Entries) != 4 || !w2.Entries[0].At.Equal(at(0)) {
		t.Fatalf("at the window's edge: %+v", w2.Entries)
	}
	w3 := w2.With(WindowEntry{At: at(65), Destroyed: 1, Before: 8, After: 7}, time.Hour)
	if len(w3.Entries) != 4 || !w3.Entries[0].At.Equal(at(10)) {
		t.Fatalf("past the window: %+v", w3.Entries)
	}
	if len(w.Entries) != 3 {
		t.Fatalf("With changed its receiver: %+v", w.Entries)
	}
	if got := w3.Since(at(20)); len(got) != 3 || !got[0].At.Equal(at(20)) {
		t.Fatalf("Since: %+v", got)
	}
	if got := w3.Since(at(70)); got != nil {
		t.Fatalf("Since after the last: %+v", got)
	}
	// keep <= 0: nothing is kept (a window of "0s").
	if got := w3.With(WindowEntry{At: at(66), Destroyed: 1}, 0); len(got.Entries) != 0 {
		t.Fatalf("keep 0: %+v", got)
	}
	// Past MaxWindowEntries the oldest are merged: destroys summed, the
	// larger counts, the later time; nothing stops counting sooner.
	var big DestroyWindow
	for i := range MaxWindowEntries + 2 {
		big = big.With(WindowEntry{At: t0.Add(time.Duration(i) * time.Second), Destroyed: 1, Before: 100 - i, After: 99 - i, Approved: i == 0}, time.Hour)
	}
	if len(big.Entries) != MaxWindowEntries {
		t.Fatalf("%d entries, want %d", len(big.Entries), MaxWindowEntries)
	}
	first := big.Entries[0]
	want := WindowEntry{At: t0.Add(2 * time.Second), Destroyed: 3, Before: 100, After: 99}
	if first != want {
		t.Fatalf("merged entry %+v, want %+v", first, want)
	}
	total := 0
	for _, e := range big.Entries {
		total += e.Destroyed
	}
	if total != MaxWindowEntries+2 {
		t.Fatalf("destroys after merging: %d, want %d", total, MaxWindowEntries+2)
	}
}
