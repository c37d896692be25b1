// ctsync dashboard. Reads and changes everything through the /v1 API.
//
// Rule: every value from the API (task names, descriptions, triggers,
// errors, plans, logs: they come from Consul or the configuration) reaches
// the page as text through el() and textContent. Nothing is ever parsed as
// HTML (ui_test.go fails on the sinks that would).
'use strict';

const API = '../v1';
const REFRESH_MS = 5000;
// The API token (api_auth) the user typed, kept for this browser tab's
// session only: sessionStorage, never localStorage or a cookie.
const TOKEN_KEY = 'ctsync-api-token';

function token() {
  try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch (e) { return ''; }
}

// UI state that survives a refresh of the page's data.
const state = {
  busy: false,     // an action is in progress: no refresh, buttons off
  login: null,     // the reason the token form is shown (401), or null
  message: null,   // {text, kind} shown above the task page
  plan: null,      // {task, text, changes}: the plan preview of an enable
  log: null,       // {task, id, text, error}: the run log shown
  confirmRun: null, // the task whose "Run now" waits for confirmation
  runLog: null,    // {key, text, note}: the log of the run page (a run's log does not change)
  filter: '',      // history filter: '', 'success' or 'failure'
  page: 0,         // history page (PAGE_SIZE runs each), newest first
  timer: null,
  seq: 0,          // render generation: a slow, stale render is dropped
};

// el builds an element. props: class, text, on<event>, dataset, or
// attributes; children are nodes or strings (added as text).
function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = String(v);
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

class APIError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function api(method, path, body) {
  // Reads carry ?stale: a follower answers them from its copy of the
  // cluster's state (the leader ignores it); writes go to the leader.
  if (method === 'GET') path += (path.includes('?') ? '&' : '?') + 'stale';
  return request(method, API + path, body);
}

async function request(method, url, body) {
  const opts = { method, headers: { Accept: 'application/json' }, credentials: 'omit' };
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  const t = token();
  if (t) opts.headers.Authorization = 'Bearer ' + t;
  // Names the approver of a held plan when the API has no tokens.
  if (method !== 'GET') opts.headers['X-Ctsync-Client'] = 'dashboard';
  const resp = await fetch(url, opts);
  const text = await resp.text();
  let data = text;
  if ((resp.headers.get('Content-Type') || '').startsWith('application/json') && text) {
    try { data = JSON.parse(text); } catch (e) { data = text; }
  }
  if (!resp.ok) {
    const msg = data && data.error && data.error.message ? data.error.message : resp.status + ' ' + resp.statusText;
    throw new APIError(resp.status, msg);
  }
  return data;
}

const taskPath = (name) => '/tasks/' + encodeURIComponent(name);
const taskHref = (name) => '#/tasks/' + encodeURIComponent(name);
const runHref = (name, id) => '#/runs/' + encodeURIComponent(name) + '/' + encodeURIComponent(id);
// runURL is a run's link to paste anywhere: /ui/runs/<task>/<id>, which
// the server sends to this page (it survives a reload).
const runURL = (name, id) => new URL('runs/' + encodeURIComponent(name) + '/' + encodeURIComponent(id),
  location.href.split('#')[0]).href;
const PAGE_SIZE = 20;

// ---- formatting ----

function pad(n) { return String(n).padStart(2, '0'); }

function fmtTime(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  if (isNaN(d) || d.getFullYear() < 1971) return '';
  return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' +
    pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
}

function fmtAgo(iso) {
  const d = new Date(iso);
  if (isNaN(d)) return '';
  const ms = Date.now() - d.getTime();
  if (Math.abs(ms) < 1000) return 'now';
  const future = ms < 0;
  const s = Math.round(Math.abs(ms) / 1000);
  let t;
  if (s < 60) t = s + 's';
  else if (s < 3600) t = Math.round(s / 60) + 'm';
  else if (s < 86400) t = Math.round(s / 3600) + 'h';
  else t = Math.round(s / 86400) + 'd';
  return future ? 'in ' + t : t + ' ago';
}

function timeCell(iso) {
  const t = fmtTime(iso);
  if (!t) return el('span', { class: 'muted', text: '—' });
  return el('time', { datetime: iso, title: t }, fmtAgo(iso));
}

function fmtDuration(start, end) {
  const ms = new Date(end) - new Date(start);
  if (!(ms >= 0)) return '';
  if (ms < 1000) return ms + 'ms';
  const s = ms / 1000;
  if (s < 60) return s.toFixed(1) + 's';
  return Math.floor(s / 60) + 'm' + pad(Math.round(s % 60)) + 's';
}

function badge(text, kind, title) {
  return el('span', { class: 'badge ' + kind, title }, text);
}

const statusKinds = { successful: 'ok', errored: 'warn', critical: 'bad', unknown: 'muted', waiting: 'warn' };

function statusBadge(status) {
  return badge(status || 'unknown', statusKinds[status] || 'muted');
}

function resultBadge(ev) {
  if (ev.kind === 'drift') return badge('drift', 'bad', 'a drift check found changes made outside Terraform');
  if (ev.kind === 'gate' && ev.gate) {
    return badge(ev.gate.action, ev.gate.action === 'approved' ? 'ok' : 'warn', 'a safety gate\'s decision about plan ' + ev.gate.plan_id + ' (not a run)');
  }
  if (ev.kind === 'noop') return badge('no change', 'muted');
  return ev.success ? badge('success', 'ok') : badge('failed', 'bad');
}

function driftBadge(status, spec) {
  if (status && status.drifted) {
    return badge('drifted', 'bad', 'last drift check: ' + (fmtTime(status.last_drift_check) || 'unknown'));
  }
  if (spec && spec.drift_detection) {
    const last = status && status.last_drift_check;
    return badge('in sync', 'ok', last ? 'last drift check: ' + fmtTime(last) : 'not checked yet (every ' + spec.drift_detection.interval + ')');
  }
  return el('span', { class: 'muted', text: 'off' });
}

function planText(p) {
  if (!p) return '';
  return '+' + p.add + ' ~' + p.change + ' -' + p.destroy;
}

