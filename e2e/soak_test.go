package e2e

// The soak (make soak): three real ctsync members (a -race build) in front
// of one real Consul, each behind its own fault proxy, run 10 tasks of the
// soak module (testdata/modules/soak: every apply appends side-effect
// records "beat|done <instance> <task> <run> <digest> <time>" to one log)
// while the catalog churns and faults drawn from a seeded schedule hit the
// members and Consul: first in spread mode, then in leader mode. The
// invariants (soak_check_test.go) are checked while it runs and at the end;
// the report, the timeline plot and, on a violation, the window of logs
// around it go to SOAK_OUT. docs/reliability.md describes the run and its
// figures.
//
//	CTSYNC_SOAK=1     run it (it is skipped otherwise)
//	SOAK_DURATION     the soak's length (default 60m): half per mode, of
//	                  which all but ~45 s (start-up, convergence) is chaos
//	SOAK_SEED         the schedule's seed (default: the time); printed first
//	SOAK_OUT          where the report goes (default soak-out/ in the repo)
//	SOAK_LOG_LEVEL    the members' log level (default INFO)
//	SOAK_KNOWN        classes of violations that are documented daemon
//	                  limitations, reported without failing the soak
//	                  (consul-down-mid-apply; CI sets it)
//	SOAK_MODES        which modes to run (default "spread,leader"); mode i
//	                  draws its schedule from SOAK_SEED + i

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/testutil"
)

const (
	soakTasks    = 10 // configured tasks, task-i on service svc-i
	soakAPITasks = 3  // tasks api-k created and deleted through the API, on svc-api
	soakBeats    = 4  // heartbeats per apply (1 s of side effects)
	soakMaxInst  = 8  // instances per service at most
	// soakParallel is how many tasks a member applies at once (the
	// controller's default, the CPUs of the 2-vCPU machine).
	soakParallel = 2
	// soakSettle bounds the convergence once churn and faults stop.
	soakSettle = 4 * time.Minute
	soakDisk   = "256m" // each member's working_dir file system
)

// Fault kinds of the schedule.
const (
	fKill   = "sigkill"        // SIGKILL, restarted after For
	fStop   = "sigstop"        // SIGSTOP for For (> the session TTL), then SIGCONT
	fCut    = "blackhole"      // the member's link to Consul drops everything for For
	fSlow   = "slow-link"      // the member's link delays every chunk by Arg ms for For
	fConsul = "consul-restart" // Consul's agent SIGKILLed and restarted (data kept)
	fDisk   = "disk-full"      // the member's working_dir file system filled for For
	fAPI    = "api-write"      // Op on api-<Arg> through the member
)

// soakPlanned is one fault of the schedule, relative to the mode's start.
type soakPlanned struct {
	At, For time.Duration
	Kind    string
	Member  int // -1: Consul
	Op      string
	Arg     int
	Enable  bool
}

func (p soakPlanned) String() string {
	who := "consul"
	if p.Member >= 0 {
		who = fmt.Sprintf("member %d", p.Member)
	}
	s := fmt.Sprintf("%8s %-14s %s", p.At.Round(time.Millisecond), p.Kind, who)
	switch p.Kind {
	case fAPI:
		s += fmt.Sprintf(" %s api-%d", p.Op, p.Arg)
		if p.Op == "update" {
			s += fmt.Sprintf(" enabled=%t", p.Enable)
		}
	case fSlow:
		s += fmt.Sprintf(" for %s, +%dms per chunk", p.For, p.Arg)
	case fConsul:
	default:
		s += fmt.Sprintf(" for %s", p.For)
	}
	return s
}

// soakHistory is the members' history { runs_per_task }.
const soakHistory = 20

// soakWitness is the member that is never SIGKILLed (every other fault
// hits it): its one process lives the whole mode, so that its resources
// can be judged over a long window.
const soakWitness = 2

