package ha

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/backoff"
)

// DefaultFollowInterval is the shortest time between two refreshes of a
// follower's copy of the cluster's state.
const DefaultFollowInterval = 5 * time.Second

// FollowOptions configure FollowState.
type FollowOptions struct {
	Client    *api.Client
	Prefix    string // the folder to watch: <parent_path>/<cluster>/state
	Namespace string
	// Refresh reloads the follower's copy; it is called once at the start
	// and then after changes under Prefix, at most once per Interval. An
	// error is logged and the refresh retried at the next change or after
	// Interval.
	Refresh func(ctx context.Context) error
	// Interval is the shortest time between two refreshes (default
	// DefaultFollowInterval): a leader writing four keys per run makes a
	// follower read the state at most once per Interval.
	Interval time.Duration
	Logger   *slog.Logger
}

// FollowState keeps a follower's copy of the cluster's state current until
// ctx ends. It watches the folder with one blocking query whose answer is
// the folder's first level of key names (a few bytes, however much history
// the folder holds) and whose index moves on any write below it; Refresh
// does the real read. So an idle cluster costs one long-poll per follower,
// and a busy one at most one state read per follower per Interval.
func FollowState(ctx context.Context, o FollowOptions) {
	if o.Interval <= 0 {
		o.Interval = DefaultFollowInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	prefix := strings.TrimRight(o.Prefix, "/") + "/"
	var (
		index   uint64
		last    time.Time
		pending bool // the first answer (index 0) sets it
		retry   time.Duration
	)
	wait := func(d time.Duration) bool { return backoff.Sleep(ctx, d) }
	for ctx.Err() == nil {
		if pending {
			if !wait(time.Until(last.Add(o.Interval))) {
				return
			}
			last = time.Now()
			if err := o.Refresh(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				o.Logger.Debug("ha: refreshing this follower's copy of the cluster's state failed", "error", err)
			} else {
				pending = false
			}
		}
		q := &api.QueryOptions{Namespace: o.Namespace, AllowStale: true, WaitIndex: index, WaitTime: 5 * time.Minute}
		if pending {
			// Retry the failed refresh after Interval even when nothing
			// changes.
			q.WaitTime = o.Interval
		}
		_, meta, err := o.Client.KV().Keys(prefix, "/", q.WithContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			retry = min(max(2*retry, time.Second), 30*time.Second)
			o.Logger.Debug("ha: watching the cluster's state failed", "error", err, "retry_in", retry)
			if !wait(retry) {
				return
			}
			continue
		}
		retry = 0
		switch {
		case meta.LastIndex < index: // Consul lost its data, or another server
			index = 0
			pending = true
		case meta.LastIndex > index:
			index = meta.LastIndex
			pending = true
		}
	}
}
