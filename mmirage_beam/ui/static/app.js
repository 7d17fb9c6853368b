// mmirage ui: the dashboard page. Plain JS, no dependency; charts are SVG drawn here.
// Views: #/runs, #/run/<config>/<run_id>, #/spend. Data: the server's /api/* JSON.
"use strict";

const main = document.getElementById("main");
const tokenInput = document.getElementById("token");
let timer = null; // the pending refresh of a run in flight
let shown = 0; // increments on each navigation: a late answer of an older view is dropped
let lastAction = { run: null, text: "", cls: "" }; // kept across the refreshes of a run

// The launch link carries the token in the fragment (never sent to the server).
(function takeToken() {
  const m = location.hash.match(/token=([A-Za-z0-9_-]+)/);
  if (m) {
    sessionStorage.setItem("mmirage-token", m[1]);
    history.replaceState(null, "", location.pathname + "#/runs");
  }
  tokenInput.value = sessionStorage.getItem("mmirage-token") || "";
  tokenInput.addEventListener("change", () =>
    sessionStorage.setItem("mmirage-token", tokenInput.value.trim()));
})();

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

const svgNS = "http://www.w3.org/2000/svg";
function svg(tag, attrs, text) {
  const node = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

async function getJSON(url) {
  const r = await fetch(url, { headers: { Accept: "application/json" } });
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

async function post(url, body) {
  const r = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Mmirage-Token": tokenInput.value.trim() },
    body: JSON.stringify(body || {}),
  });
  const answer = await r.json();
  if (!r.ok) throw new Error(`${r.status}: ${answer.error || r.statusText}`);
  return answer;
}

const usd = (x, plus) => x === null || x === undefined ? "-" :
  (x >= 1 ? "$" + x.toFixed(2) : "$" + x.toFixed(4)) + (plus ? "+" : "");
const num = (x) => x === null || x === undefined ? "-" : x.toLocaleString("en-US");
const when = (iso) => iso ? iso.slice(0, 19).replace("T", " ") : "-";
const statusTag = (s) => el("span", { class: "status " + s.replace(/[ ()]/g, "-") }, s);
const runLink = (cfg, id) => el("a", { href: `#/run/${cfg}/${encodeURIComponent(id)}` }, id);

function tokens(t, a, b) {
  return t ? `${num(t[a])} in / ${num(t[b])} out` : "-";
}
// the estimate: input tokens and the output-token upper bound (none when a request set no limit)
function estTokens(t) {
  if (!t) return "-";
  return `${num(t.input)} in / ` + (t.max_output === null ? "out unbounded" : `≤ ${num(t.max_output)} out`);
}

// -- Runs -------------------------------------------------------------------------
async function showRuns(me) {
  const view = await getJSON("/api/runs");
  if (me !== shown) return;
  const head = el("tr", {},
    view.columns.map((c, i) => el("th", { class: i >= 4 ? "num" : null }, c)),
    el("th", {}, "provider"), el("th", {}, "model"), el("th", {}, "batches by status"),
    el("th", { class: "num" }, "done"), el("th", {}, "est. tokens"),
    el("th", {}, "used tokens"), el("th", {}, "ended"));
  const rows = view.runs.map((r) => el("tr", { "data-run": r.run_id, "data-config": r.config },
    r.cells.map((c, i) => el("td", { "data-col": view.columns[i], class: i >= 4 ? "num" : null },
      i === 0 ? runLink(r.config, c) : c)),
    el("td", {}, r.provider), el("td", {}, r.model || "default"),
    el("td", {}, Object.entries(r.by_status).map(([s, n]) => [statusTag(s), ` ${n} `])),
    el("td", { class: "num" }, num(r.done)),
    el("td", {}, estTokens(r.estimated_tokens)),
    el("td", {}, tokens(r.used_tokens, "input", "output")),
    el("td", {}, when(r.ended))));
  main.replaceChildren(el("h1", {}, "Runs"),
    ...(view.notices || []).map((n) => el("p", { class: "notice" }, n)),
    view.runs.length ? el("table", { id: "runs-table" }, el("thead", {}, head), el("tbody", {}, rows))
      : el("p", { class: "muted", id: "no-runs" }, "No run under these configs' state yet."));
}

