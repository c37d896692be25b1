package terraform

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/testutil"
)

const mib = 1 << 20

// budgetWith returns a budget whose tasks have the given measured peaks.
func budgetWith(limit int64, peaks map[string]int64) *MemoryBudget {
	b := NewMemoryBudget(limit, nil, nil)
	for task, p := range peaks {
		b.recent[task] = []int64{p}
	}
	return b
}

func TestMemoryBudgetEstimate(t *testing.T) {
	b := NewMemoryBudget(1000*mib, nil, nil)
	if got := b.Estimate("a"); got != 1000*mib {
		t.Fatalf("nothing measured: estimate %d, want the whole budget", got)
	}
	b.recent["a"] = []int64{100 * mib, 300 * mib, 200 * mib}
	b.recent["b"] = []int64{50 * mib}
	if got := b.Estimate("a"); got != 300*mib {
		t.Fatalf("a: %d, want its largest recent peak", got)
	}
	if got := b.Estimate("new"); got != 300*mib {
		t.Fatalf("unmeasured task: %d, want the largest recent peak of any task", got)
	}
	b.Forget("a")
	if got := b.Estimate("new"); got != 50*mib {
		t.Fatalf("after forgetting a: %d", got)
	}
}

// TestMemoryBudgetNeverExceeds runs many commands of tasks of various
// sizes at once and checks that what runs together always fits.
func TestMemoryBudgetNeverExceeds(t *testing.T) {
	const limit = 1000 * mib
	peaks := map[string]int64{}
	for i := range 20 {
		peaks[fmt.Sprintf("t%d", i)] = int64(50+i*40) * mib // 50 .. 810 MiB
	}
	b := budgetWith(limit, peaks)
	var mu sync.Mutex
	var inUse, most int64
	var concurrent, maxConcurrent int
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 200 {
				task := fmt.Sprintf("t%d", r.IntN(20))
				res, err := b.acquire(context.Background(), task, "")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				inUse += peaks[task]
				concurrent++
				most, maxConcurrent = max(most, inUse), max(maxConcurrent, concurrent)
				if inUse > limit {
					t.Errorf("%d MiB running at once, over the %d MiB budget", inUse/mib, limit/mib)
				}
				mu.Unlock()
				for range r.IntN(50) {
					runtime.Gosched() // hold the memory a while, so commands overlap
				}
				mu.Lock()
				inUse -= peaks[task]
				concurrent--
				mu.Unlock()
				res.release()
			}
		})
	}
	wg.Wait()
	if st := b.Stats(); st.Reserved != 0 || st.Running != 0 || st.Waiting != 0 {
		t.Fatalf("budget not empty at the end: %+v", st)
	}
	t.Logf("at most %d MiB and %d commands at once", most/mib, maxConcurrent)
	if maxConcurrent < 2 {
		t.Fatal("commands never ran together: the test shows nothing")
	}
}

// TestMemoryBudgetLargeTaskRunsAlone: a task measured above the whole
// budget still runs, alone, and the ones behind it wait for it.
func TestMemoryBudgetLargeTaskRunsAlone(t *testing.T) {
	b := budgetWith(100*mib, map[string]int64{"big": 500 * mib, "small": 10 * mib})
	small, err := b.acquire(context.Background(), "small", "")
	if err != nil {
		t.Fatal(err)
	}
	bigDone := make(chan *reservation)
	go func() {
		r, err := b.acquire(context.Background(), "big", "")
		if err != nil {
			t.Error(err)
		}
		bigDone <- r
	}()
	testutil.WaitFor(t, "big to queue", func() bool { return b.Stats().Waiting == 1 })
	// A small one arriving later waits behind the big one (arrival order).
	small2Done := make(chan *reservation)
	go func() {
		r, _ := b.acquire(context.Background(), "small", "")
		small2Done <- r
	}()
	testutil.WaitFor(t, "second small to queue", func() bool { return b.Stats().Waiting == 2 })
	small.release()
	big := <-bigDone
	if st := b.Stats(); st.Running != 1 || st.Reserved != 500*mib {
		t.Fatalf("big should run alone: %+v", st)
	}
	select {
	case <-small2Done:
		t.Fatal("a command started while the over-budget one runs")
	default:
	}
	big.release()
	(<-small2Done).release()
	if st := b.Stats(); st.Running != 0 || st.Reserved != 0 {
		t.Fatalf("%+v", st)
	}
}

