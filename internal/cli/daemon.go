package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ctsync/ctsync/internal/consul"
	"github.com/ctsync/ctsync/internal/driver/terraform"
	"github.com/ctsync/ctsync/internal/reconcile"
)

// part is one long-lived part of the daemon: it runs until its context
// ends and returns nil then; an error means it failed.
type part struct {
	name string
	run  func(ctx context.Context) error
}

// group runs the daemon's parts as one: the first part that fails stops
// the daemon (every part's context ends, in the order below) and is the
// reason it exits. Parts run in two stages:
//   - front parts (the API, the controller, the HA elector) stop when the
//     daemon stops (a signal, or a part failing);
//   - back parts (the watches, the follower's state refresh, compatibility
//     checks, notifications, Vault) serve and report the runs, so they stop
//     only once the controller has finished its runs in progress.
type group struct {
	g       errgroup.Group
	stop    context.CancelCauseFunc
	front   context.Context
	back    context.Context
	endBack context.CancelFunc
}

func newGroup(ctx context.Context) *group {
	front, stop := context.WithCancelCause(ctx)
	back, endBack := context.WithCancel(context.WithoutCancel(ctx))
	return &group{stop: stop, front: front, back: back, endBack: endBack}
}

// start runs p in the front stage (back=false) or the back stage.
func (gr *group) start(p part, back bool) {
	ctx := gr.front
	if back {
		ctx = gr.back
	}
	gr.g.Go(func() error {
		err := p.run(ctx)
		if err != nil && !(ctx.Err() != nil && errors.Is(err, context.Canceled)) {
			err = fmt.Errorf("%s: %w", p.name, err)
			gr.stop(err) // one part failing stops them all
			return err
		}
		return nil
	})
}

// failure is why the daemon stopped when a part failed (nil for a signal).
func (gr *group) failure() error {
	if err := context.Cause(gr.front); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// runDaemon runs the daemon's parts as one group until a signal (or a part
// failing), then stops them in order: no new runs; the runs in progress
// finish within the shutdown grace (the controller's one rule); the lead is
// handed over and ctsync deregisters; then the watches, notifications and
// the rest stop. Exit code: 0, 12 when runs had to be interrupted, 11 when
// a part failed.
func (a *app) runDaemon(ctx context.Context) int {
	a.log.Info("running controller in daemon mode") // CTS's line, as -once's and -inspect's
	// The API is bound before anything starts (a port in use is fatal),
	// and serves before Consul is reachable.
	srv, err := a.startAPI()
	if err != nil {
		a.log.Error("api server failed to start", "error", err)
		return ExitError
	}
	// Under high availability a second process kills this one's Terraform
	// when this one cannot (stopped or killed): see terraform.Watchdog.
	if a.cfg.HA != nil && a.coord.KillBound() > 0 {
		wd, err := terraform.StartWatchdog(a.coord.KillBound(), a.log.With("component", "ha"))
		if err != nil {
			a.log.Error("cannot start the fence watchdog", "error", err)
			return ExitError
		}
		defer wd.Close()
	}
	gr := newGroup(ctx)
	defer gr.endBack()
	gr.start(part{"api", srv.Run}, false)
	gr.start(a.serviceManager(srv), false) // systemd.go: READY=1, reload on SIGHUP

	if err := consul.WaitReady(gr.front, a.client.Client, a.log); err != nil {
		gr.stop(nil)
		_ = gr.g.Wait()
		if f := gr.failure(); f != nil {
			a.log.Error("ctsync stopped: a part failed", "error", f)
			return ExitError
		}
		return ExitInterrupt
	}
	deregister := a.selfRegister(gr.front)

	gr.start(part{"watch", a.registry.Run}, true)
	for _, p := range a.coord.Parts(a.ctrl) { // ha.go; none without high availability
		gr.start(part{p.Name, p.Run}, p.Back)
	}
	for _, p := range a.secretParts() { // secrets.go; none without Vault
		gr.start(p, true)
	}
	gr.start(part{"notify", a.obs.notifier.Run}, true)
	// Alone, the tasks created, enabled or deleted through the API before
	// a restart are restored from the history database before the
	// controller runs: they start as the configured tasks do (ha.go).
	if err := a.coord.Restore(gr.front, a.ctrl); err != nil {
		a.log.Error("some tasks changed through the api could not be restored", "error", err)
	}

	interrupted := false
	gr.start(part{"controller", func(ctx context.Context) error {
		go func() {
			<-ctx.Done()
			if f := gr.failure(); f != nil {
				a.log.Info("stopping: a part failed; waiting for runs in progress", "grace", shutdownGrace, "error", f)
			} else {
				// CTS's message and key (signal=interrupt), which
				// operators' log alerts look for.
				a.log.Info("signal received to initiate graceful shutdown", "signal", signalName(ctx), "grace", shutdownGrace)
			}
		}()
		err := a.ctrl.Run(ctx)
		if errors.Is(err, reconcile.ErrRunsInterrupted) {
			interrupted, err = true, nil
		}
		// The runs are over: hand the lead over, deregister, deliver
		// the last notifications, then stop the back stage.
		a.coord.Resign()
		deregister()
		fctx, cancel := context.WithTimeout(context.Background(), notifyFlush)
		a.obs.notifier.Flush(fctx)
		cancel()
		gr.endBack()
		if err == nil && gr.front.Err() == nil {
			err = errors.New("the controller stopped on its own")
		}
		return err
	}}, false)
	a.log.Info("ctsync started", "tasks", len(a.cfg.Tasks), "working_dir", a.cfg.WorkingDir)

	_ = gr.g.Wait() // each failure is in gr.failure()
	switch f := gr.failure(); {
	case f != nil:
		a.log.Error("ctsync stopped: a part failed", "error", f)
		return ExitError
	case interrupted:
		a.log.Info("graceful shutdown timed out, exiting", "runs_interrupted", true)
		return ExitInterrupt
	}
	a.log.Info("graceful shutdown") // CTS's line: operators' alerts look for it
	return ExitOK
}

// logSignal logs CTS's line when a signal ends ctx (-once and -inspect:
// the runs in progress are interrupted); the returned func stops watching.
func (a *app) logSignal(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, func() {
		if sig := signalName(ctx); sig != "" {
			a.log.Info("signal received to initiate graceful shutdown", "signal", sig)
		}
	})
}

// signalName is the name of the signal that ended ctx ("interrupt",
// "terminated", "quit"), as Go prints it and so as CTS logs it; "" when no
// signal did.
func signalName(ctx context.Context) string {
	cause := context.Cause(ctx)
	if cause == nil || !strings.HasSuffix(cause.Error(), signalSuffix) {
		return ""
	}
	return strings.TrimSuffix(cause.Error(), signalSuffix)
}

// signalSuffix ends the cause signal.NotifyContext gives its context.
const signalSuffix = " signal received"

// notifyFlush bounds how long the shutdown waits for queued notifications.
const notifyFlush = 5 * time.Second
