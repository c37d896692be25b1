package cli

import (
	"context"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"

	ctsapi "github.com/ctsync/ctsync/internal/api"
)

// serviceManager is the daemon's part that speaks to systemd (a unit with
// Type=notify, packaging/ctsync.service): READY=1 once the API listens
// (it does before this part starts), Consul answered and the watches run,
// and every watch has had its first answer; RELOADING=1 then READY=1 around a reload on SIGHUP
// (the configuration files, the API's token files and TLS certificate: reload.go); STOPPING=1 when the daemon
// begins to stop. Outside systemd (no NOTIFY_SOCKET) the notifications
// are no-ops and SIGHUP still reloads.
func (a *app) serviceManager(srv *ctsapi.Server) part {
	return part{"systemd", func(ctx context.Context) error {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)

		tick := time.NewTicker(readyPoll)
		defer tick.Stop()
		ready := false
		for {
			if !ready && a.registry.Answered() {
				ready = true
				a.notifySystemd("READY=1\nSTATUS=watching Consul")
			}
			select {
			case <-ctx.Done():
				a.notifySystemd("STOPPING=1\nSTATUS=stopping: waiting for runs in progress")
				return nil
			case <-hup:
				a.reload(ctx, srv, ready)
			case <-tick.C:
			}
		}
	}}
}

// reload is a SIGHUP: the configuration files are read again and put in
// force (reload.go), with srv's token and TLS files, all or nothing. Once
// ready, systemd is told RELOADING=1, then READY=1 with the outcome:
// STATUS=reloaded, or STATUS=reload refused: <why> when a file has an
// error (what is in force stays in force; the error, with its file and
// line, is logged too). Before READY=1 systemd still waits for the start:
// a reload then is not reported. An app started without configuration
// files (tests) reloads srv's files only.
func (a *app) reload(ctx context.Context, srv liveAPI, ready bool) {
	if ready {
		a.notifySystemd("RELOADING=1\nMONOTONIC_USEC=" + monotonicUsec())
	}
	status := "STATUS=reloaded"
	if a.flags == nil || len(a.flags.configs) == 0 {
		if err := srv.Reload(); err != nil {
			status = "STATUS=reload refused: " + statusLine(err)
		}
	} else {
		summary, err := a.reloadConfig(ctx, srv)
		switch {
		case err != nil && summary == "":
			a.log.Error("reload refused: the configuration in force stays in force", "error", err)
			status = "STATUS=reload refused: " + statusLine(err)
		case err != nil:
			a.log.Error("reloaded, with errors", "changes", summary, "error", err)
			status = "STATUS=reloaded with errors: " + statusLine(err)
		default:
			a.log.Info("configuration reloaded", "changes", summary)
		}
	}
	if ready {
		a.notifySystemd("READY=1\n" + status)
	}
}

// readyPoll is how often the service manager part checks whether the
// watches have answered, until they have.
const readyPoll = 100 * time.Millisecond

func (a *app) notifySystemd(state string) {
	if _, err := sd.SdNotify(false, state); err != nil {
		a.log.Warn("cannot notify systemd", "error", err)
	}
}

// monotonicUsec is CLOCK_MONOTONIC in microseconds, which systemd wants
// with RELOADING=1.
func monotonicUsec() string {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return "0"
	}
	return strconv.FormatInt(ts.Nano()/1000, 10)
}
