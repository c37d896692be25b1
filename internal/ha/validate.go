package ha

import (
	"log/slog"

	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
)

// FilterStored returns the records whose task passes check; the others
// are logged and left out, so that ApplyStored neither creates them nor
// keeps a task of that name that this instance created earlier. A task
// record in Consul KV is input from whoever can write the cluster's KV
// folder: without this check such a writer could make the leader run any
// module, or use a task name that walks out of working_dir. Records of
// configured tasks (only their enabled flag counts) and deletions pass.
func FilterStored(recs map[string]store.TaskRecord, configured map[string]bool, check func(key string, spec task.Spec) error, log *slog.Logger) map[string]store.TaskRecord {
	if check == nil {
		return recs
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	out := make(map[string]store.TaskRecord, len(recs))
	for key, rec := range recs {
		if rec.Spec != nil && !configured[key] {
			if err := check(key, *rec.Spec); err != nil {
				log.Error("ha: a stored task record (consul kv, or the history database alone) is not a valid task created through the api; ignored", "record", key, "error", err)
				continue
			}
		}
		out[key] = rec
	}
	return out
}
