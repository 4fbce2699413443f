// shopsimrl view: charts (plotly.js, served from the installed plotly package), live refresh, group filters.
// Every string shown comes from the server already escaped (HTML) or is set as text, never as HTML.
"use strict";

const COLORS = {kept: "#2a9d8f", fallback: "#8ab17d", "zero-spread": "#e9c46a", technical: "#e76f51",
                surplus: "#8d99ae", aborted: "#6c757d"};
const LAYOUT = {margin: {l: 55, r: 10, t: 35, b: 45}, height: 300, legend: {font: {size: 10}},
                font: {size: 11}, hovermode: "closest"};
const CONFIG = {displaylogo: false, responsive: true};

function refreshSeconds() {
  // the server's REFRESH_SECONDS (shopsimrl/webview/app.py), handed over on the page
  return Number(document.body.dataset.refreshSeconds) || 5;
}

async function drawCharts(box) {
  const runs = JSON.parse(box.dataset.runs);
  const query = runs.map((r) => "run=" + encodeURIComponent(r)).join("&");
  const response = await fetch("/api/charts?" + query);
  const data = await response.json();
  for (const chart of data.charts) {
    let div = document.getElementById("chart-" + chart.id);
    if (!div) {
      div = document.createElement("div");
      div.id = "chart-" + chart.id;
      div.className = "chart";
      box.appendChild(div);
    }
    const traces = chart.traces.map((t) => ({x: t.x, y: t.y, name: t.name, type: "scatter", mode: "lines+markers",
                                             line: t.dash ? {dash: t.dash} : {}}));
    const layout = Object.assign({}, LAYOUT, {title: {text: chart.title, font: {size: 13}},
                                 xaxis: {title: {text: chart.xlabel}}, yaxis: {title: {text: chart.ylabel}}});
    Plotly.react(div, traces, layout, CONFIG);
  }
  box.dataset.drawn = String(data.charts.length);
  const errors = document.getElementById("chart-errors");
  if (errors) {
    errors.textContent = data.errors.join("\n");
  }
}

function drawTimeline(div, data) {
  // one bar per group, from its wave's opening to its end (finished, or cancelled if aborted), by verdict
  const byVerdict = {};
  for (const g of data.groups) {
    (byVerdict[g.v] = byVerdict[g.v] || []).push(g);
  }
  const traces = Object.keys(byVerdict).map((v) => {
    const x = [], y = [], text = [];
    for (const g of byVerdict[v]) {
      const start = g.s === null ? g.t : g.s;
      x.push(start, g.t, null);
      y.push(g.i, g.i, null);
      text.push(g.p, g.p, null);
    }
    return {x, y, text, name: v, type: "scatter", mode: "lines+markers", line: {color: COLORS[v] || "#333", width: 3},
            marker: {size: 4}, hovertemplate: "group %{y}<br>%{text}<br>%{x:.2f} s<extra>" + v + "</extra>"};
  });
  const shapes = data.waves.map((t) => ({type: "line", x0: t, x1: t, yref: "paper", y0: 0, y1: 1,
                                         line: {color: "#999", dash: "dot"}}));
  const layout = Object.assign({}, LAYOUT, {title: {text: "groups from their wave's opening (dotted) to their end",
                                                    font: {size: 13}},
                               xaxis: {title: {text: "seconds into the step"}}, yaxis: {title: {text: "group"}}, shapes});
  Plotly.newPlot(div, traces, layout, CONFIG);
  div.dataset.drawn = String(traces.length);
}

function drawPrompt(div, data) {
  const traces = [{x: data.steps, y: data.means, text: data.verdicts, name: "mean reward", type: "scatter",
                   mode: "markers", marker: {size: 10, color: data.verdicts.map((v) => COLORS[v] || "#333")},
                   hovertemplate: "step %{x}<br>mean reward %{y:.2f}<br>%{text}<extra></extra>"}];
  if (data.skipped.length) {
    traces.push({x: data.skipped, y: data.skipped.map(() => 0), name: "skipped by the selection", type: "scatter",
                 mode: "markers", marker: {symbol: "x", size: 11, color: "#6c757d"}});
  }
  const weighted = data.weights.map((w, i) => [data.steps[i], w]).filter((p) => p[1] !== null);
  if (weighted.length) {
    traces.push({x: weighted.map((p) => p[0]), y: weighted.map((p) => p[1]), name: "weight", yaxis: "y2",
                 type: "scatter", mode: "lines+markers", line: {dash: "dot"}});
  }
  const layout = Object.assign({}, LAYOUT, {title: {text: "outcomes over the run (colour: verdict)", font: {size: 13}},
                               xaxis: {title: {text: "step"}}, yaxis: {title: {text: "mean reward"}, range: [-0.05, 1.05]},
                               yaxis2: {title: {text: "weight"}, overlaying: "y", side: "right"}});
  Plotly.newPlot(div, traces, layout, CONFIG);
  div.dataset.drawn = String(traces.length);
}

function filterGroups() {
  const verdict = document.getElementById("f-verdict").value;
  const low = parseFloat(document.getElementById("f-min").value);
  const high = parseFloat(document.getElementById("f-max").value);
  const prompt = document.getElementById("f-prompt").value.trim();
  let shown = 0;
  for (const row of document.querySelectorAll("#groups tbody tr")) {
    const reward = row.dataset.reward === "" ? NaN : parseFloat(row.dataset.reward);
    const ok = (!verdict || row.dataset.verdict === verdict)
      && (isNaN(low) || reward >= low) && (isNaN(high) || reward <= high)
      && (!prompt || row.dataset.prompt.includes(prompt));
    row.hidden = !ok;
    shown += ok ? 1 : 0;
  }
  document.getElementById("group-count").textContent = String(shown);
  const params = new URLSearchParams();
  if (verdict) params.set("verdict", verdict);
  if (!isNaN(low)) params.set("min", String(low));
  if (!isNaN(high)) params.set("max", String(high));
  if (prompt) params.set("prompt", prompt);
  history.replaceState(null, "", params.toString() ? "?" + params.toString() : location.pathname);
}

function setUpFilters() {
  const params = new URLSearchParams(location.search);
  document.getElementById("f-verdict").value = params.get("verdict") || "";
  document.getElementById("f-min").value = params.get("min") || "";
  document.getElementById("f-max").value = params.get("max") || "";
  document.getElementById("f-prompt").value = params.get("prompt") || "";
  for (const id of ["f-verdict", "f-min", "f-max", "f-prompt"]) {
    document.getElementById(id).addEventListener("input", filterGroups);
  }
  document.getElementById("filters").addEventListener("submit", (e) => e.preventDefault());
  filterGroups();
}

async function refreshFragment(box) {
  const response = await fetch(box.dataset.refresh);
  if (response.ok) {
    box.innerHTML = await response.text();  // server-rendered, every string escaped by the template
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const charts = document.getElementById("charts");
  if (charts) {
    drawCharts(charts);
    if (charts.dataset.live === "yes") setInterval(() => drawCharts(charts), refreshSeconds() * 1000);
  }
  const timeline = document.getElementById("timeline");
  if (timeline) drawTimeline(timeline, JSON.parse(document.getElementById("timeline-data").textContent));
  const prompt = document.getElementById("prompt-chart");
  if (prompt) drawPrompt(prompt, JSON.parse(document.getElementById("prompt-data").textContent));
  if (document.getElementById("filters")) setUpFilters();
  for (const box of document.querySelectorAll("[data-refresh]")) {
    setInterval(() => refreshFragment(box), refreshSeconds() * 1000);
  }
});
