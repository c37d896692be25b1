package e2e

// The soak's faults and API writes (soak_test.go), and what it does when
// the chaos ends: heal, stop the members, check, report.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// startFault injects p now and returns the index of its record in
// m.faults (-1 when nothing was done).
func (m *soakMode) startFault(p soakPlanned) int {
	t := m.t
	f := soakFault{kind: p.Kind, from: time.Now()}
	if p.Member >= 0 {
		f.target = m.c.insts[p.Member].id
	} else {
		f.target = "consul"
	}
	in := func() *haInstance { return m.c.insts[p.Member] }
	switch p.Kind {
	case fKill:
		pr, ok := m.proc(p.Member)
		if !ok {
			return -1
		}
		_ = pr.cmd.Process.Kill()
		m.mu.Lock()
		m.killed[p.Member] = true
		in().kills = append(in().kills, f.from)
		m.mu.Unlock()
	case fStop:
		pr, ok := m.proc(p.Member)
		if !ok {
			return -1
		}
		if err := pr.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			return -1
		}
		m.mu.Lock()
		m.stopped[p.Member] = true
		m.mu.Unlock()
	case fCut:
		in().proxy.Cut()
	case fSlow:
		in().proxy.Slow(time.Duration(p.Arg) * time.Millisecond)
		f.detail = fmt.Sprintf("+%dms", p.Arg)
	case fDisk:
		if m.disks[p.Member] == "" {
			return -1
		}
		m.fillers[p.Member] = fill(t, m.disks[p.Member])
	case fConsul:
		m.c.consul.Restart()
		f.to = time.Now()
	case fAPI:
		f.detail = m.apiWrite(p)
		f.to = time.Now()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counts["fault "+p.Kind]++
	m.faults = append(m.faults, f)
	return len(m.faults) - 1
}

// endFault undoes fault p (record fi).
func (m *soakMode) endFault(p soakPlanned, fi int) {
	t := m.t
	in := m.c.insts[p.Member]
	switch p.Kind {
	case fKill:
		m.mu.Lock()
		in.start(t)
		m.killed[p.Member] = false
		m.mu.Unlock()
	case fStop:
		m.mu.Lock()
		pr := in.procs[len(in.procs)-1]
		m.stopped[p.Member] = false
		m.mu.Unlock()
		_ = pr.cmd.Process.Signal(syscall.SIGCONT)
	case fCut:
		in.proxy.Restore()
		// A slow link that is still in its period stays slow.
		for _, f := range m.active {
			if f.p.Kind == fSlow && f.p.Member == p.Member && m.faults[f.fault].to.IsZero() {
				in.proxy.Slow(time.Duration(f.p.Arg) * time.Millisecond)
			}
		}
	case fSlow:
		in.proxy.Slow(0)
	case fDisk:
		must(t, os.Remove(m.fillers[p.Member]))
	}
	m.mu.Lock()
	m.faults[fi].to = time.Now()
	m.mu.Unlock()
}

// heal ends every fault still in progress.
func (m *soakMode) heal() {
	keys := make([]int, 0, len(m.active))
	for k := range m.active {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		f := m.active[k]
		m.endFault(f.p, f.fault)
		delete(m.active, k)
	}
}

// apiWrite makes one API write through a member and records what its
// answer says about the task; it returns the outcome for the report.
func (m *soakMode) apiWrite(p soakPlanned) string {
	in := m.c.insts[p.Member]
	name := fmt.Sprintf("api-%d", p.Arg)
	var method, path, body string
	switch p.Op {
	case "create":
		method, path = "POST", "/v1/tasks"
		b, _ := json.Marshal(map[string]any{"task": map[string]any{
			"name": name, "module": module("soak"),
			// The API's variables are HCL values written as strings.
			"variables": map[string]string{"name": strconv.Quote(name), "dir": strconv.Quote(m.dirs[name]),
				"effects": strconv.Quote(m.effects), "beats": strconv.Itoa(soakBeats)},
			"condition": map[string]any{"services": map[string]any{"names": []string{"svc-api"}}},
		}})
		body = string(b)
	case "update":
		method, path, body = "PATCH", "/v1/tasks/"+name, fmt.Sprintf(`{"enabled":%t}`, p.Enable)
	case "delete":
		method, path = "DELETE", "/v1/tasks/"+name
	case "run":
		method, path = "POST", "/v1/tasks/"+name+"/run"
	}
	sent := time.Now()
	req, _ := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d%s", in.port, path), strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	code := 0
	var resp []byte
	if r, err := m.http.Do(req); err == nil {
		code = r.StatusCode
		resp, _ = io.ReadAll(r.Body)
		r.Body.Close()
	}
	outcome := fmt.Sprintf("%s %s -> %d", p.Op, name, code)
	m.mu.Lock()
	st := m.apiState[name]
	switch {
	case code >= 200 && code < 300:
		m.counts["api "+p.Op+" ok"]++
		switch p.Op {
		case "create":
			*st = soakAPIState{known: true, exists: true, enabled: true}
		case "update":
			st.enabled = p.Enable
		case "delete":
			*st = soakAPIState{known: true}
		}
	case code >= 400 && code < 500:
		// Refused (a follower, a task that is running, exists or does not):
		// nothing happened.
		m.counts["api refused"]++
	default:
		// No answer, or a server error: it may or may not have happened.
		m.counts["api unknown"]++
		if p.Op != "run" {
			st.known = false
		}
	}
	m.mu.Unlock()
	if p.Op == "run" && code == 200 {
		var r struct {
			Event *soakEvent `json:"event"`
		}
		if json.Unmarshal(resp, &r) != nil || r.Event == nil || r.Event.StartTime.Before(sent.Add(-time.Second)) {
			m.violate(time.Now(), fmt.Sprintf("run now of %s through %s answered 200 without an event of that run: %s", name, in.id, resp))
		}
	}
	if code >= 400 && code < 500 {
		outcome += " " + strings.TrimSpace(string(resp))
	}
	return outcome
}