// soakSchedule draws the faults of a run of d with the given members from
// seed: the same seed and duration give the same schedule. A fault starts
// every 2-10 s; at most two members are down (killed, stopped or cut off)
// at once, a member has one fault of a kind at a time, Consul restarts at
// most once a minute, and the witness member is never killed.
func soakSchedule(seed int64, d time.Duration, members int) []soakPlanned {
	rng := rand.New(rand.NewSource(seed))
	kinds := []struct {
		kind   string
		weight int
	}{{fAPI, 4}, {fSlow, 2}, {fCut, 2}, {fKill, 2}, {fStop, 1}, {fDisk, 1}, {fConsul, 1}}
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	type busy struct {
		kind   string
		member int
		until  time.Duration
	}
	var active []busy
	var lastConsul time.Duration = -time.Hour
	var out []soakPlanned
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int63n(int64(hi-lo))) }
	for at := 10 * time.Second; at < d-15*time.Second; at += between(2*time.Second, 10*time.Second) {
		active = slices.DeleteFunc(active, func(b busy) bool { return b.until <= at })
		w := rng.Intn(total)
		kind := ""
		for _, k := range kinds {
			if w < k.weight {
				kind = k.kind
				break
			}
			w -= k.weight
		}
		p := soakPlanned{At: at, Kind: kind, Member: rng.Intn(members)}
		down := map[int]bool{}
		for _, b := range active {
			if b.kind == fKill || b.kind == fStop || b.kind == fCut {
				down[b.member] = true
			}
		}
		switch kind {
		case fAPI:
			p.Op = []string{"create", "update", "delete", "run"}[rng.Intn(4)]
			p.Arg = rng.Intn(soakAPITasks)
			p.Enable = rng.Intn(2) == 0
		case fConsul:
			if at-lastConsul < time.Minute {
				continue
			}
			p.Member = -1
			lastConsul = at
		case fKill:
			if p.Member == soakWitness {
				continue
			}
			p.For = between(time.Second, 6*time.Second)
		case fStop:
			p.For = between(haTTL+2*time.Second, haTTL+12*time.Second)
		case fCut:
			p.For = between(5*time.Second, 30*time.Second)
		case fSlow:
			p.For = between(10*time.Second, 30*time.Second)
			p.Arg = 100 + rng.Intn(900)
		case fDisk:
			p.For = between(10*time.Second, 30*time.Second)
		}
		if p.Member >= 0 && kind != fAPI {
			clash := false
			for _, b := range active {
				// One fault of a kind per member; a killed or stopped member
				// gets nothing else until it is back.
				if b.member == p.Member && (b.kind == kind || b.kind == fKill || b.kind == fStop || kind == fKill || kind == fStop) {
					clash = true
				}
			}
			if (kind == fKill || kind == fStop || kind == fCut) && !down[p.Member] && len(down) >= 2 {
				clash = true
			}
			if clash {
				continue
			}
			p.For = min(p.For, d-5*time.Second-at)
			active = append(active, busy{kind, p.Member, at + p.For})
		}
		out = append(out, p)
	}
	return out
}

// soakMode is one mode's run: the cluster and everything recorded.
type soakMode struct {
	t       *testing.T
	mode    string
	seed    int64
	dur     time.Duration
	out     string // this mode's folder in SOAK_OUT
	c       *haCluster
	cli     *api.Client // the checker's own Consul client (short timeouts)
	http    *http.Client
	effects string
	dirs    map[string]string // task -> its module's output folder
	disks   []string          // member -> its working_dir file system ("" without root)
	start   time.Time

	mu         sync.Mutex
	faults     []soakFault
	versions   []soakVersion
	current    map[string]int // task -> index in versions of the standing one
	samples    map[string][]soakSample
	plain      map[string]bool // processes (keys of samples) built without the race detector
	owners     []soakOwners
	events     map[string]soakEvent
	violations []soakViolation
	known      []soakViolation // violations of a known limitation listed in SOAK_KNOWN
	counts     map[string]int
	apiState   map[string]*soakAPIState
	stopped    map[int]bool // members SIGSTOPped now
	killed     map[int]bool // members killed, not restarted yet
	conv       []time.Duration
	settle     time.Duration
	slopes     []string
	runs       []soakRun
	stopChaos  chan struct{}
	stopOnce   sync.Once
	active     map[int]soakPending // faults in progress, by schedule index
	fillers    map[int]string      // member -> the file filling its disk
}