function planCell(p) {
  if (!p) return el('span', { class: 'muted', text: '—' });
  return el('span', { class: 'plan', title: p.add + ' to add, ' + p.change + ' to change, ' + p.destroy + ' to destroy' },
    el('span', { class: 'add' }, '+' + p.add), ' ',
    el('span', { class: 'change' }, '~' + p.change), ' ',
    el('span', { class: 'destroy' }, '-' + p.destroy));
}

function conditionText(spec) {
  const c = spec.condition || {};
  if (c.services) {
    const s = c.services;
    return 'services: ' + (s.regexp != null ? 'regexp ' + s.regexp : (s.names || []).join(', '));
  }
  if (c.catalog_services) return 'catalog-services: regexp ' + c.catalog_services.regexp;
  if (c.consul_kv) return 'consul-kv: ' + c.consul_kv.path + (c.consul_kv.recurse ? ' (recurse)' : '');
  if (c.schedule) return 'schedule: ' + c.schedule.cron;
  return '';
}

// lastRun is the newest event that is a run (drift checks are not).
function lastRun(events) {
  return (events || []).find((e) => e.kind !== 'drift') || null;
}

// ---- page frame ----

function setBanner(text) {
  const b = document.getElementById('banner');
  b.textContent = text || '';
  b.hidden = !text;
}

function setMain(...nodes) {
  // replaceChildren would turn a null into the text "null", and an array
  // into its string: arrays are flattened.
  document.getElementById('main').replaceChildren(...nodes.flat(Infinity).filter((n) => n !== null && n !== undefined && n !== false));
}

async function renderCluster() {
  const box = document.getElementById('cluster');
  let c;
  try {
    c = await api('GET', '/status/cluster');
  } catch (e) {
    if (e.status === 401) {
      box.replaceChildren();
    } else if (e.status === 405) {
      box.replaceChildren(el('span', { class: 'badge muted', title: 'high availability is not configured' }, 'single instance'));
    } else {
      box.replaceChildren(el('span', { class: 'badge warn', title: e.message }, 'cluster status unavailable'));
    }
    return;
  }
  const members = Array.isArray(c.members) ? c.members : [];
  const leader = members.find((m) => m.leader || m.is_leader);
  // Spread mode (spread_tasks): no leader; each member runs the tasks it
  // owns, listed with it.
  const spread = c.spread_tasks === true;
  const role = (m) => {
    if (spread) {
      const n = Array.isArray(m.tasks) ? m.tasks.length : 0;
      return badge(n + ' task' + (n === 1 ? '' : 's'), n ? 'ok' : 'muted', n ? m.tasks.join(', ') : 'owns no task');
    }
    return m.leader || m.is_leader ? badge('leader', 'ok') : badge('follower', 'muted');
  };
  const list = el('ul', { class: 'members' }, members.map((m) =>
    el('li', { dataset: { member: m.id || '' } },
      el('span', { class: 'member-id' }, m.id || '?'), ' ',
      role(m), ' ',
      m.healthy === false ? badge('unhealthy', 'bad') : null,
      m.address ? el('span', { class: 'muted' }, ' ' + m.address) : null)));
  box.replaceChildren(el('details', { class: 'cluster-details' },
    el('summary', null, 'cluster ', el('b', null, c.cluster_name || ''), ' · ', members.length + ' member' + (members.length === 1 ? '' : 's'),
      spread
        ? [' · ', el('b', { class: 'spread-mode', title: 'spread_tasks: every member runs the tasks it owns' }, 'tasks spread')]
        : [' · leader: ', el('b', { class: 'leader-id' }, leader ? leader.id : 'none')]),
    list));
}

// ownerCell shows a task's owner in spread mode: the member that runs it,
// or that it is being taken over (no owner for a moment).
function ownerCell(owner) {
  if (owner) return el('code', { class: 'owner-id' }, owner);
  return badge('taking over', 'warn', 'a member left or failed; another one takes the task over within the session TTL');
}

// ---- task list ----

async function renderList(seq) {
  const [statuses, tasks, summary] = await Promise.all([
    api('GET', '/status/tasks?include=events'), api('GET', '/tasks'), api('GET', '/status')]);
  if (seq !== state.seq) return;
  // Set-up warnings of the daemon (GET /v1/status "warnings"), e.g. an
  // API open to the network without tokens.
  const warn = document.getElementById('setup-warning');
  warn.textContent = (summary.warnings || []).join(' ');
  warn.hidden = !warn.textContent;
  const specs = new Map((tasks.tasks || []).map((t) => [t.name, t]));
  const names = Object.keys(statuses).sort();
  const s = summary.task_summary;
  const counts = el('p', { class: 'summary', id: 'summary' },
    names.length + ' task' + (names.length === 1 ? '' : 's') + ': ',
    badge(s.status.successful + ' successful', 'ok'), ' ',
    badge(s.status.errored + ' errored', s.status.errored ? 'warn' : 'muted'), ' ',
    badge(s.status.critical + ' critical', s.status.critical ? 'bad' : 'muted'), ' ',
    badge(s.status.unknown + ' unknown', 'muted'), ' ',
    badge((s.status.waiting || 0) + ' waiting', s.status.waiting ? 'warn' : 'muted',
      'plans held for approval: not counted as successful'), ' · ',
    s.enabled.true + ' enabled, ' + s.enabled.false + ' disabled');

  // In spread mode every task status carries its owner ("" while it is
  // being taken over): one more column.
  const spread = names.some((n) => statuses[n] && typeof statuses[n].owner === 'string');
  const cols = ['Task', 'Status', 'Enabled', 'Last run', 'Result', 'Trigger', 'Next run', 'Drift'];
  if (spread) cols.splice(1, 0, 'Owner');
  const head = el('thead', null, el('tr', null, cols.map((h) => el('th', { scope: 'col' }, h))));
  const body = el('tbody', null, names.map((name) => {
    const st = statuses[name];
    const spec = specs.get(name) || {};
    const ev = lastRun(st.events);
    return el('tr', { dataset: { task: name } },
      el('td', { class: 'name' },
        el('a', { href: taskHref(name) }, name),
        spec.description ? el('div', { class: 'desc' }, spec.description) : null,
        el('div', { class: 'cond muted' }, conditionText(spec))),
      spread ? el('td', { class: 'owner' }, ownerCell(st.owner)) : null,
      el('td', { class: 'status' }, statusBadge(st.status), st.active ? [' ', badge('running', 'info')] : null,
        st.held ? el('div', { class: 'held-reason' }, el('a', { href: taskHref(name) }, st.held.reason)) : null),
      el('td', { class: 'enabled' }, st.enabled ? badge('yes', 'ok') : badge('no', 'muted')),
      el('td', { class: 'last-run' }, ev ? timeCell(ev.end_time) : el('span', { class: 'muted' }, 'never')),
      el('td', { class: 'result' }, ev ? [resultBadge(ev), ' ', planCell(ev.plan)] : null, errorLine(st)),
      el('td', { class: 'trigger' }, ev && ev.trigger ? el('code', null, ev.trigger) : ''),
      el('td', { class: 'next-run' }, nextRunCell(st)),
      el('td', { class: 'drift' }, driftBadge(st, spec)));
  }));
  const table = names.length
    ? el('table', { class: 'tasks', id: 'tasks' }, head, body)
    : el('p', { class: 'muted' }, 'No tasks are configured.');
  setMain(el('h1', null, 'Tasks'), counts, table,
    el('h2', null, 'Activity'), chartFigure('chart-runs', 'Runs per minute, all tasks', 'last hour'));
  // The runs of the last hour, compact (no logs): GET /v1/status/runs.
  const since = new Date(Date.now() - 3600 * 1000).toISOString().replace(/\.\d+Z$/, 'Z');
  const runs = await api('GET', '/status/runs?since=' + encodeURIComponent(since));
  if (seq !== state.seq) return;
  drawRunsPerMinute(runs.runs || []);
}

