package terraform

import (
	"bytes"
	"context"
	"regexp"
	"strings"

	"github.com/zclconf/go-cty/cty"

	"github.com/ctsync/ctsync/internal/store"
)

// StateLocks keeps the records that let a task's next owner end the state
// lock of a Terraform that an earlier owner ran and the HA fence stopped
// (see store.ConsulKV.ClearStateLock). Set only under high availability
// with the consul backend.
type StateLocks interface {
	RecordStateLock(ctx context.Context, task, key, session, member string) error
	ClearStateLock(ctx context.Context, task, key string) (store.ClearedLock, bool, error)
}

var _ StateLocks = (*store.ConsulKV)(nil)

// lockSessionLine is what Terraform's consul backend logs (at INFO) when
// it has created the session it locks the state with.
var lockSessionLine = regexp.MustCompile(`created consul lock session ([0-9a-fA-F-]{36})`)

// stateLockKey is the key Terraform's consul backend locks the task's state
// with: its workspace's state path (the task's name is the workspace) plus
// "/.lock". ok=false when the backend is not the consul one or has locking
// off, or when there is nothing to record it in.
func (d *Driver) stateLockKey() (string, bool) {
	if d.opts.StateLocks == nil || d.mod == nil || d.mod.backend.Type != "consul" {
		return "", false
	}
	attrs := d.mod.backend.Attrs
	if v, ok := attrs["lock"]; ok && v.Type() == cty.Bool && v.IsKnown() && !v.IsNull() && v.False() {
		return "", false
	}
	p, ok := attrs["path"]
	if !ok || p.Type() != cty.String || p.IsNull() || !p.IsKnown() {
		return "", false
	}
	path := p.AsString() + "-env:" + d.opts.Spec.Name
	return strings.TrimRight(path, "/") + "/.lock", true
}

// lockWatch scans Terraform's log for the lock sessions its commands
// create and records each (RecordStateLock). The records are written in
// order by one goroutine (newLockWatch, close), so that the log pump never waits
// for Consul: a full pipe would stall Terraform.
type lockWatch struct {
	d    *Driver
	key  string
	line []byte
	ch   chan string
	done chan struct{}
}

func newLockWatch(d *Driver, key string) *lockWatch {
	w := &lockWatch{d: d, key: key, ch: make(chan string, 8), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for session := range w.ch {
			w.record(session)
		}
	}()
	return w
}

// close waits for the records of the sessions seen so far.
func (w *lockWatch) close() {
	close(w.ch)
	<-w.done
}

func (w *lockWatch) Write(p []byte) (int, error) {
	w.line = append(w.line, p...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			break
		}
		if m := lockSessionLine.FindSubmatch(w.line[:i]); m != nil {
			select {
			case w.ch <- string(m[1]):
			default:
				w.d.log.Debug("too many terraform lock sessions to record; one is not", "session", string(m[1]))
			}
		}
		w.line = w.line[i+1:]
	}
	if len(w.line) > 64<<10 { // a line this long is no session line
		w.line = w.line[:0]
	}
	return len(p), nil
}

func (w *lockWatch) record(session string) {
	if err := w.d.opts.StateLocks.RecordStateLock(context.Background(), w.d.opts.Spec.Name, w.key, session, w.d.opts.Instance); err != nil {
		w.d.log.Debug("cannot record the terraform state lock session; a next owner waits for it to expire if this run is stopped",
			"session", session, "error", err)
		return
	}
	w.d.log.Debug("recorded the terraform state lock session", "session", session)
}

// clearStaleLock ends the task's state lock when it is held by the session
// of a Terraform that an owner of the task ran and that is stopped by now
// (store.ConsulKV.ClearStateLock says why that holds), so that this run
// does not wait for Consul to expire it. Any other lock is left alone: the
// command then waits for it, or fails as locked, as it would without this.
func (d *Driver) clearStaleLock(ctx context.Context) {
	key, ok := d.stateLockKey()
	if !ok {
		return
	}
	c, cleared, err := d.opts.StateLocks.ClearStateLock(ctx, d.opts.Spec.Name, key)
	if err != nil {
		d.log.Debug("cannot check the terraform state lock", "key", key, "error", err)
		return
	}
	if !cleared {
		return
	}
	d.log.Info("cleared the terraform state lock of a stopped run: an earlier owner of the task ran that terraform, and the high availability fence stopped it",
		"key", key, "session", c.Session, "ran_by", c.Member, "who", c.Who, "locked_at", c.Created)
	d.sink.note("cleared the state lock %s of a stopped terraform run by %s (locked at %s)", c.Session, c.Member, c.Created)
}
