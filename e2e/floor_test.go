package e2e

// The "floor" scenario of `make bench` (issue 18): after one catalog change
// that reaches T tasks, how long ctsync takes until all T have applied,
// next to how long Terraform alone takes for the same T applies, run by hand
// in the same task directories with the same parallelism. The ratio
// ctsync / floor is what the daemon costs on top of Terraform.
//
// Each cell (T tasks × N instances of 20 services, every task watching all
// 20, buffer period off) starts one daemon and runs rounds back to back:
//
//  1. ctsync: register one new instance; time until T more "task run
//     succeeded" lines.
//  2. floor: put back, in every task directory, the terraform.tfvars ctsync
//     had written before that change (so each apply again changes one
//     instance, the same work), and run `terraform apply` in the T
//     directories, P at a time; time until all have exited.
//
// The daemon stays up (idle, blocked on Consul) during the floor, so both
// halves of a round see the same machine. The figures are the medians over
// the rounds. Knobs:
//
//	CTSYNC_FLOOR_CELLS     cells to run, "TxN,..." (default: 1,10,50 × 100,2000,10000)
//	CTSYNC_FLOOR_ROUNDS    rounds per cell (default 3)
//	CTSYNC_FLOOR_PARALLEL  max_parallel_runs given to ctsync, and the floor's
//	                       parallelism (default: not set in the configuration,
//	                       so ctsync's default; the floor uses the number of CPUs)
//	CTSYNC_FLOOR_TERRAFORM_PARALLEL  the floor's parallelism alone (default: as
//	                       above); to compare with a ctsync whose
//	                       max_parallel_runs differs, as issue 18's 4 vs 2
//	CTSYNC_FLOOR_PROFILE   a file: run the daemon in this test's process and
//	                       write a CPU profile of the ctsync halves to it
//	CTSYNC_FLOOR_LOG       a file: the daemon's output is written to it at the
//	                       end of the cell (with GODEBUG=gctrace=1 in the
//	                       environment, its garbage collector's trace)
//	CTSYNC_FLOOR_HEAP_PROFILE  a file: run the daemon in this test's process
//	                       and write a heap profile (allocations and what is
//	                       in use after a GC) after the first round's ctsync
//	                       half to it, and after round N's to <file>.N (the
//	                       growth between rounds: go tool pprof -inuse_space
//	                       -diff_base <file> <file>.2)
//	CTSYNC_BENCH_OUT       output folder (default docs/bench): floor.csv
//	                       (rows of the cells run replace earlier ones) and
//	                       floor.png
//
// Run: make bench-floor, or
//
//	CTSYNC_BENCH=1 CTSYNC_FLOOR_CELLS=10x2000 go test -run '^TestFloor$' -v -timeout 120m ./e2e/

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/ctsync/ctsync/internal/cli"
	"github.com/ctsync/ctsync/internal/testutil"
)

const floorServices = 20

type floorCell struct{ tasks, instances int }

// floorRow is one cell's result.
type floorRow struct {
	cell             floorCell
	parallel         int
	ctsync, floor    time.Duration // medians
	pairRatio        float64       // median of the rounds' ctsync/floor ratios
	ctsyncCPU        float64       // CPU seconds (median): the daemon and its Terraform processes
	floorCPU         float64       // CPU seconds (median): the floor's Terraform processes
	setting          string        // max_parallel_runs as configured ("default" when not set)
	rounds           int
	load             string // /proc/loadavg's first three fields at the start of the cell
	daemonRSS        float64
	tfRSS, floorRSS  float64 // MiB: largest Terraform process tree seen by ctsync / by the floor
	date, cpus, note string
}