// errorLine is a failed task's error in one line, and whether it is
// terminal.
function errorLine(st) {
  const lr = st.last_run;
  if (!lr || lr.success || !lr.error_summary) return null;
  return el('div', { class: 'err-summary' }, lr.error_summary,
    lr.terminal ? [' ', badge('terminal', 'bad', 'not retried until the task\'s desired state changes')] : null);
}

// nextRunCell: running, a pending retry, a schedule tick, or on change.
function nextRunCell(st) {
  if (st.active) return badge('running', 'info');
  if (st.held) return badge('awaiting approval', 'warn', st.held.reason);
  if (st.retry) return retryBadge(st.retry);
  if (st.next_run) return timeCell(st.next_run);
  return el('span', { class: 'muted', title: 'runs when its Consul data or configuration changes' }, st.enabled ? 'on change' : '—');
}

function retryBadge(r) {
  const due = new Date(r.next_at) - Date.now() < 1000;
  return el('span', { class: 'retry' }, badge('retry ' + r.attempt, 'warn', r.last_error), ' ',
    el('time', { datetime: r.next_at, title: fmtTime(r.next_at) }, due ? 'due now' : fmtAgo(r.next_at)));
}

// ---- task page ----

function detail(label, value) {
  return [el('dt', null, label), el('dd', null, value === '' || value === null || value === undefined ? el('span', { class: 'muted' }, '—') : value)];
}

