"use strict";
const state = { token: null, queue: null, samples: [], last: null, history: [], historyLoaded: false, reportRun: 0, lookupRun: 0 };
const $ = (id) => document.getElementById(id);
const el = (tag, text, cls) => { const e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e; };

// The URL's fragment (never sent to the server) may carry token=, queue=, publisher=, customer=,
// and for the reports from=, to= (yyyy-mm-dd) and by= (day, week, month).
const link = new URLSearchParams(location.hash.slice(1));
function start() {
  if (link.get("token")) { sessionStorage.setItem("entitle-token", link.get("token")); history.replaceState(null, "", location.pathname); }
  state.token = sessionStorage.getItem("entitle-token");
  if (!state.token) { $("login").hidden = false; return; }
  $("main").hidden = false;
  if (link.get("queue")) state.queue = link.get("queue");
  if (link.get("publisher")) $("publisher").value = link.get("publisher");
  setupReports();
  loadReports();
  if (link.get("customer")) { $("customer").value = link.get("customer"); lookup(); }
  // The queue charts start from the last day's history; the live samples follow it. A slow
  // history does not hold the tables back for long (it is merged when it comes).
  const seeded = loadHistory();
  Promise.race([seeded, new Promise((resolve) => setTimeout(resolve, 1500))]).then(() => {
    refresh();
    setInterval(refresh, 2000);
  });
}
$("login-form").addEventListener("submit", (e) => {
  e.preventDefault(); sessionStorage.setItem("entitle-token", $("token-input").value); $("login").hidden = true; start();
});

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: { "Authorization": "Bearer " + state.token, "Content-Type": "application/json" } });
  const body = await response.json().catch(() => ({}));
  if (response.status === 401) { sessionStorage.removeItem("entitle-token"); }
  if (!response.ok) throw new Error(body.message || response.statusText || "HTTP " + response.status);
  return body;
}

const sum = (counters, prefix) => Object.entries(counters || {}).filter(([k]) => k.startsWith(prefix)).reduce((a, [, v]) => a + v, 0);

async function refresh() {
  try {
    const { queues } = await api("/v1/queues");
    renderQueues(queues);
    const names = queues.map((q) => q.name);
    if (!state.queue || !names.includes(state.queue)) state.queue = names.includes("default") ? "default" : names[0];
    const select = $("queue");
    if (select.options.length !== names.length || [...select.options].some((o, i) => o.value !== names[i])) {
      select.replaceChildren(...names.map((n) => { const o = el("option", n); o.value = n; return o; }));
    }
    select.value = state.queue;
    const q = queues.find((x) => x.name === state.queue);
    if (q) sample(q);
    if (state.queue) {
      const [dead, recent] = await Promise.all([
        api(`/v1/admin/queues/${encodeURIComponent(state.queue)}/dead`),
        api(`/v1/admin/queues/${encodeURIComponent(state.queue)}/recent?limit=15`),
      ]);
      renderDead(dead.jobs); renderRecent(recent.jobs);
    }
    $("status").textContent = "updated " + new Date().toLocaleTimeString();
    $("status").className = "status";
  } catch (error) {
    $("status").textContent = "error: " + error.message; $("status").className = "status error";
  }
}
$("queue").addEventListener("change", (e) => { state.queue = e.target.value; state.samples = []; state.last = null; drawQueueCharts(); refresh(); });

function renderQueues(queues) {
  $("queues").tBodies[0].replaceChildren(...queues.map((q) => {
    const tr = el("tr");
    tr.append(el("td", q.name));
    for (const v of [q.pending, q.scheduled, q.active, q.dead]) tr.append(el("td", String(v), "num"));
    tr.append(el("td", q.oldestPendingAgeSeconds.toFixed(1) + " s", "num"), el("td", String(q.consumers), "num"),
      el("td", String(sum(q.counters, "succeeded:")), "num"), el("td", String(sum(q.counters, "dead:")), "num"));
    return tr;
  }));
}

// ---------------------------------------------------------------------------------------------
// Queue charts: a day of minute samples from GET /v1/admin/queues/history, then the live
// samples this page takes every refresh. Counters are cumulative: a rate is the difference
// between two samples over the seconds between them.

async function loadHistory() {
  const note = $("history-note");
  try {
    const { minutes } = await api("/v1/admin/queues/history");
    state.history = (Array.isArray(minutes) ? minutes : []).filter((m) => m && Number.isFinite(m.at) && m.queues)
      .sort((a, b) => a.at - b.at);
    state.historyLoaded = true;
    note.className = "muted small";
    note.textContent = state.history.length
      ? `history: ${state.history.length} minute sample${state.history.length === 1 ? "" : "s"} since ${clock(state.history[0].at)}, then live samples every 2 s`
      : "no history kept yet (a worker writes a sample a minute); live samples every 2 s";
  } catch (error) {
    note.className = "error small"; note.textContent = "queue history: " + error.message;
  }
  drawQueueCharts();
}

const LIVE_SAMPLES = 1800; // an hour at one sample every 2 s

// The queue the charts show: the selected one, else the one the first refresh will pick.
function chartQueue() {
  if (state.queue) return state.queue;
  const last = state.history[state.history.length - 1];
  if (!last) return null;
  const names = Object.keys(last.queues);
  return names.includes("default") ? "default" : names[0] || null;
}