// -- One run ----------------------------------------------------------------------
async function showRun(me, cfg, runId) {
  const base = `/api/runs/${cfg}/${encodeURIComponent(runId)}`;
  const view = await getJSON(base);
  if (me !== shown) return;
  const batches = view.batches.map((b) => {
    const total = b.total || 0, done = b.done || 0, failed = b.failed || 0;
    const pct = total ? Math.round(100 * (done + failed) / total) : 0;
    return el("tr", { "data-batch": b.provider_batch_id },
      el("td", {}, b.run_id), el("td", {}, b.provider), el("td", {}, b.provider_batch_id),
      el("td", {}, b.chunk_id), el("td", {}, b.output_name || "-"),
      el("td", { class: "batch-status" }, statusTag(b.status)),
      el("td", {}, b.provider_status || "-"),
      el("td", {}, el("span", { class: "bar", title: `${pct}%` },
        el("span", { style: `width:${pct}%` })), `${num(b.done)} done, ${num(b.failed)} failed of ${num(b.total)}`),
      el("td", { class: "num" }, b.age_secs === null ? "-" : `${Math.round(b.age_secs)}s`),
      el("td", {}, b.detail || ""));
  });
  const f = view.failures;
  let failures;
  if (!f.merged) {
    failures = el("p", { class: "muted" }, "Not merged yet: the failed rows are listed once `mmirage merge` has run.");
  } else if (!Object.keys(f.by_type).length) {
    failures = el("p", { id: "no-failures" }, `Merged ${when(f.merged_at)}: no failed row.`);
  } else {
    const rowsBox = el("div", { id: "failed-rows-box" });
    failures = el("div", {},
      el("p", {}, `Merged ${when(f.merged_at)}; errors file ${f.errors_path}; ${num(f.retryable)} retryable.`),
      el("table", { id: "failure-types" },
        el("tr", {}, el("th", {}, "error type"), el("th", { class: "num" }, "rows"), el("th", {}, "")),
        Object.entries(f.by_type).map(([t, n]) => el("tr", { "data-type": t },
          el("td", {}, t), el("td", { class: "num" }, num(n)),
          el("td", {}, el("button", { onclick: () => showFailedRows(base, t, rowsBox) }, "show rows"))))),
      rowsBox);
  }
  const said = lastAction.run === base ? lastAction : { text: "", cls: "" };
  const msg = el("span", { id: "action-result", class: said.cls }, said.text);
  const say = (text, cls) => {
    lastAction = { run: base, text, cls };
    const now = document.getElementById("action-result");
    if (now) { now.textContent = text; now.className = cls; }
  };
  const act = (what, body) => async () => {
    say(`${what}…`, "");
    try {
      const r = await post(`${base}/${what}`, body);
      say(what === "cancel"
        ? `cancel: asked for ${r.batches.length} batch(es), ${r.refused} refused`
        : `resubmit: exit ${r.exit_code}, new run ${r.new_run_id || "-"}`, "");
    } catch (e) {
      say(e.message, "error");
    }
  };
  main.replaceChildren(
    el("h1", {}, "Run ", el("span", { id: "run-id" }, runId),
      view.runs.length > 1 ? el("span", { class: "muted" }, ` (with ${view.runs.slice(1).join(", ")})`) : null),
    el("p", { class: "muted" }, `${view.provider} · ${view.model || "default model"} · ${view.config_path}`),
    el("div", {},
      el("button", { id: "cancel", onclick: act("cancel") }, "Cancel unfinished batches"),
      el("button", { id: "resubmit", onclick: act("resubmit", { only: "retryable" }) }, "Resubmit retryable failures"),
      msg),
    el("h2", {}, "Batches ", el("span", { class: "muted", id: "refreshed" },
      view.in_flight ? `(in flight: refreshing every ${view.refresh_ms / 1000}s)` : "(every batch has ended)")),
    el("table", { id: "batches" },
      el("tr", {}, ["run", "provider", "batch", "chunk", "output", "status", "provider status",
        "progress", "age", "detail"].map((h) => el("th", {}, h))), batches),
    el("h2", {}, "Failures"), failures);
  document.getElementById("footer").textContent = `updated ${new Date().toLocaleTimeString()}`;
  if (view.in_flight) timer = setTimeout(() => me === shown && showRun(me, cfg, runId).catch(fail(me)), view.refresh_ms);
}

