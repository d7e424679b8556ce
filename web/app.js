// rota dashboard: cluster heat map, queues, jobs. Every number comes from the
// REST API with the token the user gives; nothing is shown without one.
// Plain JavaScript, no build step: served from the binary.
'use strict';

const REFRESH_MS = 2000;
const PAGE_ROWS = 50;  // jobs per page of the jobs list
const state = {
  token: sessionStorage.getItem('rota.token') || '', timer: null, me: null, selectedGpu: null, selectedNode: null,
  filters: {}, sort: { key: 'id', dir: -1 }, page: 0, armed: '', logs: null,
};

function esc(v) {
  return String(v === undefined || v === null ? '' : v)
    .replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}
const $ = (sel) => document.querySelector(sel);

class AuthError extends Error {}

// The response itself (headers and all); an error's message is the server's.
async function apiRaw(path, init) {
  const res = await fetch(path, Object.assign({}, init, { headers: { Authorization: 'Bearer ' + state.token,
    'Content-Type': 'application/json' } }));
  if (res.status === 401) throw new AuthError('token not accepted');
  if (!res.ok) {
    let msg = res.status + ' ' + res.statusText;
    try { msg = (await res.json()).error.message || msg; } catch (e) { /* not JSON */ }
    throw new Error(msg);
  }
  return res;
}

async function api(path) {
  const res = await apiRaw(path);
  const type = res.headers.get('Content-Type') || '';
  return type.includes('json') ? res.json() : res.text();
}

// An action (cancel, hold, drain...): POST with a JSON body.
async function apiPost(path, body) {
  return (await apiRaw(path, { method: 'POST', body: JSON.stringify(body || {}) })).json();
}

// Spans as people read them: 45s, 12m, 3h12m, 2d4h.
function dur(seconds) {
  if (seconds === undefined || seconds === null || seconds < 0) return '';
  const s = Math.floor(seconds);
  if (s < 60) return s + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm' + (s % 60 && s < 600 ? (s % 60) + 's' : '');
  if (s < 86400) return Math.floor(s / 3600) + 'h' + (Math.floor(s / 60) % 60 ? (Math.floor(s / 60) % 60) + 'm' : '');
  return Math.floor(s / 86400) + 'd' + (Math.floor(s / 3600) % 24 ? (Math.floor(s / 3600) % 24) + 'h' : '');
}

// An RFC 3339 time from the API in the browser's local time (the API keeps UTC).
function localTime(text) {
  if (!text) return '';
  const d = new Date(text);
  return isNaN(d) ? text : d.toLocaleString();
}

// A time ahead as "in 20m", one behind as "5m ago".
function fromNow(text) {
  const d = Date.parse(text);
  if (isNaN(d)) return '';
  const s = (d - Date.now()) / 1000;
  return s >= 0 ? 'in ' + dur(s) : dur(-s) + ' ago';
}

// One row of a details list (<dl class="kv">); nothing for an empty value.
function kv(k, v, title) {
  if (v === undefined || v === '') return '';
  return '<dt>' + esc(k) + '</dt><dd data-k="' + esc(k) + '"' + (title ? ' title="' + esc(title) + '"' : '') + '>' + esc(v) + '</dd>';
}

// Whether the signed-in caller may act on a job (its owner, or an admin).
function mayAct(job) { return !!state.me && (state.me.role === 'admin' || state.me.user === job.user); }
function isAdmin() { return !!state.me && state.me.role === 'admin'; }

// ---- login ----------------------------------------------------------------

function showLogin(message) {
  state.token = '';
  state.me = null;
  state.projection = null;  // (another user may see other jobs)
  sessionStorage.removeItem('rota.token');
  clearInterval(state.timer);
  $('#app').hidden = true;
  $('#app').innerHTML = '';
  $('#nav').hidden = true;
  $('#logout').hidden = true;
  $('#updated').textContent = '';
  $('#whoami').textContent = '';
  $('#login-view').hidden = false;
  $('#login-error').textContent = message || '';
}

async function login(token) {
  state.token = token.trim();
  try {
    state.me = await api('/v1/whoami');
  } catch (e) {
    showLogin(e instanceof AuthError ? 'That token was not accepted.' : 'Cannot reach the server: ' + e.message);
    return;
  }
  sessionStorage.setItem('rota.token', state.token);
  $('#login-view').hidden = true;
  $('#app').hidden = false;
  $('#nav').hidden = false;
  $('#logout').hidden = false;
  $('#whoami').textContent = state.me.user + (state.me.role === 'admin' ? ' (admin)' : '');
  if (!location.hash || location.hash === '#' || location.hash === '#/') location.hash = '#/cluster';
  route();
  clearInterval(state.timer);
  state.timer = setInterval(refresh, REFRESH_MS);
}

// ---- routing --------------------------------------------------------------