func floorCells(t *testing.T) []floorCell {
	spec := os.Getenv("CTSYNC_FLOOR_CELLS")
	if spec == "" {
		var out []floorCell
		for _, n := range []int{100, 2000, 10000} {
			for _, k := range []int{1, 10, 50} {
				out = append(out, floorCell{k, n})
			}
		}
		return out
	}
	var out []floorCell
	for _, f := range strings.Split(spec, ",") {
		a, b, ok := strings.Cut(strings.TrimSpace(f), "x")
		k, err1 := strconv.Atoi(a)
		n, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || k < 1 || n < floorServices {
			t.Fatalf("CTSYNC_FLOOR_CELLS: %q is not TASKSxINSTANCES (instances ≥ %d)", f, floorServices)
		}
		out = append(out, floorCell{k, n})
	}
	return out
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func TestFloor(t *testing.T) {
	benchEnabled(t)
	skipShort(t)
	outDir := os.Getenv("CTSYNC_BENCH_OUT")
	if outDir == "" {
		outDir = filepath.Join(testutil.RepoRoot(), "docs", "bench")
	}
	rounds := envInt("CTSYNC_FLOOR_ROUNDS", 3)
	var rows []floorRow
	// One Consul per instance count, loaded once.
	byN := map[int][]floorCell{}
	var ns []int
	for _, c := range floorCells(t) {
		if _, ok := byN[c.instances]; !ok {
			ns = append(ns, c.instances)
		}
		byN[c.instances] = append(byN[c.instances], c)
	}
	for _, n := range ns {
		t.Run(fmt.Sprintf("instances_%d", n), func(t *testing.T) {
			c := testutil.StartConsul(t)
			per := n / floorServices
			loadCatalog(t, c, floorServices, per)
			cat := &catalog{c: c, services: floorServices, per: per}
			for _, cell := range byN[n] {
				t.Run(fmt.Sprintf("%dx%d", cell.tasks, cell.instances), func(t *testing.T) {
					row := floorRun(t, cat, cell, rounds)
					t.Logf("%d tasks × %d instances: ctsync %.2f s, floor %.2f s, ratio %.3f; CPU %.1f s / %.1f s (parallel %d, load %s, daemon RSS %.0f MiB, terraform RSS %.0f MiB)",
						cell.tasks, cell.instances, row.ctsync.Seconds(), row.floor.Seconds(), row.pairRatio, row.ctsyncCPU, row.floorCPU,
						row.parallel, row.load, row.daemonRSS, row.tfRSS)
					rows = append(rows, row)
				})
			}
		})
	}
	if len(rows) > 0 {
		writeFloor(t, outDir, rows)
	}
}

// nextInstance is the index of the next instance a round registers for
// service 0 (beyond the loaded ones).
var nextInstance = map[*catalog]int{}

func floorRun(t *testing.T, cat *catalog, cell floorCell, rounds int) floorRow {
	mod := filepath.Join(t.TempDir(), "keys")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	src := "variable \"services\" {\n  type = any\n}\n\nresource \"terraform_data\" \"s\" {\n  input = keys(var.services)\n}\n"
	if err := os.WriteFile(filepath.Join(mod, "main.tf"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var all []string
	for s := 0; s < floorServices; s++ {
		all = append(all, strconv.Quote(serviceName(s)))
	}
	var tasks []taskSpec
	for k := 0; k < cell.tasks; k++ {
		tasks = append(tasks, taskSpec{name: fmt.Sprintf("t%02d", k), module: mod, services: strings.Join(all, ", ")})
	}
	work := t.TempDir()
	taskRoot := filepath.Join(work, "sync-tasks")
	text := config(t, cat.c.Addr, taskRoot, tasks...)
	text = strings.Replace(text, "log_level = \"DEBUG\"", "log_level = \"INFO\"", 1)
	parallel := runtime.NumCPU()
	if p := envInt("CTSYNC_FLOOR_PARALLEL", 0); p > 0 {
		parallel = p
		text = strings.Replace(text, "log_level", fmt.Sprintf("max_parallel_runs = %d\nlog_level", p), 1)
	}
	cfg := writeFile(t, work, "config.hcl", text)
	floorParallel := envInt("CTSYNC_FLOOR_TERRAFORM_PARALLEL", parallel)

	profile := os.Getenv("CTSYNC_FLOOR_PROFILE")
	heapProfile := os.Getenv("CTSYNC_FLOOR_HEAP_PROFILE")
	d := startFloorDaemon(t, work, cfg, profile != "" || heapProfile != "")
	testutil.Eventually(t, 30*time.Minute, "every task's first apply", func() bool {
		return d.count("task completed") >= cell.tasks
	})
	var prof *os.File
	if profile != "" {
		var err error
		if prof, err = os.Create(profile); err != nil {
			t.Fatal(err)
		}
		defer prof.Close()
	}
	tfBin := testutil.Binary(t, "terraform")
	setting := "default"
	if p := envInt("CTSYNC_FLOOR_PARALLEL", 0); p > 0 {
		setting = strconv.Itoa(p)
	}
	row := floorRow{cell: cell, parallel: floorParallel, setting: setting, rounds: rounds, load: loadAvg(),
		date: time.Now().UTC().Format("2006-01-02 15:04"), cpus: strconv.Itoa(runtime.NumCPU())}
	var cts, floor []time.Duration
	var ratios, ctsCPU, floorCPU []float64
	for r := 0; r < rounds; r++ {
		// What ctsync wrote before the change: the floor writes it back.
		before := map[string][]byte{}
		for _, tk := range tasks {
			b, err := os.ReadFile(filepath.Join(taskRoot, tk.name, "terraform.tfvars"))
			if err != nil {
				t.Fatal(err)
			}
			before[tk.name] = b
		}
		// 1. ctsync.
		done := d.count("task completed")
		i := cat.per + nextInstance[cat]
		nextInstance[cat]++
		if prof != nil && r == 0 {
			if err := pprof.StartCPUProfile(prof); err != nil {
				t.Fatal(err)
			}
		}
		cpu0 := d.cpu()
		begin := time.Now()
		ok, resp, _, err := cat.c.Client.Txn().Txn(instanceOps(0, i, api.HealthPassing), nil)
		if err != nil || !ok {
			t.Fatalf("registration: %v %+v", err, resp)
		}
		testutil.Eventually(t, 30*time.Minute, "every task's apply of the change", func() bool {
			return d.count("task completed") >= done+cell.tasks
		})
		end := time.Now()
		if at, ok := d.lastSuccess(); ok && at.After(begin) && at.Before(end) {
			end = at // the log's time, not this loop's next poll
		}
		cts = append(cts, end.Sub(begin))
		ctsCPU = append(ctsCPU, d.cpu()-cpu0)
		if prof != nil && r == 0 {
			pprof.StopCPUProfile()
		}
		if heapProfile != "" {
			name := heapProfile
			if r > 0 {
				name = fmt.Sprintf("%s.%d", heapProfile, r) // diff with -diff_base
			}
			writeHeapProfile(t, name)
		}
		if n := d.count("error applying task"); n > 0 {
			t.Fatalf("%d runs failed", n)
		}
		// 2. Terraform alone, in the same directories.
		for name, b := range before {
			if err := os.WriteFile(filepath.Join(taskRoot, name, "terraform.tfvars"), b, 0o640); err != nil {
				t.Fatal(err)
			}
		}
		took, cpu, rss := floorApplies(t, tfBin, taskRoot, tasks, floorParallel)
		floor = append(floor, took)
		floorCPU = append(floorCPU, cpu)
		ratios = append(ratios, cts[r].Seconds()/took.Seconds())
		row.floorRSS = max(row.floorRSS, rss)
		t.Logf("round %d: ctsync %.2f s (%.1f CPU s), floor %.2f s (%.1f CPU s), ratio %.3f (load %s)",
			r, cts[r].Seconds(), ctsCPU[r], took.Seconds(), cpu, ratios[r], loadAvg())
	}
	row.ctsync, row.floor = median(cts), median(floor)
	row.pairRatio, row.ctsyncCPU, row.floorCPU = medianF(ratios), medianF(ctsCPU), medianF(floorCPU)
	row.daemonRSS = d.peakRSS()
	if f := os.Getenv("CTSYNC_FLOOR_LOG"); f != "" && d.p != nil {
		if err := os.WriteFile(f, []byte(d.p.out.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
	row.tfRSS = d.terraformRSS()
	return row
}

// writeHeapProfile writes this process's heap profile (the in-process
// daemon's allocations since it started, and what a GC leaves in use).
func writeHeapProfile(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Fatal(err)
	}
}

func medianF(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// floorApplies runs `terraform apply` (the arguments ctsync's driver gives
// it) in every task directory, parallel at a time, and returns the wall
// time, the CPU seconds of the applies, and the largest peak RSS of one
// apply (Terraform and the processes it waited for), in MiB.
func floorApplies(t *testing.T, bin, root string, tasks []taskSpec, parallel int) (time.Duration, float64, float64) {
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var peak int64
	var cpu time.Duration
	var failed []string
	begin := time.Now()
	for _, tk := range tasks {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cmd := exec.Command(bin, "apply", "-no-color", "-auto-approve", "-input=false", "-lock=true", "-parallelism=10", "-refresh=true")
			cmd.Dir = filepath.Join(root, tk.name)
			cmd.Env = append(env(), "TF_IN_AUTOMATION=1")
			out, err := cmd.CombinedOutput()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s: %v\n%s", tk.name, err, out))
			}
			cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
			if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
				peak = max(peak, ru.Maxrss) // KiB on Linux
			}
		})
	}
	wg.Wait()
	took := time.Since(begin)
	if len(failed) > 0 {
		t.Fatalf("floor applies failed:\n%s", strings.Join(failed, "\n"))
	}
	return took, cpu.Seconds(), float64(peak) / 1024
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// floorDaemon is the daemon of a cell: the binary, or (to profile it) the
// command run in this process.
type floorDaemon struct {
	p    *proc       // the binary
	buf  *syncBuffer // the in-process daemon's output
	done chan struct{}
	port int
}

// count counts s in the daemon's output.
func (d *floorDaemon) count(s string) int {
	if d.p != nil {
		return d.p.count(s)
	}
	return strings.Count(d.buf.String(), s)
}

func startFloorDaemon(t *testing.T, dir, cfg string, inProcess bool) *floorDaemon {
	t.Helper()
	d := &floorDaemon{}
	b, _ := os.ReadFile(cfg)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "port = "); ok {
			d.port, _ = strconv.Atoi(v)
		}
	}
	if !inProcess {
		d.p = startCtsync(t, dir, "start", "-config-file", cfg)
		return d
	}
	for _, kv := range append(testutil.TerraformEnv(), "PATH="+filepath.Join(testutil.ToolsDir(), "bin")+":"+os.Getenv("PATH")) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	t.Chdir(dir)
	d.buf, d.done = &syncBuffer{}, make(chan struct{})
	go func() {
		defer close(d.done)
		cli.Run([]string{"start", "-config-file", cfg}, d.buf, d.buf)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM) // the daemon's signal handler stops it
		<-d.done
	})
	return d
}