async function renderTask(name, seq) {
  let spec, statuses, events, recent;
  const q = '?limit=' + PAGE_SIZE + '&offset=' + state.page * PAGE_SIZE + (state.filter ? '&result=' + state.filter : '');
  try {
    [spec, statuses, events, recent] = await Promise.all([
      api('GET', taskPath(name)), api('GET', '/status' + taskPath(name)), api('GET', taskPath(name) + '/events' + q),
      api('GET', '/status/runs?task=' + encodeURIComponent(name))]);
  } catch (e) {
    if (seq !== state.seq) return;
    if (e.status === 404) {
      setMain(el('h1', null, name), el('p', { class: 'error' }, e.message), el('p', null, el('a', { href: '#/' }, 'All tasks')));
      return;
    }
    throw e;
  }
  if (seq !== state.seq) return;
  const t = spec.task;
  const st = statuses[name] || {};
  const evs = events.events || [];
  // A plan a safety gate holds: the whole of it, to approve or reject.
  let held = null;
  if (st.held) {
    try {
      held = (await api('GET', taskPath(name) + '/plan')).plan;
    } catch (e) {
      if (e.status !== 404) throw e; // decided meanwhile: gone
    }
    if (seq !== state.seq) return;
  }

  const actions = el('div', { class: 'actions' },
    el('button', { id: 'run-now', type: 'button', disabled: state.busy || !t.enabled, onclick: () => { state.confirmRun = name; render(); },
      title: t.enabled ? 'apply now, even if the inputs did not change' : 'enable the task first' }, 'Run now'),
    t.enabled
      ? el('button', { id: 'disable', type: 'button', disabled: state.busy, onclick: () => disable(name) }, 'Disable')
      : el('button', { id: 'enable', type: 'button', disabled: state.busy, onclick: () => previewEnable(name) }, 'Enable…'));

  const dd = t.drift_detection;
  const details = el('dl', { class: 'details' },
    detail('Status', [statusBadge(st.status), st.active ? [' ', badge('running', 'info')] : null,
      st.waiting ? [' ', el('span', { id: 'waiting-reason', class: 'muted' }, st.waiting)] : null]),
    typeof st.owner === 'string' ? detail('Owner', ownerCell(st.owner)) : null,
    detail('Enabled', t.enabled ? badge('yes', 'ok') : badge('no', 'muted')),
    detail('Module', el('code', null, t.module + (t.version ? ' @ ' + t.version : ''))),
    detail('Condition', conditionText(t)),
    detail('Providers', (t.providers || []).join(', ')),
    detail('Buffer period', t.buffer_period && t.buffer_period.enabled ? t.buffer_period.min + ' – ' + t.buffer_period.max : 'off'),
    t.removal_delay ? detail('Removal delay', el('span', { id: 'removal-delay' }, t.removal_delay)) : null,
    st.pending_removals && st.pending_removals.length ? detail('Pending removals', el('ul', { id: 'pending-removals' },
      st.pending_removals.map(r => el('li', null, el('code', null, r.id), ' (' + r.kind + ') gone since ' + fmtTime(r.since) +
        ', removed at ' + fmtTime(r.applies_at) + ' unless it returns')))) : null,
    detail('Next run', nextRunCell(st)),
    st.last_run && !st.last_run.success ? detail('Last error', el('span', { id: 'last-error' }, st.last_run.error_summary || 'failed',
      ' ', el('a', { href: runHref(name, st.last_run.id) }, 'run'))) : null,
    st.dirty ? detail('Terminal', st.terminal ? badge('yes: waits for a change of its desired state', 'bad')
      : st.retry || st.active ? badge('no: retried', 'warn')
        : el('span', { id: 'no-retry' }, badge('no', 'warn'), ' ', el('span', { class: 'muted' },
          t.enabled ? 'no retry pending: its retries are used up (retry { max_retries }), or another instance runs it; it runs again when its desired state changes'
            : 'not retried while the task is disabled'))) : null,
    st.retry ? detail('Retry', el('span', { id: 'retry-info' }, 'attempt ' + st.retry.attempt + ' at ' + fmtTime(st.retry.next_at) +
      ' (' + (new Date(st.retry.next_at) - Date.now() < 1000 ? 'due now' : fmtAgo(st.retry.next_at)) + ')')) : null,
    detail('Drift detection', dd ? ['every ' + dd.interval + (dd.remediate ? ', remediate' : ', report only') + ' ', driftBadge(st, t)] : 'off'),
    detail('Last drift check', st.last_drift_check ? timeCell(st.last_drift_check) : ''));

  const nodes = [
    el('p', { class: 'crumbs' }, el('a', { href: '#/' }, 'Tasks'), ' / '),
    el('h1', { id: 'task-name' }, name),
    t.description ? el('p', { class: 'desc', id: 'task-desc' }, t.description) : null,
    actions,
  ];
  if (state.message) nodes.push(el('p', { id: 'message', class: 'message ' + state.message.kind, role: 'status' }, state.message.text));
  if (held && held.state === 'pending') nodes.push(heldPanel(name, held));
  if (state.plan && state.plan.task === name) nodes.push(planPanel(name));
  if (state.confirmRun === name) nodes.push(runConfirmPanel(name));
  nodes.push(details,
    el('div', { class: 'charts' },
      chartFigure('chart-duration', 'Run duration (s) and result', successNote(runEvents(recent.runs))),
      chartFigure('chart-latency', 'Reaction latency (s): change seen → run ended')),
    el('h2', null, 'History'), historyControls(events.total || 0), historyTable(name, evs));
  if (state.log && state.log.task === name) nodes.push(logPanel());
  // A refresh must not move the log or the held plan the user is reading.
  const oldLog = document.getElementById('log');
  const kept = oldLog ? { event: oldLog.dataset.event, top: oldLog.scrollTop } : null;
  const oldHeld = document.getElementById('held-plan-text');
  const keptHeld = oldHeld ? { plan: oldHeld.dataset.plan, top: oldHeld.scrollTop } : null;
  setMain(...nodes);
  const newLog = document.getElementById('log');
  if (kept && newLog && newLog.dataset.event === kept.event) newLog.scrollTop = kept.top;
  const newHeld = document.getElementById('held-plan-text');
  if (keptHeld && newHeld && newHeld.dataset.plan === keptHeld.plan) newHeld.scrollTop = keptHeld.top;
  drawTaskCharts(recent.runs);
}

// successNote: how many runs a chart shows and the share that succeeded.
function successNote(runs) {
  if (!runs.length) return 'no runs yet';
  const ok = runs.filter((e) => e.success).length;
  return 'newest ' + runs.length + ' runs, ' + Math.round(100 * ok / runs.length) + '% succeeded';
}

// historyControls: the result filter and the pages of the history.
function historyControls(total) {
  const sel = el('select', { id: 'result-filter', 'aria-label': 'show runs', onchange: () => { state.filter = sel.value; state.page = 0; render(); } },
    [['', 'All runs'], ['success', 'Successful'], ['failure', 'Failed']].map(([v, label]) =>
      el('option', { value: v, selected: state.filter === v }, label)));
  const from = total ? state.page * PAGE_SIZE + 1 : 0;
  const to = Math.min(total, (state.page + 1) * PAGE_SIZE);
  return el('div', { class: 'history-controls' }, sel, ' ',
    el('span', { id: 'page-info', class: 'muted' }, from + '–' + to + ' of ' + total), ' ',
    el('button', { id: 'newer-page', type: 'button', class: 'small', disabled: state.page === 0,
      onclick: () => { state.page--; render(); } }, '‹ Newer'), ' ',
    el('button', { id: 'older-page', type: 'button', class: 'small', disabled: to >= total,
      onclick: () => { state.page++; render(); } }, 'Older ›'));
}

// collapse folds identical consecutive failures (same kind and error
// summary) into the newest of them, with how many it stands for.
function collapse(evs) {
  const out = [];
  for (const ev of evs) {
    const prev = out[out.length - 1];
    const key = (e) => e.kind + '\u0000' + (e.error_summary || (e.error && e.error.message) || '');
    if (prev && !prev.ev.success && !ev.success && prev.ev.kind !== 'drift' && key(prev.ev) === key(ev)) {
      prev.count++;
      prev.oldest = ev;
      continue;
    }
    out.push({ ev, count: 1, oldest: ev });
  }
  return out;
}

function runConfirmPanel(name) {
  return el('section', { class: 'panel', id: 'run-confirm', 'aria-label': 'confirm run' },
    el('p', null, 'Apply ', el('b', null, name), ' now? Terraform applies its module even if nothing changed.'),
    el('div', { class: 'actions' },
      el('button', { id: 'confirm-run', type: 'button', class: 'primary', disabled: state.busy, onclick: () => { state.confirmRun = null; runNow(name); } }, 'Apply now'),
      el('button', { id: 'cancel-run', type: 'button', disabled: state.busy, onclick: () => { state.confirmRun = null; render(); } }, 'Cancel')));
}

