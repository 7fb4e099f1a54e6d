// The libos console: the process tree, a process page, pending approvals
// and the live event stream. Everything it shows comes from /api/v1; every
// value is written with textContent, never as markup.
"use strict";

const API = "/api/v1";
const MAX_EVENTS = 200;

const $ = (id) => document.getElementById(id);

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

async function api(method, path, body) {
  const opts = { method, headers: {}, credentials: "same-origin" };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const resp = await fetch(API + path, opts);
  if (resp.status === 401) {
    location.href = "/login";
    throw new Error("log in first");
  }
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (!resp.ok) {
    const msg = data && data.error ? data.error.code + ": " + data.error.message : resp.status + " " + text;
    throw new Error(msg);
  }
  return { data, resp };
}

function pretty(v) {
  if (typeof v === "string") {
    try { return JSON.stringify(JSON.parse(v), null, 2); } catch (e) { return v; }
  }
  return JSON.stringify(v, null, 2);
}

function shorten(s, n) {
  s = String(s);
  return s.length > n ? s.slice(0, n - 1) + "…" : s;
}

// ---- the process tree ----
//
// One DOM node per process, made once; an event changes only the row of its
// process, and rows are repainted at most once per animation frame.

const procs = new Map();    // pid -> row as GET /processes lists it
const nodes = new Map();    // pid -> {li, row, status, wait, why, kids, tog}
const dirty = new Set();
let frame = 0;
let selected = 0;
let rootList = null;
let filterText = "";

function statusClass(s) { return "status st-" + s; }

function makeNode(p) {
  const li = el("li");
  li.setAttribute("role", "treeitem");
  const row = el("div", "row");
  row.dataset.pid = p.pid;
  const tog = el("span", "tog", "");
  const dot = el("span", "dot");
  const pid = el("span", "pid", p.pid);
  const img = el("span", "img", p.image);
  const status = el("span", "", "");
  const wait = el("span", "wait", "");
  const why = el("span", "why", "");
  row.append(tog, dot, pid, img, status, wait, why);
  const kids = el("ul");
  kids.setAttribute("role", "group");
  li.append(row, kids);
  const n = { li, row, tog, dot, status, wait, why, kids, count: 0 };
  nodes.set(p.pid, n);
  return n;
}

function paintNode(pid) {
  const p = procs.get(pid);
  const n = nodes.get(pid);
  if (!p || !n) return;
  n.dot.className = "dot st-" + p.status;
  n.status.className = statusClass(p.status);
  n.status.textContent = p.status;
  n.wait.textContent = p.status === "waiting" && p.waiting_on ? "on " + p.waiting_on : "";
  n.why.textContent = p.reason ? shorten(p.reason, 80) : "";
  n.row.title = p.reason || "";
  n.tog.textContent = n.count > 0 ? (n.li.classList.contains("collapsed") ? "▸" : "▾") : "";
  n.row.classList.toggle("selected", pid === selected);
  if (filterText) n.li.classList.toggle("nomatch", !matches(p));
}

function attach(pid) {
  const p = procs.get(pid);
  const n = nodes.get(pid) || makeNode(p);
  const parent = p.parent_pid ? nodes.get(p.parent_pid) : null;
  if (parent) {
    parent.kids.appendChild(n.li);
    parent.count++;
    dirty.add(p.parent_pid);
  } else {
    rootList.appendChild(n.li);
  }
  dirty.add(pid);
}

function renderTree(rows) {
  procs.clear();
  nodes.clear();
  dirty.clear();
  const tree = $("tree");
  rootList = el("ul");
  for (const p of rows) procs.set(p.pid, p);
  // Parents come before children: pids grow with spawns.
  for (const p of rows) {
    const n = makeNode(p);
    const parent = p.parent_pid ? nodes.get(p.parent_pid) : null;
    (parent ? parent.kids : rootList).appendChild(n.li);
    if (parent) parent.count++;
  }
  for (const p of rows) paintNode(p.pid);
  tree.replaceChildren(rootList);
  paintCounts();
}

function schedule() {
  if (!frame) frame = requestAnimationFrame(flush);
}

function flush() {
  frame = 0;
  for (const pid of dirty) paintNode(pid);
  dirty.clear();
  paintCounts();
}