// lastSuccess is the time of the last "task completed" line in the
// daemon's log (hclog's format keeps milliseconds).
func (d *floorDaemon) lastSuccess() (time.Time, bool) {
	var out string
	if d.p != nil {
		out = d.p.out.String()
	} else {
		out = d.buf.String()
	}
	i := strings.LastIndex(out, "task completed")
	if i < 0 {
		return time.Time{}, false
	}
	line := out[strings.LastIndexByte(out[:i], '\n')+1 : i]
	m := logTime.FindStringSubmatch(line)
	if m == nil {
		return time.Time{}, false
	}
	at, err := parseLogTime(m[1])
	return at, err == nil
}

// cpu is the CPU seconds used so far by the daemon and the Terraform
// processes it has waited for (for the in-process daemon, this test
// process's).
func (d *floorDaemon) cpu() float64 {
	pid := os.Getpid()
	if d.p != nil {
		pid = d.p.cmd.Process.Pid
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	var ticks float64
	for _, i := range []int{11, 12, 13, 14} { // utime, stime, cutime, cstime
		v, _ := strconv.ParseFloat(f[i], 64)
		ticks += v
	}
	return ticks / 100 // USER_HZ is 100 on Linux
}

// peakRSS is the daemon's peak RSS in MiB (for the in-process daemon, the
// test process's).
func (d *floorDaemon) peakRSS() float64 {
	pid := os.Getpid()
	if d.p != nil {
		pid = d.p.cmd.Process.Pid
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
			return kb / 1024
		}
	}
	return 0
}

