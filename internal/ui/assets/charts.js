// ctsync dashboard: charts (drawn in the browser with uPlot, vendored in
// vendor/uplot: no CDN) and the readable summary of /metrics. Loaded before
// app.js, whose el() it uses at call time.
//
// Same rule as app.js: values reach the page as text only.
'use strict';

const charts = new Map(); // figure id -> uPlot instance, replaced at each render

// chartFigure is the place of a chart in the page: drawChart fills it once
// the figure is in the document (uPlot measures its width).
function chartFigure(id, title, note) {
  return el('figure', { class: 'chart', id },
    el('figcaption', null, title, note ? el('span', { class: 'muted' }, ' · ' + note) : null),
    el('div', { class: 'plot' }));
}

// drawChart draws data ([xs, ...series]) in the figure id. The figure's
// data-points says how many values were drawn (0: an empty chart says so),
// data-series-points how many each series has; once drawn, data-x-ticks
// holds the x axis's labels ("|" between them) and data-x-range the x
// scale's bounds (seconds), which the browser test reads.
function drawChart(id, series, data, opts) {
  const fig = document.getElementById(id);
  if (!fig) return;
  const old = charts.get(id);
  if (old) { old.destroy(); charts.delete(id); }
  const box = fig.querySelector('.plot');
  box.replaceChildren();
  const counts = data.slice(1).map((ys) => ys.filter((v) => v !== null && v !== undefined).length);
  const points = counts.reduce((a, b) => a + b, 0);
  fig.dataset.points = String(points);
  fig.dataset.seriesPoints = counts.join(','); // per series, in order
  delete fig.dataset.xTicks;
  delete fig.dataset.xRange;
  if (!points) {
    box.append(el('p', { class: 'muted empty' }, 'No data yet.'));
    return;
  }
  if (typeof uPlot === 'undefined') {
    box.append(el('p', { class: 'muted' }, 'The chart library did not load.'));
    return;
  }
  const width = Math.max(280, Math.floor(box.getBoundingClientRect().width || fig.getBoundingClientRect().width || 600));
  const tip = el('div', { class: 'chart-tip', role: 'tooltip', hidden: true });
  const u = new uPlot(Object.assign({
    width, height: 170,
    cursor: { drag: { x: false, y: false } },
    legend: { show: true },
    // The x range comes from the data, at least minXSpan wide; durations
    // and counts start at zero.
    scales: { x: { time: true, range: xRange }, y: { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] } },
    series: [{ label: 'time', value: (u, v) => (v === null || v === undefined ? '—' : fmtTipTime(v)) }].concat(series),
    axes: [{ space: 70, incrs: timeIncrs, values: (u, splits, ax, space, incr) => {
      const labels = timeLabels(splits, incr);
      fig.dataset.xTicks = labels.join('|');
      return labels;
    } }, { size: 50 }],
    hooks: {
      draw: [(u) => { fig.dataset.xRange = u.scales.x.min + ',' + u.scales.x.max; }],
      setCursor: [(u) => showTip(u, tip)],
    },
  }, opts || {}), data, box);
  u.over.append(tip);
  charts.set(id, u);
}

// timeIncrs are the x axis's tick steps (seconds): whole seconds at least,
// then the units a clock reads (a burst of runs gave ticks ":15.500").
const timeIncrs = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200,
  86400, 2 * 86400, 7 * 86400, 14 * 86400, 30 * 86400, 91 * 86400, 182 * 86400, 365 * 86400];

// minXSpan is the narrowest x range (seconds): a single run is drawn in
// the middle of a minute, not of the years uPlot would pick; a burst of
// runs spreads over a minute at least.
const minXSpan = 60;

// xRange is the x scale's range: the data's, with 5% on each side (a point
// is not drawn on the frame), and at least minXSpan around its middle. The
// bounds are read from the data: for a single point uPlot passes a range
// of its own (a thousand days after it).
function xRange(u, dmin, dmax) {
  let min = null, max = null;
  for (const x of u.data[0]) {
    if (x === null || x === undefined) continue;
    if (min === null || x < min) min = x;
    if (max === null || x > max) max = x;
  }
  if (min === null) return [dmin, dmax];
  const pad = (max - min) * 0.05;
  let lo = min - pad, hi = max + pad;
  if (hi - lo < minXSpan) {
    const mid = (min + max) / 2;
    lo = mid - minXSpan / 2;
    hi = mid + minXSpan / 2;
  }
  return [lo, hi];
}

