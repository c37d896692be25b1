package notify

import (
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/testutil"
)

// A reload puts new notification blocks in force while the dispatcher
// runs: a notifier added receives the events from then on, one removed
// receives nothing more, one unchanged goes on.
func TestSetNotificationsWhileRunning(t *testing.T) {
	kept, gone, added := newReceiver(t, nil), newReceiver(t, nil), newReceiver(t, nil)
	d := start(t, Options{Notifications: []config.Notification{
		webhook("kept", kept.URL, config.NotifyFailed), webhook("gone", gone.URL, config.NotifyFailed)}})
	d.OnEvent(run("1", "web", false, 1))
	flush(t, d)
	if len(kept.got()) != 1 || len(gone.got()) != 1 {
		t.Fatalf("before the reload: kept %d, gone %d", len(kept.got()), len(gone.got()))
	}

	d.SetNotifications([]config.Notification{
		webhook("kept", kept.URL, config.NotifyFailed), webhook("added", added.URL, config.NotifyFailed)})
	d.OnEvent(run("2", "web", false, 2))
	flush(t, d)
	testutil.Eventually(t, 10*time.Second, "the added notifier's delivery", func() bool { return len(added.got()) == 1 })
	if len(kept.got()) != 2 {
		t.Errorf("the unchanged notifier got %d notifications, want 2", len(kept.got()))
	}
	if len(gone.got()) != 1 {
		t.Errorf("the removed notifier got %d notifications, want 1", len(gone.got()))
	}
	if d.Len() != 0 {
		t.Errorf("%d notifications still queued", d.Len())
	}
}