function currentPage() {
  const h = location.hash.replace(/^#\/?/, '');
  const parts = h.split('/');
  if (parts[0] === 'jobs' && parts[1]) return { page: 'job', id: decodeURIComponent(parts[1]) };
  if (parts[0] === 'queues') return { page: 'queues' };
  if (parts[0] === 'services') return { page: 'services' };
  if (parts[0] === 'reports') return { page: 'reports' };
  if (parts[0] === 'jobs') return { page: 'jobs' };
  return { page: 'cluster' };
}

function route() {
  if (!state.token) return;
  const p = currentPage();
  for (const name of ['cluster', 'queues', 'jobs', 'services', 'reports']) {
    $('#nav-' + name).classList.toggle('active', p.page === name || (name === 'jobs' && p.page === 'job'));
  }
  state.armed = '';
  $('#app').innerHTML = '<p class="muted">Loading…</p>';
  $('#app').dataset.page = p.page;
  refresh();
}

async function refresh() {
  if (!state.token) return;
  const p = currentPage();
  // What the user is typing (a drain reason) survives the page being drawn again.
  const kept = [...document.querySelectorAll('#app input[data-keep]')].map((e) => [e.id, e.value]);
  const focused = document.activeElement && document.activeElement.id;
  try {
    if (p.page === 'cluster') await renderCluster();
    else if (p.page === 'queues') await renderQueues();
    else if (p.page === 'jobs') await renderJobs();
    else if (p.page === 'services') await renderServices();
    else if (p.page === 'reports') await renderReports();
    else await renderJob(p.id);
    for (const [id, value] of kept) {
      const el = document.getElementById(id);
      if (el) el.value = value;
    }
    if (focused && document.getElementById(focused) && document.activeElement !== document.getElementById(focused)) {
      document.getElementById(focused).focus();
    }
    $('#updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    $('#app').dataset.ready = '1';
  } catch (e) {
    if (e instanceof AuthError) return showLogin('Your token is no longer accepted.');
    $('#updated').textContent = 'update failed: ' + e.message;
  }
}

// ---- reports --------------------------------------------------------------

// Where the GPU-hours went: GET /v1/usage/report, read again every 30 s (a
// week's records are not re-read every refresh) or when the period or the
// grouping changes.
const REPORT_MS = 30000;

function reportRow(r, max, priced) {
  const held = r.gpu_hours, used = r.gpu_hours_used, idle = r.gpu_hours_idle;
  const bar = '<div class="bar" title="held ' + held + ' GPU-h; used ' + used + '; idle ' + idle + '">' +
    '<div class="fill" style="width:' + (100 * held / max).toFixed(1) + '%"></div>' +
    '<div class="used" style="width:' + (100 * used / max).toFixed(1) + '%"></div></div>';
  return '<tr data-key="' + esc(r.key) + '"><td>' + esc(r.key) + '</td><td class="num" data-k="jobs">' + esc(r.jobs) +
    '</td><td class="num" data-k="gpu_hours">' + esc(held) + '</td><td class="num" data-k="used">' + esc(used) +
    '</td><td class="num" data-k="idle">' + esc(idle) + '</td><td class="num" data-k="oversized">' + esc(r.gpu_hours_oversized) +
    '</td><td class="num" data-k="efficiency">' + (r.efficiency_pct < 0 ? '-' : esc(r.efficiency_pct) + '%') +
    '</td><td class="num" data-k="energy">' + esc(r.energy_kwh) + '</td>' +
    (priced ? '<td class="num" data-k="cost">' + (r.cost === null ? '-' : esc(r.cost.toFixed(2))) +
      '</td><td class="num" data-k="cost_idle">' + (r.cost_idle === null ? '-' : esc(r.cost_idle.toFixed(2))) + '</td>' : '') +
    '<td>' + bar + '</td></tr>';
}

// GPU-hours held (solid) and used (dashed) per row over the period, a step
// an hour or more (the report's timeline).
function reportChart(rep) {
  const tl = rep.timeline;
  if (!tl || tl.steps < 2 || !Object.keys(tl.series).length) return '';
  const w = 640, h = 200, l = 44, r = 12, t = 14, b = 28;
  let max = 0.001;
  for (const s of Object.values(tl.series)) for (const v of s.held) max = Math.max(max, v);
  const x = (k) => l + k / (tl.steps - 1) * (w - l - r);
  const y = (v) => h - b - v / max * (h - t - b);
  const colors = ['#2f6fdf', '#d64533', '#2ca05a', '#ff9f1a', '#8e44ad', '#16a2b8', '#7f8c8d'];
  let svg = '<svg class="chart" id="report-chart" width="' + w + '" height="' + h + '" viewBox="0 0 ' + w + ' ' + h + '">';
  svg += '<text x="' + (l - 6) + '" y="' + (t + 4) + '" text-anchor="end" font-size="11">' + max.toFixed(1) + '</text>';
  svg += '<text x="' + (l - 6) + '" y="' + (h - b) + '" text-anchor="end" font-size="11">0</text>';
  svg += '<line x1="' + l + '" y1="' + (h - b) + '" x2="' + (w - r) + '" y2="' + (h - b) + '" stroke="#999"/>';
  Object.entries(tl.series).slice(0, colors.length).forEach(([key, s], i) => {
    const c = colors[i];
    for (const [vals, dash] of [[s.held, ''], [s.used, ' stroke-dasharray="4 3"']]) {
      svg += '<polyline class="series" data-key="' + esc(key) + '" fill="none" stroke="' + c + '" stroke-width="1.5"' + dash +
        ' points="' + vals.map((v, k) => x(k).toFixed(1) + ',' + y(v).toFixed(1)).join(' ') + '"/>';
    }
    svg += '<text x="' + (l + 8) + '" y="' + (t + 12 + 13 * i) + '" fill="' + c + '" font-size="11">' + esc(key) + '</text>';
  });
  const step = tl.step_s >= 3600 ? (tl.step_s / 3600) + ' h' : tl.step_s + ' s';
  svg += '<text x="' + (w - r) + '" y="' + (h - 8) + '" text-anchor="end" font-size="11" fill="#777">solid: GPU-hours held · ' +
    'dashed: used · per ' + step + '</text></svg>';
  return svg;
}

async function renderReports() {
  const by = state.filters['r-by'] || 'user', since = state.filters['r-since'] || '7d';
  const key = by + '/' + since;
  if (!state.report || state.reportKey !== key || Date.now() - state.reportAt > REPORT_MS) {
    state.report = await api('/v1/usage/report?by=' + encodeURIComponent(by) + '&since=' + encodeURIComponent(since));
    state.reportKey = key;
    state.reportAt = Date.now();
  }
  const rep = state.report;
  const priced = rep.total.cost !== null && rep.total.cost !== undefined;  // some node's GPU-hours have a price
  let max = 0.001;
  for (const r of rep.rows) max = Math.max(max, r.gpu_hours);
  let html = '<h1>Reports</h1><div class="filters"><select id="r-by"><option value="user">by user</option>' +
    '<option value="queue">by queue</option><option value="model">by GPU model</option></select>' +
    '<select id="r-since"><option value="1d">last day</option><option value="7d">last 7 days</option>' +
    '<option value="30d">last 30 days</option></select> <span class="muted">' + esc(rep.since) + ' to ' + esc(rep.until) +
    '</span></div>' + reportChart(rep) + '<div class="scroll"><table id="report-table"><tr><th>' + esc(rep.by) + '</th><th class="num">jobs</th>' +
    '<th class="num">GPU-hours</th><th class="num">used</th><th class="num">idle</th><th class="num">oversized</th>' +
    '<th class="num">efficiency</th><th class="num">kWh</th>' +
    (priced ? '<th class="num">cost' + (rep.currency ? ' (' + esc(rep.currency) + ')' : '') + '</th><th class="num">idle cost</th>' : '') +
    '<th>held vs used</th></tr>';
  for (const r of rep.rows) html += reportRow(r, max, priced);
  html += reportRow(rep.total, Math.max(max, rep.total.gpu_hours), priced).replace('<tr ', '<tr class="total" ');
  html += '</table></div><p class="muted">Used: GPU-hours held times the GPUs\u2019 measured activity. Idle: held with the GPU under ' +
    'the idle threshold. Oversized: what the shape each job family fits would have freed.</p>';
  html += '<h2>Right-sizing</h2>';
  if (!rep.under_users.length) {
    html += '<p class="muted" id="under-none">No job family under-uses its GPUs (or none has been measured long enough).</p>';
  } else {
    html += '<div class="scroll"><table id="under-table"><tr><th>family</th><th class="num">jobs</th><th class="num">GPU-hours</th>' +
      '<th class="num">oversized</th><th>fits</th><th>why</th></tr>';
    for (const u of rep.under_users) {
      html += '<tr data-family="' + esc(u.family) + '"><td>' + esc(u.family) + '</td><td class="num">' + esc(u.jobs) +
        '</td><td class="num">' + esc(u.gpu_hours) + '</td><td class="num">' + esc(u.gpu_hours_oversized) +
        '</td><td data-k="shape"><code>' + esc(u.shape) + '</code></td><td>' + esc(u.summary) + '</td></tr>';
    }
    html += '</table></div>';
  }
  $('#app').innerHTML = html;
  for (const id of ['r-by', 'r-since']) {
    const el = $('#' + id);
    el.value = id === 'r-by' ? by : since;
    el.addEventListener('input', () => { state.filters[id] = el.value; refresh(); });
  }
}

// ---- cluster --------------------------------------------------------------

function gpuTitle(node, g) {
  const parts = [node.name + ' GPU ' + g.index];
  if (!g.healthy) parts.push('unhealthy' + (g.health_reason ? ': ' + g.health_reason : ''));
  parts.push(g.allocated ? (g.jobs ? 'jobs ' + g.jobs.join(', ') : 'job ' + g.job) : 'idle');
  if (g.shared_milli !== undefined) parts.push('shared: ' + (g.shared_milli / 1000).toFixed(2) + ' of the GPU');
  if (g.mig !== undefined) parts.push('MIG ' + (g.mig || '(no instances)') + (g.mig.includes('*') ? ' (* in use)' : ''));
  if (g.utilization_pct !== undefined) parts.push('util ' + g.utilization_pct + '%');
  if (g.memory_used !== undefined) parts.push('mem ' + g.memory_used);
  if (g.temperature_c !== undefined) parts.push(g.temperature_c + '°C');
  if (g.power_w !== undefined) parts.push(g.power_w + ' W');
  if (node.simulated) parts.push('simulated');
  return parts.join(' · ');
}

// Allocated GPUs get darker with utilisation (when the agent reports it).
function gpuStyle(g) {
  if (!g.allocated || !g.healthy || g.utilization_pct === undefined) return '';
  const light = 72 - Math.round(Math.min(100, Math.max(0, g.utilization_pct)) * 0.4);
  return ' style="background:hsl(218,72%,' + light + '%)"';
}

function nodeHtml(node, highlight) {
  const islands = Math.max(1, node.nvlink_islands || 1);
  const per = Math.ceil(node.gpus / islands);
  let cells = '';
  for (let i = 0; i < islands; i++) {
    cells += '<span class="island">';
    for (const g of node.gpu_list.slice(i * per, (i + 1) * per)) {
      const cls = ['gpu', !g.healthy ? 'unhealthy' : g.allocated ? 'alloc' : 'idle'];
      if (highlight && highlight(node, g)) cls.push('mine');
      if (state.selectedGpu === node.name + '/' + g.index) cls.push('sel');
      cells += '<span class="' + cls.join(' ') + '" data-gpu="' + esc(node.name + '/' + g.index) + '"' + gpuStyle(g) +
        ' title="' + esc(gpuTitle(node, g)) + '"></span>';
    }
    cells += '</span>';
  }
  const badges = (node.simulated ? ' <span class="badge sim">simulated</span>' : '') +
    (node.state !== 'ready' ? ' <span class="badge bad">' + esc(node.state) + '</span>' : '');
  return '<div class="node ' + esc(node.state) + (!highlight && state.selectedNode === node.name ? ' sel' : '') + '" data-node="' +
    esc(node.name) + '"><div class="name" data-node-select="' + esc(node.name) + '" title="details and actions">' +
    esc(node.name) + ' <span class="muted">' + esc(node.gpu_model) + '</span>' + badges + '</div>' + cells + '</div>';
}

// Spine -> rack -> node, from the nodes' topology labels.
function topologyHtml(nodes, highlight) {
  const spines = new Map();
  for (const n of nodes) {
    const spine = (n.labels && n.labels.spine) || '-';
    const rack = (n.labels && n.labels.rack) || '-';
    if (!spines.has(spine)) spines.set(spine, new Map());
    const racks = spines.get(spine);
    if (!racks.has(rack)) racks.set(rack, []);
    racks.get(rack).push(n);
  }
  let html = '';
  for (const [spine, racks] of spines) {
    html += '<div class="spine" data-spine="' + esc(spine) + '"><div class="label">spine ' + esc(spine) + '</div>';
    for (const [rack, rackNodes] of racks) {
      html += '<div class="rack" data-rack="' + esc(rack) + '"><div class="label">rack ' + esc(rack) + '</div>';
      for (const n of rackNodes) html += nodeHtml(n, highlight);
      html += '</div>';
    }
    html += '</div>';
  }
  return html;
}

function clusterTotals(nodes) {
  const t = { nodes: nodes.length, gpus: 0, allocated: 0, unhealthy: 0, idle: 0, simulated: 0 };
  for (const n of nodes) {
    t.gpus += n.gpus;
    t.allocated += n.gpus_allocated;
    t.unhealthy += n.gpus_unhealthy;
    if (n.simulated) t.simulated++;
    for (const g of n.gpu_list) if (g.healthy && !g.allocated && n.state === 'ready') t.idle++;
  }
  return t;
}

// The period the node and GPU charts cover (GET /v1/nodes/NAME/history?since=).
const HISTORY_RANGES = [['1h', 'last hour'], ['6h', 'last 6 hours'], ['24h', 'last 24 hours'], ['7d', 'last 7 days']];
function historyRange() { return state.filters['h-range'] || '24h'; }
function rangeSelect(id, ranges, value) {
  return '<select id="' + id + '">' + ranges.map(([v, label]) => '<option value="' + v + '"' + (v === value ? ' selected' : '') +
    '>' + esc(label) + '</option>').join('') + '</select>';
}

async function renderCluster() {
  const { nodes } = await api('/v1/nodes');
  const t = clusterTotals(nodes);
  const pct = t.gpus ? Math.round(100 * t.allocated / t.gpus) : 0;
  const card = (id, label, v) => '<div class="card"><div class="muted">' + label + '</div><div class="v" id="' + id + '">' +
    esc(v) + '</div></div>';
  let html = '<h1>Cluster</h1><div class="cards" id="cluster-summary">' +
    card('sum-nodes', 'nodes', t.nodes) + card('sum-gpus', 'GPUs', t.gpus) + card('sum-allocated', 'allocated', t.allocated) +
    card('sum-idle', 'idle', t.idle) + card('sum-unhealthy', 'unhealthy', t.unhealthy) + card('sum-pct', 'allocated %', pct + '%') +
    '</div>';
  if (t.simulated) {
    html += '<p><span class="badge sim">simulated</span> ' + t.simulated +
      ' node(s) report a declared inventory: no NVIDIA driver there, GPUs are simulated.</p>';
  }
  html += '<div class="legend"><span><span class="gpu alloc"></span>allocated (darker = busier)</span>' +
    '<span><span class="gpu"></span>idle</span><span><span class="gpu unhealthy"></span>unhealthy</span>' +
    '<span>hatched node: drained or lost</span><span>underlined groups: NVLink islands</span>' +
    '<span>click a node\u2019s name for its details</span></div>';
  html += '<div id="heatmap" class="scroll">' + topologyHtml(nodes) + '</div>';
  // Every unhealthy GPU with the agent's reason, and every node out of service with why.
  const sick = [];
  for (const n of nodes) {
    if (n.state !== 'ready') sick.push('<li data-node="' + esc(n.name) + '">' + esc(n.name) + ': ' + esc(n.state) +
      (n.drain_reason ? ' (' + esc(n.drain_reason) + ')' : '') + '</li>');
    for (const g of n.gpu_list) {
      if (!g.healthy) sick.push('<li data-gpu-reason="' + esc(n.name + '/' + g.index) + '">' + esc(n.name) + ' GPU ' + g.index +
        ': ' + esc(g.health_reason || 'unhealthy (no reason reported)') + '</li>');
    }
  }
  if (sick.length) html += '<h2>Needs attention</h2><ul id="attention">' + sick.join('') + '</ul>';
  html += '<div class="filters">Use over time: ' + rangeSelect('h-range', HISTORY_RANGES, historyRange()) + '</div>' +
    '<div id="gpu-detail" class="muted">Click a GPU for details.</div><div id="node-detail"></div>';
  $('#app').innerHTML = html;
  state.nodes = nodes;
  if (state.selectedGpu) showGpu(state.selectedGpu);
  if (state.selectedNode) showNode(state.selectedNode);
}

function showGpu(key) {
  state.selectedGpu = key;
  const [name, idx] = [key.slice(0, key.lastIndexOf('/')), Number(key.slice(key.lastIndexOf('/') + 1))];
  const node = (state.nodes || []).find((n) => n.name === name);
  const g = node && node.gpu_list[idx];
  const box = $('#gpu-detail');
  if (!g || !box) return;
  document.querySelectorAll('.gpu.sel').forEach((e) => e.classList.remove('sel'));
  const cell = document.querySelector('.gpu[data-gpu="' + CSS.escape(key) + '"]');
  if (cell) cell.classList.add('sel');
  box.classList.remove('muted');
  box.innerHTML = '<b>' + esc(name) + ' GPU ' + idx + '</b> (' + esc(node.gpu_model) + ', node ' + esc(node.state) + ')' +
    (node.simulated ? ' <span class="badge sim">simulated</span>' : '') + '<br>' +
    (g.allocated ? (g.jobs || [g.job]).map((id) => 'job <a href="#/jobs/' + esc(id) + '">' + esc(id) + '</a>').join(', ') : 'idle') +
    (g.shared_milli !== undefined ? ' · shared: ' + esc((g.shared_milli / 1000).toFixed(2)) + ' of the GPU in use' : '') +
    (g.mig !== undefined ? ' · MIG: ' + esc(g.mig || '(no instances)') + ' (* in use)' : '') +
    (g.healthy ? '' : ' · <span class="error" id="gpu-reason">unhealthy' + (g.health_reason ? ': ' + esc(g.health_reason) : '') +
      '</span>') +
    (g.utilization_pct !== undefined ? ' · utilisation ' + esc(g.utilization_pct) + '%' : '') +
    (g.memory_used !== undefined ? ' · memory used ' + esc(g.memory_used) : '') +
    (g.temperature_c !== undefined ? ' · ' + esc(g.temperature_c) + '°C' : '') +
    (g.power_w !== undefined ? ' · ' + esc(g.power_w) + ' W' : '') +
    '<div id="gpu-history"></div>';
  showGpuHistory(name, idx);
}

// A node's GPUs over the chosen period, a point a minute (an hour past two
// days): GET /v1/nodes/NAME/history, read again at most once a minute per
// node and period.
const GPU_HISTORY_MS = 60000;

async function nodeHistory(name) {
  const range = historyRange();
  const c = state.gpuHistory;
  if (!c || c.node !== name || c.range !== range || Date.now() - c.at >= GPU_HISTORY_MS) {
    const data = await api('/v1/nodes/' + encodeURIComponent(name) + '/history?since=' + encodeURIComponent(range));
    state.gpuHistory = { node: name, range, at: Date.now(), data };
  }
  return state.gpuHistory.data;
}

function rangeLabel(range) {
  const r = HISTORY_RANGES.find(([v]) => v === range);
  return r ? r[1] : 'last ' + range;
}

async function showGpuHistory(name, idx) {
  const data = await nodeHistory(name);
  const box = $('#gpu-history');
  if (!box || state.selectedGpu !== name + '/' + idx) return;
  const gpu = (data.gpus || []).find((g) => g.index === idx);
  box.innerHTML = gpuHistoryChart(gpu ? gpu.points : [], data);
}

// A node's GPUs as one: at each step, the mean activity over the samples of
// all its GPUs, their highest memory, and their energy and power summed.
function nodePoints(data) {
  const byT = new Map();
  for (const g of data.gpus || []) {
    for (const p of g.points) {
      const a = byT.get(p[0]) || [p[0], 0, 0, 0, 0, 0];
      if (p[2] >= 0) a[2] += p[2] * p[1];
      a[1] += p[1];
      a[3] = Math.max(a[3], p[3]);
      a[4] += p[4];
      a[5] += p[5];
      byT.set(p[0], a);
    }
  }
  return [...byT.values()].sort((x, y) => x[0] - y[0]).map((a) => [a[0], a[1], a[1] ? a[2] / a[1] : -1, a[3], a[4], a[5]]);
}

// Activity (solid, 0-100%) and power (dashed, to its highest) over the period.
function gpuHistoryChart(points, history, id, label) {
  id = id || 'gpu-history-chart';
  if (points.length < 2) {
    return '<p class="muted" id="' + esc(id.replace(/-chart$/, '')) + '-empty">Use over time appears after a few minutes of reports.</p>';
  }
  const w = 640, h = 160, l = 44, r = 12, t = 14, b = 28;
  const t0 = history.since, t1 = history.until;
  const x = (v) => l + (v - t0) / Math.max(1, t1 - t0) * (w - l - r);
  const maxPower = Math.max(1, ...points.map((p) => p[5]));
  const y = (v, max) => h - b - v / max * (h - t - b);
  const line = (pick, max, dash) => '<polyline fill="none" stroke="' + (dash ? '#d64533' : '#2f6fdf') + '" stroke-width="1.5"' +
    (dash ? ' stroke-dasharray="4 3"' : '') + ' points="' +
    points.filter((p) => pick(p) >= 0).map((p) => x(p[0]).toFixed(1) + ',' + y(pick(p), max).toFixed(1)).join(' ') + '"/>';
  let svg = '<svg class="chart" id="' + esc(id) + '" data-points="' + points.length + '" width="' + w + '" height="' + h +
    '" viewBox="0 0 ' + w + ' ' + h + '">';
  svg += '<text x="' + (l - 6) + '" y="' + (t + 4) + '" text-anchor="end" font-size="11">100%</text>';
  svg += '<text x="' + (l - 6) + '" y="' + (h - b) + '" text-anchor="end" font-size="11">0</text>';
  svg += '<line x1="' + l + '" y1="' + (h - b) + '" x2="' + (w - r) + '" y2="' + (h - b) + '" stroke="#999"/>';
  svg += line((p) => p[2], 100, false) + line((p) => p[5], maxPower, true);
  const mean = points.reduce((a, p) => a + Math.max(0, p[2]) * p[1], 0) / Math.max(1, points.reduce((a, p) => a + p[1], 0));
  const kwh = points.reduce((a, p) => a + p[4], 0) / 3.6e6;
  svg += '<text x="' + (w - r) + '" y="' + (h - 8) + '" text-anchor="end" font-size="11" fill="#777">solid: activity (mean ' +
    Math.round(mean) + '%) · dashed: power (peak ' + Math.round(maxPower) + ' W) · ' + kwh.toFixed(2) + ' kWh · ' +
    esc(label || rangeLabel(historyRange())) + '</text></svg>';
  return svg;
}

// One node: its state and why, its unhealthy GPUs, its GPUs' use over the
// period, and (for admins) drain with a reason or undrain.
async function showNode(name) {
  state.selectedNode = name;
  const node = (state.nodes || []).find((n) => n.name === name);
  const box = $('#node-detail');
  if (!node || !box) return;
  document.querySelectorAll('.node.sel').forEach((e) => e.classList.remove('sel'));
  const el = document.querySelector('.node[data-node="' + CSS.escape(name) + '"]');
  if (el) el.classList.add('sel');
  let html = '<h2>Node ' + esc(name) + '</h2><dl class="kv">' + kv('state', node.state) +
    kv('drained because', node.drain_reason) + kv('GPUs', node.gpus + ' x ' + node.gpu_model + ' (' + node.gpus_allocated +
    ' allocated, ' + node.gpus_unhealthy + ' unhealthy)') + kv('CPU', node.cpu_allocated + ' of ' + node.cpu) +
    kv('memory', node.memory_allocated + ' of ' + node.memory) + kv('last heartbeat', localTime(node.last_heartbeat)) +
    kv('labels', Object.entries(node.labels || {}).map(([k, v]) => k + '=' + v).join(', ')) + '</dl>';
  const sick = node.gpu_list.filter((g) => !g.healthy);
  if (sick.length) {
    html += '<ul id="node-unhealthy">' + sick.map((g) => '<li>GPU ' + g.index + ': ' +
      esc(g.health_reason || 'unhealthy (no reason reported)') + '</li>').join('') + '</ul>';
  }
  if (isAdmin()) {
    html += '<div class="actions" id="node-actions">' + (node.drained
      ? '<button id="node-undrain" data-action="undrain">Undrain</button>'
      : '<input id="drain-reason" data-keep placeholder="reason (shown to users)" maxlength="512">' +
        '<button id="node-drain" data-action="drain">Drain</button>') +
      ' <span id="node-action-result" class="muted">' + esc(state.nodeResult || '') + '</span></div>';
  }
  html += '<p class="muted">All its GPUs together:</p><div id="node-history"></div>';
  box.innerHTML = html;
  const data = await nodeHistory(name);
  const chart = $('#node-history');
  if (chart && state.selectedNode === name) chart.innerHTML = gpuHistoryChart(nodePoints(data), data, 'node-history-chart');
}

async function nodeAction(action) {
  const name = state.selectedNode;
  const reason = action === 'drain' ? ($('#drain-reason') || {}).value || '' : '';
  try {
    await apiPost('/v1/nodes/' + encodeURIComponent(name) + '/' + action, { reason });
    state.nodeResult = (action === 'drain' ? 'drained' : 'undrained') + ' ' + name;
  } catch (e) {
    if (e instanceof AuthError) throw e;
    state.nodeResult = action + ' refused: ' + e.message;
  }
  await refresh();
}

// ---- queues ---------------------------------------------------------------

// A queue's standing (GET /v1/queues "status"), as words and a colour.
const QUEUE_STATUS = {
  starved: 'starved: jobs wait below its guarantee',
  borrowing: 'borrowing beyond its quota',
  over_share: 'over its fair share',
  ok: 'within its share',
};

const QUEUE_RANGES = [['all', 'all kept'], ['15m', 'last 15 min'], ['1h', 'last hour'], ['6h', 'last 6 hours']];
function rangeSeconds(v) {
  const m = /^(\d+)([smhd])$/.exec(v);
  return m ? Number(m[1]) * { s: 1, m: 60, h: 3600, d: 86400 }[m[2]] : Infinity;
}

function historyChart(history, queues, range) {
  const cut = Date.now() - rangeSeconds(range || 'all') * 1000;
  const samples = (history.samples || []).filter((s) => Date.parse(s.t) >= cut);
  const w = 640, h = 220, l = 44, r = 12, t = 14, b = 28;
  if (samples.length < 2) return '<p class="muted">Usage over time appears after a few samples (one every ' +
    esc(history.interval_s) + ' s).</p>';
  const times = samples.map((s) => Date.parse(s.t));
  let max = 1;
  for (const s of samples) for (const q of Object.values(s.queues)) max = Math.max(max, q.gpus_allocated, q.pending);
  const x = (v) => l + (v - times[0]) / Math.max(1, times[times.length - 1] - times[0]) * (w - l - r);
  const y = (v) => h - b - v / max * (h - t - b);
  const colors = ['#2f6fdf', '#d64533', '#2ca05a', '#ff9f1a', '#8e44ad', '#16a2b8', '#7f8c8d'];
  let svg = '<svg class="chart" id="queue-history" data-samples="' + samples.length + '" width="' + w + '" height="' + h +
    '" viewBox="0 0 ' + w + ' ' + h + '">';
  svg += '<text x="' + (l - 6) + '" y="' + (t + 4) + '" text-anchor="end" font-size="11">' + max + '</text>';
  svg += '<text x="' + (l - 6) + '" y="' + (h - b) + '" text-anchor="end" font-size="11">0</text>';
  svg += '<line x1="' + l + '" y1="' + (h - b) + '" x2="' + (w - r) + '" y2="' + (h - b) + '" stroke="#999"/>';
  queues.forEach((q, i) => {
    const c = colors[i % colors.length];
    for (const [key, dash] of [['gpus_allocated', ''], ['pending', ' stroke-dasharray="4 3"']]) {
      const pts = samples.map((s, k) => x(times[k]).toFixed(1) + ',' + y((s.queues[q.name] || {})[key] || 0).toFixed(1));
      svg += '<polyline fill="none" stroke="' + c + '" stroke-width="1.5"' + dash + ' points="' + pts.join(' ') + '"/>';
    }
    svg += '<text x="' + (l + 8) + '" y="' + (t + 12 + 13 * i) + '" fill="' + c + '" font-size="11">' + esc(q.name) + '</text>';
  });
  const span = (times[times.length - 1] - times[0]) / 1000;
  const spanText = span < 120 ? Math.round(span) + ' s' : span < 7200 ? Math.round(span / 60) + ' min' : (span / 3600).toFixed(1) + ' h';
  svg += '<text x="' + (w - r) + '" y="' + (h - 8) + '" text-anchor="end" font-size="11" fill="#777">solid: GPUs held · dashed: pending jobs · last ' +
    spanText + '</text></svg>';
  return svg;
}

async function renderQueues() {
  const [{ queues }, history] = await Promise.all([api('/v1/queues'), api('/v1/queues/history')]);
  let max = 1;
  for (const q of queues) max = Math.max(max, q.gpus_allocated, q.fair_share_gpus, q.gpus_guaranteed);
  let html = '<h1>Queues</h1><div class="scroll"><table id="queues-table"><tr><th>queue</th><th>status</th><th class="num">weight</th>' +
    '<th class="num">guaranteed</th><th class="num">fair share</th><th class="num">allocated</th>' +
    '<th class="num">borrowed</th><th class="num">pending</th><th class="num">running</th><th>usage vs fair share</th></tr>';
  for (const q of queues) {
    const status = q.status || 'ok';
    const bar = '<div class="bar q-' + esc(status) + '" title="allocated ' + q.gpus_allocated + ' GPUs; fair share ' +
      q.fair_share_gpus.toFixed(1) + '; guaranteed ' + q.gpus_guaranteed + '"><div class="fill" style="width:' +
      (100 * q.gpus_allocated / max).toFixed(1) + '%"></div><div class="mark" style="left:' +
      (100 * q.fair_share_gpus / max).toFixed(1) + '%"></div>' +
      '<div class="guar" style="left:' + (100 * q.gpus_guaranteed / max).toFixed(1) + '%"></div></div>';
    html += '<tr data-queue="' + esc(q.name) + '" class="q-' + esc(status) + '"><td>' + esc(q.name) + '</td><td data-k="status">' +
      '<span class="badge q-' + esc(status) + '" title="' + esc(QUEUE_STATUS[status] || status) + '">' +
      esc(status.replace('_', ' ')) + '</span></td><td class="num">' + esc(q.weight) +
      '</td><td class="num" data-k="guaranteed">' + esc(q.gpus_guaranteed) + '</td><td class="num" data-k="fair">' +
      esc(q.fair_share_gpus.toFixed(1)) + '</td><td class="num" data-k="allocated">' + esc(q.gpus_allocated) +
      '</td><td class="num" data-k="borrowed">' + esc(q.gpus_borrowed) + '</td><td class="num" data-k="pending">' +
      esc(q.pending) + '</td><td class="num" data-k="running">' + esc(q.running) + '</td><td>' + bar + '</td></tr>';
  }
  html += '</table></div><p class="muted">Bar: GPUs held, coloured by status (red: starved below its guarantee; amber: ' +
    'borrowing beyond its quota; purple: over its fair share); black mark: fair share (weights down the queue tree); ' +
    'green: guarantee.</p>';
  const range = state.filters['q-range'] || 'all';
  html += '<h2>Over time</h2><div class="filters">' + rangeSelect('q-range', QUEUE_RANGES, range) + '</div>' +
    historyChart(history, queues, range);
  $('#app').innerHTML = html;
}

// ---- services -------------------------------------------------------------

async function renderServices() {
  const { router, services } = await api('/v1/services');
  let html = '<h1>Services</h1><div class="scroll"><table id="services-table"><tr><th>service</th><th class="num">job</th><th>state</th>' +
    '<th class="num">desired</th><th class="num">placed</th><th class="num">ready</th><th class="num">min-max</th>' +
    '<th class="num">in flight</th><th class="num">queued</th><th class="num">p99</th><th>last scaling</th><th>endpoint</th></tr>';
  for (const v of services) {
    const r = v.replicas, sig = v.signals || {};
    const last = v.rollout || (v.last_scale ? 'to ' + v.last_scale.to + ': ' + v.last_scale.reason : v.reason || '');
    html += '<tr data-service="' + esc(v.name) + '"><td>' + esc(v.name) + '</td><td class="num"><a href="#/jobs/' + esc(v.job) +
      '">' + esc(v.job) + '</a></td><td data-k="state">' + esc(v.state) + (v.panic ? ' (panic)' : '') + '</td>' +
      '<td class="num" data-k="desired">' + esc(r.desired) + '</td><td class="num" data-k="placed">' + esc(r.placed) +
      '</td><td class="num" data-k="ready">' + esc(r.ready) + '</td><td class="num">' + esc(r.min) + '-' + esc(r.max) +
      '</td><td class="num" data-k="inflight">' + esc(sig.inflight === undefined ? '' : sig.inflight) +
      '</td><td class="num">' + esc(sig.queued === undefined ? '' : sig.queued) + '</td><td class="num">' +
      esc(sig.requests ? sig.p99_ms.toFixed(1) + ' ms' : '') + '</td><td data-k="last">' + esc(last) + '</td><td>' +
      esc(v.url) + '</td></tr>';
  }
  html += '</table></div>';
  if (!services.length) html += '<p class="muted">No services (kind: service). See docs/services.md.</p>';
  if (!router) html += '<p class="muted">No router: start the server with --router HOST:PORT for endpoints.</p>';
  $('#app').innerHTML = html;
}

// ---- jobs -----------------------------------------------------------------

function reasonText(j) {
  if (j.state === 'pending' && j.pending_reason) {
    return j.pending_reason.code + ': ' + j.pending_reason.message +
      (j.expected_start ? ' (expected start ' + fromNow(j.expected_start) + ', ' + localTime(j.expected_start) + ')' : '');
  }
  return j.end_reason || j.last_requeue_reason || '';
}

// The jobs list's columns: header, sort key (a job's value to order by) and cell.
const JOB_COLUMNS = [
  ['id', (j) => j.id, (j) => '<td class="num">' + esc(j.id) + '</td>'],
  ['name', (j) => j.name, (j) => '<td>' + esc(j.name) + (j.array ? ' <span class="muted">[' + esc(j.array.index) + ']</span>' : '') +
    '</td>'],
  ['user', (j) => j.user, (j) => '<td>' + esc(j.user) + '</td>'],
  ['queue', (j) => j.queue, (j) => '<td>' + esc(j.queue) + '</td>'],
  ['state', (j) => j.state, (j) => '<td data-k="state">' + esc(j.state) +
    (j.flags ? ' <span class="flag" title="' + esc(j.flags.join('; ')) + '">⚑</span>' : '') + '</td>'],
  ['GPUs', (j) => j.gpus, (j) => '<td class="num">' + esc(j.gpu_shares || j.gpus) + '</td>'],
  ['submitted', (j) => j.submitted_at, (j) => '<td data-k="submitted" title="' + esc(fromNow(j.submitted_at)) + '">' +
    esc(localTime(j.submitted_at)) + '</td>'],
  ['waited', (j) => j.waited_s || 0, (j) => '<td class="num" data-k="waited">' + esc(dur(j.waited_s)) + '</td>'],
  ['elapsed', (j) => j.elapsed_s || 0, (j) => '<td class="num" data-k="elapsed">' + esc(dur(j.elapsed_s)) + '</td>'],
  ['limit', (j) => j.time_limit_s || 0, (j) => '<td class="num" data-k="limit">' + esc(j.time_limit || '') + '</td>'],
  ['restarts', (j) => j.restarts, (j) => '<td class="num">' + esc(j.restarts) + '</td>'],
  ['reason', (j) => reasonText(j), (j) => '<td class="reason">' + esc(reasonText(j)) + '</td>'],
];

async function renderJobs() {
  const { jobs } = await api('/v1/jobs?all=true&limit=5000');  // (the first 5000: a page, never a million)
  let table = $('#jobs-table');
  if (!table) {
    $('#app').innerHTML = '<h1>Jobs</h1><div class="filters">' +
      '<select id="f-state"><option value="">all states</option><option>pending</option><option>running</option>' +
      '<option>preempting</option><option>succeeded</option><option>failed</option><option>cancelled</option></select>' +
      '<select id="f-queue"><option value="">all queues</option></select>' +
      '<input id="f-text" placeholder="name or user"> <span id="jobs-count" class="muted"></span></div>' +
      '<div class="scroll"><table id="jobs-table"><thead><tr>' +
      JOB_COLUMNS.map(([h], i) => '<th data-sort="' + i + '"' + (['id', 'GPUs', 'waited', 'elapsed', 'limit', 'restarts']
        .includes(h) ? ' class="num"' : '') + ' title="sort">' + esc(h) + '</th>').join('') +
      '</tr></thead><tbody></tbody></table></div><div class="pager" id="jobs-pager"><button id="page-prev">‹ newer</button> ' +
      '<span id="page-text" class="muted"></span> <button id="page-next">older ›</button></div>';
    for (const id of ['f-state', 'f-queue', 'f-text']) {
      const el = $('#' + id);
      el.value = state.filters[id] || '';
      el.addEventListener('input', () => { state.filters[id] = el.value; state.page = 0; renderJobRows(state.jobs); });
    }
    table = $('#jobs-table');
  }
  const queues = [...new Set(jobs.map((j) => j.queue))].sort();
  const sel = $('#f-queue');
  for (const q of queues) {
    if (![...sel.options].some((o) => o.value === q)) sel.add(new Option(q, q));
  }
  state.jobs = jobs;
  renderJobRows(jobs);
}

function renderJobRows(jobs) {
  const st = state.filters['f-state'] || '', q = state.filters['f-queue'] || '';
  const text = (state.filters['f-text'] || '').toLowerCase();
  const shown = jobs.filter((j) => (!st || j.state === st) && (!q || j.queue === q) &&
    (!text || j.name.toLowerCase().includes(text) || j.user.toLowerCase().includes(text)));
  const col = JOB_COLUMNS.find(([h]) => h === state.sort.key) || JOB_COLUMNS[0];
  const dir = state.sort.dir;
  shown.sort((a, b) => {
    const x = col[1](a), y = col[1](b);
    return (x < y ? -1 : x > y ? 1 : a.id - b.id) * dir;
  });
  const pages = Math.max(1, Math.ceil(shown.length / PAGE_ROWS));
  state.page = Math.min(state.page, pages - 1);
  const page = shown.slice(state.page * PAGE_ROWS, (state.page + 1) * PAGE_ROWS);
  let rows = '';
  for (const j of page) {
    rows += '<tr class="click" data-job="' + esc(j.id) + '">' + JOB_COLUMNS.map((c) => c[2](j)).join('') + '</tr>';
  }
  $('#jobs-table tbody').innerHTML = rows;
  document.querySelectorAll('#jobs-table th[data-sort]').forEach((th) => {
    const on = JOB_COLUMNS[Number(th.dataset.sort)][0] === col[0];
    th.classList.toggle('sorted', on);
    th.dataset.dir = on ? (dir > 0 ? 'asc' : 'desc') : '';
  });
  $('#jobs-count').textContent = shown.length + ' of ' + jobs.length + ' jobs';
  $('#page-text').textContent = shown.length ? (state.page * PAGE_ROWS + 1) + '–' + (state.page * PAGE_ROWS + page.length) +
    ' of ' + shown.length : '';
  $('#page-prev').disabled = state.page === 0;
  $('#page-next').disabled = state.page >= pages - 1;
  $('#jobs-pager').hidden = pages <= 1;
}

function sortJobs(index) {
  const key = JOB_COLUMNS[index][0];
  state.sort = state.sort.key === key ? { key, dir: -state.sort.dir } : { key, dir: key === 'id' ? -1 : 1 };
  state.page = 0;
  renderJobRows(state.jobs || []);
}

// ---- one job --------------------------------------------------------------

// The actions a job's state allows: [verb, label, needs a second click].
function jobActions(job) {
  const out = [];
  const live = ['pending', 'running', 'preempting'].includes(job.state);
  if (job.state === 'pending' && !job.held) out.push(['hold', 'Hold', false]);
  if (job.held) out.push(['release', 'Release', false]);
  if (job.state === 'running') out.push(['requeue', 'Requeue', true]);
  if (live) out.push(['cancel', 'Cancel', true]);
  return out;
}

const ARMED_MS = 6000;  // a destructive action's second click must come within this

async function jobAction(id, verb, confirm) {
  if (confirm && !(state.armed === id + '/' + verb && Date.now() - state.armedAt < ARMED_MS)) {
    state.armed = id + '/' + verb;
    state.armedAt = Date.now();
    return refresh();
  }
  state.armed = '';
  try {
    const j = await apiPost('/v1/jobs/' + encodeURIComponent(id) + '/' + verb);
    state.jobResult = { id, text: verb + ': job ' + id + ' is now ' + j.state + (j.held ? ' (held)' : '') };
  } catch (e) {
    if (e instanceof AuthError) throw e;
    state.jobResult = { id, text: verb + ' refused: ' + e.message, error: true };
  }
  await refresh();
}

// The log shown on a job's page: every replica's last lines, or one
// replica's log followed from where the page last read it (?offset=).
const LOG_TAIL = 1000, LOG_KEEP = 1 << 20;

async function readLogs(job) {
  let L = state.logs;
  if (!L || L.job !== String(job.id)) {
    L = state.logs = { job: String(job.id), tab: '', offset: 0, text: '', follow: true, read: false, error: '' };
  }
  if (L.read && !L.follow) return L;
  const base = '/v1/jobs/' + encodeURIComponent(job.id) + '/logs';
  try {
    if (!L.tab) {
      L.text = await api(base + '?tail=' + LOG_TAIL);
    } else {
      const res = await apiRaw(base + '?task=' + encodeURIComponent(L.tab) + '&offset=' + L.offset);
      const size = Number(res.headers.get('Rota-Log-Size') || 0);
      const body = await res.text();
      L.text = size < L.offset ? body : L.text + body;  // shorter than we read: it started over
      if (L.text.length > LOG_KEEP) L.text = L.text.slice(L.text.length - LOG_KEEP);
      L.offset = size;
    }
    L.error = '';
  } catch (e) {
    if (e instanceof AuthError) throw e;
    L.error = e.message;
  }
  L.read = true;
  return L;
}

// A pending job's start in the what-if projection (GET /v1/whatif, as `rota
// jobs --start`): the whole queue projected forward with the server's
// profile. Read again at most every 30 s (a projection costs the server up
// to seconds); null while none is known (busy: 429, or not within the horizon).
async function projectedStart(id) {
  const p = state.projection;
  if (!p || Date.now() - p.at > (p.failed ? 5000 : 30000)) {
    try {
      state.projection = { at: Date.now(), jobs: (await api('/v1/whatif')).baseline.jobs };
    } catch (e) {
      if (e instanceof AuthError) throw e;
      state.projection = { at: Date.now(), jobs: [], failed: true };  // (busy: try again in 5 s)
    }
  }
  return state.projection.jobs.find((j) => String(j.id) === String(id)) || null;
}

async function renderJob(id) {
  const [job, nodesReply, events] = await Promise.all([api('/v1/jobs/' + encodeURIComponent(id)), api('/v1/nodes'),
    api('/v1/jobs/' + encodeURIComponent(id) + '/events')]);
  const projected = job.state === 'pending' && !job.held ? await projectedStart(job.id) : null;
  const L = await readLogs(job);
  const when = (t) => (t ? localTime(t) + ' (' + fromNow(t) + ')' : '');
  const live = job.state === 'running' || job.state === 'preempting';
  const left = live && job.time_limit_s ? Math.max(0, job.time_limit_s - (job.elapsed_s || 0)) : undefined;
  let html = '<p><a href="#/jobs">← jobs</a></p><h1 id="job-title">' + esc(job.name) + ' <span class="muted">#' + esc(job.id) +
    '</span></h1>';
  if (mayAct(job)) {
    const acts = jobActions(job);
    const result = state.jobResult && state.jobResult.id === String(job.id) ? state.jobResult : null;
    if (acts.length || result) {
      html += '<div class="actions" id="job-actions">' + acts.map(([verb, label, confirm]) => {
        const armed = state.armed === job.id + '/' + verb && Date.now() - state.armedAt < ARMED_MS;
        return '<button data-job-action="' + verb + '" data-confirm="' + (confirm ? 1 : 0) + '"' +
          (armed ? ' class="armed"' : '') + '>' + (armed ? 'Confirm: ' + label.toLowerCase() + ' job ' + esc(job.id) : label) +
          '</button>';
      }).join(' ') + (result ? ' <span id="job-action-result" class="' + (result.error ? 'error' : 'muted') + '">' +
        esc(result.text) + '</span>' : '') + '</div>';
    }
  }
  html += '<dl class="kv">' + kv('state', job.state + (job.held ? ' (held)' : '')) + kv('user', job.user) +
    kv('queue', job.queue) + kv('priority', job.priority) + kv('GPUs', job.gpu_shares || job.gpus) + kv('replicas', job.replicas) +
    (job.array ? kv('array', 'element ' + job.array.index + ' of ' + job.array.count + ' (array ' + job.array.id + ')') : '') +
    kv('submitted', when(job.submitted_at), job.submitted_at) + kv('started', when(job.started_at), job.started_at) +
    kv('finished', when(job.finished_at), job.finished_at) +
    kv(job.state === 'pending' ? 'waiting for' : 'waited', dur(job.waited_s)) +
    kv(live ? 'running for' : 'ran', dur(job.elapsed_s)) + kv('time limit', job.time_limit) +
    kv('time left', left === undefined ? '' : dur(left)) + kv('restarts', job.restarts) +
    kv('last requeue', job.last_requeue_reason) + kv('ended because', job.end_reason) +
    (job.last_checkpoint ? kv('last checkpoint', localTime(job.last_checkpoint.at) + (job.last_checkpoint.path ? '  ' + job.last_checkpoint.path : '')) : '') +
    (job.elastic ? kv('elastic', job.elastic.running + ' running of ' + job.elastic.min_replicas + '..' +
                                 job.elastic.replicas + ' replicas (' + job.elastic.resizes + ' resizes)') : '');
  if (job.pending_reason) {
    html += kv('pending', job.pending_reason.code + ': ' + job.pending_reason.message) +
      kv('expected start', job.expected_start ? fromNow(job.expected_start) + ' (' + localTime(job.expected_start) + ')' : '') +
      kv('projected start', projected && projected.expected_start
        ? (projected.estimate ? '~ ' : '') + fromNow(projected.expected_start) + ' (' + localTime(projected.expected_start) + ')'
        : '', projected && projected.estimate ? 'an estimate: a job ahead has no time limit (rota whatif)' : 'rota whatif');
  }
  if (job.flags) html += kv('right-sizing', job.flags.join('; '));
  html += '</dl>';
  if (job.spec) {
    html += '<details id="job-spec"' + (state.specOpen ? ' open' : '') + '><summary>Spec (as submitted, with defaults)</summary>' +
      '<pre>' + esc(JSON.stringify(job.spec, null, 2)) + '</pre></details>';
  }
  const held = new Set((job.placement || []).flatMap((p) => p.gpus.map((g) => p.node + '/' + g)));
  if (held.size) {
    // Only the racks the gang touches, with its GPUs outlined.
    const nodes = nodesReply.nodes;
    const racks = new Set(nodes.filter((n) => job.placement.some((p) => p.node === n.name)).map((n) => n.labels.rack));
    html += '<h2>Placement</h2><div class="scroll"><table id="job-placement"><tr><th>task</th><th class="num">replica</th>' +
      '<th>node</th><th>GPUs</th><th>share</th><th>isolation</th></tr>';
    for (const p of job.placement) {
      const share = p.mig ? 'MIG ' + p.mig : p.gpu_fraction ? p.gpu_fraction + ' of a GPU' : 'whole';
      html += '<tr><td>' + esc(p.task) + '</td><td class="num">' + esc(p.replica) + '</td><td>' + esc(p.node) + '</td><td>' +
        esc(p.gpus.join(', ')) + '</td><td>' + esc(share) + '</td><td>' + esc(p.isolation || 'exclusive') + '</td></tr>';
    }
    html += '</table></div><div id="job-topology" class="scroll">' +
      topologyHtml(nodes.filter((n) => racks.has(n.labels.rack)), (n, g) => held.has(n.name + '/' + g.index)) + '</div>' +
      '<p class="muted">Outlined: this job\'s GPUs.</p>';
  }
  // Events, an attempt at a time: each start ("bound") opens one.
  html += '<h2>Events</h2><ul id="job-events">';
  let attempt = 0;
  for (const e of events.events) {
    if (e.event === 'bound') attempt++;
    html += '<li data-attempt="' + attempt + '"' + (e.event === 'bound' ? ' class="attempt"' : '') + '><span class="muted">' +
      esc(e.at ? localTime(e.at) : '') + '</span> <b>' + esc(e.event) + '</b> ' + esc(e.detail) + '</li>';
  }
  // Logs: all replicas, or one replica's tab followed as it grows.
  const tabs = [''].concat((job.placement || []).map((p) => p.task + '-' + p.replica));
  if (L.tab && !tabs.includes(L.tab)) tabs.push(L.tab);
  html += '</ul><h2>Logs</h2><div class="tabs" id="log-tabs">' + tabs.map((t) => '<button data-log-tab="' + esc(t) + '"' +
    (t === L.tab ? ' class="on"' : '') + '>' + esc(t || 'all replicas') + '</button>').join('') +
    ' <label><input type="checkbox" id="log-follow"' + (L.follow ? ' checked' : '') + '> follow</label></div>' +
    '<pre id="job-logs">' + esc(L.error ? '(' + L.error + ')' : L.text || '(no output yet)') + '</pre>';
  const before = $('#job-logs');
  const scroll = before && $('#app').dataset.job === String(job.id) ? before.scrollTop : null;
  $('#app').innerHTML = html;
  $('#app').dataset.job = String(job.id);
  const pre = $('#job-logs');
  if (L.follow) pre.scrollTop = pre.scrollHeight;
  else if (scroll !== null) pre.scrollTop = scroll;
}

// ---- wiring ---------------------------------------------------------------

document.addEventListener('click', (ev) => {
  const act = ev.target.closest('button[data-job-action]');
  if (act) return jobAction(currentPage().id, act.dataset.jobAction, act.dataset.confirm === '1');
  const tab = ev.target.closest('button[data-log-tab]');
  if (tab && state.logs) {
    Object.assign(state.logs, { tab: tab.dataset.logTab, offset: 0, text: '', read: false });
    return refresh();
  }
  const nodeAct = ev.target.closest('#node-actions button[data-action]');
  if (nodeAct) return nodeAction(nodeAct.dataset.action);
  const th = ev.target.closest('#jobs-table th[data-sort]');
  if (th) return sortJobs(Number(th.dataset.sort));
  if (ev.target.closest('#page-prev')) { state.page = Math.max(0, state.page - 1); return renderJobRows(state.jobs || []); }
  if (ev.target.closest('#page-next')) { state.page++; return renderJobRows(state.jobs || []); }
  const nodeName = ev.target.closest('[data-node-select]');
  if (nodeName && $('#node-detail')) {
    if (state.selectedNode !== nodeName.dataset.nodeSelect) state.nodeResult = '';
    return showNode(nodeName.dataset.nodeSelect);
  }
  const gpu = ev.target.closest('.gpu[data-gpu]');
  if (gpu && $('#gpu-detail')) return showGpu(gpu.dataset.gpu);
  const row = ev.target.closest('tr[data-job]');
  if (row) location.hash = '#/jobs/' + encodeURIComponent(row.dataset.job);
});
document.addEventListener('input', (ev) => {
  const id = ev.target.id;
  if (id === 'h-range' || id === 'q-range') {
    state.filters[id] = ev.target.value;
    refresh();
  } else if (id === 'log-follow' && state.logs) {
    state.logs.follow = ev.target.checked;
  }
});
// <details> does not bubble its toggle: caught on the way down.
document.addEventListener('toggle', (ev) => { if (ev.target.id === 'job-spec') state.specOpen = ev.target.open; }, true);
$('#login-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  login($('#token').value);
});
$('#logout').addEventListener('click', () => showLogin(''));
window.addEventListener('hashchange', route);

if (state.token) login(state.token);
else showLogin('');
