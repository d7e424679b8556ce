// rota dashboard: cluster heat map, queues, jobs. Every number comes from the
// REST API with the token the user gives; nothing is shown without one.
// Plain JavaScript, no build step: served from the binary.
'use strict';

const REFRESH_MS = 2000;
const state = { token: sessionStorage.getItem('rota.token') || '', timer: null, selectedGpu: null, filters: {} };

function esc(v) {
  return String(v === undefined || v === null ? '' : v)
    .replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}
const $ = (sel) => document.querySelector(sel);

class AuthError extends Error {}

async function api(path) {
  const res = await fetch(path, { headers: { Authorization: 'Bearer ' + state.token } });
  if (res.status === 401) throw new AuthError('token not accepted');
  if (!res.ok) {
    let msg = res.status + ' ' + res.statusText;
    try { msg = (await res.json()).error.message || msg; } catch (e) { /* not JSON */ }
    throw new Error(msg);
  }
  const type = res.headers.get('Content-Type') || '';
  return type.includes('json') ? res.json() : res.text();
}

// ---- login ----------------------------------------------------------------

function showLogin(message) {
  state.token = '';
  sessionStorage.removeItem('rota.token');
  clearInterval(state.timer);
  $('#app').hidden = true;
  $('#app').innerHTML = '';
  $('#nav').hidden = true;
  $('#logout').hidden = true;
  $('#updated').textContent = '';
  $('#login-view').hidden = false;
  $('#login-error').textContent = message || '';
}

async function login(token) {
  state.token = token.trim();
  try {
    await api('/v1/queues');
  } catch (e) {
    showLogin(e instanceof AuthError ? 'That token was not accepted.' : 'Cannot reach the server: ' + e.message);
    return;
  }
  sessionStorage.setItem('rota.token', state.token);
  $('#login-view').hidden = true;
  $('#app').hidden = false;
  $('#nav').hidden = false;
  $('#logout').hidden = false;
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
  $('#app').innerHTML = '<p class="muted">Loading…</p>';
  $('#app').dataset.page = p.page;
  refresh();
}