function paintCounts() {
  const by = {};
  for (const p of procs.values()) by[p.status] = (by[p.status] || 0) + 1;
  const parts = [procs.size + " processes"];
  for (const s of ["running", "runnable", "waiting", "paused", "exited", "failed", "killed"]) {
    if (by[s]) parts.push(by[s] + " " + s);
  }
  $("counts").textContent = parts.join(" · ");
}

function matches(p) {
  const hay = [p.pid, p.image, p.status, p.waiting_on || "", p.reason || ""].join(" ").toLowerCase();
  return filterText.split(/\s+/).every((w) => hay.includes(w));
}

function applyFilter() {
  filterText = $("filter").value.trim().toLowerCase();
  $("tree").classList.toggle("filtering", filterText !== "");
  for (const [pid, n] of nodes) {
    n.li.classList.toggle("nomatch", filterText !== "" && !matches(procs.get(pid)));
  }
}

// ---- events ----

let lastSeq = 0;
let source = null;

function onEntry(e) {
  if (e.seq > lastSeq) lastSeq = e.seq;
  switch (e.type) {
    case "spawned": {
      if (!procs.has(e.pid)) {
        procs.set(e.pid, { pid: e.pid, parent_pid: e.parent_pid || null, image: e.image, status: "created", waiting_on: null, turn: 0 });
        attach(e.pid);
      }
      break;
    }
    case "state": {
      const p = procs.get(e.pid);
      if (p) {
        p.status = e.to;
        p.waiting_on = e.to === "waiting" ? (e.wait || "something") : null;
        p.reason = e.reason || (e.to === "waiting" || e.to === "failed" || e.to === "killed" ? p.reason : "");
        dirty.add(e.pid);
        // The entry names the kind of wait; which child, or until when, is in the process's detail.
        if (e.to === "waiting" && (e.wait === "child" || e.wait === "timer")) refreshWaitSoon(e.pid);
      }
      // A paused process keeps its approval wait: its kill ends the hold.
      if (e.wait === "approval" || e.from === "waiting" || e.from === "paused") refreshApprovalsSoon();
      break;
    }
    case "approval":
      refreshApprovalsSoon();
      break;
  }
  schedule();
  showEvent(e);
  if (selected && e.pid === selected) refreshProcessSoon();
  else if (selected && e.type === "checkpoint") refreshProcessSoon();
}

const waitQueue = new Set();
let waitTimer = 0;
function refreshWaitSoon(pid) {
  waitQueue.add(pid);
  if (!waitTimer) waitTimer = setTimeout(refreshWaits, 250);
}

async function refreshWaits() {
  waitTimer = 0;
  const pids = Array.from(waitQueue).slice(0, 50);
  for (const pid of pids) waitQueue.delete(pid);
  await Promise.all(pids.map(async (pid) => {
    try {
      const d = (await api("GET", "/processes/" + pid)).data;
      const p = procs.get(pid);
      const w = d.waiting_on;
      if (!p || d.status !== "waiting" || !w) return;
      p.waiting_on = w.kind === "child" ? "child " + w.child_pid : w.kind === "timer" ? "timer until " + w.until : w.kind;
      dirty.add(pid);
    } catch (e) { /* the next entry tries again */ }
  }));
  schedule();
  if (waitQueue.size && !waitTimer) waitTimer = setTimeout(refreshWaits, 250);
}

function describe(e) {
  switch (e.type) {
    case "spawned": return e.image + (e.parent_pid ? " (parent " + e.parent_pid + ")" : "");
    case "state": return e.from + " → " + e.to + (e.wait ? " (" + e.wait + ")" : "") + (e.reason ? ": " + e.reason : "");
    case "tool_call": return e.name + " " + (e.arguments ? JSON.stringify(e.arguments) : "");
    case "tool_result": return e.name + (e.ok === false ? " error " + (e.error_code || "") : " ok");
    case "model_output": return JSON.stringify(e.text || "");
    case "provider_call": return "turn " + e.turn + ", " + (e.outcome || "") + (e.latency_ms !== undefined ? ", " + e.latency_ms + " ms" : "");
    case "message": return (e.action || "") + (e.body ? ": " + e.body : "");
    default: return e.reason || e.name || "";
  }
}

const eventQueue = [];
let eventFrame = 0;