// TestMemoryBudgetCancel: a command cancelled while it waits leaves the
// queue, and the ones behind it are not blocked by it.
func TestMemoryBudgetCancel(t *testing.T) {
	b := budgetWith(100*mib, map[string]int64{"a": 60 * mib, "b": 60 * mib, "c": 30 * mib})
	a, err := b.acquire(context.Background(), "a", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errB := make(chan error)
	go func() {
		_, err := b.acquire(ctx, "b", "")
		errB <- err
	}()
	testutil.WaitFor(t, "b to queue", func() bool { return b.Stats().Waiting == 1 })
	cDone := make(chan *reservation)
	go func() {
		r, _ := b.acquire(context.Background(), "c", "")
		cDone <- r
	}()
	testutil.WaitFor(t, "c to queue behind b", func() bool { return b.Stats().Waiting == 2 })
	cancel()
	if err := <-errB; !errors.Is(err, context.Canceled) {
		t.Fatalf("b: %v", err)
	}
	c := <-cDone // 60 + 30 fits: c starts once b is gone
	if st := b.Stats(); st.Running != 2 || st.Reserved != 90*mib {
		t.Fatalf("%+v", st)
	}
	a.release()
	c.release()
}

// TestMemoryBudgetNoLimit: without a bound nothing waits.
func TestMemoryBudgetNoLimit(t *testing.T) {
	b := NewMemoryBudget(0, nil, nil)
	var rs []*reservation
	for i := range 50 {
		r, err := b.acquire(context.Background(), fmt.Sprint(i), "")
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	if st := b.Stats(); st.Running != 50 || st.Waiting != 0 {
		t.Fatalf("%+v", st)
	}
	for _, r := range rs {
		r.release()
	}
}

func TestAutoMemoryLimit(t *testing.T) {
	m := machineMemory()
	if m == 0 {
		t.Skip("no /proc/meminfo")
	}
	if got := AutoMemoryLimit(); got <= 0 || got > m {
		t.Fatalf("automatic bound %d for %d bytes of memory", got, m)
	}
}

// TestMemoryBudgetMeasuresTerraform: with the real Terraform, an apply's
// peak RSS is measured, recorded for the task and reported.
func TestMemoryBudgetMeasuresTerraform(t *testing.T) {
	bin := needTerraform(t)
	var mu sync.Mutex
	reported := map[string]int64{}
	b := NewMemoryBudget(0, nil, func(task string, bytes int64) {
		mu.Lock()
		reported[task] = bytes
		mu.Unlock()
	})
	b.every = 20 * time.Millisecond
	dir := t.TempDir()
	o := localTask(t, dir, "rss", bin)
	o.Memory = b
	d := mustNew(t, o)
	ctx := testCtx(t)
	if err := d.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Apply(ctx, run("rss-1"), services("web-1")); err != nil {
		t.Fatal(err)
	}
	peaks := b.peaksOf("rss")
	if len(peaks) != 1 {
		t.Fatalf("peaks recorded: %v", peaks)
	}
	// Terraform alone is tens of MiB; no apply of it fits in 1 MiB or
	// needs 4 GiB.
	if peaks[0] < 4*mib || peaks[0] > 4<<30 {
		t.Fatalf("implausible peak RSS %d bytes", peaks[0])
	}
	mu.Lock()
	defer mu.Unlock()
	if reported["rss"] != peaks[0] {
		t.Fatalf("reported %v, recorded %v", reported, peaks)
	}
	t.Logf("apply peak RSS: %.1f MiB", float64(peaks[0])/mib)
	if st := b.Stats(); st.Running != 0 || st.Reserved != 0 {
		t.Fatalf("%+v", st)
	}
}

// TestMemoryBudgetHoldsTerraformBack: with the real Terraform, two tasks
// whose measured peaks do not fit in the budget together apply one after
// the other; with room for both, they apply at once.
func TestMemoryBudgetHoldsTerraformBack(t *testing.T) {
	bin := needTerraform(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	b := NewMemoryBudget(0, nil, nil)
	b.every = 20 * time.Millisecond
	var drivers []*Driver
	for _, name := range []string{"a", "b"} {
		o := localTask(t, dir, name, bin)
		o.Memory = b
		d := mustNew(t, o)
		if err := d.Init(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Apply(ctx, run(name+"-1"), services("web-1")); err != nil { // measures its peak
			t.Fatal(err)
		}
		drivers = append(drivers, d)
	}
	both := func(id string) int {
		b.mu.Lock()
		b.most = 0
		b.mu.Unlock()
		var wg sync.WaitGroup
		for i, d := range drivers {
			wg.Go(func() {
				if _, err := d.Apply(ctx, run(fmt.Sprintf("%s-%d", id, i)), services("web-1", id)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.most
	}
	pa, pb := b.Estimate("a"), b.Estimate("b")
	b.mu.Lock()
	b.limit = max(pa, pb) * 3 / 2 // room for one, not for two
	b.mu.Unlock()
	if most := both("tight"); most != 1 {
		t.Fatalf("%d applies ran at once within a budget for one", most)
	}
	b.mu.Lock()
	b.limit = (pa + pb) * 3 // room for both (each may grow a little)
	b.mu.Unlock()
	if most := both("roomy"); most != 2 {
		t.Logf("both applies fitted but ran %d at once (one ended before the other was admitted)", most)
	}
}