const pad2 = (n) => String(n).padStart(2, '0');
const monthNames = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const dayLabel = (d) => monthNames[d.getMonth()] + ' ' + d.getDate();

// timeLabels are the labels of the x ticks at splits (seconds), incr apart:
// HH:MM:SS below a minute, HH:MM below a day, the date above; the first
// tick and each one on a new day also carry the date, on a second line.
function timeLabels(splits, incr) {
  let prevDay = null;
  return splits.map((s) => {
    const d = new Date(s * 1000);
    const day = d.getFullYear() + '-' + d.getMonth() + '-' + d.getDate();
    const newDay = day !== prevDay;
    prevDay = day;
    if (incr >= 86400) return dayLabel(d) + (incr >= 182 * 86400 || newDay && d.getMonth() === 0 ? ' ' + d.getFullYear() : '');
    const hm = pad2(d.getHours()) + ':' + pad2(d.getMinutes());
    const t = incr < 60 ? hm + ':' + pad2(d.getSeconds()) : hm;
    return newDay ? t + '\n' + dayLabel(d) : t;
  });
}

// fmtTipTime is a point's time in the hover tip: date and time to the
// second (and the millisecond when it has one).
function fmtTipTime(v) {
  const d = new Date(v * 1000);
  const ms = d.getMilliseconds();
  return dayLabel(d) + ' ' + pad2(d.getHours()) + ':' + pad2(d.getMinutes()) + ':' + pad2(d.getSeconds()) +
    (ms ? '.' + String(ms).padStart(3, '0') : '');
}

// showTip shows the values under the cursor next to it: the time, then each
// series that has a value there (the legend below the chart says the same).
function showTip(u, tip) {
  const i = u.cursor.idx;
  if (i === null || i === undefined || u.cursor.left < 0) { tip.hidden = true; return; }
  const lines = [fmtTipTime(u.data[0][i])];
  u.series.forEach((s, k) => {
    const v = u.data[k][i];
    if (k === 0 || !s.show || v === null || v === undefined) return;
    lines.push(s.label + ': ' + (s.value ? s.value(u, v, k, i) : String(v)));
  });
  if (lines.length < 2) { tip.hidden = true; return; }
  tip.textContent = lines.join('\n');
  tip.hidden = false;
  const w = u.over.clientWidth;
  const left = u.cursor.left + 12;
  tip.style.left = (left + 160 > w ? Math.max(0, u.cursor.left - 172) : left) + 'px';
  tip.style.top = Math.max(0, u.cursor.top - 10) + 'px';
}

// Point-only series (no line between runs).
function dots(label, stroke) {
  return { label, stroke, fill: stroke, width: 0, paths: () => null, points: { show: true, size: 7, stroke, fill: stroke },
    value: (u, v) => (v === null || v === undefined ? '—' : v.toFixed(2) + ' s') };
}

function bars(label, fill) {
  const paths = uPlot.paths && uPlot.paths.bars ? uPlot.paths.bars({ size: [0.7, 40] }) : undefined;
  return { label, stroke: fill, fill, width: 1, paths, points: { show: false }, value: (u, v) => (v === null || v === undefined ? '—' : String(v)) };
}

const secs = (iso) => new Date(iso).getTime() / 1000;

// runEvents are a task's runs (drift checks and no-ops left out), oldest
// first.
function runEvents(evs) {
  return (evs || []).filter((e) => e.kind !== 'drift' && e.kind !== 'noop' && e.start_time && e.end_time)
    .sort((a, b) => secs(a.start_time) - secs(b.start_time));
}

