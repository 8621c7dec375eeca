// Plexus console: a small hash-routed single page over the JSON API under /api/.
// Plain JS, no framework, no build step: the file is embedded into the binary as is.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const main = $("#main");
const REFRESH_MS = 1000;

// ---- helpers -------------------------------------------------------------------------------

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function enc(s) { return encodeURIComponent(s); }
function pill(status) { return `<span class="pill st-${esc(status)}">${esc(status)}</span>`; }
// A run's badge: its outcome (running / succeeded / failed (N nodes) / stopped (reason)).
function outcomePill(r) { return `<span class="pill st-${esc(r.outcome)}" data-outcome="${esc(r.outcome)}">${esc(r.outcome_text)}</span>`; }
function fmtTime(ms) {
  if (ms == null) return "";
  const d = new Date(ms);
  const p = (n, w = 2) => String(n).padStart(w, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}
function fmtDur(ms) {
  if (ms == null) return "";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  const m = Math.floor(ms / 60000), s = Math.round((ms % 60000) / 1000);
  return `${m} min ${s} s`;
}
function plural(n, one, many = `${one}s`) { return `${n} ${n === 1 ? one : many}`; }
function fmtNum(n) { return n == null ? "" : Number(n).toLocaleString("en-US"); }

let toastTimer = null;
function toast(msg, bad = false) {
  const t = $("#toast");
  t.textContent = msg;
  t.className = bad ? "toast bad" : "toast";
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.hidden = true; }, bad ? 8000 : 3500);
}

// An API error: the server's message and, for a refused script, every validation error.
class ApiError extends Error {
  constructor(status, body) {
    super(body && body.error ? body.error : `HTTP ${status}`);
    this.status = status;
    this.errors = (body && body.errors) || [];
  }
}

// The token never lives in this page: the server keeps it in an HttpOnly, SameSite=Strict
// cookie (set by the console link or by signing in), sent with same-origin requests only.
// State changes are JSON, as the server insists.
async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  const writes = method !== "GET" && method !== "HEAD";
  if (writes) headers["Content-Type"] = "application/json";
  if (writes && body === undefined) body = {};
  const resp = await fetch(`/api${path}`, { method, headers, credentials: "same-origin", body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = { error: text }; }
  if (!resp.ok) throw new ApiError(resp.status, data);
  return data;
}

// A state-changing call; on 401 asks for the token once and tries again.
async function write(method, path, body) {
  try {
    return await api(method, path, body);
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      const ok = await askToken(e.message);
      if (ok) return await api(method, path, body);
    }
    throw e;
  }
}

// ---- dialogs ------------------------------------------------------------------------------

const dialog = $("#dialog");
const dform = $("#dialog-form");

function openDialog(html, onReady) {
  dform.innerHTML = html;
  if (!dialog.open) dialog.showModal();
  if (onReady) onReady(dform);
  const first = dform.querySelector("input,textarea");
  if (first) first.focus();
}
function closeDialog() { if (dialog.open) dialog.close(); }
dialog.addEventListener("cancel", () => { dform.innerHTML = ""; });

function errorBox(e) {
  const list = (e.errors || []).map((x) => `<li class="error">${esc(x)}</li>`).join("");
  return `<div class="errors-box" id="dialog-errors"><strong>${esc(e.message)}</strong>${list ? `<ul>${list}</ul>` : ""}</div>`;
}

function askToken(why) {
  return new Promise((resolve) => {
    openDialog(`
      <h3>API token</h3>
      <p class="muted">${esc(why || "Start, stop and drop need the console token of this server: open the link planner serve printed, or give the token (PLEXUS_CONSOLE_TOKEN, --token-file, or the peer's console.token).")}</p>
      <label>Token<input id="token-input" type="password" autocomplete="off" value=""></label>
      <div class="actions">
        <button type="button" id="token-cancel">Cancel</button>
        <button type="button" class="primary" id="token-save">Save</button>
      </div>`, (f) => {
      $("#token-cancel", f).onclick = () => { closeDialog(); resolve(false); };
      $("#token-save", f).onclick = async () => {
        const v = $("#token-input", f).value.trim();
        try {
          if (v) await api("POST", "/session", { token: v }); else await api("DELETE", "/session");
          $("#token-btn").hidden = !!v;
          closeDialog();
          resolve(!!v);
        } catch (e) {
          toast(e.message, true);
        }
      };
    });
  });
}
$("#token-btn").onclick = () => askToken();