// soakPending is a fault in progress: what was planned, and its record.
type soakPending struct {
	p     soakPlanned
	fault int
}

// soakOwners is one reading of who leads (leader mode) or owns each task
// (spread mode), from the first member linked to Consul that answered.
type soakOwners struct {
	at     time.Time
	leader string
	owners map[string]string
}

// soakAPIState is what the API's answers say about api-k: known is false
// after an answer that does not tell whether the write happened.
type soakAPIState struct {
	known, exists, enabled bool
}

func soakEnv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// TestSoak is the soak; see the top of the file.
func TestSoak(t *testing.T) {
	skipShort(t)
	if os.Getenv("CTSYNC_SOAK") == "" {
		t.Skip("the soak runs with CTSYNC_SOAK=1 (make soak)")
	}
	dur, err := time.ParseDuration(soakEnv("SOAK_DURATION", "60m"))
	if err != nil || dur < time.Minute {
		t.Fatalf("SOAK_DURATION=%q: want a Go duration of at least 1m", os.Getenv("SOAK_DURATION"))
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("SOAK_SEED"); s != "" {
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("SOAK_SEED=%q: want an integer", s)
		}
	}
	out := soakEnv("SOAK_OUT", filepath.Join(testutil.RepoRoot(), "soak-out"))
	must(t, os.MkdirAll(out, 0o755))
	fmt.Printf("SOAK seed=%d duration=%s out=%s (reproduce: SOAK_SEED=%d SOAK_DURATION=%s make soak)\n", seed, dur, out, seed, dur)
	var reports []string
	for i, mode := range []string{"spread", "leader"} {
		if !slices.Contains(strings.Split(soakEnv("SOAK_MODES", "spread,leader"), ","), mode) {
			continue
		}
		t.Run(mode, func(t *testing.T) {
			m := newSoakMode(t, mode, seed+int64(i), soakChaos(dur), filepath.Join(out, mode))
			m.run()
			reports = append(reports, m.report())
		})
	}
	summary := fmt.Sprintf("# ctsync soak\n\nseed %d, a %s soak (each mode %s of chaos), %s\n\n%s", seed, dur, soakChaos(dur),
		time.Now().UTC().Format(time.RFC3339), strings.Join(reports, "\n"))
	must(t, os.WriteFile(filepath.Join(out, "summary.md"), []byte(summary), 0o644))
	fmt.Println(summary)
}

// soakOverhead is what a mode spends outside the chaos: starting the
// cluster (~20 s), converging once healed (~20 s), the final checks.
const soakOverhead = 45 * time.Second

// soakChaos is each mode's chaos time: half the soak's duration, less the
// mode's start-up and convergence, so that the soak takes about
// SOAK_DURATION (plus the -race build).
func soakChaos(d time.Duration) time.Duration {
	return max(d/2-soakOverhead, 30*time.Second)
}

func newSoakMode(t *testing.T, mode string, seed int64, dur time.Duration, out string) *soakMode {
	must(t, os.RemoveAll(out))
	must(t, os.MkdirAll(out, 0o755))
	m := &soakMode{t: t, mode: mode, seed: seed, dur: dur, out: out,
		http:    &http.Client{Timeout: 30 * time.Second},
		effects: filepath.Join(t.TempDir(), "effects.log"), dirs: map[string]string{},
		current: map[string]int{}, samples: map[string][]soakSample{}, plain: map[string]bool{}, events: map[string]soakEvent{},
		counts: map[string]int{}, apiState: map[string]*soakAPIState{}, stopped: map[int]bool{}, killed: map[int]bool{}, fillers: map[int]string{},
		stopChaos: make(chan struct{})}
	for _, name := range m.taskNames() {
		m.dirs[name] = t.TempDir()
	}
	for k := range soakAPITasks {
		m.apiState[fmt.Sprintf("api-%d", k)] = &soakAPIState{known: true}
	}
	// A real agent that keeps its data, so that its restart is a crash and
	// restart, not a wipe; the HTTP port is fixed for the proxies.
	m.c = newHAClusterWith(t, testutil.ConsulOptions{DataDir: t.TempDir(), HTTPPort: testutil.FreePort(t)})
	cfg := api.DefaultConfig()
	cfg.Address = m.c.consul.Addr
	cfg.HttpClient = &http.Client{Timeout: 15 * time.Second}
	cli, err := api.NewClient(cfg)
	must(t, err)
	m.cli = cli
	m.c.logsSaved = true
	for _, id := range []string{"cts-a", "cts-b", "cts-c"} {
		in := &haInstance{id: id, quiet: true}
		if len(m.c.insts) == soakWitness {
			in.bin = ctsyncPlainBin // "" without -race: ctsyncBin
		}
		m.c.add(in, func(in *haInstance) string {
			work := filepath.Join(in.work, "sync-tasks")
			must(t, os.MkdirAll(work, 0o755))
			if err := mountSmallFS(t, work, soakDisk); err != nil {
				t.Logf("%s: no disk-full faults: %v", in.id, err)
				work = ""
			}
			m.disks = append(m.disks, work)
			return m.config(in)
		})
	}
	return m
}

