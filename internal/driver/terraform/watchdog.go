package terraform

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The fence watchdog kills the Terraform commands of a ctsync that cannot
// do it itself: one that is stopped (SIGSTOP, a debugger) or killed. Under
// high availability ctsync interrupts its Terraform when it steps down and
// kills it within the kill bound (stopOnCancel), but only while it runs;
// the watchdog is a second process (ctsync's own binary, started with
// watchdogEnv) that ctsync feeds with a keep-alive over a pipe. When no
// keep-alive came for its timeout (ctsync is stopped) it kills, with
// SIGKILL, every process group led by a child of ctsync (its Terraform
// commands, with their provider plugins and provisioner shells); when the
// pipe closes (ctsync exited or was killed) it kills the groups it saw
// while ctsync ran, then exits. So a task's next owner may rely on the
// Terraform of the previous one being stopped (statelock.go) whatever
// happened to that ctsync, short of its whole host being paused.

// watchdogEnv, set to the timeout in milliseconds, makes the ctsync binary
// run as the watchdog (RunWatchdogIfAsked).
const watchdogEnv = "CTSYNC_FENCE_WATCHDOG"

// RunWatchdogIfAsked runs the watchdog and exits when this process was
// started as one; it returns at once otherwise. main calls it first.
func RunWatchdogIfAsked() {
	v, ok := os.LookupEnv(watchdogEnv)
	if !ok {
		return
	}
	ms, err := strconv.Atoi(v)
	if err != nil || ms <= 0 {
		fmt.Fprintf(os.Stderr, "ctsync fence watchdog: bad %s=%q\n", watchdogEnv, v)
		os.Exit(2)
	}
	// The watchdog outlives signals meant for ctsync (a terminal's ^C
	// reaches the whole foreground group): it ends when ctsync's pipe does.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	os.Exit(runWatchdog(os.Stdin, os.Getppid(), time.Duration(ms)*time.Millisecond, os.Stderr))
}

// runWatchdog is the watchdog of the ctsync process parent: in carries its
// keep-alives (any line), timeout is how long it may be silent.
func runWatchdog(in io.Reader, parent int, timeout time.Duration, logw io.Writer) int {
	lines := make(chan struct{}, 16)
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- struct{}{}
		}
		close(lines)
	}()
	self := os.Getpid()
	groups := map[int]bool{} // groups led by children of parent, as last seen
	scan := func() {
		for g := range groups {
			if syscall.Kill(-g, 0) != nil { // the group is gone
				delete(groups, g)
			}
		}
		for _, g := range childGroups(parent, self) {
			groups[g] = true
		}
	}
	scan()
	// The groups are tracked (for when ctsync dies: its children are
	// then reparented) every second, often enough to see a Terraform
	// command before it starts a provisioner; the keep-alive is checked
	// every quarter of the timeout (250 ms at most), and an expiry scans
	// afresh before it kills.
	check := time.NewTicker(min(max(timeout/4, 50*time.Millisecond), 250*time.Millisecond))
	defer check.Stop()
	track := time.NewTicker(time.Second)
	defer track.Stop()
	last := time.Now()
	killAll := func(why string) {
		for g := range groups {
			if err := syscall.Kill(-g, syscall.SIGKILL); err == nil {
				fmt.Fprintf(logw, "ctsync fence watchdog: %s: killed terraform process group %d\n", why, g)
			}
			delete(groups, g)
		}
	}
	for {
		select {
		case _, ok := <-lines:
			if !ok {
				scan()
				killAll("ctsync exited")
				return 0
			}
			last = time.Now()
		case <-track.C:
			scan()
		case <-check.C:
			if time.Since(last) <= timeout {
				continue
			}
			scan()
			if len(groups) > 0 {
				killAll(fmt.Sprintf("no keep-alive from ctsync (pid %d) for %s", parent, time.Since(last).Round(time.Millisecond)))
			}
		}
	}
}

// childGroups lists the process groups led by children of pid (but not
// skip): read from /proc/<pid>/task/*/children, or from every process's
// stat when those files are missing.
func childGroups(pid, skip int) []int {
	var kids []int
	files, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "children"))
	if len(files) > 0 {
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			for _, s := range strings.Fields(string(b)) {
				if k, err := strconv.Atoi(s); err == nil {
					kids = append(kids, k)
				}
			}
		}
	} else {
		for _, p := range procPIDs() {
			if ppid, _, ok := procStat(p); ok && ppid == pid {
				kids = append(kids, p)
			}
		}
	}
	var out []int
	for _, k := range kids {
		if k == skip {
			continue
		}
		if ppid, pgid, ok := procStat(k); ok && ppid == pid && pgid == k {
			out = append(out, k)
		}
	}
	return out
}

// Watchdog is ctsync's end of the fence watchdog.
type Watchdog struct {
	cmd  *exec.Cmd
	w    io.WriteCloser
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// StartWatchdog starts the watchdog process with timeout (the HA kill
// bound: a stopped ctsync's Terraform is killed at most that long, plus a
// scan period of at most 250 ms, after its last keep-alive) and feeds
// it every timeout/5.
func StartWatchdog(timeout time.Duration, log *slog.Logger) (*Watchdog, error) {
	if timeout < 100*time.Millisecond {
		return nil, fmt.Errorf("fence watchdog timeout %s is too short", timeout)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("fence watchdog: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", watchdogEnv, timeout.Milliseconds()))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	w, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("fence watchdog: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("fence watchdog: %w", err)
	}
	wd := &Watchdog{cmd: cmd, w: w, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(wd.done)
		t := time.NewTicker(timeout / 5)
		defer t.Stop()
		for {
			if _, err := io.WriteString(w, "k\n"); err != nil {
				if !errors.Is(err, os.ErrClosed) {
					log.Error("the fence watchdog is gone: a stopped ctsync's terraform is no longer killed by it", "error", err)
				}
				return
			}
			select {
			case <-wd.stop:
				return
			case <-t.C:
			}
		}
	}()
	log.Debug("fence watchdog started", "pid", cmd.Process.Pid, "timeout", timeout)
	return wd, nil
}

// Close ends the watchdog (it kills what is left of the Terraform
// commands, none after a clean shutdown) and waits for it.
func (wd *Watchdog) Close() {
	wd.once.Do(func() {
		close(wd.stop)
		<-wd.done
		wd.w.Close()
		_ = wd.cmd.Wait()
	})
}
