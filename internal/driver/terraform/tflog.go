package terraform

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ctsync/ctsync/internal/redact"
)

// tfLogDrain bounds how long the end of Terraform's TRACE log may take to
// arrive once a command has returned (what is in the pipe is read at once;
// this only matters if something else still holds the pipe open).
const tfLogDrain = 2 * time.Second

// persistLog arranges, for the commands of one driver verb, that
// Terraform's TRACE log (driver "terraform" { persist_log = true }) reaches
// terraform.log redacted: Terraform writes it into a named pipe in a
// private temporary folder (TF_LOG_PATH), and a goroutine copies it through
// a redact.Writer into terraform.log. The file never holds a secret in
// clear, not even while the command runs. stop waits for the end of the log
// and removes the pipe. Under high availability with the consul backend
// the same pipe carries (at least) the core's INFO log, which lockWatch
// reads for the state lock sessions (statelock.go). Without either it does
// nothing; when the pipe cannot be set up, the verb runs without a log
// (and says so).
func (d *Driver) persistLog() (stop func()) {
	key, watch := d.stateLockKey() // statelock.go
	if !d.opts.Driver.PersistLog && !watch {
		return func() {}
	}
	var lw *lockWatch
	if watch {
		lw = newLockWatch(d, key)
	}
	stop, err := d.startLogPump(d.opts.Driver.PersistLog, lw)
	if err != nil {
		if lw != nil {
			lw.close()
		}
		d.log.Warn("cannot collect terraform's log (for terraform.log or its state lock session); this run has none", "error", err)
		_ = d.tf.SetLogPath("")
		return func() {}
	}
	return stop
}

// startLogPump starts the pipe and the goroutine that reads it: into
// terraform.log (redacted) when persist, through lw (unredacted: it only
// looks for the state lock session) when set. Without persist Terraform
// logs its core at INFO only, which is where the lock session is.
func (d *Driver) startLogPump(persist bool, lw *lockWatch) (stop func(), err error) {
	dir, err := os.MkdirTemp("", "ctsync-tflog-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (func(), error) {
		os.RemoveAll(dir)
		return nil, err
	}
	pipe := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(pipe, 0o600); err != nil {
		return fail(fmt.Errorf("mkfifo: %w", err))
	}
	// Non-blocking opens: the reader first (no writer yet), then our own
	// writer, which keeps the reader from seeing an end of file between
	// two Terraform commands.
	r, err := os.OpenFile(pipe, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fail(err)
	}
	keep, err := os.OpenFile(pipe, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		r.Close()
		return fail(err)
	}
	var out *os.File
	if persist {
		if out, err = os.OpenFile(filepath.Join(d.workDir, tfLogFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600); err != nil {
			r.Close()
			keep.Close()
			return fail(err)
		}
	} else if err := d.tf.SetLogCore("INFO"); err != nil {
		r.Close()
		keep.Close()
		return fail(err)
	}
	closeOut := func() error { return nil }
	var dst io.Writer = io.Discard
	if out != nil {
		w := redact.NewWriter(out, d.opts.Redactor)
		closeOut = func() error { return errors.Join(w.Flush(), out.Close()) }
		dst = w
	}
	if lw != nil {
		dst = io.MultiWriter(lw, dst)
	}
	if err := d.tf.SetLogPath(pipe); err != nil {
		r.Close()
		keep.Close()
		_ = closeOut()
		return fail(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				// Keep reading even when the file cannot be written: a
				// full pipe would block Terraform.
				_, _ = dst.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	return func() {
		keep.Close()
		// End of file once Terraform's copies are closed; the deadline
		// covers a process that kept the pipe open.
		_ = r.SetReadDeadline(time.Now().Add(tfLogDrain))
		<-done
		r.Close()
		if lw != nil {
			lw.close()
		}
		if err := closeOut(); err != nil {
			d.log.Warn("cannot write terraform.log", "error", err)
		}
		os.RemoveAll(dir)
	}, nil
}