func (m *soakMode) taskNames() []string {
	var out []string
	for i := range soakTasks {
		out = append(out, fmt.Sprintf("task-%d", i))
	}
	for k := range soakAPITasks {
		out = append(out, fmt.Sprintf("api-%d", k))
	}
	return out
}

// service is the service a task follows.
func soakService(task string) string {
	if strings.HasPrefix(task, "api-") {
		return "svc-api"
	}
	return "svc-" + strings.TrimPrefix(task, "task-")
}

func (m *soakMode) config(in *haInstance) string {
	var b strings.Builder
	h := spreadHeader(in, m.c.consul.Addr, soakEnv("SOAK_LOG_LEVEL", "INFO"), "soak")
	if m.mode == "leader" {
		h = strings.Replace(h, "spread_tasks = true", "spread_tasks = false", 1)
	}
	b.WriteString(h)
	fmt.Fprintf(&b, "\napi_tasks {\n  allowed_modules   = [%q]\n  allowed_variables = [\"name\", \"dir\", \"effects\", \"beats\"]\n}\n", module("soak"))
	// A short history, full within the warm-up, so that the memory judged
	// is the steady state: with the default (200 runs per task, each ~4 KB
	// of JSON, every member caching every task's) the cache fills for
	// hours. The soak reads the events every 10 s, far more often than a
	// task runs 20 times.
	fmt.Fprintf(&b, "\nhistory {\n  runs_per_task = %d\n}\n", soakHistory)
	for i := range soakTasks {
		name := fmt.Sprintf("task-%d", i)
		fmt.Fprintf(&b, `
task {
  name      = %q
  module    = %q
  variables = { name = %q, dir = %q, effects = %q, beats = %d }
  condition "services" {
    names = [%q]
  }
}
`, name, module("soak"), name, m.dirs[name], m.effects, soakBeats, soakService(name))
	}
	return b.String()
}

func (m *soakMode) logf(format string, args ...any) {
	m.t.Helper()
	m.t.Logf("%s +%s "+format, append([]any{m.mode, time.Since(m.start).Round(time.Second)}, args...)...)
}

// violateKnown records v: as a known limitation when SOAK_KNOWN lists its
// class (reported, the soak does not fail), else as a violation.
func (m *soakMode) violateKnown(v soakViolation) {
	if v.known != "" && slices.Contains(strings.Split(os.Getenv("SOAK_KNOWN"), ","), v.known) {
		m.mu.Lock()
		m.known = append(m.known, v)
		m.mu.Unlock()
		m.t.Logf("KNOWN LIMITATION %s (%s, seed %d) at %s: %s", v.known, m.mode, m.seed, v.at.Format(soakStamp), v.what)
		return
	}
	if v.known != "" {
		v.what += " [known limitation " + v.known + "]"
	}
	m.violate(v.at, v.what)
}

