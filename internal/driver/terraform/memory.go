package terraform

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// MemoryBudget bounds the memory of the Terraform commands that run at
// once, across every task of the process: a plan, apply or destroy starts
// only when the peak RSS it is expected to reach fits in what the commands
// already running have reserved. One budget is shared by all the drivers
// of a daemon (Options.Memory).
//
// What a command is expected to reach is the largest peak measured for the
// same task over its last few commands (keepPeaks). A task with no
// measurement yet counts as the largest recent peak of any task; when no
// task has been measured at all (the first command of the process), as the
// whole budget: it runs alone, and its peak then stands for every task not
// yet measured. A command expected to need more than the whole budget
// still runs, alone. Commands wait in arrival order (a large one is not
// overtaken forever by small ones), so nothing waits while nothing runs.
//
// The peak of a command is measured while it runs: the process tree of
// Terraform (Terraform and its provider plugins, one process group) is
// sampled from /proc every sampleEvery, and the peak is the largest sum of
// the processes' own peaks (VmHWM) seen at one time. A command that grows
// past its reservation while it runs has its reservation grown to match,
// so later commands see the real figure at once. With a limit of 0 the
// budget only measures.
type MemoryBudget struct {
	limit  int64
	log    *slog.Logger
	onPeak func(task string, bytes int64)
	self   int

	mu       sync.Mutex
	reserved int64
	running  int
	most     int            // the most commands that ran at once (tests)
	queue    []*reservation // waiting, in arrival order
	active   map[*reservation]struct{}
	recent   map[string][]int64 // per task, its last keepPeaks peaks
	every    time.Duration      // sampleEvery, for tests to shorten
	stop     chan struct{}      // closed when the last command ends: the sampler exits (nil: no sampler)
}

// keepPeaks is how many recent peaks of a task its estimate looks at.
const keepPeaks = 5

// sampleEvery is how often the running commands' memory is read; every
// scanEvery samples (and whenever a command has no Terraform process
// known) /proc is scanned for new processes.
var sampleEvery = 200 * time.Millisecond

const scanEvery = 10

// NewMemoryBudget returns a budget of limit bytes (0: no bound, measure
// only). onPeak, if set, receives each command's measured peak.
func NewMemoryBudget(limit int64, logger *slog.Logger, onPeak func(task string, bytes int64)) *MemoryBudget {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if limit < 0 {
		limit = 0
	}
	return &MemoryBudget{limit: limit, log: logger, onPeak: onPeak, self: os.Getpid(), every: sampleEvery,
		active: map[*reservation]struct{}{}, recent: map[string][]int64{}}
}

// MemoryStats is a budget's state.
type MemoryStats struct {
	Limit    int64 // bytes; 0: no bound
	Reserved int64 // bytes reserved by the commands running
	Running  int   // commands running
	Waiting  int   // commands waiting for memory
}

// Stats returns the budget's state.
func (b *MemoryBudget) Stats() MemoryStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return MemoryStats{Limit: b.limit, Reserved: b.reserved, Running: b.running, Waiting: len(b.queue)}
}

// Estimate is what a command of the task is expected to need (see
// MemoryBudget).
func (b *MemoryBudget) Estimate(task string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.estimateLocked(task)
}

func (b *MemoryBudget) estimateLocked(task string) int64 {
	if p := b.recent[task]; len(p) > 0 {
		return maxOf(p)
	}
	var largest int64
	for _, p := range b.recent {
		largest = max(largest, maxOf(p))
	}
	if largest > 0 {
		return largest
	}
	return b.limit
}

func maxOf(s []int64) int64 {
	var m int64
	for _, v := range s {
		m = max(m, v)
	}
	return m
}

// reservation is one command's share of the budget, from admission to
// release.
type reservation struct {
	b     *MemoryBudget
	task  string
	dir   string // the task's directory, as /proc shows a process's cwd
	size  int64
	ready chan struct{} // closed on admission

	// Measurement (sampler goroutine, under b.mu).
	procs map[int]int64 // pid → its VmHWM seen, of the processes alive at the last sample
	peak  int64
}

