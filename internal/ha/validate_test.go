package ha

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

func TestFilterStored(t *testing.T) {
	good, evil, cfg := spec("good", true), spec("../../etc", true), spec("cfg", false)
	on := true
	recs := map[string]store.TaskRecord{
		"good": {Spec: &good}, "evil": {Spec: &evil}, "cfg": {Spec: &cfg},
		"gone": {Deleted: true}, "flag": {Enabled: &on},
	}
	check := func(key string, s task.Spec) error {
		if s.Name != key {
			return errors.New("name differs")
		}
		return nil
	}
	var logs bytes.Buffer
	got := FilterStored(recs, map[string]bool{"cfg": true}, check, slog.New(slog.NewTextHandler(&logs, nil)))
	for _, k := range []string{"good", "cfg", "gone", "flag"} {
		if _, ok := got[k]; !ok {
			t.Errorf("record %q dropped", k)
		}
	}
	if _, ok := got["evil"]; ok {
		t.Error("invalid record kept")
	}
	if !strings.Contains(logs.String(), "record=evil") {
		t.Errorf("not logged: %s", logs.String())
	}
	if len(FilterStored(recs, nil, nil, nil)) != len(recs) {
		t.Error("a nil check dropped records")
	}
}