func (m *soakMode) violate(at time.Time, what string) {
	m.mu.Lock()
	m.violations = append(m.violations, soakViolation{at: at, what: what})
	m.mu.Unlock()
	m.t.Errorf("VIOLATION (%s, seed %d) at %s: %s", m.mode, m.seed, at.Format(soakStamp), what)
	m.stopOnce.Do(func() {
		close(m.stopChaos)
		// The driver's own goroutines (fault proxies included) at the
		// first violation.
		buf := make([]byte, 8<<20)
		buf = buf[:runtime.Stack(buf, true)]
		_ = os.WriteFile(filepath.Join(m.out, "goroutines.txt"), buf, 0o644)
	})
}

// proc returns member i's current process and whether it is running and
// not stopped.
func (m *soakMode) proc(i int) (*proc, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	in := m.c.insts[i]
	if len(in.procs) == 0 {
		return nil, false
	}
	p := in.procs[len(in.procs)-1]
	select {
	case <-p.done:
		return p, false
	default:
	}
	return p, !m.stopped[i]
}

// running returns member i's current process unless it has exited (it
// may be stopped).
func (m *soakMode) running(i int) *proc {
	p, _ := m.proc(i)
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
		return p
	}
}

// run is the whole mode: start, chaos, heal, settle, check, report.
func (m *soakMode) run() {
	t := m.t
	m.start = time.Now()
	schedule := soakSchedule(m.seed, m.dur, len(m.c.insts))
	var sb strings.Builder
	fmt.Fprintf(&sb, "seed %d, %s, %d faults\n", m.seed, m.dur, len(schedule))
	for _, p := range schedule {
		sb.WriteString(p.String() + "\n")
	}
	must(t, os.WriteFile(filepath.Join(m.out, "schedule.txt"), []byte(sb.String()), 0o644))
	t.Logf("%s schedule (seed %d):\n%s", m.mode, m.seed, sb.String())

	// The catalog: three instances of each service; the first of each is
	// never touched by the churn.
	for _, svc := range m.services() {
		for j := range 3 {
			m.c.register(fmt.Sprintf("%s-%d", svc, j), svc, 9000+j)
		}
	}
	for _, in := range m.c.insts {
		m.mu.Lock()
		in.start(t)
		m.mu.Unlock()
	}
	m.waitConverged(5*time.Minute, m.configTasks())
	m.logf("cluster up and converged")

	var wg sync.WaitGroup
	done := make(chan struct{})
	churnDone := make(chan struct{})
	for _, svc := range m.services() {
		wg.Go(func() { m.observe(svc, done) })
	}
	wg.Go(func() { m.poll(done) })
	var churn sync.WaitGroup
	churn.Go(func() { m.churn(churnDone) })

	m.start = time.Now()
	m.chaos(schedule)
	close(churnDone)
	churn.Wait()
	m.heal()
	healed := time.Now()
	m.logf("chaos over (%d churn changes); healed, waiting for convergence", m.counts["churn"])
	if m.waitConverged(soakSettle, m.liveTasks()) {
		m.settle = time.Since(healed)
		m.logf("converged %s after healing", m.settle.Round(time.Millisecond))
	}
	m.checkAPI()
	m.pollEvents()
	close(done)
	wg.Wait()
	m.stopMembers()
	m.finalChecks()
	m.writeArtifacts()
}

func (m *soakMode) services() []string {
	var out []string
	for i := range soakTasks {
		out = append(out, fmt.Sprintf("svc-%d", i))
	}
	return append(out, "svc-api")
}

func (m *soakMode) configTasks() []string { return m.taskNames()[:soakTasks] }

