package reconcile

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

func TestOnceSummary(t *testing.T) {
	var b strings.Builder
	printOnceSummary(&b, []onceResult{
		{name: "a", dur: 1234 * time.Millisecond},
		{name: "broken", dur: 800 * time.Millisecond, err: errors.New("apply: Error: this module always fails\n\n  on main.tf line 3")},
		{name: "held", err: errors.New("an upstream task failed")},
		{name: "fw", dur: 300 * time.Millisecond, err: &driver.Error{Op: "apply", Headline: "Error: local-exec provisioner error",
			Summary: "Error: local-exec provisioner error: Error running command 'firewall APPLY --zone=edge --rules=/etc/firewall/rules.d': exit status 3"}},
	}, false, 4150*time.Millisecond)
	want := `
==> Run summary: 4 tasks, 1 succeeded, 3 failed, in 4.2s
    TASK    RESULT     DURATION  ERROR
    a       succeeded  1.2s
    broken  failed     800ms     apply: Error: this module always fails
    held    failed     -         an upstream task failed
    fw      failed     300ms     Error: local-exec provisioner error
`
	if b.String() != want {
		t.Errorf("got:\n%q\nwant:\n%q", b.String(), want)
	}
	b.Reset()
	printOnceSummary(&b, []onceResult{{name: "a", dur: time.Second}}, true, time.Second)
	if !strings.Contains(b.String(), "==> Plan summary: 1 tasks, 1 planned, 0 failed, in 1s\n") || !strings.Contains(b.String(), "    a     planned  1s") {
		t.Errorf("inspect summary:\n%s", b.String())
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// On long work, -once logs which tasks it still waits for.
func TestOnceProgress(t *testing.T) {
	old := OnceProgressEvery
	OnceProgressEvery = 20 * time.Millisecond
	t.Cleanup(func() { OnceProgressEvery = old })
	var logs lockedBuffer
	w := newFakeWatcher()
	gate := make(chan struct{})
	c := New(Options{Watcher: w, MaxParallel: 4, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		NewDriver: func(s task.Spec) (driver.Driver, error) {
			d := &fakeDriver{name: s.Name, rec: newRecorder()}
			if s.Name == "slow" {
				d.gate = gate
			}
			return d, nil
		}}, []task.Spec{servicesTask("fast", "web"), servicesTask("slow", "web")})
	w.Notify = c.Notify
	w.Set(healthKey("web"), []task.Service{inst("web-1", "web")})
	errc := make(chan error, 1)
	go func() { errc <- c.RunOnce(context.Background(), nil, false, 10*time.Second, nil) }()
	testutil.WaitFor(t, "the progress line", func() bool {
		return strings.Contains(logs.String(), `msg="still running" tasks_done=1 tasks=2 waiting_for=slow`)
	})
	close(gate)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
