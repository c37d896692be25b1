package e2e

import (
	"context"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	ctsapi "github.com/ctsync/ctsync/internal/api"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/reconcile"
	"github.com/ctsync/ctsync/internal/reconcile/reconciletest"
	"github.com/ctsync/ctsync/internal/store"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/ui"
)

// chartRuns are n runs of task web ending before now: one run; two runs
// 1.5 s apart; a burst of twenty, half a second apart (the x axis once
// read ":15.500"); two hundred over two days, every seventh failed.
func chartRuns(n int, now time.Time) []store.Event {
	var step time.Duration
	switch {
	case n <= 2:
		step = 1500 * time.Millisecond
	case n <= 20:
		step = 500 * time.Millisecond
	default:
		step = 48 * time.Hour / time.Duration(n)
	}
	first := now.Add(-2*time.Minute - time.Duration(n)*step)
	evs := make([]store.Event, 0, n)
	for i := 0; i < n; i++ {
		start := first.Add(time.Duration(i) * step)
		seen := start.Add(-200 * time.Millisecond)
		dur := time.Duration(1000+(i*379)%4000) * time.Millisecond
		evs = append(evs, store.Event{ID: fmt.Sprintf("run-%03d", i), TaskName: "web", Kind: store.KindApply, Success: i%7 != 6,
			Trigger: "health/service/web", StartTime: start, EndTime: start.Add(dur), DetectedAt: &seen})
	}
	return evs
}

// tickLabel is what an x tick reads: a time of day (to the second at most),
// or a date, with the date on a second line where a day starts.
var tickLabel = regexp.MustCompile(`^(?:\d\d:\d\d(?::\d\d)?(?:\n[A-Z][a-z]{2} \d{1,2})?|[A-Z][a-z]{2} \d{1,2}(?: \d{4})?)$`)