// liveTasks are the configured tasks and the API tasks that exist and are
// enabled (as the API's answers say).
func (m *soakMode) liveTasks() []string {
	out := m.configTasks()
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, st := range m.apiState {
		if st.known && st.exists && st.enabled {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// catalog is the passing instance IDs of a service, as Consul answers.
func (m *soakMode) catalog(svc string) (string, error) {
	entries, _, err := m.cli.Health().Service(svc, "", true, nil)
	if err != nil {
		return "", err
	}
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.Service.ID)
	}
	slices.Sort(ids)
	return strings.Join(ids, ","), nil
}

// tfState is the service IDs in the Terraform state of a task (its
// local_file's content), read from Consul KV where the consul backend
// keeps it.
func (m *soakMode) tfState(task string) (string, error) {
	kv, _, err := m.cli.KV().Get("consul-terraform-sync/terraform-env:"+task, nil)
	if err != nil || kv == nil {
		return "", fmt.Errorf("no state for %s: %v", task, err)
	}
	var st struct {
		Resources []struct {
			Type, Name string
			Instances  []struct {
				Attributes struct {
					Content string `json:"content"`
				} `json:"attributes"`
			} `json:"instances"`
		} `json:"resources"`
	}
	raw := kv.Value
	if len(raw) > 2 && raw[0] == 0x1f && raw[1] == 0x8b { // the backend's gzip = true
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return "", err
		}
		if raw, err = io.ReadAll(zr); err != nil {
			return "", err
		}
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return "", err
	}
	for _, r := range st.Resources {
		if r.Type == "local_file" && r.Name == "services" && len(r.Instances) == 1 {
			var svcs map[string]struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal([]byte(r.Instances[0].Attributes.Content), &svcs); err != nil {
				return "", err
			}
			var ids []string
			for _, s := range svcs {
				ids = append(ids, s.ID)
			}
			slices.Sort(ids)
			return strings.Join(ids, ","), nil
		}
	}
	return "", fmt.Errorf("no local_file.services in the state of %s", task)
}

// waitConverged waits until every task's module output, its Terraform
// state in Consul KV and the catalog agree; a violation when they do not
// within the bound.
func (m *soakMode) waitConverged(bound time.Duration, tasks []string) bool {
	deadline := time.Now().Add(bound)
	var why string
	for {
		why = ""
		for _, task := range tasks {
			want, err := m.catalog(soakService(task))
			if err != nil {
				why = err.Error()
				break
			}
			got := haReadServices(m.dirs[task])
			if got == nil || ids(got) != want {
				why = fmt.Sprintf("%s: module output [%s], catalog [%s]", task, ids(got), want)
				break
			}
			st, err := m.tfState(task)
			if err != nil || st != want {
				why = fmt.Sprintf("%s: Terraform state [%s] (%v), catalog [%s]", task, st, err, want)
				break
			}
		}
		if why == "" {
			return true
		}
		if time.Now().After(deadline) {
			m.violate(time.Now(), fmt.Sprintf("not converged %s after the faults and churn stopped: %s", bound, why))
			return false
		}
		time.Sleep(250 * time.Millisecond) // polling interval of the convergence check
	}
}

// observe follows one service's passing instances with blocking queries
// and records each new catalog version for the tasks that follow it.
func (m *soakMode) observe(svc string, done chan struct{}) {
	var idx uint64
	last := ""
	for {
		select {
		case <-done:
			return
		default:
		}
		entries, meta, err := m.cli.Health().Service(svc, "", true, &api.QueryOptions{WaitIndex: idx, WaitTime: 5 * time.Second})
		if err != nil {
			idx = 0
			select {
			case <-done:
				return
			case <-time.After(250 * time.Millisecond): // Consul down: retry pace
			}
			continue
		}
		if meta.LastIndex < idx {
			idx = 0
		} else {
			idx = meta.LastIndex
		}
		var idl []string
		for _, e := range entries {
			idl = append(idl, e.Service.ID)
		}
		dg := soakDigest(idl)
		if dg == last {
			continue
		}
		last = dg
		slices.Sort(idl)
		now := time.Now()
		tasks := []string{"task-" + strings.TrimPrefix(svc, "svc-")}
		if svc == "svc-api" {
			tasks = nil // API tasks come and go: only their convergence is checked
		}
		m.mu.Lock()
		for _, task := range tasks {
			if i, ok := m.current[task]; ok {
				m.versions[i].to = now
			}
			m.current[task] = len(m.versions)
			m.versions = append(m.versions, soakVersion{task: task, digest: dg, ids: strings.Join(idl, ","), from: now})
		}
		m.mu.Unlock()
	}
}