async function refresh() {
  if (!state.token) return;
  const p = currentPage();
  try {
    if (p.page === 'cluster') await renderCluster();
    else if (p.page === 'queues') await renderQueues();
    else if (p.page === 'jobs') await renderJobs();
    else if (p.page === 'services') await renderServices();
    else if (p.page === 'reports') await renderReports();
    else await renderJob(p.id);
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
  let svg = '<svg class="chart" id="report-chart" width="' + w + '" height="' + h + '">';
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
    '</span></div>' + reportChart(rep) + '<table id="report-table"><tr><th>' + esc(rep.by) + '</th><th class="num">jobs</th>' +
    '<th class="num">GPU-hours</th><th class="num">used</th><th class="num">idle</th><th class="num">oversized</th>' +
    '<th class="num">efficiency</th><th class="num">kWh</th>' +
    (priced ? '<th class="num">cost' + (rep.currency ? ' (' + esc(rep.currency) + ')' : '') + '</th><th class="num">idle cost</th>' : '') +
    '<th>held vs used</th></tr>';
  for (const r of rep.rows) html += reportRow(r, max, priced);
  html += reportRow(rep.total, Math.max(max, rep.total.gpu_hours), priced).replace('<tr ', '<tr class="total" ');
  html += '</table><p class="muted">Used: GPU-hours held times the GPUs\u2019 measured activity. Idle: held with the GPU under ' +
    'the idle threshold. Oversized: what the shape each job family fits would have freed.</p>';
  html += '<h2>Right-sizing</h2>';
  if (!rep.under_users.length) {
    html += '<p class="muted" id="under-none">No job family under-uses its GPUs (or none has been measured long enough).</p>';
  } else {
    html += '<table id="under-table"><tr><th>family</th><th class="num">jobs</th><th class="num">GPU-hours</th>' +
      '<th class="num">oversized</th><th>fits</th><th>why</th></tr>';
    for (const u of rep.under_users) {
      html += '<tr data-family="' + esc(u.family) + '"><td>' + esc(u.family) + '</td><td class="num">' + esc(u.jobs) +
        '</td><td class="num">' + esc(u.gpu_hours) + '</td><td class="num">' + esc(u.gpu_hours_oversized) +
        '</td><td data-k="shape"><code>' + esc(u.shape) + '</code></td><td>' + esc(u.summary) + '</td></tr>';
    }
    html += '</table>';
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
  if (!g.healthy) parts.push('unhealthy');
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
  return '<div class="node ' + esc(node.state) + '" data-node="' + esc(node.name) + '"><div class="name">' +
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
    '<span>hatched node: drained or lost</span><span>underlined groups: NVLink islands</span></div>';
  html += '<div id="heatmap">' + topologyHtml(nodes) + '</div><div id="gpu-detail" class="muted">Click a GPU for details.</div>';
  $('#app').innerHTML = html;
  state.nodes = nodes;
  if (state.selectedGpu) showGpu(state.selectedGpu);
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
    (g.healthy ? '' : ' · <span class="error">unhealthy</span>') +
    (g.utilization_pct !== undefined ? ' · utilisation ' + esc(g.utilization_pct) + '%' : '') +
    (g.memory_used !== undefined ? ' · memory used ' + esc(g.memory_used) : '') +
    (g.temperature_c !== undefined ? ' · ' + esc(g.temperature_c) + '°C' : '') +
    (g.power_w !== undefined ? ' · ' + esc(g.power_w) + ' W' : '') +
    '<div id="gpu-history"></div>';
  showGpuHistory(name, idx);
}

// The GPU's last 24 hours, a point a minute: GET /v1/nodes/NAME/history,
// read again at most once a minute per node.
const GPU_HISTORY_MS = 60000;

async function showGpuHistory(name, idx) {
  const cached = state.gpuHistory && state.gpuHistory.node === name && Date.now() - state.gpuHistory.at < GPU_HISTORY_MS;
  if (!cached) {
    const data = await api('/v1/nodes/' + encodeURIComponent(name) + '/history?since=24h');
    state.gpuHistory = { node: name, at: Date.now(), data };
  }
  const box = $('#gpu-history');
  if (!box || state.selectedGpu !== name + '/' + idx) return;
  const gpu = (state.gpuHistory.data.gpus || []).find((g) => g.index === idx);
  box.innerHTML = gpuHistoryChart(gpu ? gpu.points : [], state.gpuHistory.data);
}

// Activity (solid, 0-100%) and power (dashed, to its highest) over the period.
function gpuHistoryChart(points, history) {
  if (points.length < 2) {
    return '<p class="muted" id="gpu-history-empty">Its use over time appears after a few minutes of reports.</p>';
  }
  const w = 640, h = 160, l = 44, r = 12, t = 14, b = 28;
  const t0 = history.since, t1 = history.until;
  const x = (v) => l + (v - t0) / Math.max(1, t1 - t0) * (w - l - r);
  const maxPower = Math.max(1, ...points.map((p) => p[5]));
  const y = (v, max) => h - b - v / max * (h - t - b);
  const line = (pick, max, dash) => '<polyline fill="none" stroke="' + (dash ? '#d64533' : '#2f6fdf') + '" stroke-width="1.5"' +
    (dash ? ' stroke-dasharray="4 3"' : '') + ' points="' +
    points.filter((p) => pick(p) >= 0).map((p) => x(p[0]).toFixed(1) + ',' + y(pick(p), max).toFixed(1)).join(' ') + '"/>';
  let svg = '<svg class="chart" id="gpu-history-chart" data-points="' + points.length + '" width="' + w + '" height="' + h + '">';
  svg += '<text x="' + (l - 6) + '" y="' + (t + 4) + '" text-anchor="end" font-size="11">100%</text>';
  svg += '<text x="' + (l - 6) + '" y="' + (h - b) + '" text-anchor="end" font-size="11">0</text>';
  svg += '<line x1="' + l + '" y1="' + (h - b) + '" x2="' + (w - r) + '" y2="' + (h - b) + '" stroke="#999"/>';
  svg += line((p) => p[2], 100, false) + line((p) => p[5], maxPower, true);
  const mean = points.reduce((a, p) => a + Math.max(0, p[2]) * p[1], 0) / Math.max(1, points.reduce((a, p) => a + p[1], 0));
  const kwh = points.reduce((a, p) => a + p[4], 0) / 3.6e6;
  svg += '<text x="' + (w - r) + '" y="' + (h - 8) + '" text-anchor="end" font-size="11" fill="#777">solid: activity (mean ' +
    Math.round(mean) + '%) · dashed: power (peak ' + maxPower + ' W) · ' + kwh.toFixed(2) + ' kWh · last 24 h</text></svg>';
  return svg;
}

// ---- queues ---------------------------------------------------------------

function historyChart(history, queues) {
  const samples = history.samples || [];
  const w = 640, h = 220, l = 44, r = 12, t = 14, b = 28;
  if (samples.length < 2) return '<p class="muted">Usage over time appears after a few samples (one every ' +
    esc(history.interval_s) + ' s).</p>';
  const times = samples.map((s) => Date.parse(s.t));
  let max = 1;
  for (const s of samples) for (const q of Object.values(s.queues)) max = Math.max(max, q.gpus_allocated, q.pending);
  const x = (v) => l + (v - times[0]) / Math.max(1, times[times.length - 1] - times[0]) * (w - l - r);
  const y = (v) => h - b - v / max * (h - t - b);
  const colors = ['#2f6fdf', '#d64533', '#2ca05a', '#ff9f1a', '#8e44ad', '#16a2b8', '#7f8c8d'];
  let svg = '<svg class="chart" id="queue-history" width="' + w + '" height="' + h + '">';
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
  let html = '<h1>Queues</h1><table id="queues-table"><tr><th>queue</th><th class="num">weight</th>' +
    '<th class="num">guaranteed</th><th class="num">fair share</th><th class="num">allocated</th>' +
    '<th class="num">borrowed</th><th class="num">pending</th><th class="num">running</th><th>usage vs fair share</th></tr>';
  for (const q of queues) {
    const bar = '<div class="bar" title="allocated ' + q.gpus_allocated + ' GPUs; fair share ' + q.fair_share_gpus.toFixed(1) +
      '; guaranteed ' + q.gpus_guaranteed + '"><div class="fill" style="width:' + (100 * q.gpus_allocated / max).toFixed(1) +
      '%"></div><div class="mark" style="left:' + (100 * q.fair_share_gpus / max).toFixed(1) + '%"></div>' +
      '<div class="guar" style="left:' + (100 * q.gpus_guaranteed / max).toFixed(1) + '%"></div></div>';
    html += '<tr data-queue="' + esc(q.name) + '"><td>' + esc(q.name) + '</td><td class="num">' + esc(q.weight) +
      '</td><td class="num" data-k="guaranteed">' + esc(q.gpus_guaranteed) + '</td><td class="num" data-k="fair">' +
      esc(q.fair_share_gpus.toFixed(1)) + '</td><td class="num" data-k="allocated">' + esc(q.gpus_allocated) +
      '</td><td class="num" data-k="borrowed">' + esc(q.gpus_borrowed) + '</td><td class="num" data-k="pending">' +
      esc(q.pending) + '</td><td class="num" data-k="running">' + esc(q.running) + '</td><td>' + bar + '</td></tr>';
  }
  html += '</table><p class="muted">Bar: GPUs held; black mark: fair share (weights down the queue tree); green: guarantee.</p>';
  html += '<h2>Over time</h2>' + historyChart(history, queues);
  $('#app').innerHTML = html;
}

// ---- services -------------------------------------------------------------

async function renderServices() {
  const { router, services } = await api('/v1/services');
  let html = '<h1>Services</h1><table id="services-table"><tr><th>service</th><th class="num">job</th><th>state</th>' +
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
  html += '</table>';
  if (!services.length) html += '<p class="muted">No services (kind: service). See docs/services.md.</p>';
  if (!router) html += '<p class="muted">No router: start the server with --router HOST:PORT for endpoints.</p>';
  $('#app').innerHTML = html;
}

// ---- jobs -----------------------------------------------------------------

function reasonText(j) {
  if (j.state === 'pending' && j.pending_reason) {
    return j.pending_reason.code + ': ' + j.pending_reason.message + (j.expected_start ? ' (expected start ' + j.expected_start + ')' : '');
  }
  return j.end_reason || j.last_requeue_reason || '';
}

async function renderJobs() {
  const { jobs } = await api('/v1/jobs?all=true&limit=5000');  // (the first 5000: a page, never a million)
  let table = $('#jobs-table');
  if (!table) {
    $('#app').innerHTML = '<h1>Jobs</h1><div class="filters">' +
      '<select id="f-state"><option value="">all states</option><option>pending</option><option>running</option>' +
      '<option>preempting</option><option>succeeded</option><option>failed</option><option>cancelled</option></select>' +
      '<select id="f-queue"><option value="">all queues</option></select>' +
      '<input id="f-text" placeholder="name or user"> <span id="jobs-count" class="muted"></span></div>' +
      '<table id="jobs-table"><thead><tr><th class="num">id</th><th>name</th><th>user</th><th>queue</th><th>state</th>' +
      '<th class="num">GPUs</th><th>submitted</th><th class="num">restarts</th><th>reason</th></tr></thead><tbody></tbody></table>';
    for (const id of ['f-state', 'f-queue', 'f-text']) {
      const el = $('#' + id);
      el.value = state.filters[id] || '';
      el.addEventListener('input', () => { state.filters[id] = el.value; renderJobRows(state.jobs); });
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
  let rows = '';
  for (const j of shown) {
    rows += '<tr class="click" data-job="' + esc(j.id) + '"><td class="num">' + esc(j.id) + '</td><td>' + esc(j.name) +
      '</td><td>' + esc(j.user) + '</td><td>' + esc(j.queue) + '</td><td data-k="state">' + esc(j.state) +
      (j.flags ? ' <span class="flag" title="' + esc(j.flags.join('; ')) + '">⚑</span>' : '') + '</td><td class="num">' +
      esc(j.gpus) + '</td><td>' + esc(j.submitted_at) + '</td><td class="num">' + esc(j.restarts) + '</td><td>' +
      esc(reasonText(j)) + '</td></tr>';
  }
  $('#jobs-table tbody').innerHTML = rows;
  $('#jobs-count').textContent = shown.length + ' of ' + jobs.length + ' jobs';
}

async function renderJob(id) {
  const [job, nodesReply, events] = await Promise.all([api('/v1/jobs/' + encodeURIComponent(id)), api('/v1/nodes'),
    api('/v1/jobs/' + encodeURIComponent(id) + '/events')]);
  let logs = '';
  try {
    logs = await api('/v1/jobs/' + encodeURIComponent(id) + '/logs');
  } catch (e) {
    if (e instanceof AuthError) throw e;
    logs = '(' + e.message + ')';
  }
  const kv = (k, v) => (v === undefined || v === '' ? '' : '<dt>' + esc(k) + '</dt><dd data-k="' + esc(k) + '">' + esc(v) + '</dd>');
  let html = '<p><a href="#/jobs">← jobs</a></p><h1 id="job-title">' + esc(job.name) + ' <span class="muted">#' + esc(job.id) +
    '</span></h1><dl class="kv">' + kv('state', job.state) + kv('user', job.user) + kv('queue', job.queue) +
    kv('priority', job.priority) + kv('GPUs', job.gpus) + kv('replicas', job.replicas) + kv('submitted', job.submitted_at) +
    kv('started', job.started_at) + kv('finished', job.finished_at) + kv('restarts', job.restarts) +
    kv('last requeue', job.last_requeue_reason) + kv('ended because', job.end_reason) +
    (job.last_checkpoint ? kv('last checkpoint', job.last_checkpoint.at + '  ' + job.last_checkpoint.path) : '') +
    (job.elastic ? kv('elastic', job.elastic.running + ' running of ' + job.elastic.min_replicas + '..' +
                                 job.elastic.replicas + ' replicas (' + job.elastic.resizes + ' resizes)') : '');
  if (job.pending_reason) {
    html += kv('pending', job.pending_reason.code + ': ' + job.pending_reason.message) + kv('expected start', job.expected_start);
  }
  if (job.flags) html += kv('right-sizing', job.flags.join('; '));
  html += '</dl>';
  const held = new Set((job.placement || []).flatMap((p) => p.gpus.map((g) => p.node + '/' + g)));
  if (held.size) {
    // Only the racks the gang touches, with its GPUs outlined.
    const nodes = nodesReply.nodes;
    const racks = new Set(nodes.filter((n) => job.placement.some((p) => p.node === n.name)).map((n) => n.labels.rack));
    html += '<h2>Placement</h2><table id="job-placement"><tr><th>task</th><th class="num">replica</th><th>node</th><th>GPUs</th>' +
      '<th>share</th><th>isolation</th></tr>';
    for (const p of job.placement) {
      const share = p.mig ? 'MIG ' + p.mig : p.gpu_fraction ? p.gpu_fraction + ' of a GPU' : 'whole';
      html += '<tr><td>' + esc(p.task) + '</td><td class="num">' + esc(p.replica) + '</td><td>' + esc(p.node) + '</td><td>' +
        esc(p.gpus.join(', ')) + '</td><td>' + esc(share) + '</td><td>' + esc(p.isolation || 'exclusive') + '</td></tr>';
    }
    html += '</table><div id="job-topology">' +
      topologyHtml(nodes.filter((n) => racks.has(n.labels.rack)), (n, g) => held.has(n.name + '/' + g.index)) + '</div>' +
      '<p class="muted">Outlined: this job\'s GPUs.</p>';
  }
  html += '<h2>Events</h2><ul id="job-events">';
  for (const e of events.events) html += '<li>' + esc(e.at) + ' <b>' + esc(e.event) + '</b> ' + esc(e.detail) + '</li>';
  html += '</ul><h2>Logs</h2><pre id="job-logs">' + esc(logs || '(no output yet)') + '</pre>';
  $('#app').innerHTML = html;
}

// ---- wiring ---------------------------------------------------------------

document.addEventListener('click', (ev) => {
  const gpu = ev.target.closest('.gpu[data-gpu]');
  if (gpu && $('#gpu-detail')) return showGpu(gpu.dataset.gpu);
  const row = ev.target.closest('tr[data-job]');
  if (row) location.hash = '#/jobs/' + encodeURIComponent(row.dataset.job);
});
$('#login-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  login($('#token').value);
});
$('#logout').addEventListener('click', () => showLogin(''));
window.addEventListener('hashchange', route);

if (state.token) login(state.token);
else showLogin('');