function historyTable(name, evs) {
  if (!evs.length) return el('p', { class: 'muted', id: 'history' }, state.filter || state.page ? 'No runs match.' : 'No runs yet.');
  const head = el('thead', null, el('tr', null,
    ['Started', 'Kind', 'Result', 'Plan', 'Trigger', 'Changed in Consul', 'Inputs', 'Duration', 'Error', ''].map((h) => el('th', { scope: 'col' }, h))));
  const rows = collapse(evs).map(({ ev, count, oldest }) => el('tr', { dataset: { event: ev.id }, class: state.log && state.log.id === ev.id ? 'selected' : null },
    el('td', { class: 'started' }, el('a', { class: 'run-link', href: runHref(name, ev.id), title: 'open this run' }, fmtTime(ev.start_time))),
    el('td', { class: 'kind' }, ev.kind || ''),
    el('td', { class: 'result' }, resultBadge(ev), count > 1
      ? [' ', el('span', { class: 'badge warn repeat', title: count + ' identical failures since ' + fmtTime(oldest.start_time) }, '×' + count)] : null),
    el('td', { class: 'plan-cell' }, planCell(ev.plan)),
    el('td', { class: 'trigger' }, ev.trigger ? el('code', null, ev.trigger) : ''),
    el('td', { class: 'changes' }, changesLine(ev.changes)),
    el('td', { class: 'hash' }, ev.inputs_hash ? el('code', { title: ev.inputs_hash }, ev.inputs_hash.slice(0, 12)) : ''),
    el('td', null, fmtDuration(ev.start_time, ev.end_time)),
    el('td', { class: 'error', title: ev.error ? ev.error.message : null }, ev.error_summary || (ev.error ? ev.error.message.split('\n')[0] : ''),
      ev.terminal ? [' ', badge('terminal', 'bad')] : null),
    el('td', null, ev.kind === 'noop' ? '' : el('button', { type: 'button', class: 'small view-log', onclick: () => showLog(name, ev.id) }, 'Log'))));
  return el('table', { class: 'history', id: 'history' }, head, el('tbody', null, rows));
}

function planPanel(name) {
  const p = state.plan;
  const buttons = p.changes
    ? [el('button', { id: 'confirm-enable', type: 'button', class: 'primary', disabled: state.busy, onclick: () => enable(name, true) }, 'Enable and apply')]
    : [el('button', { id: 'confirm-enable', type: 'button', class: 'primary', disabled: state.busy, onclick: () => enable(name, false) }, 'Enable')];
  buttons.push(el('button', { id: 'cancel-enable', type: 'button', disabled: state.busy, onclick: () => { state.plan = null; render(); } }, 'Cancel'));
  return el('section', { class: 'panel', id: 'plan-preview', 'aria-label': 'plan preview' },
    el('h2', null, 'Plan if enabled'),
    el('p', null, p.changes ? 'Enabling applies these changes now:' : 'No changes: enabling applies nothing until the inputs change.'),
    el('pre', { class: 'plan-text' }, p.text || '(empty plan)'),
    el('div', { class: 'actions' }, buttons));
}

// heldPanel shows the plan a safety gate holds (GET /v1/tasks/<name>/plan):
// why, its counts, what changed in Consul since the last apply and the
// plan itself, with Approve (apply exactly this plan) and Reject.
function heldPanel(name, p) {
  return el('section', { class: 'panel held', id: 'held-plan', 'aria-label': 'plan held for approval', dataset: { plan: p.id } },
    el('h2', null, 'Plan held for approval'),
    el('p', { id: 'held-reason', class: 'held-why' }, p.reason),
    el('dl', { class: 'details' },
      detail('Plan', [el('code', { id: 'held-id' }, p.id), ' ', el('span', { id: 'held-counts' }, planCell(p)),
        p.in_state ? el('span', { class: 'muted' }, ' of ' + p.in_state + ' resources in the state') : null]),
      detail('Made', timeCell(p.created)),
      detail('Expires', p.expires ? timeCell(p.expires) : 'never')),
    el('h3', null, 'Changed in Consul since the last apply'),
    p.consul_changes && p.consul_changes.length
      ? el('ul', { id: 'held-changes' }, p.consul_changes.map((c) => el('li', null, c)))
      : el('p', { class: 'muted', id: 'held-changes' }, 'Nothing recorded.'),
    el('pre', { class: 'plan-text', id: 'held-plan-text', dataset: { plan: p.id } }, p.plan || '(empty plan)'),
    el('div', { class: 'actions' },
      el('button', { id: 'approve-plan', type: 'button', class: 'primary', disabled: state.busy, onclick: () => decidePlan(name, p.id, true),
        title: 'apply exactly this plan' }, 'Approve'),
      el('button', { id: 'reject-plan', type: 'button', disabled: state.busy, onclick: () => decidePlan(name, p.id, false),
        title: 'drop this plan: nothing is applied; the task waits for a change' }, 'Reject')));
}

function logPanel() {
  const l = state.log;
  return el('section', { class: 'panel', id: 'log-viewer', 'aria-label': 'run log' },
    el('h2', null, 'Run log ', el('code', null, l.id)),
    el('div', { class: 'actions' }, el('button', { type: 'button', class: 'small', onclick: () => { state.log = null; render(); } }, 'Close')),
    l.error ? el('p', { class: 'error' }, l.error) : el('pre', { class: 'log', id: 'log', dataset: { event: l.id } }, l.text === null ? 'Loading…' : l.text));
}

// ---- actions ----

// act runs an action: at once the buttons are disabled and the message
// shows what is going on; the page is rendered again when it ends.
async function act(fn) {
  state.busy = true;
  paintBusy();
  try {
    await fn();
  } catch (e) {
    state.message = { text: e.message, kind: 'error' };
  } finally {
    state.busy = false;
    render();
  }
}