function startDialog(keyspace) {
  const remembered = JSON.parse(localStorage.getItem(`plexus.start.${keyspace || ""}`) || "{}");
  openDialog(`
    <h3>Start a run</h3>
    <label>Keyspace<input id="start-keyspace" required pattern="[A-Za-z0-9_]+" value="${esc(keyspace || "")}" ${keyspace ? "readonly" : ""} placeholder="my_keyspace"></label>
    <label>Script URL (path, file://, http(s)://, s3://, sftp://)<input id="start-script" required value="${esc(remembered.script_url || "")}" placeholder="/data/cfg/script.json"></label>
    <label>Params URL (optional)<input id="start-params" value="${esc(remembered.params_url || "")}" placeholder="/data/cfg/script_params.json"></label>
    <label>Start nodes, comma-separated (empty: every node that reads files)<input id="start-nodes" value="${esc(remembered.start_nodes || "")}" placeholder="read_orders,read_order_items"></label>
    <label>Description<input id="start-desc" value="" placeholder="what this run is for"></label>
    <div id="start-feedback"></div>
    <div class="actions">
      <button type="button" id="start-cancel">Cancel</button>
      <button type="button" class="primary" id="start-review">Review…</button>
    </div>`, (f) => {
    $("#start-cancel", f).onclick = closeDialog;
    const btn = $("#start-review", f);
    // Review first; any edit after the review (or after a refusal) asks for a new review, so
    // what starts is always what was confirmed.
    const toReview = () => {
      btn.textContent = "Review…";
      btn.id = "start-review";
      btn.disabled = false;
      btn.onclick = review;
    };
    const review = () => {
      const req = readStart(f);
      if (!req) return;
      $("#start-feedback", f).innerHTML = `<div class="confirm" id="start-summary">Start a new run in keyspace <b class="mono">${esc(req.keyspace)}</b> of
        <span class="mono">${esc(req.script_url)}</span>${req.params_url ? ` with params <span class="mono">${esc(req.params_url)}</span>` : ""},
        start nodes: <span class="mono">${esc(req.start_nodes || "every file reader")}</span>. The script is validated first.</div>`;
      btn.textContent = "Start run";
      btn.id = "start-confirm";
      btn.onclick = () => submitStart(f, req);
    };
    for (const input of f.querySelectorAll("input")) {
      input.addEventListener("input", () => { if (btn.id === "start-confirm") toReview(); });
    }
    toReview();
  });
}

function readStart(f) {
  const req = {
    keyspace: $("#start-keyspace", f).value.trim(),
    script_url: $("#start-script", f).value.trim(),
    params_url: $("#start-params", f).value.trim(),
    start_nodes: $("#start-nodes", f).value.trim(),
    description: $("#start-desc", f).value.trim(),
  };
  const problems = [];
  if (!/^[A-Za-z0-9_]+$/.test(req.keyspace)) problems.push("the keyspace name must be letters, digits and _");
  if (!req.script_url) problems.push("the script URL is required");
  if (problems.length) {
    $("#start-feedback", f).innerHTML = errorBox({ message: "Fix these first:", errors: problems });
    return null;
  }
  return req;
}

async function submitStart(f, req) {
  const btn = $("#start-confirm", f);
  btn.disabled = true;
  btn.textContent = "Validating…";
  try {
    const body = { script_url: req.script_url, params_url: req.params_url || null, start_nodes: req.start_nodes, description: req.description };
    const r = await write("POST", `/keyspaces/${enc(req.keyspace)}/runs`, body);
    localStorage.setItem(`plexus.start.${req.keyspace}`, JSON.stringify(req));
    closeDialog();
    toast(`Run ${r.run_id} started in ${req.keyspace}` + ((r.warnings || []).length ? ` (${r.warnings.join("; ")})` : ""));
    if (location.hash !== `#/ks/${req.keyspace}`) location.hash = `#/ks/${req.keyspace}`; else route();
  } catch (e) {
    if (!dialog.open) dialog.showModal();
    $("#start-feedback", f).innerHTML = errorBox(e);
    btn.disabled = false;
    btn.textContent = "Start run";
  }
}