// The queue's figures in the history, oldest first: [{t, key, depth, age, throughput, failing, succeeded, failures}].
let historyCache = { source: null, queue: null, rows: [] };
function historyOf(queue) {
  if (historyCache.source === state.history && historyCache.queue === queue) return historyCache.rows;
  const out = [];
  let previous = null;
  for (const minute of state.history) {
    const f = minute.queues[queue];
    if (!f) continue;
    const succeeded = f.succeeded || 0, failures = (f.retried || 0) + (f.failed || 0);
    const row = { t: minute.at, key: isoSeconds(minute.at), depth: f.pending, age: f.oldestPendingAgeSeconds, throughput: null, failing: null, succeeded, failures };
    if (previous) {
      const dt = (minute.at - previous.t) / 1000;
      if (dt > 0) {
        row.throughput = Math.max(0, (succeeded - previous.succeeded) / dt);
        row.failing = Math.max(0, (failures - previous.failures) / dt);
      }
    }
    out.push(row);
    previous = row;
  }
  historyCache = { source: state.history, queue, rows: out };
  return out;
}

function sample(q) {
  const t = Date.now();
  const succeeded = sum(q.counters, "succeeded:"), failures = sum(q.counters, "retried:") + sum(q.counters, "dead:");
  let base = state.last && state.last.queue === q.name ? state.last : null;
  if (!base) { const h = historyOf(q.name); base = h.length ? h[h.length - 1] : null; }
  let throughput = null, failing = null;
  if (base) {
    const dt = (t - base.t) / 1000;
    if (dt >= 0.5) {
      throughput = Math.max(0, (succeeded - base.succeeded) / dt);
      failing = Math.max(0, (failures - base.failures) / dt);
    }
  }
  state.last = { queue: q.name, t, succeeded, failures };
  state.samples.push({ t, key: isoSeconds(t), depth: q.pending, age: q.oldestPendingAgeSeconds, throughput, failing });
  // Dropped a chunk at a time: the charts' tables then gain a row per sample, not lose one too.
  if (state.samples.length > LIVE_SAMPLES) state.samples.splice(0, LIVE_SAMPLES / 6);
  drawQueueCharts();
}

const roundRate = (v) => Math.round(v * 1000) / 1000;
const QUEUE_METRICS = { depth: "pending", age: "oldestPendingAgeSeconds", throughput: "succeededPerSecond", failing: "failuresPerSecond" };

function drawQueueCharts() {
  const queue = chartQueue();
  const rows = queue ? historyOf(queue).concat(state.samples) : [];
  // Each row names the chart's data-metric (pending, oldestPendingAgeSeconds, succeededPerSecond, failuresPerSecond).
  const series = (name, field, cssClass, round) => [{
    name, cssClass, metric: QUEUE_METRICS[field],
    points: rows.filter((r) => r[field] !== null && r[field] !== undefined && Number.isFinite(r[field]))
      .map((r) => ({ key: r.key, t: r.t, value: round ? round(r[field]) : r[field] })),
  }];
  const empty = state.historyLoaded ? "collecting…" : "loading…";
  const seconds = (v) => compact(v) + "s", perSecond = (v) => compact(v) + "/s";
  renderChart(chartBody("chart-depth"), series("pending", "depth", "c-blue"),
    { kind: "line", time: true, integer: true, showLast: true, empty, tip: (v) => String(v) + " pending" });
  renderChart(chartBody("chart-age"), series("oldest pending (s)", "age", "c-violet"),
    { kind: "line", time: true, format: seconds, showLast: true, empty, tip: (v) => v.toFixed(1) + " s" });
  renderChart(chartBody("chart-throughput"), series("succeeded/s", "throughput", "c-green", roundRate),
    { kind: "line", time: true, format: perSecond, showLast: true, empty, tip: (v) => v.toFixed(3) + " jobs/s" });
  renderChart(chartBody("chart-failures"), series("(retried + failed)/s", "failing", "c-red", roundRate),
    { kind: "line", time: true, format: perSecond, showLast: true, empty, tip: (v) => v.toFixed(3) + " jobs/s" });
}

const chartBody = (wrapperId) => $(wrapperId).querySelector(".chart-body");

// ---------------------------------------------------------------------------------------------
// The page's own SVG chart renderer.
//
// renderChart(container, series, options) replaces the container's children with an SVG chart,
// a legend and a compact data table (class "chart-data": one row per point, with the value as
// given). series: [{name, points: [{key, value, t?}], cssClass?, metric?, currency?}].
// options: kind "line" (levels) or "bar" (flows, grouped when several series); time: x is each
// point's t (ms) instead of its key; format(v): y-axis labels; tip(v, series): tooltips and the
// legend's latest value (showLast); keyLabel(key): x labels; integer: whole-number ticks;
// height; empty: the text when there are no points.

const SVG_NS = "http://www.w3.org/2000/svg";
const PALETTE = ["c-blue", "c-green", "c-violet", "c-amber", "c-teal", "c-pink", "c-red", "c-grey"];
const drawn = new Map(); // container → [series, options], to draw again when the window resizes