// paintBusy updates the current page in place, without waiting for the
// API: buttons off, the message replaced.
function paintBusy() {
  for (const b of document.querySelectorAll('#main button')) b.disabled = true;
  const old = document.getElementById('message');
  if (!state.message) {
    if (old) old.remove();
    return;
  }
  const m = el('p', { id: 'message', class: 'message ' + state.message.kind, role: 'status' }, state.message.text);
  if (old) old.replaceWith(m);
  else {
    const actions = document.querySelector('#main .actions');
    if (actions) actions.after(m);
  }
}

function runNow(name) {
  state.message = { text: 'Running ' + name + '…', kind: 'info' };
  act(async () => {
    const r = await api('POST', taskPath(name) + '/run');
    const ev = r.event;
    if (r.status === 'held') {
      // A safety gate holds the run's plan: nothing was applied.
      const p = r.plan || {};
      state.message = { text: 'Held for approval: ' + (p.reason || r.message || '') + ' (plan ' + (p.id || r.run_id) + '); nothing applied.', kind: 'info' };
      return;
    }
    if (!ev) {
      state.message = { text: 'Nothing ran: ' + (r.message || 'no run was recorded') + '.', kind: 'error' };
      return;
    }
    state.message = { text: 'Run succeeded' + (ev.plan ? ' (' + planText(ev.plan) + ')' : '') + ': run ' + (r.run_id || ev.id) + '.', kind: 'ok' };
  });
}

function disable(name) {
  state.plan = null;
  state.message = { text: 'Disabling…', kind: 'info' };
  act(async () => {
    await api('PATCH', taskPath(name), { enabled: false });
    state.message = { text: 'Task disabled.', kind: 'ok' };
  });
}

// previewEnable plans the task as if enabled (PATCH ?run=inspect changes
// nothing) and shows the plan for confirmation, as `ctsync task enable`.
function previewEnable(name) {
  state.message = { text: 'Planning…', kind: 'info' };
  act(async () => {
    const r = await api('PATCH', taskPath(name) + '?run=inspect', { enabled: true });
    const i = r.inspect || {};
    state.plan = { task: name, text: i.plan || '', changes: !!i.changes_present };
    state.message = null;
  });
}

function enable(name, apply) {
  state.message = { text: apply ? 'Enabling and applying…' : 'Enabling…', kind: 'info' };
  act(async () => {
    await api('PATCH', taskPath(name) + (apply ? '?run=now' : ''), { enabled: true });
    state.plan = null;
    state.message = { text: apply ? 'Task enabled and applied.' : 'Task enabled.', kind: 'ok' };
  });
}

// decidePlan approves or rejects a held plan by its id: a plan replaced
// meanwhile (superseded, expired) is refused with 409 and its reason.
function decidePlan(name, id, approve) {
  state.message = { text: approve ? 'Approving…' : 'Rejecting…', kind: 'info' };
  act(async () => {
    const r = await api('POST', taskPath(name) + '/plan/' + encodeURIComponent(id) + (approve ? '/approve' : '/reject'));
    const by = r.plan && r.plan.decided_by ? ' by ' + r.plan.decided_by : '';
    state.message = approve
      ? { text: 'Plan ' + id + ' approved' + by + ': ctsync applies it now.', kind: 'ok' }
      : { text: 'Plan ' + id + ' rejected' + by + ': nothing is applied.', kind: 'ok' };
  });
}

async function showLog(name, id) {
  state.log = { task: name, id, text: null, error: null };
  render();
  try {
    const text = await api('GET', taskPath(name) + '/events/' + encodeURIComponent(id) + '/log');
    if (state.log && state.log.id === id) state.log.text = text;
  } catch (e) {
    if (state.log && state.log.id === id) state.log.error = e.message;
  }
  render();
}

// ---- a run's page (#/runs/<task>/<id>) ----

function decode(s) {
  try { return decodeURIComponent(s); } catch (e) { return s; }
}

function secondsBetween(a, b) {
  const ms = new Date(b) - new Date(a);
  return ms >= 0 ? ms / 1000 : null;
}

function fmtSeconds(s) {
  if (s === null || s === undefined) return '';
  if (s < 1) return Math.round(s * 1000) + 'ms';
  if (s < 60) return s.toFixed(1) + 's';
  return Math.floor(s / 60) + 'm' + pad(Math.round(s % 60)) + 's';
}

// changesView says what changed in Consul since the task's previous run.
function changesView(c) {
  if (!c) return el('p', { class: 'muted', id: 'changes' }, 'Not recorded: the first run of the task since the daemon started.');
  const kinds = [['services', 'Service instances'], ['consul_kv', 'Consul KV keys'], ['catalog_services', 'Catalog services'], ['nodes', 'Nodes']];
  const parts = [];
  for (const [k, label] of kinds) {
    const d = c[k];
    if (!d) continue;
    const line = (what, n, names, cls) => n ? el('li', { class: cls },
      n + ' ' + what + ': ', (names || []).map((x, i) => [i ? ', ' : '', el('code', null, x)]),
      n > (names || []).length ? ' and ' + (n - names.length) + ' more' : '') : null;
    parts.push(el('div', { class: 'change-kind', dataset: { kind: k } }, el('h3', null, label), el('ul', null,
      line('added', d.added_count, d.added, 'add'), line('removed', d.removed_count, d.removed, 'destroy'),
      line('changed', d.changed_count, d.changed, 'change'))));
  }
  if (!parts.length) return el('p', { class: 'muted', id: 'changes' }, 'Nothing changed in the Consul data since the previous run (the run had another cause: ' +
    'its configuration, module, a retry or a request).');
  return el('div', { id: 'changes' }, parts);
}

