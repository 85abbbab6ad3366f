// The Weir console: a tenant's pipelines from the /v1 API, with live charts of the selected
// one's progress records (Spark's Structured Streaming tab: input rate, process rate, batch
// duration, watermark lag). The token lives in this tab's sessionStorage only.
"use strict";

const POLL_MS = 1000;
const KEEP_POINTS = 300;
let token = sessionStorage.getItem("weir-token");
let selected = null;
let after = 0;
let series = null;
let charts = {};

async function api(method, path) {
  const r = await fetch(path, { method, headers: { Authorization: "Bearer " + token } });
  const text = await r.text();
  const body = text ? JSON.parse(text) : null;
  if (!r.ok) throw new Error((body && body.error) || r.statusText);
  return body;
}

function el(id) { return document.getElementById(id); }

function showError(e) { el("error").textContent = e ? String(e.message || e) : ""; }

function fmt(n, digits) { return n == null ? "" : Number(n).toFixed(digits); }

function chart(id, title, unit) {
  const opts = {
    title, width: 500, height: 200,
    scales: { x: { time: true } },
    // Room for labels such as 1,250,000.
    axes: [{}, { size: 80 }],
    series: [{}, { label: unit, stroke: "#3366cc", width: 2 }],
  };
  return new uPlot(opts, [[], []], el(id));
}

function resetCharts() {
  for (const c of Object.values(charts)) c.destroy();
  series = { t: [], input: [], process: [], duration: [], lag: [] };
  charts = {
    input: chart("chart-input", "Input rate", "rows/s"),
    process: chart("chart-process", "Process rate", "rows/s"),
    duration: chart("chart-duration", "Batch duration", "ms"),
    lag: chart("chart-lag", "Watermark lag", "s"),
  };
}

function addPoint(p) {
  const t = Date.parse(p.timestamp) / 1000;
  series.t.push(t);
  series.input.push(p.inputRowsPerSecond);
  series.process.push(p.processedRowsPerSecond);
  series.duration.push(p.durationMs ? p.durationMs.totalMs : null);
  series.lag.push(p.watermark == null ? null : (Date.parse(p.timestamp) - p.watermark) / 1000);
  for (const k of Object.keys(series)) if (series[k].length > KEEP_POINTS) series[k].shift();
}

function drawCharts() {
  for (const k of ["input", "process", "duration", "lag"]) charts[k].setData([series.t, series[k]]);
  el("detail").dataset.points = String(series.t.length);
}

// Rows are updated in place, one per pipeline, so a row being clicked is never replaced
// under the pointer.
async function refreshList() {
  const { pipelines } = await api("GET", "/v1/pipelines");
  const body = el("pipelines").querySelector("tbody");
  const seen = new Set();
  for (const p of pipelines) {
    seen.add(p.name);
    let tr = body.querySelector(`tr[data-name="${CSS.escape(p.name)}"]`);
    if (!tr) {
      tr = document.createElement("tr");
      tr.dataset.name = p.name;
      for (let i = 0; i < 6; i++) tr.appendChild(document.createElement("td"));
      tr.onclick = () => select(p.name);
      body.appendChild(tr);
    }
    tr.className = "pick" + (p.name === selected ? " selected" : "");
    const g = p.progress || {};
    const cells = [p.name, p.state, p.desired, fmt(g.inputRowsPerSecond, 0), g.watermarkTime || "", g.batchId];
    cells.forEach((v, i) => { tr.children[i].textContent = v == null ? "" : v; });
    tr.children[1].className = "state-" + p.state;
  }
  for (const tr of [...body.children]) if (!seen.has(tr.dataset.name)) tr.remove();
}

async function refreshDetail() {
  if (!selected) return;
  const name = encodeURIComponent(selected);
  const { progress } = await api("GET", `/v1/pipelines/${name}/progress?after=${after}`);
  for (const p of progress) { addPoint(p); after = p.seq; }
  if (progress.length) drawCharts();
  const last = progress[progress.length - 1];
  if (last && last.plugins) {
    const body = el("plugins").querySelector("tbody");
    body.innerHTML = "";
    for (const [stage, m] of Object.entries(last.plugins)) {
      const tr = document.createElement("tr");
      for (const v of [stage, m.calls, m.errors, m.fuel, m.memoryHighWaterBytes]) {
        const td = document.createElement("td"); td.textContent = v; tr.appendChild(td);
      }
      body.appendChild(tr);
    }
  }
  const { dead_letters } = await api("GET", `/v1/pipelines/${name}/dead-letters?n=10`);
  el("dead-letters").textContent = dead_letters.map((d) => JSON.stringify(d)).join("\n") || "(none)";
}

function select(name) {
  selected = name;
  after = 0;
  el("detail").hidden = false;
  el("detail-name").textContent = name;
  el("action-result").textContent = "";
  resetCharts();
  tick();
}

async function act(action) {
  try {
    const p = await api("POST", `/v1/pipelines/${encodeURIComponent(selected)}/${action}`);
    el("action-result").textContent = `${action}: ${p.desired}, ${p.state}`;
    await refreshList();
  } catch (e) { showError(e); }
}

async function tick() {
  try {
    await refreshList();
    await refreshDetail();
    showError(null);
  } catch (e) { showError(e); }
}

async function signIn(t) {
  token = t;
  try {
    await api("GET", "/v1/pipelines");
  } catch (e) { showError(e); return; }
  sessionStorage.setItem("weir-token", token);
  el("login").hidden = true;
  el("app").hidden = false;
  el("who").textContent = "signed in";
  tick();
  setInterval(tick, POLL_MS);
}

el("login").onsubmit = (e) => { e.preventDefault(); signIn(el("token").value.trim()); };
for (const a of ["start", "stop", "pause", "resume"]) el(a).onclick = () => act(a);
if (token) signIn(token);