function svg(tag, attributes, cls) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attributes || {})) e.setAttribute(k, String(v));
  if (cls) e.setAttribute("class", cls);
  return e;
}
function svgText(text, x, y, anchor, cls) {
  const t = svg("text", { x, y, "text-anchor": anchor || "start" }, cls);
  t.textContent = text;
  return t;
}
const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;" };
const escapeHTML = (text) => String(text).replace(/[&<>"']/g, (c) => ESCAPES[c]);
function svgTitle(text) { const t = svg("title"); t.textContent = text; return t; }

// Trims a number for an axis: 1234 → "1234", 12345 → "12.3k", 0.25 → "0.25".
function trimmed(v) {
  const a = Math.abs(v);
  return String(Number(v.toFixed(a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3)));
}
function compact(v) {
  const a = Math.abs(v);
  if (a >= 1e9) return trimmed(v / 1e9) + "B";
  if (a >= 1e6) return trimmed(v / 1e6) + "M";
  if (a >= 1e4) return trimmed(v / 1e3) + "k";
  return trimmed(v);
}
const percent = (v) => trimmed(v * 100) + "%";

// About `count` evenly spaced round values covering lo..hi (1, 2, 2.5 or 5 times a power of ten).
function niceTicks(lo, hi, count = 4, integer = false) {
  if (!(hi > lo)) hi = lo + (integer ? count : 1);
  const raw = (hi - lo) / count;
  const magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
  const steps = integer ? [1, 2, 5, 10] : [1, 2, 2.5, 5, 10];
  let step = steps.map((m) => m * magnitude).find((s) => s >= raw * (1 - 1e-9)) || 10 * magnitude;
  if (integer) step = Math.max(1, Math.round(step));
  const decimals = Math.max(0, -Math.floor(Math.log10(step)) + 1);
  const first = Math.floor(lo / step + 1e-9) * step, last = Math.ceil(hi / step - 1e-9) * step;
  const ticks = [];
  for (let k = 0; first + k * step <= last + step * 1e-6 && k < 50; k++) ticks.push(Number((first + k * step).toFixed(decimals)));
  return ticks;
}

const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400].map((s) => s * 1000);
// Round local times between t0 and t1, at most `max` of them.
function timeTicks(t0, t1, max) {
  const span = Math.max(1, t1 - t0);
  const step = TIME_STEPS.find((s) => span / s <= max) || Math.ceil(span / max / 86400000) * 86400000;
  const offset = new Date(t0).getTimezoneOffset() * 60000; // local = utc - offset
  const ticks = [];
  for (let t = Math.ceil((t0 - offset) / step) * step + offset; t <= t1 && ticks.length < 50; t += step) ticks.push(t);
  return { ticks, step };
}
const two = (n) => String(n).padStart(2, "0");
const clock = (t, seconds) => { const d = new Date(t); return two(d.getHours()) + ":" + two(d.getMinutes()) + (seconds ? ":" + two(d.getSeconds()) : ""); };
const localStamp = (t) => { const d = new Date(t); return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ${clock(t, true)}`; };
const isoSeconds = (t) => new Date(t).toISOString().replace(/\.\d{3}Z$/, "Z");

function renderChart(container, series, options = {}) {
  if (!container) return;
  drawn.set(container, [series, options]);
  const kind = options.kind === "bar" ? "bar" : "line";
  const time = kind === "line" && !!options.time;
  const format = options.format || compact;
  const tip = options.tip || ((v) => format(v));
  const list = series.map((s, i) => {
    const points = (s.points || []).filter((p) => p && Number.isFinite(Number(p.value)) && (!time || Number.isFinite(p.t)));
    if (time) points.sort((a, b) => a.t - b.t);
    return { ...s, cssClass: s.cssClass || PALETTE[i % PALETTE.length], points, byKey: new Map(points.map((p) => [p.key, p])) };
  });
  const all = list.flatMap((s) => s.points);
  // Drawn at the container's own width (fractions too), so that nothing is scaled.
  const measured = Math.round(container.getBoundingClientRect().width * 100) / 100;
  const width = Math.max(260, measured || options.width || 480);
  const height = options.height || 150;

  // The x axis: categories (keys, in order) or time.
  let keys = [];
  if (!time) {
    const seen = new Set();
    for (const s of list) for (const p of s.points) if (!seen.has(p.key)) { seen.add(p.key); keys.push(p.key); }
    if (options.sortKeys !== false) keys.sort();
  }
  let t0 = Infinity, t1 = -Infinity;
  if (time) for (const p of all) { if (p.t < t0) t0 = p.t; if (p.t > t1) t1 = p.t; }

  // The y axis: round ticks covering 0 and every value.
  let lo = 0, hi = 0;
  for (const p of all) { const v = Number(p.value); if (v < lo) lo = v; if (v > hi) hi = v; }
  const ticks = niceTicks(lo, hi, 4, !!options.integer);
  lo = ticks[0]; hi = ticks[ticks.length - 1];
  const labels = ticks.map(format);
  // x labels of a category axis; a line's first and last sit on the plot's edges, so the
  // margins leave room for half of one.
  const keyText = keys.map((k) => (options.keyLabel ? options.keyLabel(k) : String(k)));
  const widest = keyText.length ? Math.max(...keyText.map((t) => t.length)) * 6 + 10 : 0;
  const half = kind === "line" && !time ? Math.ceil(widest / 2) - 4 : 0;
  const padL = Math.max(26, 8 + 6 * Math.max(...labels.map((l) => l.length)), half), padR = Math.max(12, half), padT = 8, padB = 20;
  const plotW = width - padL - padR, plotH = height - padT - padB;
  const y = (v) => Math.round((padT + plotH * (1 - (v - lo) / (hi - lo))) * 10) / 10;

  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", preserveAspectRatio: "xMinYMin meet" }, "chart-svg");
  root.setAttribute("aria-label", list.map((s) => s.name).join(", "));
  const grid = svg("g"), axes = svg("g"), marks = svg("g"), dots = svg("g");
  root.append(grid, axes, marks, dots);
  ticks.forEach((v, i) => {
    grid.append(svg("line", { x1: padL, x2: width - padR, y1: y(v), y2: y(v) }, v === 0 ? "axis" : "grid"));
    axes.append(svgText(labels[i], padL - 5, y(v) + 3, "end", "tick"));
  });
  axes.append(svg("line", { x1: padL, x2: padL, y1: padT, y2: padT + plotH }, "axis"));

  // x positions and labels.
  const n = keys.length;
  const keyIndex = new Map(keys.map((k, i) => [k, i]));
  const band = n ? plotW / n : plotW;
  const xOfIndex = kind === "bar" ? (i) => padL + band * (i + 0.5) : (i) => (n <= 1 ? padL + plotW / 2 : padL + plotW * i / (n - 1));
  const xOfTime = (t) => (t1 > t0 ? padL + plotW * (t - t0) / (t1 - t0) : padL + plotW / 2);
  const round1 = (v) => Math.round(v * 10) / 10;
  if (time && all.length) {
    const { ticks: times, step } = timeTicks(t0, t1, Math.max(2, Math.floor(plotW / 64)));
    for (const t of times) axes.append(svgText(clock(t, step < 60000), round1(xOfTime(t)), height - 5, "middle", "tick"));
  } else if (n) {
    const spacing = kind === "bar" ? band : plotW / Math.max(1, n - 1);
    const every = Math.max(1, Math.ceil(widest / spacing));
    for (let i = 0; i < n; i += every) {
      axes.append(svgText(keyText[i], round1(xOfIndex(i)), height - 5, "middle", "tick"));
    }
  }

  const tooltip = (p, s) => `${time ? localStamp(p.t) : p.key} · ${s.name}: ${tip(Number(p.value), s)}`;
  if (!all.length) {
    marks.append(svgText(options.empty || "no data", padL + plotW / 2, padT + plotH / 2, "middle", "empty"));
  } else if (kind === "line") {
    for (const s of list) {
      const dense = s.points.length > 40;
      let d = "";
      if (time) {
        s.points.forEach((p, i) => { d += `${i ? "L" : "M"}${round1(xOfTime(p.t))} ${y(Number(p.value))}`; });
      } else {
        let open = false;
        keys.forEach((k, i) => {
          const p = s.byKey.get(k);
          if (!p) { open = false; return; }
          d += `${open ? "L" : "M"}${round1(xOfIndex(i))} ${y(Number(p.value))}`;
          open = true;
        });
      }
      if (d) marks.append(svg("path", { d, fill: "none" }, "line " + s.cssClass));
      for (const p of s.points) {
        const cx = round1(time ? xOfTime(p.t) : xOfIndex(keyIndex.get(p.key)));
        const dot = svg("circle", { cx, cy: y(Number(p.value)), r: dense ? 4 : 2.5 }, "dot " + s.cssClass + (dense ? " dense" : ""));
        dot.append(svgTitle(tooltip(p, s)));
        dots.append(dot);
      }
    }
  } else {
    const m = list.length, inner = band * 0.8, barW = inner / m;
    const zero = y(Math.min(Math.max(0, lo), hi));
    keys.forEach((k, i) => {
      list.forEach((s, j) => {
        const p = s.byKey.get(k);
        if (!p) return;
        const v = Number(p.value), top = y(v);
        const h = Math.abs(zero - top);
        const rect = svg("rect", {
          x: round1(padL + band * i + band * 0.1 + barW * j), y: Math.min(zero, top),
          width: round1(Math.max(1, barW > 3 ? barW - 1 : barW)), height: v === 0 ? 0 : Math.max(1, round1(h)),
        }, "bar " + s.cssClass);
        rect.append(svgTitle(tooltip(p, s)));
        marks.append(rect);
      });
    });
  }

  // Legend, with the latest value when asked.
  const legend = el("div", undefined, "chart-legend");
  for (const s of list) {
    const item = el("span", undefined, "legend-item " + s.cssClass);
    const last = s.points[s.points.length - 1];
    item.append(el("span", undefined, "swatch"), s.name + (options.showLast && last ? ": " + tip(Number(last.value), s) : ""));
    legend.append(item);
  }

  // The numbers, as given: one row per point. Built as text, and when the chart is drawn again
  // with the same first rows (a live chart gaining samples) only the rows after them change.
  const rows = [];
  for (const s of list) {
    const series = escapeHTML(s.name);
    const extra = (s.metric ? ` data-metric="${escapeHTML(s.metric)}"` : "") + (s.currency ? ` data-currency="${escapeHTML(s.currency)}"` : "");
    for (const p of s.points) {
      const key = escapeHTML(String(p.key)), value = escapeHTML(String(p.value));
      rows.push(`<tr data-key="${key}" data-series="${series}" data-value="${value}"${extra}><td class="key">${key}</td><td class="series">${series}</td><td class="num value">${value}</td></tr>`);
    }
  }
  let data = dataTables.get(container);
  if (data && data.box.parentNode === container) {
    syncRows(data.tbody, data.rows, rows);
    for (const child of [...container.children]) if (child !== data.box) child.remove();
    container.insertBefore(root, data.box);
    container.insertBefore(legend, data.box);
  } else {
    const table = el("table", undefined, "chart-data");
    table.innerHTML = "<thead><tr><th>key</th><th>series</th><th class=\"num\">value</th></tr></thead><tbody></tbody>";
    const box = el("div", undefined, "chart-data-box");
    box.append(table);
    data = { box, tbody: table.tBodies[0], rows: [] };
    data.tbody.innerHTML = rows.join("");
    container.replaceChildren(root, legend, box);
  }
  data.rows = rows;
  dataTables.set(container, data);
}

const dataTables = new WeakMap(); // container → {box, tbody, rows (the rows' text)}

// Makes tbody's rows (whose text is `old`) those of `rows`: keeps the common first rows.
function syncRows(tbody, old, rows) {
  let same = 0;
  const m = Math.min(old.length, rows.length);
  while (same < m && old[same] === rows[same]) same++;
  if (same === old.length && same === rows.length) return;
  if (same < rows.length / 2 || tbody.rows.length !== old.length) { tbody.innerHTML = rows.join(""); return; }
  if (same < old.length) {
    const range = document.createRange();
    range.setStartBefore(tbody.rows[same]);
    range.setEndAfter(tbody.lastChild);
    range.deleteContents();
  }
  if (same < rows.length) tbody.insertAdjacentHTML("beforeend", rows.slice(same).join(""));
}

function chartError(container, message) {
  drawn.delete(container);
  dataTables.delete(container);
  container.replaceChildren(el("p", message, "error chart-error"));
}

let resizeTimer = null;
window.addEventListener("resize", () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => { for (const [container, [series, options]] of drawn) renderChart(container, series, options); }, 150);
});

// ---------------------------------------------------------------------------------------------
// Reports: GET /v1/reports/{metric}?publisher&from&to&by&environment, one request per metric.

const REPORTS = [
  { id: "report-mrr", kind: "line", metrics: ["mrr"], money: true },
  { id: "report-subscriptions", kind: "line", metrics: ["activeSubscriptions", "payingSubscriptions", "trialSubscriptions"] },
  { id: "report-new-churned", kind: "bar", metrics: ["newPaidSubscriptions", "churned"] },
  { id: "report-trial-conversion", kind: "line", metrics: ["trialConversionRate"], ratio: true },
  { id: "report-revenue", kind: "bar", metrics: ["grossRevenue", "refundAmount"], money: true },
];
const METRIC_NAMES = {
  mrr: "MRR", activeSubscriptions: "active", payingSubscriptions: "paying", trialSubscriptions: "in trial",
  newPaidSubscriptions: "new paid", churned: "churned", trialConversionRate: "trial conversion",
  grossRevenue: "gross revenue", refundAmount: "refunds",
};
// A metric's colour, or for money its colours, one per currency.
const METRIC_CLASSES = {
  mrr: ["c-blue", "c-teal", "c-violet", "c-amber", "c-pink", "c-grey"],
  activeSubscriptions: ["c-blue"], payingSubscriptions: ["c-green"], trialSubscriptions: ["c-violet"],
  newPaidSubscriptions: ["c-green"], churned: ["c-red"], trialConversionRate: ["c-violet"],
  grossRevenue: ["c-green", "c-teal", "c-blue", "c-grey"], refundAmount: ["c-red", "c-amber", "c-pink", "c-grey"],
};

const dayString = (d) => `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())}`;
const validDay = (s) => /^\d{4}-\d{2}-\d{2}$/.test(s || "");

function setupReports() {
  const today = new Date(), from = new Date(today.getFullYear(), today.getMonth(), today.getDate() - 29);
  $("report-publisher").value = link.get("publisher") || "demo";
  $("report-from").value = validDay(link.get("from")) ? link.get("from") : dayString(from);
  $("report-to").value = validDay(link.get("to")) ? link.get("to") : dayString(today);
  if (["day", "week", "month"].includes(link.get("by"))) $("report-by").value = link.get("by");
  if (["production", "sandbox"].includes(link.get("environment"))) $("report-environment").value = link.get("environment");
  $("report-form").addEventListener("submit", (e) => { e.preventDefault(); loadReports(); });
  for (const id of ["report-publisher", "report-from", "report-to", "report-by", "report-environment"]) {
    $(id).addEventListener("change", () => loadReports());
  }
}

// Money: milliunits → "1.99 USD" (1990), "200 JPY" (200000).
function money(milliunits, currency) {
  const units = Number(milliunits) / 1000;
  const text = units.toLocaleString("en-US", { minimumFractionDigits: Number.isInteger(units) ? 0 : 2, maximumFractionDigits: 3 });
  return currency ? `${text} ${currency}` : text;
}

async function loadReports() {
  const run = ++state.reportRun;
  const publisher = $("report-publisher").value.trim(), from = $("report-from").value, to = $("report-to").value;
  const by = $("report-by").value, environment = $("report-environment").value;
  const message = $("report-message");
  message.className = "muted"; message.textContent = "loading…";
  const query = new URLSearchParams({ publisher });
  if (from) query.set("from", from);
  if (to) query.set("to", to);
  query.set("by", by);
  query.set("environment", environment);
  const metrics = [...new Set(REPORTS.flatMap((r) => r.metrics))];
  const answers = await Promise.all(metrics.map((metric) =>
    api(`/v1/reports/${encodeURIComponent(metric)}?${query}`).then((report) => ({ metric, report }), (error) => ({ metric, error }))));
  if (run !== state.reportRun) return; // a newer load is under way
  const answer = Object.fromEntries(answers.map((a) => [a.metric, a]));
  const errors = [...new Set(answers.filter((a) => a.error).map((a) => a.error.message))];
  for (const chart of REPORTS) {
    const container = chartBody(chart.id);
    const failed = chart.metrics.map((m) => answer[m]).find((a) => a.error);
    if (failed) { chartError(container, failed.error.message); continue; }
    drawReport(container, chart, chart.metrics.map((m) => answer[m].report), by);
  }
  if (errors.length) {
    message.className = "error"; message.textContent = errors.join("; ");
  } else {
    const r = answers[0].report;
    message.className = "muted"; message.textContent = `${publisher}: ${r.from} to ${r.to}, by ${r.by}` + (r.environment ? `, ${r.environment} purchases` : "");
  }
}

function drawReport(container, chart, reports, by) {
  const series = [];
  for (const report of reports) {
    const metric = report.metric;
    const classes = METRIC_CLASSES[metric] || PALETTE;
    const points = Array.isArray(report.points) ? report.points : [];
    if (report.unit === "milliunits" || chart.money) {
      const currencies = [...new Set(points.map((p) => p.currency || ""))].sort();
      currencies.forEach((currency, i) => {
        const name = chart.metrics.length > 1 ? `${METRIC_NAMES[metric] || metric}${currency ? " " + currency : ""}` : currency || METRIC_NAMES[metric] || metric;
        series.push({
          name, metric, currency: currency || undefined, cssClass: classes[i % classes.length],
          points: points.filter((p) => (p.currency || "") === currency).map((p) => ({ key: p.key, value: p.value })),
        });
      });
    } else {
      series.push({ name: METRIC_NAMES[metric] || metric, metric, cssClass: classes[0], points: points.map((p) => ({ key: p.key, value: p.value })) });
    }
  }
  const keys = series.flatMap((s) => s.points.map((p) => p.key));
  const years = new Set(keys.map((k) => String(k).slice(0, 4)));
  const keyLabel = by === "month" || years.size > 1 ? (k) => k : (k) => String(k).slice(5);
  const options = { kind: chart.kind, keyLabel, empty: "no figures in this range" };
  if (chart.money) {
    options.format = (v) => compact(v / 1000);
    options.tip = (v, s) => money(v, s.currency);
  } else if (chart.ratio) {
    options.format = percent;
    options.tip = (v) => (v * 100).toFixed(1) + " %";
  } else {
    options.integer = true;
    options.tip = (v) => String(v);
  }
  renderChart(container, series, options);
}

// ---------------------------------------------------------------------------------------------
// Dead and recent jobs.

const when = (ms) => ms ? new Date(ms).toLocaleTimeString() : "";
const pill = (status) => el("span", status, "pill " + status);

function renderDead(jobs) {
  $("dead").tBodies[0].replaceChildren(...(jobs.length ? jobs.map((j) => {
    const tr = el("tr"), actions = el("td");
    const retry = el("button", "Retry"), purge = el("button", "Purge", "danger");
    retry.onclick = () => act("retry", [j.id]); purge.onclick = () => act("purge", [j.id]);
    actions.append(retry, " ", purge);
    tr.append(el("td", j.id), el("td", j.type), el("td", j.lastError || ""), actions);
    return tr;
  }) : [Object.assign(el("tr"), { innerHTML: '<td colspan="4" class="muted">no dead jobs</td>' })]));
}

function renderRecent(jobs) {
  $("recent").tBodies[0].replaceChildren(...jobs.map((j) => {
    const tr = el("tr"), status = el("td"); status.append(pill(j.status));
    tr.append(el("td", j.id), el("td", j.type), status, el("td", String(j.attempt), "num"), el("td", when(j.enqueuedAt)));
    return tr;
  }));
}

async function act(action, ids) {
  if (action === "purge" && !confirm(ids ? "Purge this dead job?" : "Purge every dead job of " + state.queue + "?")) return;
  try {
    await api(`/v1/admin/queues/${encodeURIComponent(state.queue)}/dead/${action}`, { method: "POST", body: JSON.stringify(ids ? { ids } : {}) });
  } catch (error) { alert(error.message); }
  refresh();
}
$("retry-all").onclick = () => act("retry", null);
$("purge-all").onclick = () => act("purge", null);

// ---------------------------------------------------------------------------------------------
// Customer lookup: the customer now (access, entitlements, subscriptions), then the lifecycle
// events that led there, newest first.

const EVENT_LABELS = {
  initial_purchase: "Initial purchase", trial_started: "Trial started", trial_converted: "Trial converted", renewal: "Renewal",
  product_change: "Product change", cancellation: "Cancelled (auto-renew off)", uncancellation: "Auto-renew back on",
  billing_issue: "Billing issue", grace_period_started: "Grace period started", billing_recovered: "Billing recovered",
  expiration: "Expired", refund: "Refunded", refund_reversed: "Refund reversed", refund_adjusted: "Refund amount corrected", revoked: "Revoked", transfer: "Transferred",
  non_renewing_purchase: "One-time purchase", extension: "Extended by Apple", offer_redeemed: "Offer redeemed",
  price_increase: "Price increase", credits_granted: "Credits granted", credits_spent: "Credits spent",
  credits_clawed_back: "Credits clawed back",
};
const EVENT_TONES = {
  initial_purchase: "good", trial_started: "good", trial_converted: "good", renewal: "good", billing_recovered: "good",
  uncancellation: "good", non_renewing_purchase: "good", extension: "good", offer_redeemed: "good", refund_reversed: "good",
  cancellation: "warn", billing_issue: "warn", grace_period_started: "warn", price_increase: "warn", product_change: "",
  expiration: "bad", refund: "bad", revoked: "bad", transfer: "", refund_adjusted: "",
  credits_granted: "credit", credits_spent: "credit", credits_clawed_back: "bad",
};
// Why a subscription ended or was cancelled: Entitle's reason, then what it means.
const REASONS = {
  voluntary: "voluntary: the customer turned auto-renew off", billing: "billing: the renewal could not be billed",
  priceIncreaseDeclined: "priceIncreaseDeclined: the customer declined a price increase", refund: "refund: the purchase was refunded",
  productNotForSale: "productNotForSale: the product is no longer for sale", other: "other",
};
const eventLabel = (type) => EVENT_LABELS[type] || String(type || "event").replace(/_/g, " ");

// A date (ms since 1970 or ISO 8601) as "2026-11-25 14:03 UTC".
function dateText(value) {
  if (value === null || value === undefined || value === "") return "";
  const d = new Date(value);
  if (Number.isNaN(d.getTime())) return String(value);
  return d.toISOString().slice(0, 16).replace("T", " ") + " UTC";
}
const dateMs = (value) => { const t = new Date(value).getTime(); return Number.isNaN(t) ? null : t; };

// Why an event happened, in a few words (the "(…)" of "no access: …").
function eventReason(e) {
  const parts = [];
  if (e.reason && !(e.reason === "refund" && e.type === "refund")) parts.push(REASONS[e.reason] || e.reason);
  if (e.type === "expiration" && e.trial) parts.push("a free trial ended");
  if (e.revocationType) parts.push(e.revocationType);
  if (e.revocationPercentage !== undefined && e.revocationPercentage !== null && e.revocationPercentage !== 100000) {
    parts.push(trimmed(e.revocationPercentage / 1000) + " % refunded");
  }
  if (e.type === "transfer" && e.to) parts.push("moved to " + e.to);
  return parts.join(", ");
}

// What else an event says: price, product change, expiry, grace, transfer, credits.
function eventDetail(e, customer) {
  const parts = [];
  const reason = eventReason(e);
  if (reason && e.type !== "transfer") parts.push(reason);
  const has = (v) => v !== undefined && v !== null;
  if (has(e.refundMilliunits)) {
    parts.push("refunded " + money(e.refundMilliunits, e.currency) + (has(e.priceMilliunits) ? " of " + money(e.priceMilliunits, e.currency) : "") +
      (has(e.previousRefundMilliunits) ? ", not " + money(e.previousRefundMilliunits, e.currency) : ""));
  } else if (has(e.priceMilliunits)) {
    parts.push((e.type === "price_increase" ? "new price " : "") + money(e.priceMilliunits, e.currency) + (e.priceSource && e.priceSource !== "apple" ? ` (${e.priceSource} price)` : ""));
  }
  if (e.fromProductId || e.toProductId) {
    parts.push(`${e.fromProductId || "?"} → ${e.toProductId || "?"}` + [e.change, e.effective === "atRenewal" ? "at renewal" : e.effective].filter(Boolean).map((x) => " " + x).join(""));
  }
  if (e.type === "transfer") {
    if (e.from && e.to) parts.push(e.to === customer ? `to this customer from ${e.from}` : `from ${e.from} to ${e.to}`);
    else if (e.from || e.to) parts.push(e.from ? "from " + e.from : "to " + e.to);
    if (e.road) parts.push("road: " + e.road);
    if (e.vouchedBy) parts.push("vouched by " + e.vouchedBy);
  }
  if (e.resubscribed) parts.push("resubscribed after a lapse");
  if (e.offerKind || e.offerIdentifier) parts.push("offer " + [e.offerKind, e.offerIdentifier].filter(Boolean).join(" "));
  if (e.consented === true) parts.push("customer agreed");
  if (e.consented === false) parts.push("not agreed yet");
  if (e.type === "extension" && e.previousExpiresDate) parts.push(`expiry ${dateText(e.previousExpiresDate)} → ${dateText(e.expiresDate)}`);
  else if (e.expiresDate) {
    const word = e.type === "expiration" ? "ended " : e.type === "billing_issue" || e.type === "grace_period_started" ? "renewal was due " : "until ";
    parts.push(word + dateText(e.expiresDate));
  }
  if (e.gracePeriodExpiresDate) parts.push("grace period until " + dateText(e.gracePeriodExpiresDate));
  if (e.amount !== undefined && e.amount !== null) {
    const sign = e.type === "credits_granted" ? "+" : e.type === "credits_spent" || e.type === "credits_clawed_back" ? "−" : "";
    parts.push(`${sign}${Math.abs(e.amount)} credits`);
  }
  if (e.balance !== undefined && e.balance !== null) {
    parts.push("balance " + (e.previousBalance !== undefined && e.previousBalance !== null ? `${e.previousBalance} → ` : "") + e.balance);
  }
  if (e.shortfall) parts.push(`${e.shortfall} already spent`);
  if (e.reference) parts.push("ref " + e.reference);
  if (e.familyShared) parts.push("Family Sharing");
  if (e.shared) parts.push("shared by its holder");
  if (e.environment && e.environment !== "Production") parts.push(e.environment);
  return parts.join(" · ");
}

// The answer to "why does this customer have access, or not, right now?".
function accessSummary(c, events) {
  const subscriptions = c.subscriptions || [];
  const granting = subscriptions.filter((s) => s.status === "active" || s.status === "gracePeriod");
  const entitlements = c.entitlements || [];
  if (entitlements.length) {
    const notes = [];
    // Until when: a paid-up subscription's expiry; in a grace period, the grace period's end.
    const ends = [];
    let grace = false;
    for (const s of granting) {
      if (s.status === "gracePeriod") {
        grace = true;
        const started = events.find((e) => e.gracePeriodExpiresDate && (!e.originalTransactionId || e.originalTransactionId === s.originalTransactionId));
        if (started) ends.push(dateMs(started.gracePeriodExpiresDate));
      } else if (s.expiresDate !== null && s.expiresDate !== undefined) {
        ends.push(dateMs(s.expiresDate));
      }
    }
    const known = ends.filter((t) => t !== null);
    if (known.length) notes.push("until " + dateText(Math.max(...known)));
    if (grace) notes.push("billing grace period: Apple is retrying the renewal");
    if (granting.some((s) => s.autoRenew === true)) notes.push("renews automatically");
    else if (granting.length && granting.every((s) => s.autoRenew === false)) notes.push("auto-renew off: ends then");
    return { granted: true, text: `access now: ${entitlements.join(", ")}` + (notes.length ? ` (${notes.join("; ")})` : "") };
  }
  const last = events.find((e) => !String(e.type).startsWith("credits_")) || events[0];
  const retrying = subscriptions.some((s) => s.status === "billingRetry");
  if (!last) return { granted: false, text: "no access: no events recorded" + (retrying ? " (Apple is retrying billing)" : "") };
  const why = [eventReason(last), retrying ? "Apple is retrying billing" : ""].filter(Boolean).join("; ");
  return {
    granted: false,
    text: `no access: last event ${last.type} on ${dateText(last.occurredAt)}` + (last.productId ? ` for ${last.productId}` : "") + (why ? ` (${why})` : ""),
  };
}

function eventRow(e, customer) {
  const tr = el("tr", undefined, "event");
  tr.dataset.type = e.type;
  if (e.id) tr.dataset.id = e.id;
  const at = el("td", dateText(e.occurredAt), "when");
  if (e.recordedAt) at.title = "recorded " + dateText(e.recordedAt);
  const label = el("td");
  label.append(el("span", eventLabel(e.type), "pill " + (EVENT_TONES[e.type] || "")));
  const product = e.productId || (e.toProductId ? e.toProductId : "");
  tr.append(at, label, el("td", product + (e.offerId && e.offerId !== product ? ` (${e.offerId})` : ""), "product"), el("td", eventDetail(e, customer), "detail"));
  return tr;
}

$("customer-form").addEventListener("submit", (e) => { e.preventDefault(); lookup(); });
async function lookup() {
  const run = ++state.lookupRun;
  const out = $("customer-result"); out.replaceChildren(el("p", "looking up…", "muted"));
  const publisher = $("publisher").value.trim(), customer = $("customer").value.trim();
  const path = `/v1/admin/publishers/${encodeURIComponent(publisher)}/customers/${encodeURIComponent(customer)}`;
  try {
    const [c, page] = await Promise.all([api(path), api(path + "/events?limit=50").catch((error) => ({ error }))]);
    if (run !== state.lookupRun) return;
    const events = page.error ? [] : page.events || [];

    const access = accessSummary(c, events);
    const line = el("p", access.text, "access " + (access.granted ? "granted" : "denied"));
    line.id = "customer-access";

    const summary = el("p");
    summary.id = "customer-summary";
    summary.append(el("strong", c.customer), ` — entitlements: ${c.entitlements.join(", ") || "none"}; credits: ${c.credits.balance}`);

    const table = el("table"); table.id = "customer-subscriptions";
    table.append(Object.assign(el("thead"), { innerHTML: "<tr><th>subscription</th><th>product</th><th>offer</th><th>status</th><th>expires</th><th>auto-renew</th></tr>" }));
    const subs = el("tbody");
    for (const s of c.subscriptions) {
      const tr = el("tr");
      tr.dataset.status = s.status;
      tr.append(el("td", s.originalTransactionId), el("td", s.productId || ""), el("td", s.offerId), el("td", s.status),
        el("td", s.expiresDate ? new Date(s.expiresDate).toISOString() : ""), el("td", String(s.autoRenew)));
      subs.append(tr);
    }
    if (!c.subscriptions.length) subs.append(Object.assign(el("tr"), { innerHTML: '<td colspan="6" class="muted">no subscriptions</td>' }));
    table.append(subs);

    const heading = el("h3", "Timeline (newest first)", "sub");
    const timeline = el("table", undefined, "timeline"); timeline.id = "customer-timeline";
    timeline.append(Object.assign(el("thead"), { innerHTML: "<tr><th>when</th><th>event</th><th>product</th><th>detail</th></tr>" }));
    const rows = el("tbody");
    timeline.append(rows);
    const note = el("p", "", "muted small"); note.id = "customer-timeline-note";
    const more = el("button", "Older events"); more.id = "customer-more"; more.type = "button";
    let next = page.error ? null : page.next || null;
    const show = (list) => { for (const e of list) rows.append(eventRow(e, customer)); };
    const settle = () => {
      more.hidden = !next;
      if (!rows.children.length) note.textContent = "no events recorded";
      else note.textContent = `${rows.children.length} event${rows.children.length === 1 ? "" : "s"}` + (next ? "; older ones exist" : "");
    };
    if (page.error) { note.className = "error small"; note.textContent = "events: " + page.error.message; more.hidden = true; }
    else { show(events); settle(); }
    more.addEventListener("click", async () => {
      if (!next) return;
      more.disabled = true;
      try {
        const older = await api(`${path}/events?limit=50&before=${encodeURIComponent(next)}`);
        if (run !== state.lookupRun) return;
        show(older.events || []); next = older.next || null; note.className = "muted small"; settle();
      } catch (error) { note.className = "error small"; note.textContent = "events: " + error.message; }
      more.disabled = false;
    });
    out.replaceChildren(line, summary, table, heading, timeline, note, more);
  } catch (error) { if (run === state.lookupRun) out.replaceChildren(el("p", error.message, "error")); }
}

start();
