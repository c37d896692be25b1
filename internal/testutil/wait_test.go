package testutil

import (
	"testing"
	"time"
)

func TestParseScale(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"", DefaultScale, true},
		{"1", 1, true},
		{"0.5", 0.5, true},
		{"4", 4, true},
		{"0", 0, false},
		{"-2", 0, false},
		{"NaN", 0, false},
		{"Inf", 0, false},
		{"two", 0, false},
	} {
		got, err := parseScale(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("parseScale(%q) = %v, %v; want %v (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// Eventually gives up after the scaled timeout, naming it.
func TestEventuallyScalesItsDeadline(t *testing.T) {
	ft := &fakeT{TB: t}
	start := time.Now()
	func() {
		defer func() { _ = recover() }()
		Eventually(ft, 10*time.Millisecond, "nothing", func() bool { return false })
	}()
	waited := time.Since(start)
	if want := Scale(10 * time.Millisecond); waited < want || ft.msg == "" {
		t.Fatalf("waited %s (want at least %s), failure %q", waited, want, ft.msg)
	}
}

// fakeT records a Fatalf and stops the wait (as t.Fatalf would).
type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = format
	panic("fatal")
}