// drawTaskCharts: run duration and result over time, and the reaction
// latency (change seen -> run ended) of the runs that a change caused.
function drawTaskCharts(evs) {
  const runs = runEvents(evs);
  const xs = runs.map((e) => secs(e.start_time));
  const dur = (e) => Math.max(0, secs(e.end_time) - secs(e.start_time));
  drawChart('chart-duration', [dots('succeeded', '#1a7f37'), dots('failed', '#cf222e')],
    [xs, runs.map((e) => (e.success ? dur(e) : null)), runs.map((e) => (e.success ? null : dur(e)))]);
  // A failed run applied nothing: its latency is drawn apart, in red.
  const seen = runs.filter((e) => e.detected_at);
  const latency = (e) => Math.max(0, secs(e.end_time) - secs(e.detected_at));
  drawChart('chart-latency', [dots('change seen → applied', '#0969da'), dots('change seen → failed', '#cf222e')],
    [seen.map((e) => secs(e.end_time)), seen.map((e) => (e.success ? latency(e) : null)), seen.map((e) => (e.success ? null : latency(e)))]);
}

// drawRunsPerMinute: the daemon's runs per minute over the last hour, from
// every task's runs (GET /v1/status/runs).
function drawRunsPerMinute(runs) {
  const now = Math.floor(Date.now() / 60000) * 60;
  const first = now - 59 * 60;
  const xs = [];
  for (let t = first; t <= now; t += 60) xs.push(t);
  const ok = xs.map(() => 0);
  const failed = xs.map(() => 0);
  for (const e of runEvents(runs)) {
    const i = Math.floor((secs(e.end_time) - first) / 60);
    if (i < 0 || i >= xs.length) continue;
    if (e.success) ok[i]++; else failed[i]++;
  }
  // All runs, with the failed ones drawn over them; empty minutes stay
  // empty.
  const all = ok.map((n, i) => n + failed[i] || null);
  const bad = failed.map((n) => n || null);
  drawChart('chart-runs', [bars('runs', '#1a7f37'), bars('failed', '#cf222e')], [xs, all, bad]);
}

// ---- metrics ----