function stopDialog(keyspace, runId) {
  openDialog(`
    <h3>Stop run ${esc(runId)} of ${esc(keyspace)}?</h3>
    <div class="confirm">Batches already running finish; every batch not started yet is marked <b>stopreceived</b>. A stopped run cannot be resumed; later runs that depend on it see it as not successful.</div>
    <label>Comment (recorded in the run history)<input id="stop-comment" value="stopped from the console"></label>
    <div id="stop-feedback"></div>
    <div class="actions">
      <button type="button" id="stop-cancel">Keep running</button>
      <button type="button" class="danger" id="stop-confirm">Stop run ${esc(runId)}</button>
    </div>`, (f) => {
    $("#stop-cancel", f).onclick = closeDialog;
    $("#stop-confirm", f).onclick = async () => {
      const btn = $("#stop-confirm", f);
      btn.disabled = true;
      try {
        await write("POST", `/keyspaces/${enc(keyspace)}/runs/${enc(runId)}/stop`, { comment: $("#stop-comment", f).value });
        closeDialog();
        toast(`Run ${runId} stopped`);
        route();
      } catch (e) {
        if (!dialog.open) dialog.showModal();
        $("#stop-feedback", f).innerHTML = errorBox(e);
        btn.disabled = false;
      }
    };
  });
}

function dropDialog(keyspace) {
  openDialog(`
    <h3>Drop keyspace ${esc(keyspace)}?</h3>
    <div class="confirm">Every table of every run and the whole run history of <b class="mono">${esc(keyspace)}</b> are deleted. This cannot be undone.</div>
    <label>Type the keyspace name to confirm<input id="drop-name" autocomplete="off"></label>
    <div id="drop-feedback"></div>
    <div class="actions">
      <button type="button" id="drop-cancel">Cancel</button>
      <button type="button" class="danger" id="drop-confirm" disabled>Drop keyspace</button>
    </div>`, (f) => {
    const input = $("#drop-name", f), btn = $("#drop-confirm", f);
    input.oninput = () => { btn.disabled = input.value !== keyspace; };
    $("#drop-cancel", f).onclick = closeDialog;
    btn.onclick = async () => {
      btn.disabled = true;
      try {
        await write("DELETE", `/keyspaces/${enc(keyspace)}`);
        closeDialog();
        toast(`Keyspace ${keyspace} dropped`);
        location.hash = "#/";
      } catch (e) {
        if (!dialog.open) dialog.showModal();
        $("#drop-feedback", f).innerHTML = errorBox(e);
        btn.disabled = false;
      }
    };
  });
}

// ---- pages --------------------------------------------------------------------------------

let info = { backend: "", writes: {} };
let generation = 0; // bumped on every navigation: stale refresh timers stop themselves
let timer = null;

function crumbs(parts) {
  $("#crumbs").innerHTML = parts
    .map(([label, href]) => (href ? `<a href="${href}">${esc(label)}</a>` : `<span>${esc(label)}</span>`))
    .join(`<span class="sep">/</span>`);
}
function setLive(on) { $("#live").hidden = !on; }

// Renders `render()` now and again every REFRESH_MS while it returns true (a run is going).
async function refreshing(render) {
  const gen = ++generation;
  clearTimeout(timer);
  const tick = async () => {
    if (gen !== generation) return;
    let again = false;
    try {
      again = await render();
    } catch (e) {
      if (gen !== generation) return;
      main.innerHTML = `<div class="errors-box" id="page-error"><strong>${esc(e.message)}</strong>${(e.errors || []).map((x) => `<div class="error">${esc(x)}</div>`).join("")}</div>`;
      again = false;
    }
    if (gen !== generation) return;
    setLive(again);
    if (again) timer = setTimeout(tick, REFRESH_MS);
  };
  await tick();
}

async function pageKeyspaces() {
  crumbs([["keyspaces", null]]);
  await refreshing(async () => {
    const data = await api("GET", "/keyspaces");
    const cards = data.keyspaces.map((k) => `
      <a class="card ks-card" href="#/ks/${enc(k.name)}" data-keyspace="${esc(k.name)}">
        <div class="name">${esc(k.name)}</div>
        <div class="meta">${k.last_run ? `${pill(k.last_outcome)} run ${k.last_run} of ${k.runs}` : `<span class="muted">no runs</span>`}
          <span>${esc(fmtTime(k.last_ts_ms))}</span></div>
      </a>`).join("");
    main.innerHTML = `
      <h1>Keyspaces <span class="sub">${data.keyspaces.length} in this store</span>
        <span class="toolbar">${info.writes.start ? `<button class="primary" id="new-run">Start a run…</button>` : ""}</span></h1>
      ${data.keyspaces.length ? `<div class="cards" id="keyspaces">${cards}</div>` : `<div class="panel empty" id="keyspaces">No keyspace yet. Start a run to create one.</div>`}`;
    const nr = $("#new-run");
    if (nr) nr.onclick = () => startDialog("");
    return data.keyspaces.some((k) => k.last_status === "start");
  });
}