function showEvent(e) {
  eventQueue.push(e);
  if (!eventFrame) eventFrame = requestAnimationFrame(paintEvents);
}

function paintEvents() {
  eventFrame = 0;
  const list = $("events");
  const only = $("events-this").checked && selected;
  const frag = document.createDocumentFragment();
  const batch = eventQueue.splice(0).slice(-MAX_EVENTS);
  for (let i = batch.length - 1; i >= 0; i--) {
    const e = batch[i];
    if (only && e.pid !== selected) continue;
    const li = el("li");
    li.append(el("span", "seq", e.seq + " "), el("span", "", new Date(e.time).toLocaleTimeString() + " "),
      el("b", "", "pid " + e.pid + " "), el("span", "", e.type + " "), el("span", "", shorten(describe(e), 300)));
    li.title = JSON.stringify(e);
    frag.appendChild(li);
  }
  list.prepend(frag);
  while (list.childElementCount > MAX_EVENTS) list.lastElementChild.remove();
}

function setConn(on, text) {
  const c = $("conn");
  c.className = "conn " + (on ? "conn-on" : "conn-off");
  c.textContent = text;
}

async function load() {
  const { data, resp } = await api("GET", "/processes");
  lastSeq = Number(resp.headers.get("Libos-Event-Seq") || 0);
  renderTree(data);
}

function connect() {
  if (source) source.close();
  source = new EventSource(API + "/events?since=" + lastSeq);
  let broken = false;
  source.onopen = async () => {
    setConn(true, "live");
    if (broken) {
      broken = false;
      // Catch up after a break: the tree from scratch, then the stream resumes.
      try { await load(); } catch (e) { /* the next error says more */ }
    }
  };
  source.onerror = () => { broken = true; setConn(false, "reconnecting…"); };
  source.onmessage = (m) => {
    try { onEntry(JSON.parse(m.data)); } catch (e) { /* a malformed entry is skipped */ }
  };
}

// ---- approvals ----

let approvalsTimer = 0;
function refreshApprovalsSoon() {
  clearTimeout(approvalsTimer);
  approvalsTimer = setTimeout(refreshApprovals, 150);
}

// What the operator typed as a deny reason, and why a decision was refused,
// by hold: the list is drawn again on every approval event, and must not
// lose either.
const denyReasons = new Map();
const decisionErrors = new Map();

async function refreshApprovals() {
  let list;
  try { list = (await api("GET", "/approvals")).data; } catch (e) { return; }
  const ul = $("approvals");
  for (const input of ul.querySelectorAll("input.reason")) {
    denyReasons.set(input.closest("li").dataset.approval, input.value);
  }
  ul.replaceChildren();
  const count = $("approval-count");
  count.textContent = list.length;
  count.className = "badge" + (list.length ? "" : " zero");
  const shown = new Set();
  for (const a of list) {
    shown.add(a.id);
    const li = el("li");
    li.dataset.pid = a.pid;
    li.dataset.call = a.call_id;
    li.dataset.approval = a.id;
    const link = el("a", "", "pid " + a.pid);
    link.href = "#/p/" + a.pid;
    const approve = el("button", "approve primary", "Approve");
    approve.type = "button";
    const reason = el("input", "reason");
    reason.placeholder = "reason to deny";
    reason.value = denyReasons.get(a.id) || "";
    const deny = el("button", "deny danger", "Deny");
    deny.type = "button";
    li.append(link, el("b", "", a.tool), el("span", "", a.rights.join(",") + " on " + a.resource),
      approve, reason, deny, el("span", "args", shorten(JSON.stringify(a.arguments), 400)));
    if (decisionErrors.has(a.id)) li.appendChild(el("span", "err", decisionErrors.get(a.id)));
    ul.appendChild(li);
  }
  for (const m of [denyReasons, decisionErrors]) {
    for (const id of m.keys()) if (!shown.has(id)) m.delete(id);
  }
}