// churn changes the catalog until done: a change every 0.1-1.5 s, and a
// burst of 50-100 changes at 100/s every 20-60 s. Registrations,
// deregistrations and health flips of every service but its first
// instance. The sequence is drawn from the seed.
func (m *soakMode) churn(done chan struct{}) {
	rng := rand.New(rand.NewSource(m.seed + 1000))
	type inst struct {
		passing, registered bool
	}
	model := map[string]map[int]*inst{}
	next := map[string]int{}
	for _, svc := range m.services() {
		model[svc] = map[int]*inst{1: {true, true}, 2: {true, true}}
		next[svc] = 3
	}
	change := func() {
		svcs := m.services()
		svc := svcs[rng.Intn(len(svcs))]
		var live []int
		for j, in := range model[svc] {
			if in.registered {
				live = append(live, j)
			}
		}
		slices.Sort(live)
		op := rng.Intn(3)
		if len(live) == 0 {
			op = 0
		}
		var err error
		switch {
		case op == 0 && len(live) < soakMaxInst-1:
			j := next[svc]
			next[svc]++
			id := fmt.Sprintf("%s-%d", svc, j)
			err = m.cli.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: id, Name: svc, Port: 9000 + j,
				Check: &api.AgentServiceCheck{CheckID: "check-" + id, TTL: "10m", Status: api.HealthPassing}})
			if err == nil {
				model[svc][j] = &inst{true, true}
			}
		case op == 2 && len(live) > 0:
			j := live[rng.Intn(len(live))]
			status := api.HealthCritical
			if !model[svc][j].passing {
				status = api.HealthPassing
			}
			err = m.cli.Agent().UpdateTTL(fmt.Sprintf("check-%s-%d", svc, j), "soak", status)
			if err == nil {
				model[svc][j].passing = status == api.HealthPassing
			}
		case len(live) > 0:
			j := live[rng.Intn(len(live))]
			err = m.cli.Agent().ServiceDeregister(fmt.Sprintf("%s-%d", svc, j))
			if err == nil {
				model[svc][j].registered = false
			}
		}
		m.mu.Lock()
		m.counts["churn"]++
		if err != nil {
			m.counts["churn errors"]++
		}
		m.mu.Unlock()
	}
	nextBurst := time.Now().Add(time.Duration(20+rng.Intn(40)) * time.Second)
	for {
		wait := time.Duration(100+rng.Intn(1400)) * time.Millisecond
		select {
		case <-done:
			return
		case <-time.After(wait): // the churn's own pace
		}
		if time.Now().After(nextBurst) {
			n := 50 + rng.Intn(51)
			tick := time.NewTicker(10 * time.Millisecond) // 100 changes/s
			for range n {
				<-tick.C
				change()
			}
			tick.Stop()
			m.mu.Lock()
			m.counts["churn bursts"]++
			m.mu.Unlock()
			nextBurst = time.Now().Add(time.Duration(20+rng.Intn(40)) * time.Second)
			continue
		}
		change()
	}
}

// poll reads, until done: who leads or owns what (every second), each
// member's resources (every 10 s), the run events and the side-effect log
// (every 10 s; an overlap is a violation at once).
func (m *soakMode) poll(done chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		m.pollOwners()
		if n%10 == 0 {
			m.pollResources()
			m.pollEvents()
			if v := soakOverlaps(soakRuns(readSoakRecords(m.effects))); len(v) > 0 && !m.seen(v[0]) {
				m.violate(v[0].at, v[0].what)
			}
		}
	}
}

func (m *soakMode) seen(v soakViolation) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.violations {
		if w.what == v.what {
			return true
		}
	}
	return false
}