function cellText(c) {
  if (c.status === "start") return `${c.done + c.failed}/${c.batches_total}`;
  if (c.status === "none") return "·";
  return c.status === "success" ? "✓" : c.status === "fail" ? "✗" : "■";
}

async function pageMatrix(ks) {
  crumbs([["keyspaces", "#/"], [ks, null]]);
  await refreshing(async () => {
    const m = await api("GET", `/keyspaces/${enc(ks)}/runs`);
    const runs = m.runs.slice().reverse();
    const head = m.nodes.map((n) => `<th class="node" title="${esc(n.type)}${n.manual ? " (manual)" : ""}">${esc(n.name)}${n.manual ? ` <span class="manual">(manual)</span>` : ""}</th>`).join("");
    const rows = runs.map((r) => {
      const cells = m.nodes.map((n) => {
        const c = r.nodes[n.name];
        if (!c) return `<td class="cell"><span class="na" title="not processed by this run">–</span></td>`;
        const title = `${n.name}: ${c.status}, ${c.done} of ${c.batches_total} batches done${c.failed ? `, ${c.failed} failed` : ""}`;
        return `<td class="cell"><a class="st-${c.status}" data-node="${esc(n.name)}" data-run="${r.run_id}" data-status="${c.status}" title="${esc(title)}"
          href="#/ks/${enc(ks)}/run/${r.run_id}/node/${enc(n.name)}">${cellText(c)}</a></td>`;
      }).join("");
      const dur = r.started_ms != null ? fmtDur((r.completed_ms ?? r.stopped_ms ?? Date.now()) - r.started_ms) : "";
      return `<tr data-run="${r.run_id}" data-status="${r.status}">
        <td class="run"><a href="#/ks/${enc(ks)}/run/${r.run_id}"><b>run ${r.run_id}</b></a> ${outcomePill(r)}
          ${r.status === "start" && info.writes.stop ? `<button class="stop-btn" data-run="${r.run_id}">Stop…</button>` : ""}
          <div class="muted">${esc(fmtTime(r.started_ms))} · ${esc(dur)}</div>
          <div class="desc" title="${esc(r.description)}">${esc(r.description)}</div></td>${cells}</tr>`;
    }).join("");
    const going = m.runs.some((r) => r.status === "start");
    main.innerHTML = `
      <h1><span class="mono">${esc(ks)}</span> <span class="sub">${plural(m.runs.length, "run")} × ${plural(m.nodes.length, "node")}${going ? " · refreshing every second" : ""}</span>
        <span class="toolbar">
          <a class="btn" id="tables-link" href="#/ks/${enc(ks)}/tables">Tables</a>
          ${info.writes.start ? `<button class="primary" id="start-run">Start run…</button>` : ""}
          ${info.writes.drop ? `<button id="drop-ks">Drop keyspace…</button>` : ""}
        </span></h1>
      <div class="legend">${["none", "start", "success", "fail", "stopreceived"].map(pill).join("")}
        <span>· a cell is one node in one run; click it for its batches. “–”: the run does not process the node.</span></div>
      <div class="panel matrix-panel"><table class="matrix" id="matrix"><thead><tr><th>run</th>${head}</tr></thead><tbody>${rows ||
        `<tr><td class="empty" colspan="${m.nodes.length + 1}">No runs yet.</td></tr>`}</tbody></table></div>`;
    const sr = $("#start-run");
    if (sr) sr.onclick = () => startDialog(ks);
    const dk = $("#drop-ks");
    if (dk) dk.onclick = () => dropDialog(ks);
    for (const b of main.querySelectorAll(".stop-btn")) b.onclick = () => stopDialog(ks, b.dataset.run);
    return going;
  });
}