async function showFailedRows(base, type, box) {
  const view = await getJSON(`${base}/failures?type=${encodeURIComponent(type)}`);
  box.replaceChildren(el("h2", {}, `${type}: ${num(view.total)} row(s)`,
      view.total > view.rows.length ? ` (first ${view.rows.length})` : ""),
    el("table", { id: "failed-rows" },
      el("tr", {}, ["source_index", "output", "error type", "message", "prompt", "row"].map((h) => el("th", {}, h))),
      view.rows.map((r) => el("tr", { "data-source-index": r.source_index },
        el("td", { class: "num" }, r.source_index), el("td", {}, r.output_name || "-"),
        el("td", {}, r.error_type), el("td", { class: "message" }, r.message || ""),
        // the prompt as text (a text node: never parsed as HTML), cut ones say so
        el("td", {}, r.prompt == null ? "-" : el("details", { class: "prompt" }, el("summary", {}, "prompt"),
          el("pre", { class: "prompt" }, r.prompt,
            r.prompt_chars ? `\n[first ${num(r.prompt.length)} of ${num(r.prompt_chars)} characters]` : ""))),
        el("td", {}, r.row ? el("details", {}, el("summary", {}, "merged row"),
          el("pre", { class: "row" }, JSON.stringify(r.row, null, 1))) : "-")))));
}

// -- Spend ------------------------------------------------------------------------
function barChart(id, groups, labelKey) {
  const w = 560, rowH = 34, left = 110, h = groups.length * rowH + 30;
  const max = Math.max(1e-9, ...groups.flatMap((g) => [g.estimated_usd, g.actual_usd]));
  const chart = svg("svg", { id, width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img" });
  groups.forEach((g, i) => {
    const y = 10 + i * rowH;
    chart.append(svg("text", { x: 0, y: y + 16 }, g[labelKey]));
    [["estimated_usd", "#9bb7e0"], ["actual_usd", "#3d8b5a"]].forEach(([k, color], j) => {
      const bw = Math.max(1, (w - left - 90) * g[k] / max);
      const bar = svg("rect", { x: left, y: y + j * 12, width: bw, height: 11, fill: color, "data-key": k });
      bar.append(svg("title", {}, `${g[labelKey]} ${k.replace("_usd", "")}: ${usd(g[k])}`));
      chart.append(bar, svg("text", { x: left + bw + 4, y: y + j * 12 + 9 }, usd(g[k])));
    });
  });
  return chart;
}

async function showSpend(me) {
  const view = await getJSON("/api/spend");
  if (me !== shown) return;
  const legend = el("p", { class: "legend" }, el("span", { style: "background:#9bb7e0" }), "estimated",
    el("span", { style: "background:#3d8b5a" }), "actual (merged runs)");
  main.replaceChildren(el("h1", {}, "Spend"),
    el("div", { class: "cards" },
      el("div", { class: "card" }, "actual", el("b", { id: "total-actual" }, usd(view.total.actual_usd))),
      el("div", { class: "card" }, "estimated", el("b", { id: "total-estimated" }, usd(view.total.estimated_usd))),
      el("div", { class: "card" }, "runs", el("b", {}, num(view.total.runs)))),
    legend,
    el("h2", {}, "By day (UTC, the run's start)"), barChart("by-day", view.by_day, "day"),
    el("h2", {}, "By provider"), barChart("by-provider", view.by_provider, "provider"),
    el("h2", {}, "Ledger"),
    el("table", { id: "ledger" },
      el("tr", {}, ["day", "run", "provider", "model", "state", "est. tokens", "used tokens", "est. cost", "actual cost"]
        .map((h, i) => el("th", { class: i >= 7 ? "num" : null }, h))),
      view.runs.map((r) => el("tr", {},
        el("td", {}, r.day), el("td", {}, runLink(r.config, r.run_id)), el("td", {}, r.provider),
        el("td", {}, r.model || "default"), el("td", {}, r.state),
        el("td", {}, estTokens(r.estimated_tokens)),
        el("td", {}, tokens(r.used_tokens, "input", "output")),
        el("td", { class: "num" }, usd(r.estimated_usd, r.estimate_is_lower_bound)),
        el("td", { class: "num" }, usd(r.actual_usd))))));
}

// -- Routing ----------------------------------------------------------------------
function fail(me) {
  return (e) => {
    if (me === shown) main.replaceChildren(el("p", { class: "error", id: "error" }, String(e.message || e)));
  };
}

function route() {
  clearTimeout(timer);
  const me = ++shown;
  const hash = location.hash || "#/runs";
  document.getElementById("nav-runs").className = hash.startsWith("#/spend") ? "" : "active";
  document.getElementById("nav-spend").className = hash.startsWith("#/spend") ? "active" : "";
  const run = hash.match(/^#\/run\/(\d+)\/(.+)$/);
  const p = run ? showRun(me, run[1], decodeURIComponent(run[2]))
    : hash.startsWith("#/spend") ? showSpend(me) : showRuns(me);
  p.catch(fail(me));
}

window.addEventListener("hashchange", route);
route();