func (m *soakMode) get(port int, path string, timeout time.Duration) (int, []byte) {
	c := &http.Client{Timeout: timeout}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (m *soakMode) pollOwners() {
	for i, in := range m.c.insts {
		if _, ok := m.proc(i); !ok || in.proxy.IsCut() {
			continue
		}
		s := soakOwners{at: time.Now()}
		if m.mode == "spread" {
			code, body := m.get(in.port, "/v1/status/tasks", 800*time.Millisecond)
			var st map[string]spreadStatus
			if code != 200 || json.Unmarshal(body, &st) != nil {
				continue
			}
			s.owners = map[string]string{}
			for name, v := range st {
				if v.Owner != nil {
					s.owners[name] = *v.Owner
				}
			}
		} else {
			code, body := m.get(in.port, "/v1/status/cluster", 800*time.Millisecond)
			var st struct {
				Members []struct {
					ID     string `json:"id"`
					Leader bool   `json:"leader"`
				} `json:"members"`
			}
			if code != 200 || json.Unmarshal(body, &st) != nil {
				continue
			}
			for _, mb := range st.Members {
				if mb.Leader {
					s.leader = mb.ID
				}
			}
		}
		m.mu.Lock()
		m.owners = append(m.owners, s)
		m.mu.Unlock()
		return
	}
}

func (m *soakMode) pollResources() {
	for i, in := range m.c.insts {
		p := m.running(i)
		if p == nil {
			continue
		}
		pid := p.cmd.Process.Pid
		s := soakSample{at: time.Now(), goroutines: -1}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
				s.rss = kb / 1024
			}
		}
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			continue
		}
		s.fds = len(fds)
		s.heap = -1
		if _, ok := m.proc(i); ok {
			s.goroutines, s.heap = runtimeOf(in.port)
		}
		m.mu.Lock()
		s.owned = m.ranLocked(in.id)
		n := len(in.procs)
		key := fmt.Sprintf("%s#%d", in.id, n)
		m.samples[key] = append(m.samples[key], s)
		if in.bin != "" && in.bin == ctsyncPlainBin {
			m.plain[key] = true
		}
		m.mu.Unlock()
	}
}

// ranLocked is how many tasks member id ran at the last ownership sample
// (spread: the tasks it owned; leader: all of them or none); -1 before the
// first one (mu held).
func (m *soakMode) ranLocked(id string) int {
	if len(m.owners) == 0 {
		return -1
	}
	last := m.owners[len(m.owners)-1]
	if m.mode != "spread" {
		if last.leader != id {
			return 0
		}
		n := soakTasks
		for _, st := range m.apiState {
			if st.exists && st.enabled {
				n++
			}
		}
		return n
	}
	n := 0
	for _, o := range last.owners {
		if o == id {
			n++
		}
	}
	return n
}

// pollEvents collects every task's run events from the first member that
// serves them (the history keeps the last soakHistory per task).
func (m *soakMode) pollEvents() {
	for _, task := range m.taskNames() {
		for i, in := range m.c.insts {
			if _, ok := m.proc(i); !ok || in.proxy.IsCut() {
				continue
			}
			code, body := m.get(in.port, "/v1/tasks/"+task+"/events", 2*time.Second)
			var r struct {
				Events []soakEvent `json:"events"`
			}
			if code != 200 || json.Unmarshal(body, &r) != nil {
				continue
			}
			m.mu.Lock()
			for _, ev := range r.Events {
				if ev.TaskName == "" {
					ev.TaskName = task
				}
				m.events[task+"/"+ev.ID] = ev
			}
			m.mu.Unlock()
			break
		}
	}
}

// chaos carries out the schedule (each fault at its time, its end For
// later) until the mode's duration or the first violation.
func (m *soakMode) chaos(schedule []soakPlanned) {
	type action struct {
		at  time.Duration
		p   soakPlanned
		end bool
	}
	var acts []action
	for _, p := range schedule {
		acts = append(acts, action{p.At, p, false})
		if p.For > 0 {
			acts = append(acts, action{p.At + p.For, p, true})
		}
	}
	slices.SortStableFunc(acts, func(a, b action) int { return int(a.at - b.at) })
	m.active = map[int]soakPending{}
	for _, a := range acts {
		select {
		case <-m.stopChaos:
			return
		case <-time.After(time.Until(m.start.Add(a.at))): // the schedule's time
		}
		key := slices.IndexFunc(schedule, func(p soakPlanned) bool { return p == a.p })
		if a.end {
			if f, ok := m.active[key]; ok {
				m.endFault(f.p, f.fault)
				delete(m.active, key)
			}
			continue
		}
		if fi := m.startFault(a.p); fi >= 0 && a.p.For > 0 {
			m.active[key] = soakPending{a.p, fi}
		}
	}
	select {
	case <-m.stopChaos:
	case <-time.After(time.Until(m.start.Add(m.dur))):
	}
}