// acquire waits until the task may run a command in dir, and reserves its
// expected peak. The caller must release the reservation.
func (b *MemoryBudget) acquire(ctx context.Context, task, dir string) (*reservation, error) {
	r := &reservation{b: b, task: task, dir: dir, ready: make(chan struct{}), procs: map[int]int64{}}
	b.mu.Lock()
	r.size = b.estimateLocked(task)
	b.queue = append(b.queue, r)
	b.admitLocked()
	waiting := len(b.queue) > 0 && !isClosed(r.ready)
	b.mu.Unlock()
	if waiting {
		b.log.Debug("terraform waits for memory", "task_name", task, "needs", r.size, "limit", b.limit)
	}
	select {
	case <-r.ready:
		return r, nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if isClosed(r.ready) { // admitted meanwhile
		b.releaseLocked(r)
	} else {
		for i, q := range b.queue {
			if q == r {
				b.queue = append(b.queue[:i:i], b.queue[i+1:]...)
				break
			}
		}
		b.admitLocked() // it may have blocked the ones behind it
	}
	return nil, ctx.Err()
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// admitLocked starts waiting commands, in order, while the first fits.
func (b *MemoryBudget) admitLocked() {
	for len(b.queue) > 0 {
		r := b.queue[0]
		if b.running > 0 && b.limit > 0 && b.reserved+r.size > b.limit {
			return
		}
		b.queue = b.queue[1:]
		b.reserved += r.size
		b.running++
		b.most = max(b.most, b.running)
		b.active[r] = struct{}{}
		close(r.ready)
		if b.stop == nil {
			b.stop = make(chan struct{})
			go b.sampler(b.stop)
		}
	}
}

// release ends the command: its measured peak is recorded for the task and
// its reservation returned.
func (r *reservation) release() {
	b := r.b
	b.mu.Lock()
	b.sampleLocked(r)
	peak := r.peak
	if peak > 0 {
		p := append(b.recent[r.task], peak)
		if len(p) > keepPeaks {
			p = p[len(p)-keepPeaks:]
		}
		b.recent[r.task] = p
	}
	b.releaseLocked(r)
	b.mu.Unlock()
	if peak > 0 && b.onPeak != nil {
		b.onPeak(r.task, peak)
	}
}

func (b *MemoryBudget) releaseLocked(r *reservation) {
	if _, ok := b.active[r]; !ok {
		return
	}
	delete(b.active, r)
	b.reserved -= r.size
	b.running--
	b.admitLocked()
	if len(b.active) == 0 && b.stop != nil {
		close(b.stop)
		b.stop = nil
	}
}

// Forget drops what the budget knows of a task (deleted).
func (b *MemoryBudget) Forget(task string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.recent, task)
}

// peaksOf returns the last measured peaks of a task (for tests).
func (b *MemoryBudget) peaksOf(task string) []int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int64(nil), b.recent[task]...)
}

// ---- measurement --------------------------------------------------------------

// sampler reads the running commands' memory until none runs.
func (b *MemoryBudget) sampler(stop chan struct{}) {
	tick := time.NewTicker(b.every)
	defer tick.Stop()
	for n := 1; ; n++ {
		// The first look is a tick after the first admission: Terraform
		// has started by then, and a command shorter than that costs no
		// scan.
		select {
		case <-tick.C:
		case <-stop:
			return
		}
		b.mu.Lock()
		scan := n%scanEvery == 0 || childrenFiles
		for r := range b.active {
			scan = scan || len(r.procs) == 0
		}
		var dirs map[string][]*reservation
		if scan {
			dirs = map[string][]*reservation{}
			for r := range b.active {
				dirs[r.dir] = append(dirs[r.dir], r)
			}
		}
		b.mu.Unlock()

		var found map[*reservation][]int
		if scan {
			found = b.scan(dirs)
		}

		b.mu.Lock()
		for r, pids := range found {
			if _, ok := b.active[r]; !ok {
				continue
			}
			for _, pid := range pids {
				if _, ok := r.procs[pid]; !ok {
					r.procs[pid] = 0
				}
			}
		}
		for r := range b.active {
			b.sampleLocked(r)
			if r.peak > r.size { // larger than expected: reserve what it uses
				b.reserved += r.peak - r.size
				r.size = r.peak
			}
		}
		b.mu.Unlock()
	}
}