// parseMetrics reads the Prometheus text format into families:
// name -> {help, type, samples: [{name, labels, value}]}.
function parseMetrics(text) {
  const fams = new Map();
  const fam = (name) => {
    if (!fams.has(name)) fams.set(name, { name, help: '', type: '', samples: [] });
    return fams.get(name);
  };
  for (const line of String(text).split('\n')) {
    let m = line.match(/^# (HELP|TYPE) (\S+) ?(.*)$/);
    if (m) {
      if (m[1] === 'HELP') fam(m[2]).help = m[3];
      else fam(m[2]).type = m[3];
      continue;
    }
    m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)/);
    if (!m) continue;
    const labels = {};
    for (const l of (m[3] || '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2].replace(/\\(.)/g, '$1');
    const base = m[1].replace(/_(bucket|sum|count)$/, '');
    const f = fams.has(m[1]) ? fams.get(m[1]) : fam(fams.has(base) ? base : m[1]);
    f.samples.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return fams;
}

function metricSum(fams, name, sampleName) {
  const f = fams.get(name);
  if (!f) return null;
  return f.samples.filter((s) => s.name === (sampleName || name)).reduce((a, s) => a + s.value, 0);
}

function metricByTask(fams, name, sampleName) {
  const out = new Map();
  const f = fams.get(name);
  if (!f) return out;
  for (const s of f.samples) {
    if (s.name !== (sampleName || name) || s.labels.task === undefined) continue;
    out.set(s.labels.task, (out.get(s.labels.task) || 0) + s.value);
  }
  return out;
}

function fmtNum(v) {
  if (v === null || v === undefined || isNaN(v)) return '—';
  if (Math.abs(v) >= 1 << 20 && Number.isInteger(v)) return (v / (1 << 20)).toFixed(1) + ' MiB';
  return Number.isInteger(v) ? String(v) : v.toFixed(3);
}

// metricsView renders /metrics as a summary: the daemon's figures, one row
// per task, then every family; the raw text stays available.
function metricsView(text) {
  const fams = parseMetrics(text);
  const figures = [
    ['Runs', metricSum(fams, 'ctsync_task_runs_total')],
    ['Failed runs', metricSum(fams, 'ctsync_task_runs_failed_total')],
    ['Skipped (desired state unchanged)', metricSum(fams, 'ctsync_task_runs_skipped_total')],
    ['Runs in progress', metricSum(fams, 'ctsync_runs_in_progress')],
    ['Run queue depth', metricSum(fams, 'ctsync_run_queue_depth')],
    ['Watched queries', metricSum(fams, 'ctsync_watch_views')],
    ['Consul requests', metricSum(fams, 'ctsync_consul_requests_total')],
    ['Consul request errors', metricSum(fams, 'ctsync_consul_request_errors_total')],
    ['Leader', fams.has('ctsync_is_leader') ? (metricSum(fams, 'ctsync_is_leader') ? 'yes' : 'no') : null],
    ['Notifications dropped', metricSum(fams, 'ctsync_notifications_dropped_total')],
  ].filter(([, v]) => v !== null);
  const summary = el('dl', { class: 'details metrics-summary', id: 'metrics-summary' },
    figures.map(([k, v]) => [el('dt', null, k), el('dd', null, typeof v === 'string' ? v : fmtNum(v))]));

  const runs = metricByTask(fams, 'ctsync_task_runs_total');
  const failed = metricByTask(fams, 'ctsync_task_runs_failed_total');
  const durSum = metricByTask(fams, 'ctsync_task_run_duration_seconds', 'ctsync_task_run_duration_seconds_sum');
  const durCount = metricByTask(fams, 'ctsync_task_run_duration_seconds', 'ctsync_task_run_duration_seconds_count');
  const lastOK = metricByTask(fams, 'ctsync_task_last_success_timestamp_seconds');
  const dirty = metricByTask(fams, 'ctsync_task_dirty');
  const drifted = metricByTask(fams, 'ctsync_task_drifted');
  const tasks = [...new Set([...runs.keys(), ...lastOK.keys(), ...dirty.keys()])].sort();
  const perTask = tasks.length ? el('table', { class: 'history', id: 'metrics-tasks' },
    el('thead', null, el('tr', null, ['Task', 'Runs', 'Failed', 'Mean duration', 'Last success', 'Dirty', 'Drifted'].map((h) => el('th', { scope: 'col' }, h)))),
    el('tbody', null, tasks.map((t) => el('tr', { dataset: { task: t } },
      el('td', null, el('a', { href: taskHref(t) }, t)),
      el('td', null, fmtNum(runs.get(t) || 0)),
      el('td', null, fmtNum(failed.get(t) || 0)),
      el('td', null, durCount.get(t) ? (durSum.get(t) / durCount.get(t)).toFixed(2) + ' s' : '—'),
      el('td', null, lastOK.get(t) ? timeCell(new Date(lastOK.get(t) * 1000).toISOString()) : '—'),
      el('td', null, dirty.get(t) ? badge('yes', 'bad') : 'no'),
      el('td', null, drifted.get(t) ? badge('yes', 'bad') : 'no'))))) : el('p', { class: 'muted' }, 'No task metrics yet.');

  const all = el('table', { class: 'history', id: 'metrics-families' },
    el('thead', null, el('tr', null, ['Metric', 'Type', 'Series', 'Total', 'Meaning'].map((h) => el('th', { scope: 'col' }, h)))),
    el('tbody', null, [...fams.values()].sort((a, b) => a.name.localeCompare(b.name)).map((f) => {
      const own = f.samples.filter((s) => s.name === f.name || s.name === f.name + '_count');
      return el('tr', null, el('td', null, el('code', null, f.name)), el('td', null, f.type),
        el('td', null, String(own.length)), el('td', null, fmtNum(own.reduce((a, s) => a + s.value, 0))), el('td', { class: 'muted' }, f.help));
    })));
  return [el('h2', null, 'Daemon'), summary, el('h2', null, 'Tasks'), perTask,
    el('details', null, el('summary', null, 'Every metric'), all),
    el('details', null, el('summary', null, 'Raw Prometheus text (/metrics)'), el('pre', { id: 'metrics', class: 'log' }, String(text)))];
}