// checkAPI: every member that serves the task API says the same of each
// API task, and what the API's answers said happened did (a write answered
// ambiguously may have gone either way, but not half).
func (m *soakMode) checkAPI() {
	for k := range soakAPITasks {
		name := fmt.Sprintf("api-%d", k)
		var views map[string]string
		deadline := time.Now().Add(time.Minute)
		for {
			views = map[string]string{}
			for i, in := range m.c.insts {
				if _, ok := m.proc(i); !ok {
					continue
				}
				code, body := m.get(in.port, "/v1/tasks/"+name, 5*time.Second)
				var r struct {
					Task struct {
						Enabled *bool `json:"enabled"`
					} `json:"task"`
				}
				switch {
				case code == 404:
					views[in.id] = "absent"
				case code == 200 && json.Unmarshal(body, &r) == nil && r.Task.Enabled != nil:
					views[in.id] = fmt.Sprintf("exists enabled=%t", *r.Task.Enabled)
				}
			}
			agree := len(views) > 0
			var first string
			for _, v := range views {
				if first == "" {
					first = v
				}
				agree = agree && v == first
			}
			m.mu.Lock()
			st := *m.apiState[name]
			m.mu.Unlock()
			want := "absent"
			if st.exists {
				want = fmt.Sprintf("exists enabled=%t", st.enabled)
			}
			if agree && (!st.known || first == want) {
				break
			}
			if time.Now().After(deadline) {
				if !agree {
					m.violate(time.Now(), fmt.Sprintf("%s: the members disagree: %v", name, views))
				} else {
					m.violate(time.Now(), fmt.Sprintf("%s: the API's answers said %q, the cluster says %q", name, want, first))
				}
				break
			}
			time.Sleep(500 * time.Millisecond) // polling interval of the check
		}
	}
	// The API tasks that exist and are enabled follow the catalog too
	// (not waited for again when the configured tasks did not converge).
	m.mu.Lock()
	failed := len(m.violations) > 0
	m.mu.Unlock()
	if !failed {
		m.waitConverged(soakSettle, m.liveTasks())
	}
}

// stopMembers sends SIGTERM to every running member and checks that each
// exits 0 (a -race build exits 66 after a data race).
func (m *soakMode) stopMembers() {
	for i, in := range m.c.insts {
		p := m.running(i)
		if p == nil {
			continue
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			if p.code != 0 {
				m.violate(time.Now(), fmt.Sprintf("%s exited with %d after SIGTERM", in.id, p.code))
			}
		case <-time.After(90 * time.Second):
			m.violate(time.Now(), fmt.Sprintf("%s did not exit within 90 s of SIGTERM", in.id))
		}
	}
}