$("approvals").addEventListener("click", async (ev) => {
  const b = ev.target.closest("button");
  if (!b) return;
  const li = b.closest("li");
  const id = li.dataset.approval;
  // The call id is the model's: it goes in the body, where no path
  // segment such as ".." can change what is asked. The approval id decides
  // the hold shown, not a later call under the same call id.
  const body = { pid: Number(li.dataset.pid), call_id: li.dataset.call, approval_id: id };
  if (b.classList.contains("approve")) {
    body.decision = "approve";
  } else {
    body.decision = "deny";
    body.reason = li.querySelector(".reason").value;
  }
  b.disabled = true;
  for (const old of li.querySelectorAll(".err")) old.remove();
  try {
    await api("POST", "/approvals", body);
    decisionErrors.delete(id);
    denyReasons.delete(id);
    li.remove();
  } catch (e) {
    decisionErrors.set(id, e.message);
    li.appendChild(el("span", "err", e.message));
    b.disabled = false;
  }
  refreshApprovalsSoon();
});

// ---- the process page ----

let processTimer = 0;
function refreshProcessSoon() {
  clearTimeout(processTimer);
  processTimer = setTimeout(() => showProcess(selected), 200);
}

function route() {
  const m = location.hash.match(/^#\/p\/(\d+)$/);
  const pid = m ? Number(m[1]) : 0;
  const old = nodes.get(selected);
  selected = pid;
  if (old) old.row.classList.remove("selected");
  const n = nodes.get(pid);
  if (n) n.row.classList.add("selected");
  if (!pid) {
    $("process").hidden = true;
    return;
  }
  showProcess(pid);
}

async function showProcess(pid) {
  if (!pid || pid !== selected) return;
  let d, ctx, msgs, goal, cps;
  try {
    [d, ctx, msgs, goal, cps] = await Promise.all([
      api("GET", "/processes/" + pid).then((r) => r.data),
      api("GET", "/processes/" + pid + "/context").then((r) => r.data).catch(() => null),
      api("GET", "/processes/" + pid + "/messages?all=true").then((r) => r.data).catch(() => null),
      api("GET", "/processes/" + pid + "/goal").then((r) => r.data).catch(() => null),
      api("GET", "/checkpoints?pid=" + pid).then((r) => r.data).catch(() => []),
    ]);
  } catch (e) {
    $("process").hidden = false;
    $("process-title").textContent = "pid " + pid;
    $("proc-reason").textContent = e.message;
    return;
  }
  if (pid !== selected) return;
  $("process").hidden = false;
  $("process-title").textContent = "pid " + d.pid + " · " + d.image;
  const st = $("proc-status");
  st.textContent = d.status + (d.pause_requested ? " (pause requested)" : "");
  st.className = statusClass(d.status);
  const w = d.waiting_on;
  $("proc-wait").textContent = w ? "waiting on " + w.kind + (w.child_pid ? " " + w.child_pid : "") + (w.until ? " until " + w.until : "") + (w.tool ? " (" + w.tool + " " + w.call_id + ")" : "") : "";
  $("proc-turn").textContent = "turn " + d.turn;
  const parent = $("proc-parent");
  parent.replaceChildren();
  if (d.parent_pid) {
    const a = el("a", "", "parent " + d.parent_pid);
    a.href = "#/p/" + d.parent_pid;
    parent.append(a);
  }
  if (d.children.length) parent.append(" · children " + d.children.join(", "));
  $("proc-reason").textContent = d.reason || "";
  $("proc-goal").textContent = goal ? (goal.error ? "unavailable: " + goal.error : goal.text) + "\n(version " + goal.version + ")" : "";
  $("proc-result").textContent = d.result !== null ? pretty(d.result) : (d.result_error || "no result yet");
  $("proc-review").textContent = reviewState(d, ctx);
  paintGrants(d.grants);
  paintBudgets(d.budgets);
  paintTranscript(ctx);
  paintMessages(msgs);
  paintCheckpoints(cps);
  paintCalls(d.recent_calls);
  const terminal = ["exited", "failed", "killed"].includes(d.status);
  for (const b of document.querySelectorAll("#process [data-signal]")) b.disabled = terminal;
  $("msg-send").disabled = terminal;
}

// reviewState says where the completion review stands, from the latest
// process_exit answer in the transcript.
function reviewState(d, ctx) {
  if (d.status === "exited") return "exited: the completion review (if the image is gated) passed";
  let last = null;
  for (const m of (ctx && ctx.messages) || []) {
    if (m.role === "tool" && m.name === "process_exit") last = m;
  }
  if (!last) return "no exit attempted yet";
  let r;
  try { r = JSON.parse(last.content); } catch (e) { return "last exit attempt: " + shorten(last.content, 200); }
  if (r.status === "completion_review_required") {
    const cr = r.completion_review || {};
    const errs = r.validation_errors || cr.validation_errors || [];
    const unread = cr.unread_human_messages || cr.human_messages || null;
    return "completion review required" + (errs.length ? ": " + errs.map((e) => (typeof e === "string" ? e : JSON.stringify(e))).join("; ") : "") +
      (unread && unread.count ? " · unread Human messages: " + unread.count : "");
  }
  return "last exit attempt: " + shorten(last.content, 300);
}

function paintGrants(grants) {
  const tb = $("proc-grants");
  tb.replaceChildren();
  for (const g of grants) {
    const tr = el("tr");
    tr.append(el("td", "mono", g.resource), el("td", "", g.rights.join(",")), el("td", "", g.effect),
      el("td", "", g.uses_remaining === null ? "" : g.uses_remaining), el("td", "", g.expires_at || ""));
    tb.appendChild(tr);
  }
}

function paintBudgets(budgets) {
  const tb = $("proc-budgets");
  tb.replaceChildren();
  for (const name of Object.keys(budgets).sort()) {
    const b = budgets[name];
    const tr = el("tr");
    const bar = el("td");
    if (b.limit > 0) {
      const p = el("progress");
      p.max = b.limit;
      p.value = Math.min(b.used, b.limit);
      bar.appendChild(p);
    }
    tr.append(el("th", "", name), el("td", "", b.used + (b.limit > 0 ? " of " + b.limit : " (no limit)")), bar);
    tb.appendChild(tr);
  }
}

function paintTranscript(ctx) {
  const ol = $("transcript");
  ol.replaceChildren();
  if (!ctx) return;
  $("context-facts").textContent = ctx.entries + " entries, ~" + ctx.estimated_tokens + " tokens" + (ctx.truncated ? ", oldest left out" : "") + (ctx.rebuilt ? ", rebuilt" : "");
  const frag = document.createDocumentFragment();
  for (const m of ctx.messages) {
    const li = el("li", "role-" + m.role);
    li.appendChild(el("div", "who", m.role + (m.name ? " · " + m.name : "") + (m.tool_call_id ? " · " + m.tool_call_id : "")));
    if (m.role === "system") {
      const det = el("details");
      det.append(el("summary", "", "system prompt"), el("pre", "text", m.content || ""));
      li.appendChild(det);
    } else if (m.content) {
      li.appendChild(el("pre", "text", m.role === "tool" ? pretty(m.content) : m.content));
    }
    for (const tc of m.tool_calls || []) {
      const c = el("div", "call mono", "→ " + tc.name + " " + JSON.stringify(tc.arguments));
      li.appendChild(c);
    }
    frag.appendChild(li);
  }
  ol.appendChild(frag);
}

function paintMessages(list) {
  const ul = $("messages");
  ul.replaceChildren();
  if (!list) return;
  $("message-facts").textContent = list.unread + " unread of " + list.total;
  for (const m of list.messages) {
    const li = el("li");
    li.append(el("b", "", m.sender + " "), el("span", "muted", m.kind + " · " + m.status + " · " + m.id + " "), el("div", "", m.body));
    ul.appendChild(li);
  }
}

function paintCheckpoints(cps) {
  const ul = $("checkpoints");
  ul.replaceChildren();
  if (!cps.length) ul.appendChild(el("li", "muted", "no checkpoint of this subtree"));
  for (const cp of cps) {
    const li = el("li");
    li.dataset.id = cp.id;
    const restore = el("button", "restore", "Restore");
    restore.type = "button";
    const fork = el("button", "fork", "Fork");
    fork.type = "button";
    li.append(el("span", "mono", cp.id + " "), el("span", "muted", cp.pids.length + " processes · " + cp.created_at + " "), restore, fork);
    ul.appendChild(li);
  }
}

function paintCalls(calls) {
  const ol = $("recent-calls");
  ol.replaceChildren();
  for (const c of calls) {
    const li = el("li", c.ok ? "" : "err", "turn " + c.turn + " · " + c.name + " " + (c.arguments ? shorten(JSON.stringify(c.arguments), 200) : "") +
      (c.ok ? " · ok" : " · " + (c.error_code || "error")) + (c.authority && c.authority.length ? " · " + c.authority.join("; ") : ""));
    ol.appendChild(li);
  }
}

function result(id, text, ok) {
  const o = $(id);
  o.textContent = text;
  o.className = "result" + (ok ? "" : " err");
}

$("checkpoints").addEventListener("click", async (ev) => {
  const b = ev.target.closest("button");
  if (!b) return;
  const id = b.closest("li").dataset.id;
  const verb = b.classList.contains("restore") ? "restore" : "fork";
  try {
    const { data } = await api("POST", "/checkpoints/" + encodeURIComponent(id) + "/" + verb);
    result("action-result", verb === "fork" ? "forked into root pid " + data.root_pid : "restored " + (data.restored_pids || []).join(", "), true);
  } catch (e) {
    result("action-result", e.message, false);
  }
  refreshProcessSoon();
});

for (const b of document.querySelectorAll("#process [data-signal]")) {
  b.addEventListener("click", async () => {
    try {
      const { data } = await api("POST", "/processes/" + selected + "/signal", { signal: b.dataset.signal });
      result("action-result", b.dataset.signal + (data.changed ? " done" : ": nothing to do"), true);
    } catch (e) {
      result("action-result", e.message, false);
    }
    refreshProcessSoon();
  });
}

$("checkpoint-create").addEventListener("click", async () => {
  try {
    const { data } = await api("POST", "/processes/" + selected + "/checkpoints");
    result("action-result", "checkpoint " + data.id, true);
  } catch (e) {
    result("action-result", e.message, false);
  }
  refreshProcessSoon();
});

$("message-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const body = { body: $("msg-body").value, from: $("msg-from").value, interrupt: $("msg-interrupt").checked };
  try {
    const { data } = await api("POST", "/processes/" + selected + "/messages", body);
    result("msg-result", "sent " + data.id, true);
    $("msg-body").value = "";
  } catch (e) {
    result("msg-result", e.message, false);
  }
  refreshProcessSoon();
});

