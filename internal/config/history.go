package config

import "github.com/hashicorp/hcl/v2"

// DefaultRunsPerTask is the default of history { runs_per_task }: how many
// run events are kept per task.
const DefaultRunsPerTask = 200

// MaxRunsPerTask bounds history { runs_per_task }: every kept event is held
// in memory (with the end of its run's log).
const MaxRunsPerTask = 10000

// historyBlock decodes history { runs_per_task } (a ctsync extension).
func (d *decoder) historyBlock(b *hcl.Block, r *opt[int]) {
	const path = "history"
	c := d.content(b.Body, path, attrs("runs_per_task"), nil)
	if v := d.integer(c, "runs_per_task", path); v.Set {
		if v.V < 1 || v.V > MaxRunsPerTask {
			d.errf(v.Rng, "history.runs_per_task", "must be between 1 and %d", MaxRunsPerTask)
		} else {
			r.merge(v)
		}
	}
}