// finalChecks runs every checker on the whole record.
func (m *soakMode) finalChecks() {
	m.runs = soakRuns(readSoakRecords(m.effects))
	for _, v := range soakOverlaps(m.runs) {
		if !m.seen(v) {
			m.violate(v.at, v.what)
		}
	}
	// The bound of "no change lost": the buffer period (none here) plus
	// one run, where a run may wait for every other task's run on the
	// member's run slots; during a fault, plus the failover (the session
	// TTL and a new owner's init) and a failed run's retry.
	var durs []time.Duration
	for _, r := range m.runs {
		if r.done {
			durs = append(durs, r.end.Sub(r.start))
		}
	}
	run := soakPercentile(durs, 99) + 5*time.Second // init and plan come before the first beat
	bound := time.Duration((soakTasks+soakAPITasks+soakParallel-1)/soakParallel) * run
	faultBound := bound + haTTL + 60*time.Second
	m.mu.Lock()
	versions := slices.Clone(m.versions)
	faults := slices.Clone(m.faults)
	events := make([]soakEvent, 0, len(m.events))
	for _, ev := range m.events {
		events = append(events, ev)
	}
	m.mu.Unlock()
	lost, conv := soakLost(versions, m.runs, faults, bound, faultBound, time.Now())
	m.conv = conv
	m.counts["lost-change bound ms"] = int(bound.Milliseconds())
	m.counts["lost-change bound during faults ms"] = int(faultBound.Milliseconds())
	for _, v := range lost {
		m.violate(v.at, v.what)
	}
	for _, v := range soakAppliedAndFailed(events, m.runs, faults) {
		m.violateKnown(v)
	}
	// No panic, no data race, in any process of any member.
	for _, in := range m.c.insts {
		for i, p := range in.procs {
			var prev time.Time
			for _, l := range strings.Split(p.out.String(), "\n") {
				if at, ok := soakLineTime(l); ok {
					prev = at
				}
				for _, bad := range []string{"WARNING: DATA RACE", "panic: ", "fatal error: "} {
					if strings.Contains(l, bad) {
						m.violate(prev, fmt.Sprintf("%s (process %d): %s", in.id, i+1, strings.TrimSpace(l)))
					}
				}
			}
		}
	}
	// Resources: flat over each process's life after its warm-up.
	m.mu.Lock()
	keys := make([]string, 0, len(m.samples))
	for k := range m.samples {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	samples := m.samples
	m.mu.Unlock()
	b := soakSlopeBounds
	for _, k := range keys {
		s := samples[k]
		sl := soakSlopes(s)
		last := s[len(s)-1]
		build := "-race build: Go heap judged"
		memory, bound := sl.heap, "Go heap"
		if m.plain[k] {
			build, memory, bound = "no -race: RSS judged", sl.rss, "RSS"
		}
		line := fmt.Sprintf("%s (%s): %d samples, RSS %.0f→%.0f MiB (%+.2f MiB/min), Go heap %.1f→%.1f MiB (%+.2f MiB/min), goroutines %d→%d (%+.2f/min at equal load, %+.2f/min), fds %d→%d (%+.2f/min at equal load, %+.2f/min), tasks run %d→%d, over %s after warm-up",
			k, build, len(s), s[0].rss, last.rss, sl.rss, s[0].heap, last.heap, sl.heap, s[0].goroutines, last.goroutines, sl.gor, sl.rawGor,
			s[0].fds, last.fds, sl.fds, sl.rawFds, s[0].owned, last.owned, sl.window.Round(time.Second))
		if !sl.ok {
			line += " (too short to judge)"
		}
		m.slopes = append(m.slopes, line)
		if sl.ok && (memory > b.rss || sl.gor > b.goroutines || sl.fds > b.fds) {
			m.violate(last.at, fmt.Sprintf("resources of %s grow faster than the bounds (%s %.1f MiB/min, goroutines %.1f/min, fds %.1f/min): %s",
				k, bound, b.rss, b.goroutines, b.fds, line))
		}
	}
}

// soakLineTime is the time of a log line: slog's text ("time=…") or
// hclog's ("2026-01-02T15:04:05.000Z [INFO] …").
func soakLineTime(l string) (time.Time, bool) {
	if m := logTime.FindStringSubmatch(l); m != nil {
		at, err := time.Parse(time.RFC3339Nano, m[1])
		return at, err == nil
	}
	f, _, _ := strings.Cut(l, " ")
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.000Z0700"} {
		if at, err := time.Parse(layout, f); err == nil {
			return at, true
		}
	}
	return time.Time{}, false
}