function runFacts(ks, r) {
  return `<dl class="kv">
    <dt>outcome</dt><dd>${outcomePill(r)}</dd>
    <dt>started</dt><dd>${esc(fmtTime(r.started_ms))}</dd>
    ${r.completed_ms != null ? `<dt>completed</dt><dd>${esc(fmtTime(r.completed_ms))} (${esc(fmtDur(r.completed_ms - r.started_ms))})</dd>` : ""}
    ${r.stopped_ms != null ? `<dt>stopped</dt><dd>${esc(fmtTime(r.stopped_ms))} — ${esc(r.stopped_comment || "")}</dd>` : ""}
    <dt>start nodes</dt><dd class="mono">${esc((r.start_nodes || []).join(", "))}</dd>
    <dt>description</dt><dd>${esc(r.description)}</dd>
  </dl>`;
}

async function pageRun(ks, runId) {
  crumbs([["keyspaces", "#/"], [ks, `#/ks/${enc(ks)}`], [`run ${runId}`, null]]);
  await refreshing(async () => {
    const [h, svg] = await Promise.all([
      api("GET", `/keyspaces/${enc(ks)}/runs/${enc(runId)}/nodes`),
      fetch(`/api/keyspaces/${enc(ks)}/runs/${enc(runId)}/dag.svg`).then((r) => r.text()),
    ]);
    const r = h.run;
    const rows = h.history.map((e) => `<tr><td class="mono">${esc(fmtTime(e.ts_ms))}</td>
      <td><a class="mono" href="#/ks/${enc(ks)}/run/${runId}/node/${enc(e.node)}">${esc(e.node)}</a></td>
      <td>${pill(e.status)}</td><td class="num">${e.batch_idx}</td><td class="muted">${esc(e.comment)}</td></tr>`).join("");
    main.innerHTML = `
      <h1>Run ${esc(runId)} <span class="sub mono">${esc(ks)}</span>
        <span class="toolbar">${r.status === "start" && info.writes.stop ? `<button class="danger" id="stop-run">Stop run…</button>` : ""}
        <a class="btn" href="#/ks/${enc(ks)}/run/${runId}/dag">DAG only</a></span></h1>
      ${runFacts(ks, r)}
      <h2>DAG coloured by status</h2>
      <div class="panel dag" id="dag">${svg}</div>
      <h2>Node history</h2>
      <div class="panel"><table id="node-history"><thead><tr><th>time</th><th>node</th><th>status</th><th class="num">batch</th><th>comment</th></tr></thead>
      <tbody>${rows || `<tr><td colspan="5" class="empty">No node has started yet.</td></tr>`}</tbody></table></div>`;
    const s = $("#stop-run");
    if (s) s.onclick = () => stopDialog(ks, runId);
    linkDag(ks, runId);
    return r.status === "start";
  });
}

// Nodes of the SVG carry data-node: a click opens that node's batches.
function linkDag(ks, runId) {
  for (const g of main.querySelectorAll("#dag [data-node]")) {
    g.style.cursor = "pointer";
    g.addEventListener("click", () => { location.hash = `#/ks/${enc(ks)}/run/${runId}/node/${enc(g.dataset.node)}`; });
  }
}

async function pageDag(ks, runId) {
  crumbs([["keyspaces", "#/"], [ks, `#/ks/${enc(ks)}`], [`run ${runId}`, `#/ks/${enc(ks)}/run/${runId}`], ["DAG", null]]);
  await refreshing(async () => {
    const resp = await fetch(`/api/keyspaces/${enc(ks)}/runs/${enc(runId)}/dag.svg`);
    const text = await resp.text();
    if (!resp.ok) { let b = null; try { b = JSON.parse(text); } catch (_) { /* not JSON */ } throw new ApiError(resp.status, b); }
    const going = /data-status="start"/.test(text) || /data-run-status="start"/.test(text);
    main.innerHTML = `<h1>DAG of run ${esc(runId)} <span class="sub mono">${esc(ks)}</span></h1>
      <div class="legend">${["none", "start", "success", "fail", "stopreceived"].map(pill).join("")}<span>· click a node for its batches; dashed edges are lookups</span></div>
      <div class="panel dag" id="dag">${text}</div>`;
    linkDag(ks, runId);
    return going;
  });
}