// changesLine is what changed in Consul before a run, in one line for the
// history ("web-3 added, web-1 (status passing → critical)"): the first
// three names, then how many more.
function changesLine(c) {
  if (!c) return '';
  const names = [];
  let more = 0;
  for (const k of ['services', 'consul_kv', 'catalog_services', 'nodes']) {
    const d = c[k];
    if (!d) continue;
    for (const [list, n, verb] of [[d.added, d.added_count, 'added'], [d.removed, d.removed_count, 'removed'], [d.changed, d.changed_count, 'changed']]) {
      for (const x of list || []) {
        if (names.length < 3) names.push(verb === 'changed' && x.includes('(') ? x : x + ' ' + verb);
        else more++;
      }
      more += Math.max(0, (n || 0) - (list || []).length);
    }
  }
  return names.join(', ') + (more ? ' and ' + more + ' more' : '');
}

// phasesView: init, plan and apply with their durations, as bars on the
// run's time line.
function phasesView(ev) {
  const phases = ev.phases || [];
  if (!phases.length) return el('p', { class: 'muted', id: 'phases' }, 'Not recorded.');
  const t0 = new Date(phases[0].start_time).getTime();
  const total = Math.max(1, new Date(phases[phases.length - 1].end_time).getTime() - t0);
  return el('table', { class: 'history phases', id: 'phases' },
    el('thead', null, el('tr', null, ['Phase', 'Started', 'Duration', ''].map((h) => el('th', { scope: 'col' }, h)))),
    el('tbody', null, phases.map((p) => {
      const start = new Date(p.start_time).getTime() - t0;
      const dur = new Date(p.end_time).getTime() - new Date(p.start_time).getTime();
      const bar = el('div', { class: 'bar ' + p.name });
      bar.style.marginLeft = (100 * start / total).toFixed(1) + '%';
      bar.style.width = Math.max(0.5, 100 * dur / total).toFixed(1) + '%';
      return el('tr', { dataset: { phase: p.name } }, el('td', { class: 'phase-name' }, p.name), el('td', null, '+' + fmtSeconds(start / 1000)),
        el('td', { class: 'phase-duration' }, fmtSeconds(dur / 1000)), el('td', { class: 'timeline' }, bar));
    })));
}

// triggeredBy says who started a run: the API token (only when one was
// used), the approver without a token, or ctsync.
function triggeredBy(ev) {
  if (ev.actor) return 'token ' + ev.actor;
  if (ev.gate && ev.gate.by) return ev.gate.by + ' (no token: api_auth is off)';
  return ev.trigger === 'api' || ev.trigger === 'enable' ? 'an API request (no token: api_auth is off)' : 'ctsync';
}

// gateView is a safety gate's decision on a run page: the action, the
// plan's id, who and after how long, why it was held, its note (a plan
// made again after a restart), the policy's messages.
function gateView(g) {
  const who = g.by ? ' by ' + g.by : '';
  const after = g.held_seconds ? ' after ' + fmtSeconds(g.held_seconds) + ' held' : '';
  return el('div', { id: 'run-gate' },
    el('div', null, el('span', { id: 'run-gate-action' }, g.action + who + after), ' · plan ', el('code', { id: 'run-gate-plan' }, g.plan_id)),
    g.reason ? el('div', { id: 'run-gate-reason' }, g.reason) : null,
    g.note ? el('div', { id: 'run-gate-note', class: 'muted' }, g.note) : null,
    g.superseded_by ? el('div', null, 'superseded by plan ', el('code', null, g.superseded_by)) : null,
    g.messages && g.messages.length ? el('ul', { id: 'run-gate-messages' }, g.messages.map((m) => el('li', null, m))) : null);
}

async function renderRun(name, id, seq) {
  let r;
  try {
    r = await api('GET', taskPath(name) + '/events/' + encodeURIComponent(id));
  } catch (e) {
    if (seq !== state.seq) return;
    if (e.status === 404) {
      setMain(el('p', { class: 'crumbs' }, el('a', { href: '#/' }, 'Tasks'), ' / ', el('a', { href: taskHref(name) }, name), ' / '),
        el('h1', null, 'Run ' + id), el('p', { class: 'error', id: 'run-missing' }, e.message));
      return;
    }
    throw e;
  }
  const ev = r.event;
  const key = name + '\u0000' + id;
  if (!state.runLog || state.runLog.key !== key) {
    let text = null;
    let note = '';
    try {
      text = await api('GET', taskPath(name) + '/events/' + encodeURIComponent(id) + '/log');
    } catch (e) {
      note = e.message;
    }
    state.runLog = { key, text, note };
  }
  const log = state.runLog.text;
  const logNote = state.runLog.note;
  if (seq !== state.seq) return;
  const latency = ev.detected_at ? secondsBetween(ev.detected_at, ev.end_time) : null;
  const link = runURL(name, id);
  const details = el('dl', { class: 'details', id: 'run-details' },
    detail('Result', [resultBadge(ev), ev.terminal ? [' ', badge('terminal', 'bad', 'not retried until the task\'s desired state changes')] : null]),
    detail('Kind', ev.kind || ''),
    detail('Trigger', ev.trigger ? el('code', { id: 'run-trigger' }, ev.trigger) : ''),
    detail('Triggered by', el('span', { id: 'run-actor' }, triggeredBy(ev))),
    ev.gate ? detail('Safety gate', gateView(ev.gate)) : null,
    detail('Change seen', ev.detected_at ? fmtTime(ev.detected_at) : ''),
    detail('Started', fmtTime(ev.start_time)),
    detail('Ended', fmtTime(ev.end_time)),
    detail('Duration', fmtDuration(ev.start_time, ev.end_time)),
    detail('Reaction latency', latency !== null ? el('span', { id: 'run-latency', title: 'from the change seen to the end of the run' }, fmtSeconds(latency)) : ''),
    detail('Plan', el('span', { id: 'run-plan' }, planCell(ev.plan))),
    ev.refresh ? detail('Refresh', el('span', { id: 'run-refresh' }, ev.refresh === 'skipped'
      ? 'skipped (-refresh=false: a data change while the last full refresh is recent)' : 'every object read before planning')) : null,
    ev.targeted ? detail('Targeted', el('span', { id: 'run-targeted', title: 'the changed instances planned alone first (-target), then a full check' }, ev.targeted)) : null,
    detail('Error', ev.error_summary || ev.error ? el('span', { id: 'run-error-summary', class: 'err-summary' }, ev.error_summary || ev.error.message.split('\n')[0]) : ''),
    detail('Inputs', ev.inputs_hash ? el('code', null, ev.inputs_hash) : ''),
    ev.tfc_run_url ? detail('Remote run', el('a', { href: ev.tfc_run_url, rel: 'noopener noreferrer' }, ev.tfc_run_url)) : null,
    detail('Link', el('input', { id: 'run-url', type: 'text', readonly: true, value: link, 'aria-label': 'link to this run',
      onfocus: (e) => e.target.select() })));
  const nav = el('p', { class: 'run-nav' },
    r.newer_id ? el('a', { id: 'newer-run', href: runHref(name, r.newer_id) }, '‹ newer run') : el('span', { class: 'muted' }, 'newest run'), ' · ',
    r.older_id ? el('a', { id: 'older-run', href: runHref(name, r.older_id) }, 'older run ›') : el('span', { class: 'muted' }, 'oldest run kept'));
  const oldLog = document.getElementById('run-log');
  const top = oldLog ? oldLog.scrollTop : null;
  setMain(
    el('p', { class: 'crumbs' }, el('a', { href: '#/' }, 'Tasks'), ' / ', el('a', { href: taskHref(name), id: 'run-task' }, name), ' / '),
    el('h1', { id: 'run-title' }, 'Run ', el('code', null, id)),
    nav, details,
    ev.error ? el('details', { class: 'full-error' }, el('summary', null, 'Full error'), el('pre', { class: 'log', id: 'run-error' }, ev.error.message)) : null,
    ev.plan_text ? [el('h2', null, 'Plan'), el('pre', { class: 'log', id: 'run-plan-text' }, ev.plan_text)] : null,
    el('h2', null, 'What changed in Consul'), changesView(ev.changes),
    el('h2', null, 'Phases'), phasesView(ev),
    el('h2', null, 'Log'),
    log !== null
      ? el('pre', { class: 'log', id: 'run-log' }, log)
      : [el('p', { class: 'muted', id: 'run-log-note' }, (logNote || 'No log.') + (ev.log_tail ? ' The end of the output, kept with the event:' : '')),
        ev.log_tail ? el('pre', { class: 'log', id: 'run-log' }, ev.log_tail) : null]);
  const newLog = document.getElementById('run-log');
  if (newLog && top !== null) newLog.scrollTop = top;
}

