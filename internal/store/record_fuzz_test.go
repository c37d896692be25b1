package store

import (
	"strings"
	"testing"
)

// TestDecodeTaskRecordBounds: a task record from Consul KV that is too
// large or nests too deep (in its JSON or in a variable's HCL text) is
// refused before it is decoded or parsed (issue 35: such a record killed
// every member right after it became the leader).
func TestDecodeTaskRecordBounds(t *testing.T) {
	deep := strings.Repeat("[", 65000)
	for name, rec := range map[string]string{
		"deep json":     `{"spec": ` + deep,
		"deep variable": `{"spec": {"name": "t", "module": "m", "variables": {"x": "` + deep + `"}}}`,
		"too large":     `{"spec": {"name": "t", "module": "m", "description": "` + strings.Repeat("x", MaxTaskRecordBytes) + `"}}`,
	} {
		if _, err := DecodeTaskRecord([]byte(rec)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	rec, err := DecodeTaskRecord([]byte(`{"spec": {"name": "t", "module": "m", "variables": {"x": "[[1]]"}}}`))
	if err != nil || rec.Spec == nil || rec.Spec.Variables["x"] != "[[1]]" {
		t.Fatalf("a good record: %+v, %v", rec, err)
	}
}

// FuzzDecodeTaskRecord decodes arbitrary task records as read from
// Consul KV: never a panic or a stack overflow. The seed corpus holds the
// records of issue 35.
func FuzzDecodeTaskRecord(f *testing.F) {
	for _, s := range []string{`{"spec": {"name": "t", "module": "m", "variables": {"x": "[1]"}}}`, `{"enabled": false}`, `{"deleted": true, "destroy": true}`, `null`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = DecodeTaskRecord(b)
	})
}