async function pageBatches(ks, runId, node) {
  crumbs([["keyspaces", "#/"], [ks, `#/ks/${enc(ks)}`], [`run ${runId}`, `#/ks/${enc(ks)}/run/${runId}`], [node, null]]);
  await refreshing(async () => {
    const b = await api("GET", `/keyspaces/${enc(ks)}/runs/${enc(runId)}/nodes/${enc(node)}/batches`);
    const starts = b.batches.map((x) => x.started_ms).filter((x) => x != null);
    const ends = b.batches.map((x) => x.finished_ms ?? (x.started_ms != null ? Date.now() : null)).filter((x) => x != null);
    const t0 = starts.length ? Math.min(...starts) : 0;
    const t1 = ends.length ? Math.max(...ends, t0 + 1) : t0 + 1;
    const span = Math.max(1, t1 - t0);
    const rows = b.batches.map((x) => {
      let bar = "";
      if (x.started_ms != null) {
        const end = x.finished_ms ?? Date.now();
        const left = ((x.started_ms - t0) / span) * 100, width = Math.max(0.5, ((end - x.started_ms) / span) * 100);
        bar = `<div class="bar st-${x.status}" style="left:${left.toFixed(2)}%;width:${Math.min(width, 100 - left).toFixed(2)}%" title="${esc(fmtDur(end - x.started_ms))}"></div>`;
      }
      const err = x.error ? `<div class="error batch-error">${esc(x.error)}</div>` : x.status !== "success" && x.comment ? `<div class="muted">${esc(x.comment)}</div>` : "";
      return `<tr class="batch" data-batch="${x.batch_idx}" data-status="${x.status}">
        <td class="num">${x.batch_idx}</td><td>${pill(x.status)}</td><td class="mono">${esc(x.instance)}</td>
        <td class="num">${x.attempts}</td><td class="mono">${esc(fmtTime(x.started_ms))}</td>
        <td class="num">${esc(fmtDur(x.elapsed_ms ?? (x.finished_ms != null && x.started_ms != null ? x.finished_ms - x.started_ms : null)))}</td>
        <td><div class="bar-track">${bar}</div></td>
        <td class="num">${fmtNum(x.rows_in)}</td><td class="num">${fmtNum(x.rows_out)}</td><td>${err}</td></tr>`;
    }).join("");
    const failed = b.batches.filter((x) => x.status === "fail").length;
    const going = b.batches.some((x) => x.status === "start" || x.status === "none") && b.run_status === "start";
    main.innerHTML = `
      <h1><span class="mono">${esc(node)}</span> ${pill(b.status)} <span class="sub">run ${esc(runId)} · ${plural(b.batches_total, "batch", "batches")}${failed ? ` · ${failed} failed` : ""} · ${esc(b.node_type || "")}</span></h1>
      <div class="panel"><table id="batches"><thead><tr><th class="num">batch</th><th>status</th><th>peer</th><th class="num">attempts</th><th>started</th>
        <th class="num">duration</th><th>timeline (${esc(fmtDur(span))})</th><th class="num">rows in</th><th class="num">rows out</th><th>error</th></tr></thead>
        <tbody>${rows}</tbody></table></div>
      <h2>Batch history <span class="sub muted">(every recorded row, oldest first)</span></h2>
      <div class="panel"><table id="batch-history"><thead><tr><th>time</th><th class="num">batch</th><th>status</th><th>peer</th><th>comment</th></tr></thead><tbody>
      ${b.history.map((h) => `<tr><td class="mono">${esc(fmtTime(h.ts_ms))}</td><td class="num">${h.batch_idx}</td><td>${pill(h.status)}</td><td class="mono">${esc(h.instance)}</td><td class="muted">${esc(h.comment)}</td></tr>`).join("")}
      </tbody></table></div>`;
    return going;
  });
}

// The tables the runs of a keyspace wrote, with their row counts.
async function pageTables(ks) {
  crumbs([["keyspaces", "#/"], [ks, `#/ks/${enc(ks)}`], ["tables", null]]);
  await refreshing(async () => {
    const t = await api("GET", `/keyspaces/${enc(ks)}/tables`);
    const rows = t.tables.slice().reverse().map((x) => `
      <tr class="table-row" data-table="${esc(x.name)}" data-run="${x.run_id}">
        <td><a class="mono" href="#/ks/${enc(ks)}/table/${enc(x.name)}/${x.run_id}">${esc(x.name)}</a></td>
        <td class="num">${x.run_id}</td><td class="mono">${esc(x.stored_as)}</td><td class="mono">${esc(x.created_by)}</td>
        <td class="num">${fmtNum(x.rows)}</td><td class="num">${x.columns.length - 1}</td></tr>`).join("");
    main.innerHTML = `
      <h1><span class="mono">${esc(ks)}</span> <span class="sub">${plural(t.tables.length, "table")}, newest run first</span></h1>
      <div class="panel"><table id="tables"><thead><tr><th>table</th><th class="num">run</th><th>stored as</th><th>written by</th>
        <th class="num">rows</th><th class="num">fields</th></tr></thead><tbody>${rows ||
        `<tr><td class="empty" colspan="6">No table yet.</td></tr>`}</tbody></table></div>`;
    return false;
  });
}