// sampleLocked reads the peak of each known process of r; processes that
// have exited are dropped.
func (b *MemoryBudget) sampleLocked(r *reservation) {
	var sum int64
	for pid := range r.procs {
		hwm, ok := procHWM(pid)
		if !ok {
			delete(r.procs, pid)
			continue
		}
		r.procs[pid] = hwm
		sum += hwm
	}
	r.peak = max(r.peak, sum)
}

// childrenFiles reports whether the kernel lists a thread's children in
// /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN): then the
// process tree is read from there, a few files, instead of every process's
// stat.
var childrenFiles = func() bool {
	_, err := os.Stat("/proc/self/task/" + strconv.Itoa(os.Getpid()) + "/children")
	return err == nil
}()

// children lists the children of pid, from the children files of its
// threads.
func children(pid int) []int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tids, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []int
	for _, t := range tids {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range bytes.Fields(b) {
			if c, err := strconv.Atoi(string(f)); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// scan finds the Terraform processes of each directory: this process's
// children that lead their own process group (terraform-exec starts
// Terraform so) with that working directory, and every process of their
// groups (the provider plugins).
func (b *MemoryBudget) scan(dirs map[string][]*reservation) map[*reservation][]int {
	if childrenFiles {
		return b.scanChildren(dirs)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	type st struct{ ppid, pgid int }
	stats := map[int]st{}
	groups := map[int][]*reservation{} // group leader → the reservations of its directory
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, pgid, ok := procStat(pid)
		if !ok {
			continue
		}
		stats[pid] = st{ppid, pgid}
		if ppid != b.self || pgid != pid {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err != nil {
			continue
		}
		if rs, ok := dirs[cwd]; ok {
			groups[pid] = rs
		}
	}
	out := map[*reservation][]int{}
	for pid, s := range stats {
		for _, r := range groups[s.pgid] {
			out[r] = append(out[r], pid)
		}
	}
	return out
}

// scanChildren is scan from the children files: the tree under each
// Terraform this process started.
func (b *MemoryBudget) scanChildren(dirs map[string][]*reservation) map[*reservation][]int {
	out := map[*reservation][]int{}
	for _, pid := range children(b.self) {
		_, pgid, ok := procStat(pid)
		if !ok || pgid != pid {
			continue
		}
		cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
		if err != nil {
			continue
		}
		rs, ok := dirs[cwd]
		if !ok {
			continue
		}
		tree := []int{pid}
		for i := 0; i < len(tree) && i < 1000; i++ {
			tree = append(tree, children(tree[i])...)
		}
		for _, r := range rs {
			out[r] = append(out[r], tree...)
		}
	}
	return out
}

// procHWM is the peak resident set size of a process (VmHWM), in bytes.
func procHWM(pid int) (int64, bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmHWM:")); ok {
			f := bytes.Fields(v)
			if len(f) == 0 {
				return 0, false
			}
			kb, err := strconv.ParseInt(string(f[0]), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false // a zombie has no memory lines
}

// ---- the automatic bound ----------------------------------------------------

// AutoMemoryLimit is the bound used when driver "terraform" sets no
// max_memory: three quarters of the memory this process may use (the
// machine's, or its cgroup's limit when lower). 0 when it cannot be read.
func AutoMemoryLimit() int64 {
	m := machineMemory()
	if c := cgroupMemory(); c > 0 && (m == 0 || c < m) {
		m = c
	}
	return m / 4 * 3
}

// machineMemory is MemTotal from /proc/meminfo, in bytes.
func machineMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("MemTotal:")); ok {
			f := bytes.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(string(f[0]), 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// cgroupMemory is the memory limit of this process's cgroup (v2
// memory.max, or v1 memory.limit_in_bytes), 0 when there is none.
func cgroupMemory() int64 {
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
		if err != nil || v <= 0 || v >= 1<<60 { // "max", or v1's "unlimited" figure
			return 0
		}
		return v
	}
	return 0
}
