package ha

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/testutil"
)

// A follower refreshes its copy once at the start and after writes deep
// below the folder (the blocking query lists only the first level), at most
// once per interval however many writes there are.
func TestFollowStateRefreshesOnChanges(t *testing.T) {
	c := startConsul(t)
	kv := c.Client.KV()
	put := func(k string) {
		t.Helper()
		if _, err := kv.Put(&api.KVPair{Key: k, Value: []byte("x")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	put("cl/state/run/web")
	var mu sync.Mutex
	var at []time.Time
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(at) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	const interval = 300 * time.Millisecond
	go func() {
		defer close(done)
		FollowState(ctx, FollowOptions{Client: c.Client, Prefix: "cl/state", Interval: interval,
			Refresh: func(context.Context) error { mu.Lock(); at = append(at, time.Now()); mu.Unlock(); return nil }})
	}()
	testutil.Eventually(t, 10*time.Second, "the first refresh", func() bool { return count() == 1 })

	put("cl/state/events/web/00000000000000000001")
	testutil.Eventually(t, 10*time.Second, "a refresh after a nested write", func() bool { return count() == 2 })

	// A burst of writes: refreshes stay one interval apart, and the last
	// write is seen.
	for i := 2; i < 40; i++ {
		put(fmt.Sprintf("cl/state/events/web/%020d", i))
	}
	testutil.Eventually(t, 10*time.Second, "a refresh after the burst", func() bool { return count() >= 3 })
	mu.Lock()
	for i := 1; i < len(at); i++ {
		if d := at[i].Sub(at[i-1]); d < interval {
			t.Errorf("refreshes %d and %d only %s apart", i-1, i, d)
		}
	}
	mu.Unlock()
	cancel()
	<-done
	if n := count(); n > 5 {
		t.Errorf("%d refreshes for 3 changes", n)
	}
}