// One table: its columns, the rows each batch wrote, its first rows and a CSV download.
async function pageTable(ks, name, run) {
  crumbs([["keyspaces", "#/"], [ks, `#/ks/${enc(ks)}`], ["tables", `#/ks/${enc(ks)}/tables`], [`${name} (run ${run})`, null]]);
  await refreshing(async () => {
    const t = await api("GET", `/keyspaces/${enc(ks)}/tables/${enc(name)}?run=${enc(run)}&limit=50`);
    const cols = t.columns.map((c) => `<th title="${esc(c.type)}">${esc(c.name)} <span class="muted">${esc(c.type)}</span></th>`).join("");
    const rows = t.rows.map((r) => `<tr>${r.map((v) => `<td class="mono">${esc(v)}</td>`).join("")}</tr>`).join("");
    const batches = t.batch_rows.map((n, i) => `<tr data-batch="${i}"><td class="num">${i}</td><td class="num">${fmtNum(n)}</td></tr>`).join("");
    main.innerHTML = `
      <h1><span class="mono">${esc(t.table)}</span> <span class="sub">run ${t.run_id} · ${esc(t.stored_as)} · written by ${esc(t.created_by)} · ${fmtNum(t.rows_total)} rows</span>
        <span class="toolbar"><a class="btn" id="download" download="${esc(t.stored_as)}.csv"
          href="/api/keyspaces/${enc(ks)}/tables/${enc(t.table)}/csv?run=${t.run_id}">Download CSV</a></span></h1>
      <h2>Rows per batch <span class="sub muted">(what each batch of ${esc(t.created_by)} wrote)</span></h2>
      <div class="panel"><table id="batch-rows"><thead><tr><th class="num">batch</th><th class="num">rows</th></tr></thead><tbody>${batches}</tbody></table></div>
      <h2>First rows <span class="sub muted">(${t.rows.length} of ${fmtNum(t.rows_total)}, as Capillaries' CSV writer renders them)</span></h2>
      <div class="panel matrix-panel"><table id="table-rows"><thead><tr>${cols}</tr></thead><tbody>${rows ||
        `<tr><td class="empty" colspan="${t.columns.length}">No rows.</td></tr>`}</tbody></table></div>`;
    return false;
  });
}

// ---- router -------------------------------------------------------------------------------

function currentRoute() {
  // Pages are addressed by fragments (#/ks/<keyspace>…): the paths /ks… are Capillaries' webapi.
  const r = location.hash.replace(/^#/, "");
  return r.split("/").filter(Boolean).map(decodeURIComponent);
}

async function route() {
  closeDialog();
  const p = currentRoute();
  if (p[0] === "ks" && p[1] && p.length === 2) return pageMatrix(p[1]);
  if (p[0] === "ks" && p[2] === "tables" && p.length === 3) return pageTables(p[1]);
  if (p[0] === "ks" && p[2] === "table" && p[3] && p[4]) return pageTable(p[1], p[3], p[4]);
  if (p[0] === "ks" && p[2] === "run" && p[3] && p.length === 4) return pageRun(p[1], p[3]);
  if (p[0] === "ks" && p[2] === "run" && p[4] === "dag") return pageDag(p[1], p[3]);
  if (p[0] === "ks" && p[2] === "run" && p[4] === "node" && p[5]) return pageBatches(p[1], p[3], p[5]);
  return pageKeyspaces();
}

window.addEventListener("hashchange", route);
(async () => {
  try {
    info = await api("GET", "/info");
    $("#backend").textContent = info.backend === "cluster" ? `cluster · ${info.name}` : `embedded store · ${info.name}`;
    $("#token-btn").hidden = !!info.signed_in;
  } catch (e) {
    toast(`cannot reach the API: ${e.message}`, true);
  }
  route();
})();