// terraformRSS is the largest ctsync_terraform_peak_rss_bytes the daemon
// reports across its tasks, in MiB (0 when it has no such metric).
func (d *floorDaemon) terraformRSS() float64 {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", d.port))
	if err != nil {
		return 0
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	out := string(b)
	var peak float64
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "ctsync_terraform_peak_rss_bytes{") {
			continue
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		peak = max(peak, v/(1<<20))
	}
	return peak
}

var floorHeader = []string{"date (UTC)", "cpus", "tasks", "instances", "max_parallel_runs", "floor_parallel", "rounds",
	"ctsync_s", "floor_s", "ratio", "ctsync_cpu_s", "floor_cpu_s", "cpu_ratio",
	"load (1 5 15 min)", "daemon_peak_rss_mib", "terraform_peak_rss_mib", "floor_terraform_peak_rss_mib"}

// writeFloor merges rows into floor.csv (a cell run now replaces its
// earlier row) and draws floor.png from the whole file.
func writeFloor(t *testing.T, dir string, rows []floorRow) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "floor.csv")
	var records [][]string
	if f, err := os.Open(path); err == nil {
		old, _ := csv.NewReader(f).ReadAll()
		f.Close()
		if len(old) > 1 {
			records = old[1:]
		}
	}
	for _, r := range rows {
		rec := []string{r.date, r.cpus, strconv.Itoa(r.cell.tasks), strconv.Itoa(r.cell.instances), r.setting, strconv.Itoa(r.parallel),
			strconv.Itoa(r.rounds), fmt.Sprintf("%.2f", r.ctsync.Seconds()), fmt.Sprintf("%.2f", r.floor.Seconds()),
			fmt.Sprintf("%.3f", r.pairRatio), fmt.Sprintf("%.2f", r.ctsyncCPU), fmt.Sprintf("%.2f", r.floorCPU),
			fmt.Sprintf("%.3f", r.ctsyncCPU/r.floorCPU), r.load,
			fmt.Sprintf("%.0f", r.daemonRSS), fmt.Sprintf("%.0f", r.tfRSS), fmt.Sprintf("%.0f", r.floorRSS)}
		records = slices.DeleteFunc(records, func(o []string) bool {
			return len(o) != len(floorHeader) || o[2] == rec[2] && o[3] == rec[3]
		})
		records = append(records, rec)
	}
	slices.SortFunc(records, func(a, b []string) int {
		na, _ := strconv.Atoi(a[3])
		nb, _ := strconv.Atoi(b[3])
		ka, _ := strconv.Atoi(a[2])
		kb, _ := strconv.Atoi(b[2])
		if na != nb {
			return na - nb
		}
		return ka - kb
	})
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := csv.NewWriter(f)
	_ = w.Write(floorHeader)
	_ = w.WriteAll(records)
	f.Close()
	var pts []floorPoint
	for _, rec := range records {
		k, _ := strconv.Atoi(rec[2])
		n, _ := strconv.Atoi(rec[3])
		if len(rec) != len(floorHeader) {
			continue // a row of an older layout
		}
		ratio, _ := strconv.ParseFloat(rec[9], 64)
		cpu, _ := strconv.ParseFloat(rec[12], 64)
		pts = append(pts, floorPoint{tasks: k, instances: n, ratio: ratio, cpuRatio: cpu})
	}
	if err := plotFloor(filepath.Join(dir, "floor.png"), pts); err != nil {
		t.Fatal(err)
	}
	t.Logf("floor results written to %s", path)
}

