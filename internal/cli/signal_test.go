package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// The shutdown's log line names the signal as CTS does (signal=interrupt):
// signalName reads it from the context signal.NotifyContext ended, also
// through a child context; a context no signal ended has none.
func TestSignalName(t *testing.T) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	child, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-child.Done()
	if got := signalName(ctx); got != "interrupt" {
		t.Errorf("signalName = %q, want interrupt", got)
	}
	if got := signalName(child); got != "interrupt" {
		t.Errorf("signalName of a child = %q, want interrupt", got)
	}
	plain, cancelPlain := context.WithCancel(context.Background())
	cancelPlain()
	if got := signalName(plain); got != "" {
		t.Errorf("signalName without a signal = %q", got)
	}
}