// TestDashboardChartsReadable draws a task's charts in headless Chromium
// for 1, 2, 20 and 200 runs (kept in the history as a restarted daemon
// finds them; an idle controller behind the real API and dashboard). For
// each: the x range comes from the data (at least a minute, not years,
// and not much wider than the runs), the x axis's labels are times of day
// or dates (never fractions of a second), and hovering a point shows its
// time and value. Screenshots of each (for review by eye) go to
// $CTSYNC_ARTIFACTS/ui-charts.
func TestDashboardChartsReadable(t *testing.T) {
	skipShort(t)
	chromium := findChromium(t)
	shots := artifactsDir(t, "ui-charts")
	t.Logf("screenshots: %s", shots)
	b := newBrowser(t, chromium, shots)

	for _, n := range []int{1, 2, 20, 200} {
		t.Run(fmt.Sprintf("%d_runs", n), func(t *testing.T) {
			now := time.Now()
			st := store.NewMemory(0)
			runs := chartRuns(n, now)
			for _, ev := range runs {
				if err := st.AddEvent(context.Background(), ev); err != nil {
					t.Fatal(err)
				}
			}
			spec := task.Spec{Name: "web", Module: "./web", Enabled: true, Providers: []string{}, BufferPeriod: &task.BufferPeriod{},
				Condition: task.Condition{Services: &task.ServicesCondition{ServicesSelector: task.ServicesSelector{Names: []string{"web"}}}}}
			ctrl := reconcile.New(reconcile.Options{Watcher: reconciletest.NewWatcher(), Store: st, MaxParallel: 1,
				NewDriver: func(task.Spec) (driver.Driver, error) { return idleDriver{}, nil }}, []task.Spec{spec})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _ = ctrl.Run(ctx); close(done) }()
			t.Cleanup(func() { cancel(); <-done })
			srv, err := ctsapi.New(ctsapi.Options{Controller: ctrl})
			if err != nil {
				t.Fatal(err)
			}
			srv.Handle(ui.Path, ui.Handler())
			ts := httptest.NewServer(srv.Handler())
			t.Cleanup(ts.Close)

			b.t = t
			b.do("open the task", chromedp.Navigate(ts.URL+"/ui/#/tasks/web"))
			b.wait("the duration chart drawn", fmt.Sprintf(
				`(f => f && +f.dataset.points === %d && !!f.dataset.xTicks && !!f.dataset.xRange)(document.getElementById('chart-duration'))`, n), 30*time.Second)

			for _, id := range []string{"chart-duration", "chart-latency"} {
				checkTimeAxis(t, b, id, runs)
			}
			t.Logf("%d runs: %s", n, b.shot(fmt.Sprintf("task-%03d-runs", n)))

			// Hover the newest run: its time and duration show by the cursor.
			last := runs[len(runs)-1]
			xy, _ := b.eval(`(u => { const i = u.data[0].length - 1, r = u.over.getBoundingClientRect();
				const y = u.data[1][i] !== null ? u.data[1][i] : u.data[2][i];
				return [r.left + u.valToPos(u.data[0][i], 'x'), r.top + u.valToPos(y, 'y')]; })(charts.get('chart-duration'))`).([]any)
			if len(xy) != 2 {
				t.Fatalf("point position %v", xy)
			}
			b.do("hover the newest run", chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, xy[0].(float64), xy[1].(float64)))
			want := fmt.Sprintf("%.2f s", last.EndTime.Sub(last.StartTime).Seconds())
			b.wait("the hover tip", `(t => t && !t.hidden && t.innerText.includes(`+jsString(want)+`))(document.querySelector('#chart-duration .chart-tip'))`, 10*time.Second)
			tip := b.text("#chart-duration .chart-tip")
			label := "succeeded: "
			if !last.Success {
				label = "failed: "
			}
			if !strings.Contains(tip, label+want) || !strings.Contains(tip, fmt.Sprintf("%02d:%02d:%02d", last.StartTime.Hour(), last.StartTime.Minute(), last.StartTime.Second())) {
				t.Errorf("hover tip %q, want the run's time and %s%s", tip, label, want)
			}
			t.Logf("%d runs, hover: %s", n, b.shot(fmt.Sprintf("task-%03d-runs-hover", n)))

			// The daemon's runs per minute (the last hour) on the list.
			b.do("open the list", chromedp.Navigate(ts.URL+"/ui/"))
			b.wait("the runs-per-minute chart drawn", `(f => f && !!f.dataset.xTicks)(document.getElementById('chart-runs'))`, 30*time.Second)
			for _, l := range strings.Split(b.eval(`document.getElementById('chart-runs').dataset.xTicks`).(string), "|") {
				if !regexp.MustCompile(`^\d\d:\d\d(\n[A-Z][a-z]{2} \d{1,2})?$`).MatchString(l) {
					t.Errorf("runs per minute: x label %q is not a time of day", l)
				}
			}
		})
	}
}

// checkTimeAxis checks the x axis of chart id, drawn from runs.
func checkTimeAxis(t *testing.T, b *browser, id string, runs []store.Event) {
	t.Helper()
	ticks := strings.Split(b.eval(`document.getElementById(`+jsString(id)+`).dataset.xTicks`).(string), "|")
	if len(ticks) < 2 {
		t.Errorf("%s: x labels %q: fewer than two", id, ticks)
	}
	for i, l := range ticks {
		if !tickLabel.MatchString(l) || i > 0 && l == ticks[i-1] {
			t.Errorf("%s: x label %q (of %q) is not a time of day or date, or repeats the one before", id, l, ticks)
		}
	}
	var lo, hi float64
	parts := strings.Split(b.eval(`document.getElementById(`+jsString(id)+`).dataset.xRange`).(string), ",")
	if len(parts) == 2 {
		lo, _ = strconv.ParseFloat(parts[0], 64)
		hi, _ = strconv.ParseFloat(parts[1], 64)
	}
	first := float64(runs[0].StartTime.UnixMilli()) / 1000
	lastEnd := float64(runs[len(runs)-1].EndTime.UnixMilli()) / 1000
	span := lastEnd - first
	if lo > first || hi < float64(runs[len(runs)-1].StartTime.UnixMilli())/1000 || hi-lo < 59.9 || hi-lo > max(60.1, span*1.3) {
		t.Errorf("%s: x range [%.0f, %.0f] (%.0f s) for runs from %.0f to %.0f (%.0f s)", id, lo, hi, hi-lo, first, lastEnd, span)
	}
}