// ---- routing and refresh ----

// ---- the API token ----

function renderLogin(reason) {
  const input = el('input', { type: 'password', id: 'token-input', autocomplete: 'off', spellcheck: 'false',
    'aria-label': 'API token', placeholder: 'API token' });
  const form = el('form', { id: 'token-form', class: 'token-form', onsubmit: (ev) => {
    ev.preventDefault();
    const v = input.value.trim();
    if (!v) return;
    try { sessionStorage.setItem(TOKEN_KEY, v); } catch (e) { /* private mode: nothing kept */ }
    state.login = null;
    showSignOut();
    render();
    renderCluster();
  } }, input, ' ', el('button', { type: 'submit', id: 'token-submit' }, 'Sign in'));
  setMain(el('h1', null, 'API token needed'),
    el('p', { id: 'token-reason' }, reason),
    el('p', { class: 'muted' }, 'Enter an API token of this ctsync (api_auth). It is kept in this browser tab only, until the tab is closed.'),
    form);
  input.focus();
}

function showSignOut() {
  const nav = document.querySelector('header.top nav');
  let b = document.getElementById('sign-out');
  if (!token()) {
    if (b) b.remove();
    return;
  }
  if (b) return;
  b = el('button', { id: 'sign-out', class: 'link', type: 'button', onclick: () => {
    try { sessionStorage.removeItem(TOKEN_KEY); } catch (e) { /* nothing kept */ }
    showSignOut();
    render();
  } }, 'Sign out');
  nav.append(' ', b);
}

async function renderMetrics(seq) {
  const text = await request('GET', '../metrics');
  if (seq !== state.seq) return;
  setMain(el('h1', null, 'Metrics'), ...metricsView(typeof text === 'string' ? text : JSON.stringify(text)));
}

function route() {
  if (location.hash === '#/metrics') return { view: 'metrics' };
  const run = location.hash.match(/^#\/runs\/([^/]+)\/([^/]+)$/);
  if (run) return { view: 'run', name: decode(run[1]), id: decode(run[2]) };
  const m = location.hash.match(/^#\/tasks\/(.+)$/);
  if (!m) return { view: 'list' };
  return { view: 'task', name: decode(m[1]) };
}

async function render() {
  const seq = ++state.seq;
  clearTimeout(state.timer);
  const r = route();
  try {
    if (r.view === 'task') await renderTask(r.name, seq);
    else if (r.view === 'run') await renderRun(r.name, r.id, seq);
    else if (r.view === 'metrics') await renderMetrics(seq);
    else await renderList(seq);
    if (seq === state.seq) setBanner('');
  } catch (e) {
    if (e.status === 401) {
      // No token, or one the server does not know (any more).
      if (seq === state.seq) {
        setBanner('');
        state.login = e.message;
        renderLogin(token() ? 'The token was refused: ' + e.message : 'This ctsync requires an API token.');
      }
      return; // no refresh until a token is given
    }
    if (seq === state.seq) setBanner('Cannot reach the ctsync API: ' + e.message);
  }
  if (seq === state.seq) state.timer = setTimeout(refresh, REFRESH_MS);
}

// refresh re-renders unless the user is in the middle of something.
function refresh() {
  if (state.login !== null) return;
  if (state.busy || state.plan || state.confirmRun) {
    state.timer = setTimeout(refresh, REFRESH_MS);
    return;
  }
  render();
  renderCluster();
}

window.addEventListener('hashchange', () => {
  state.message = null;
  state.plan = null;
  state.log = null;
  state.confirmRun = null;
  state.page = 0;
  state.filter = '';
  render();
});

document.addEventListener('DOMContentLoaded', () => {
  showSignOut();
  render();
  renderCluster();
});
