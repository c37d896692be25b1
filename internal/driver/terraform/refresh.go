package terraform

import (
	"fmt"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/task"
)

// MaxRefreshAge is how old the task's last full refresh may be for an
// apply of a data change to skip Terraform's refresh (refresh policy
// "auto"). An apply without refresh plans against the state as the last
// run left it: an object changed or deleted outside Terraform since the
// last refresh is not seen (drift detection finds it; the fallback below
// repairs an apply it breaks). The bound caps how long a task without
// drift detection can go without reading its objects at all while its
// data keeps changing: an hour keeps every catalog change of a busy task
// cheap (one full read an hour of, say, 2,000 objects at 50 ms each,
// parallelism 10: 10 s), and is well above a drift check's usual interval,
// so a task with drift detection, whose checks refresh, never reaches it.
const MaxRefreshAge = time.Hour

// refreshState is what the driver knows of the task's last full refresh.
// It lives as long as the Driver: the first run after the daemon starts
// refreshes.
type refreshState struct {
	// at is when the last run that refreshed every object and succeeded
	// began; zero: none since the driver was made or re-initialised.
	at time.Time
	// module is the module's digest at that run: a module changed since
	// makes the next run refresh.
	module string
	// stale is set by a failed run, and by a plan that found changes
	// (drift, or data not applied yet), since that refresh.
	stale bool
	// held is when each held plan (by its file) was made: applying it
	// counts as a refresh made then.
	held map[string]time.Time
}

// refreshPolicy is the task's refresh policy: its own, else the driver
// block's, else auto.
func (d *Driver) refreshPolicy() string {
	switch {
	case d.opts.Spec.Refresh != "":
		return d.opts.Spec.Refresh
	case d.opts.Driver.Refresh != "":
		return d.opts.Driver.Refresh
	}
	return task.RefreshAuto
}

// skipRefresh decides whether an apply (not of a saved plan) runs with
// -refresh=false, and says why in a line for the run log.
func (d *Driver) skipRefresh(run driver.Run, now time.Time) (bool, string) {
	r := &d.refresh
	switch {
	case d.refreshPolicy() == task.RefreshAlways:
		return false, `full refresh: refresh policy "always"`
	case !run.DataChange:
		return false, "full refresh: the run is not a change of the task's Consul data alone"
	case r.at.IsZero():
		return false, "full refresh: first run since the driver started or re-initialised"
	case r.stale:
		return false, "full refresh: a run failed, or a plan found changes, since the last full refresh"
	case now.Sub(r.at) >= MaxRefreshAge:
		return false, fmt.Sprintf("full refresh: the last full refresh is %s old (at most %s)", now.Sub(r.at).Round(time.Second), MaxRefreshAge)
	}
	mod, err := moduleDigest(d.opts)
	switch {
	case err != nil:
		return false, fmt.Sprintf("full refresh: cannot read the module (%v)", err)
	case mod != r.module:
		return false, "full refresh: the module changed since the last full refresh"
	}
	return true, fmt.Sprintf("refresh skipped (-refresh=false): a data change, and the last full refresh is %s old (refresh policy \"auto\")",
		now.Sub(r.at).Round(time.Second))
}

// refreshed records a successful run that refreshed every object, begun
// at start.
func (d *Driver) refreshed(start time.Time) {
	if d.refreshPolicy() == task.RefreshAlways {
		return // never read
	}
	mod, err := moduleDigest(d.opts)
	if err != nil {
		d.refresh.at = time.Time{}
		return
	}
	d.refresh.at, d.refresh.module, d.refresh.stale = start, mod, false
}

// refreshFailed records a failed run (or a plan with changes): the next
// apply refreshes.
func (d *Driver) refreshFailed() { d.refresh.stale = true }

// reinitialised forgets the last refresh: the working directory was
// initialised anew (module, provider or backend changed).
func (d *Driver) reinitialised() { d.refresh.at = time.Time{} }
