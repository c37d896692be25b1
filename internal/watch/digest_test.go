package watch

import (
	"testing"

	"github.com/ctsync/ctsync/internal/task"
)

func TestDigest(t *testing.T) {
	d := func(v any) Digest {
		t.Helper()
		got, err := DigestOf(v)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	// Two different invalid UTF-8 values must not look alike (JSON would
	// turn both into U+FFFD).
	if d(map[string]string{"k": "\xff"}) == d(map[string]string{"k": "\xfe"}) {
		t.Fatal("invalid UTF-8 values collide")
	}
	// Field boundaries matter: ("ab","c") is not ("a","bc").
	if d(map[string]string{"ab": "c"}) == d(map[string]string{"a": "bc"}) {
		t.Fatal("length prefixes missing")
	}
	a := map[string][]string{"web": {"a", "b"}, "db": {}}
	b := map[string][]string{"db": {}, "web": {"a", "b"}}
	if d(a) != d(b) {
		t.Fatal("map order changed the digest")
	}
	s1 := []task.Service{{ID: "x", Port: 80, Meta: map[string]string{"v": "1"}}}
	s2 := []task.Service{{ID: "x", Port: 81, Meta: map[string]string{"v": "1"}}}
	if d(s1) == d(s2) {
		t.Fatal("port change not seen")
	}
	if _, err := DigestOf(42); err == nil {
		t.Fatal("unknown value type accepted")
	}
}