type floorPoint struct {
	tasks, instances int
	ratio, cpuRatio  float64
}

// plotFloor draws ctsync's time over Terraform's own, against instances,
// one line per task count (dashed: the same for CPU seconds), with the 1.05
// goal.
func plotFloor(path string, pts []floorPoint) error {
	p := plot.New()
	p.Title.Text = "ctsync / Terraform alone: change → all affected tasks applied"
	p.X.Label.Text = "instances in the catalog (20 services; every task watches all)"
	p.Y.Label.Text = "ctsync / floor (wall time; dashed: CPU seconds)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = false // bottom left: the ratios sit around 1
	p.Legend.Left = true
	var counts []int
	var xs []float64
	for _, pt := range pts {
		if !slices.Contains(counts, pt.tasks) {
			counts = append(counts, pt.tasks)
		}
		xs = append(xs, float64(pt.instances))
	}
	slices.Sort(counts)
	palette := []color.Color{
		color.RGBA{R: 31, G: 119, B: 180, A: 255},
		color.RGBA{R: 255, G: 127, B: 14, A: 255},
		color.RGBA{R: 44, G: 160, B: 44, A: 255},
		color.RGBA{R: 214, G: 39, B: 40, A: 255},
	}
	for i, k := range counts {
		var wall, cpu plotter.XYs
		for _, pt := range pts {
			if pt.tasks == k {
				wall = append(wall, plotter.XY{X: float64(pt.instances), Y: pt.ratio})
				cpu = append(cpu, plotter.XY{X: float64(pt.instances), Y: pt.cpuRatio})
			}
		}
		col := palette[i%len(palette)]
		for _, s := range []struct {
			name string
			xys  plotter.XYs
			dash []vg.Length
		}{{"", wall, nil}, {", CPU", cpu, []vg.Length{vg.Points(4), vg.Points(3)}}} {
			l, sc, err := plotter.NewLinePoints(s.xys)
			if err != nil {
				return err
			}
			l.Color, l.Dashes, sc.Color, sc.Shape = col, s.dash, col, draw.CircleGlyph{}
			p.Add(l, sc)
			p.Legend.Add(fmt.Sprintf("%d tasks%s", k, s.name), l, sc)
		}
	}
	if len(xs) > 0 {
		goal, err := plotter.NewLine(plotter.XYs{{X: slices.Min(xs), Y: 1.05}, {X: slices.Max(xs), Y: 1.05}})
		if err != nil {
			return err
		}
		goal.Dashes = []vg.Length{vg.Points(1), vg.Points(3)}
		goal.Color = color.Gray{Y: 150}
		p.Add(goal)
		p.Legend.Add("goal (1.05)", goal)
	}
	p.Y.Min, p.Y.Max = min(p.Y.Min, 0.8), max(p.Y.Max, 1.15)
	var ticks []plot.Tick
	for v := 0.5; v <= p.Y.Max+0.01; v += 0.05 {
		if v >= p.Y.Min-0.01 {
			ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', 2, 64)})
		}
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}