// report is the mode's summary (Markdown).
func (m *soakMode) report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s mode\n\nseed %d, %s of chaos, plot %s\n\n", m.mode, m.seed, m.dur, filepath.Join(m.out, "timeline.png"))
	m.mu.Lock()
	keys := make([]string, 0, len(m.counts))
	for k := range m.counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b.WriteString("| count | n |\n|---|---|\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "| %s | %d |\n", k, m.counts[k])
	}
	failed := 0
	for _, ev := range m.events {
		if !ev.Success {
			failed++
		}
	}
	nEvents := len(m.events)
	violations := slices.Clone(m.violations)
	known := slices.Clone(m.known)
	m.mu.Unlock()
	done, cut := 0, 0
	for _, r := range m.runs {
		if r.done {
			done++
		} else {
			cut++
		}
	}
	fmt.Fprintf(&b, "\napplies with side effects: %d finished, %d interrupted; run events seen: %d (%d failed)\n", done, cut, nEvents, failed)
	fmt.Fprintf(&b, "catalog version -> applied: %d versions, p50 %s, p99 %s, max %s\n",
		len(m.conv), soakPercentile(m.conv, 50).Round(time.Millisecond), soakPercentile(m.conv, 99).Round(time.Millisecond),
		soakPercentile(m.conv, 100).Round(time.Millisecond))
	fmt.Fprintf(&b, "healed -> every task converged: %s\n\nresources:\n", m.settle.Round(time.Millisecond))
	for _, l := range m.slopes {
		b.WriteString("- " + l + "\n")
	}
	if len(known) > 0 {
		fmt.Fprintf(&b, "\n%d instances of known limitations (SOAK_KNOWN; docs/reliability.md):\n", len(known))
		for _, v := range known {
			fmt.Fprintf(&b, "- %s %s: %s\n", v.at.Format(soakStamp), v.known, v.what)
		}
	}
	if len(violations) == 0 {
		b.WriteString("\nno invariant broken\n")
	} else {
		fmt.Fprintf(&b, "\n%d VIOLATIONS (logs around the first: %s):\n", len(violations), filepath.Join(m.out, "violation.txt"))
		for _, v := range violations {
			fmt.Fprintf(&b, "- %s %s\n", v.at.Format(soakStamp), v.what)
		}
	}
	return b.String()
}

// writeArtifacts writes the members' logs, the side-effect log, the
// timeline plot and, on a violation, the window of logs around the first.
func (m *soakMode) writeArtifacts() {
	t := m.t
	for _, in := range m.c.insts {
		for i, p := range in.procs {
			must(t, os.WriteFile(filepath.Join(m.out, fmt.Sprintf("%s-%d.log", in.id, i+1)), []byte(p.out.String()), 0o644))
		}
	}
	if b, err := os.ReadFile(m.effects); err == nil {
		must(t, os.WriteFile(filepath.Join(m.out, "effects.log"), b, 0o644))
	}
	var cat strings.Builder
	m.mu.Lock()
	for _, v := range m.versions {
		fmt.Fprintf(&cat, "%s %s %s [%s]\n", v.from.Format(soakStamp), v.task, v.digest, v.ids)
	}
	for _, f := range m.faults {
		fmt.Fprintf(&cat, "fault %s-%s %s %s %s\n", f.from.Format(soakStamp), f.to.Format(soakStamp), f.kind, f.target, f.detail)
	}
	m.mu.Unlock()
	must(t, os.WriteFile(filepath.Join(m.out, "catalog.log"), []byte(cat.String()), 0o644))
	if err := m.plot(filepath.Join(m.out, "timeline.png")); err != nil {
		t.Errorf("timeline plot: %v", err)
	}
	must(t, os.WriteFile(filepath.Join(m.out, "report.md"), []byte(m.report()), 0o644))
	m.mu.Lock()
	violations := slices.Clone(m.violations)
	m.mu.Unlock()
	if len(violations) == 0 {
		return
	}
	first := violations[0]
	for _, v := range violations {
		if v.at.Before(first.at) {
			first = v
		}
	}
	from, to := first.at.Add(-20*time.Second), first.at.Add(5*time.Second)
	var b strings.Builder
	fmt.Fprintf(&b, "VIOLATION at %s: %s\nseed %d (mode %s); reproduce the schedule with SOAK_SEED and SOAK_DURATION (schedule.txt)\n\nfaults in the window:\n",
		first.at.Format(soakStamp), first.what, m.seed, m.mode)
	for _, f := range m.faults {
		if f.from.Before(to) && (f.to.IsZero() || f.to.After(from)) {
			fmt.Fprintf(&b, "  %s-%s %s %s %s\n", f.from.Format(soakStamp), f.to.Format(soakStamp), f.kind, f.target, f.detail)
		}
	}
	b.WriteString("\nside effects in the window:\n")
	for _, r := range readSoakRecords(m.effects) {
		if !r.at.Before(from) && r.at.Before(to) {
			fmt.Fprintf(&b, "  %s %s %s %s %s\n", r.at.Format(soakStamp), r.kind, r.inst, r.task, r.run)
		}
	}
	for _, in := range m.c.insts {
		for i, p := range in.procs {
			fmt.Fprintf(&b, "\n==== %s (process %d), %s to %s ====\n", in.id, i+1, from.Format(soakStamp), to.Format(soakStamp))
			var at time.Time
			for _, l := range strings.Split(p.out.String(), "\n") {
				if lt, ok := soakLineTime(l); ok {
					at = lt
				}
				if !at.Before(from) && at.Before(to) {
					b.WriteString(l + "\n")
				}
			}
		}
	}
	must(t, os.WriteFile(filepath.Join(m.out, "violation.txt"), []byte(b.String()), 0o644))
}