$("goal-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  try {
    const { data } = await api("PUT", "/processes/" + selected + "/goal", { goal: $("goal-text").value });
    result("action-result", "goal is now version " + data.version, true);
    $("goal-text").value = "";
  } catch (e) {
    result("action-result", e.message, false);
  }
  refreshProcessSoon();
});

function list(v) {
  return v.split(",").map((s) => s.trim()).filter((s) => s);
}

$("spawn-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const body = { image: $("spawn-image").value.trim(), goal: $("spawn-goal").value };
  for (const k of ["grants", "asks", "denies"]) {
    const v = list($("spawn-" + k).value);
    if (v.length) body[k] = v;
  }
  try {
    const { data } = await api("POST", "/processes", body);
    result("spawn-result", "started pid " + data.pid, true);
    location.hash = "#/p/" + data.pid;
  } catch (e) {
    result("spawn-result", e.message, false);
  }
});

$("tree").addEventListener("click", (ev) => {
  const row = ev.target.closest(".row");
  if (!row) return;
  const pid = Number(row.dataset.pid);
  if (ev.target.classList.contains("tog")) {
    const n = nodes.get(pid);
    n.li.classList.toggle("collapsed");
    paintNode(pid);
    return;
  }
  location.hash = "#/p/" + pid;
});

$("filter").addEventListener("input", () => {
  clearTimeout(applyFilter.t);
  applyFilter.t = setTimeout(applyFilter, 120);
});

function collapseAll(on) {
  for (const [pid, n] of nodes) {
    if (n.count > 0) n.li.classList.toggle("collapsed", on);
    dirty.add(pid);
  }
  schedule();
}
$("collapse-all").addEventListener("click", () => collapseAll(true));
$("expand-all").addEventListener("click", () => collapseAll(false));
$("events-this").addEventListener("change", () => $("events").replaceChildren());

window.addEventListener("hashchange", route);

(async function start() {
  // A console link's token (see login.js) has done its work once the page
  // loads: it leaves the address bar and the history.
  if (location.hash.startsWith("#token=")) history.replaceState(null, "", location.pathname + location.search);
  try {
    await load();
  } catch (e) {
    setConn(false, e.message);
    return;
  }
  connect();
  refreshApprovals();
  route();
})();
