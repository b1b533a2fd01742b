// pgagentstate timeline viewer. Read-only; every value from the database is written with textContent.
"use strict";

const CUSTOMER = new Set(["customer", "user", "human"]);
const AGENT = new Set(["agent", "assistant", "model", "ai"]);
const HEALTH = ["active", "waiting_customer", "awaiting_approval", "completed", "failed", "abandoned"];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "onclick") node.addEventListener("click", value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function text(value) {
  if (value === null || value === undefined) return "";
  return typeof value === "string" ? value : JSON.stringify(value);
}

function time(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

function dateTime(iso) {
  return iso ? new Date(iso).toLocaleString() : "-";
}

function ago(iso) {
  if (!iso) return "";
  let s = Math.round((Date.now() - new Date(iso).getTime()) / 1000);
  const future = s < 0;
  s = Math.abs(s);
  const [n, u] = s >= 86400 ? [Math.floor(s / 86400), "d"] : s >= 3600 ? [Math.floor(s / 3600), "h"]
    : s >= 60 ? [Math.floor(s / 60), "m"] : [s, "s"];
  return future ? `in ${n}${u}` : `${n}${u} ago`;
}

function badge(value, cls) {
  return el("span", { class: `badge ${cls || value}` }, String(value).replace(/_/g, " "));
}

async function getJSON(url) {
  const response = await fetch(url, { headers: { Accept: "application/json" } });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

// --- health chips and the conversation list -------------------------------------------------------

function renderHealth(h) {
  const box = document.getElementById("health");
  const chips = HEALTH.map((k) => el("span", { class: "chip", "data-health": k }, k.replace(/_/g, " "),
    el("b", {}, h.conversations[k] ?? 0)));
  chips.push(el("span", { class: h.stuck_steps ? "chip alert" : "chip" }, "stuck steps", el("b", {}, h.stuck_steps)));
  chips.push(el("span", { class: "chip" }, "duplicates stopped", el("b", {}, h.duplicate_calls_stopped)));
  const inbox = h.inbox;
  if (inbox) {  // the durable inbox: messages accepted and not answered yet, and turns taken over
    chips.push(el("span", { class: "chip", "data-inbox": "depth" }, "inbox queue",
      el("b", {}, inbox.waiting + inbox.running)));
    if (inbox.oldest_seconds != null) {
      chips.push(el("span", { class: "chip", "data-inbox": "oldest" }, "oldest unanswered",
        el("b", {}, `${Math.round(inbox.oldest_seconds)} s`)));
    }
    chips.push(el("span", { class: inbox.stale_leases ? "chip alert" : "chip", "data-inbox": "stale" },
      "stale leases", el("b", {}, inbox.stale_leases)));
    chips.push(el("span", { class: "chip", "data-inbox": "recoveries" }, "recoveries", el("b", {}, inbox.recoveries)));
  }
  box.replaceChildren(...chips);
}

async function loadHealth() {
  const box = document.getElementById("health");
  try {
    renderHealth(await getJSON("/api/health"));
  } catch (err) {
    box.replaceChildren(el("span", { class: "chip alert" }, `health: ${err.message}`));
  }
}

function filters() {
  const params = new URLSearchParams();
  const q = document.getElementById("q").value.trim();
  const health = document.getElementById("health-filter").value;
  const framework = document.getElementById("framework").value.trim();
  if (q) params.set("q", q);
  if (health) params.set("health", health);
  if (framework) params.set("framework", framework);
  if (document.getElementById("stuck").checked) params.set("stuck", "1");
  return params;
}

function renderList(rows) {
  const list = document.getElementById("list");
  if (!rows.length) {
    list.replaceChildren(el("li", { class: "muted" }, "No conversations."));
    return;
  }
  list.replaceChildren(...rows.map((c) => el("li", {
      "data-id": c.id,
      class: c.id === currentId() ? "selected" : "",
      onclick: () => select(c.id),
    },
    el("div", { class: "cid" }, c.id),
    el("div", { class: "meta" },
      badge(c.health),
      c.stuck_steps ? badge(`${c.stuck_steps} stuck`, "stuck") : null,
      el("span", {}, c.framework || "-"),
      el("span", {}, `${c.messages ?? c.last_seq} messages`),
      c.duplicate_hits ? el("span", {}, `${c.duplicate_hits} dup stopped`) : null,
      el("span", {}, ago(c.updated_at))))));
}

async function loadList() {
  const list = document.getElementById("list");
  try {
    renderList(await getJSON(`/api/conversations?${filters()}`));
  } catch (err) {
    list.replaceChildren(el("li", { class: "error" }, err.message));
  }
}

// --- one conversation -------------------------------------------------------------------------------

function currentId() {
  const hash = location.hash.match(/^#\/c\/(.+)$/);
  if (hash) return decodeURIComponent(hash[1]);
  return new URLSearchParams(location.search).get("id");
}

function select(id) {
  location.hash = `#/c/${encodeURIComponent(id)}`;
}

function side(role) {
  const r = String(role || "").toLowerCase();
  if (CUSTOMER.has(r)) return "customer";
  if (AGENT.has(r)) return "agent";
  return "other";
}

function label(v) {
  return v.label || (v.scope && v.scope !== "conversation" ? `${v.scope}:${v.name}` : v.name);
}

// The timeline in the server's order: the order the store recorded things in (an event's own created_at
// may be a send time or a simulated clock). State written with a message is folded into its bubble.
function chatItems(tl) {
  const events = new Map(tl.events.map((ev) => [ev.seq, ev]));
  const bubbles = new Map();
  const items = [];
  for (const entry of tl.entries) {
    if (entry.folded) {
      const bubble = bubbles.get(entry.seq);
      if (bubble) {
        let box = bubble.querySelector("details.folded");
        if (!box) {
          box = el("details", { class: "folded" }, el("summary", {}, "state written with it"));
          bubble.append(box);
        }
        box.append(el("div", { class: "mono" }, `${entry.title.replace(/^state /, "")} · ${entry.text}`));
        box.querySelector("summary").textContent = `${box.children.length - 1} state change(s) written with it`;
        continue;
      }
    }
    if (entry.kind === "message" || entry.kind === "event") {
      const ev = entry.seq !== null && entry.seq !== undefined ? events.get(entry.seq) : null;
      if (!ev && entry.kind === "event") {  // a checkpoint's interrupt, resume or error
        items.push(el("li", { class: "mark event" }, `${time(entry.at)} `, el("b", {}, entry.title),
          entry.text ? ` · ${entry.text}` : ""));
        continue;
      }
      const role = entry.role || (ev && ev.author) || entry.kind;
      const kind = ev && ev.kind !== "message" ? ` · ${ev.kind}` : "";
      // ADK events are authored by the agent's name; their content says whose turn it is (user / model).
      const content = ev && ev.payload && typeof ev.payload === "object" ? ev.payload.content : null;
      const tool = content && Array.isArray(content.parts)
        && content.parts.some((p) => p && (p.function_call || p.function_response || p.functionCall || p.functionResponse));
      const actionsOnly = !content && ev && ev.payload && typeof ev.payload === "object" && ev.payload.actions;
      const who = tool ? "tool" : content && typeof content === "object" && content.role ? content.role
        : actionsOnly ? "system" : role;
      const node = el("li", { class: `msg ${side(who)}`, "data-seq": ev ? ev.seq : null, "data-at": entry.at },
        el("div", { class: "who" }, el("span", {}, `${role}${kind}`),
          el("span", { title: entry.sent_at ? `sent ${dateTime(entry.sent_at)}` : null },
            time(entry.at), entry.sent_at ? el("span", { class: "sent" }, ` · sent ${time(entry.sent_at)}`) : null)),
        el("div", { class: "text" }, ev ? (ev.text ?? text(ev.payload)) : entry.text));
      if (ev) bubbles.set(ev.seq, node);
      items.push(node);
      continue;
    }
    items.push(el("li", { class: `mark ${entry.kind}`, "data-at": entry.at },
      `${time(entry.at)} `, el("b", {}, entry.title), entry.text ? ` · ${entry.text}` : ""));
  }
  return items;
}

function statePanel(tl) {
  const latest = new Map();
  for (const v of [...tl.state_versions, ...(tl.shared_state || [])]) latest.set(label(v), v);
  const panel = el("section", { class: "panel", id: "state" }, el("h3", {}, "State"));
  if (!latest.size) {
    panel.append(el("p", { class: "muted" }, "No state documents."));
    return panel;
  }
  const shared = { user: " · shared by the user's conversations", app: " · shared by the app's conversations" };
  for (const [name, v] of latest) {
    panel.append(el("div", { class: "muted" }, `${name} · version ${v.version}${shared[v.scope] || ""}`));
    panel.append(el("pre", { class: "json" }, JSON.stringify(v.data, null, 2)));
  }
  const marks = { added: "+", removed: "-", changed: "~" };
  panel.append(el("ol", { class: "versions", reversed: "" }, [...tl.state_versions].reverse().map((v) =>
    el("li", {}, el("b", {}, `v${v.version}`), ` ${label(v)} · ${time(v.changed_at)}`,
      v.changes.map((c) => el("span", { class: `chg ${c.op}`, title: `${text(c.old)} → ${text(c.new)}` },
        `${marks[c.op]}${c.path}${c.op === "removed" ? "" : `=${text(c.new).slice(0, 40)}`}`))))));
  return panel;
}

function stepsPanel(tl) {
  const panel = el("section", { class: "panel", id: "steps" }, el("h3", {}, "Workflow steps"));
  if (!tl.steps.length) {
    panel.append(el("p", { class: "muted" }, "No workflow steps."));
    return panel;
  }
  const now = Date.now();
  panel.append(el("ol", { class: "steps" }, tl.steps.map((s) => {
    const stuck = s.status === "in_progress" && s.lease_expires_at && new Date(s.lease_expires_at).getTime() < now;
    return el("li", {},
      badge(stuck ? "stuck" : s.status, stuck ? "stuck" : s.status), " ",
      el("b", {}, `${s.workflow} / ${s.step}`),
      el("span", { class: "muted" }, ` · attempts ${s.attempts}`),
      s.completed_at ? el("span", { class: "muted" }, ` · done ${time(s.completed_at)}`) : null,
      s.last_error ? el("div", { class: "error" }, s.last_error) : null,
      s.result !== null && s.result !== undefined ? el("div", { class: "mono muted" }, text(s.result)) : null);
  })));
  return panel;
}

// One block per call rather than a table: keys are long (conversation/workflow/step) and a six-column
// table squeezed them to one character per line in a narrow column.
function ledgerPanel(tl) {
  const panel = el("section", { class: "panel", id: "ledger" }, el("h3", {}, "External calls (ledger)"));
  if (!tl.ledger.length) {
    panel.append(el("p", { class: "muted" }, "No side effects recorded."));
    return panel;
  }
  panel.append(el("ol", { class: "calls" }, tl.ledger.map((k) => el("li", {},
    el("div", { class: "call-head" }, badge(k.status), " ", el("b", {}, k.api || "-"),
      el("span", { class: "muted" }, ` · tries ${k.attempts} · duplicates stopped ${k.duplicate_hits}`)),
    el("div", { class: "key mono" }, k.key),
    el("div", { class: "result mono muted" }, k.error || text(k.result))))));
  return panel;
}

function extrasPanel(tl) {
  if (!tl.scratchpad.length && !tl.snapshots.length) return null;
  const panel = el("section", { class: "panel", id: "extras" }, el("h3", {}, "Scratchpad and checkpoints"));
  for (const s of tl.scratchpad) {
    panel.append(el("div", {}, el("span", { class: "mono" }, s.key), ` = ${text(s.value).slice(0, 80)}`,
      el("span", { class: "muted" }, s.expires_at ? ` (${s.expired ? "expired" : "expires"} ${ago(s.expires_at)})` : "")));
  }
  for (const s of tl.snapshots) {
    panel.append(el("div", {}, `checkpoints ${s.namespace || "(root)"}: ${s.count}, newest ${dateTime(s.last_at)}`));
  }
  return panel;
}

async function loadDetail() {
  const id = currentId();
  const detail = document.getElementById("detail");
  for (const li of document.querySelectorAll("#list li")) li.classList.toggle("selected", li.dataset.id === id);
  if (!id) {
    detail.replaceChildren(el("p", { class: "empty" }, "Select a conversation on the left."));
    return;
  }
  try {
    renderDetail(await getJSON(`/api/conversations/${encodeURIComponent(id)}`));
  } catch (err) {
    detail.replaceChildren(el("p", { class: "error" }, err.message));
  }
}

function renderDetail(tl) {
  const detail = document.getElementById("detail");
  const c = tl.conversation;
  detail.replaceChildren(
      el("div", { class: "conv-head" }, el("h2", {}, c.id), badge(tl.health),
        tl.health !== c.status ? el("span", { class: "muted" }, `status ${c.status}`) : null),
      el("div", { class: "facts" },
        el("span", {}, `framework ${c.framework || "-"}`), el("span", {}, `app ${c.app || "-"}`),
        el("span", {}, `user ${c.user_id || "-"}`), el("span", {}, `channel ${c.channel || "-"}`),
        el("span", {}, `version ${c.version}`),
        el("span", {}, tl.thread ? `${tl.thread.messages.length} messages in ${tl.thread.checkpoints} checkpoints`
          : `${c.last_seq} events`),
        el("span", {}, `updated ${dateTime(c.updated_at)} (${ago(c.updated_at)})`)),
      el("div", { class: "columns" },
        el("section", { class: "panel", id: "chat" }, el("h3", {}, "Conversation"),
          tl.events.length || tl.entries.length ? el("ol", { class: "chat" }, chatItems(tl))
            : el("p", { class: "muted" }, "No events.")),
        el("div", {}, statePanel(tl), stepsPanel(tl), ledgerPanel(tl), extrasPanel(tl))));
  document.title = `${c.id} · pgagentstate`;
}

function refresh() {
  return Promise.all([loadHealth(), loadList(), loadDetail()]);
}

document.addEventListener("DOMContentLoaded", () => {
  let timer = null;
  const later = () => { clearTimeout(timer); timer = setTimeout(loadList, 250); };
  for (const id of ["q", "framework"]) document.getElementById(id).addEventListener("input", later);
  for (const id of ["health-filter", "stuck"]) document.getElementById(id).addEventListener("change", loadList);
  document.getElementById("refresh").addEventListener("click", refresh);
  window.addEventListener("hashchange", loadDetail);
  const first = firstView();
  if (first) {
    document.body.setAttribute("data-loaded", "1");
  } else {
    refresh().then(() => document.body.setAttribute("data-loaded", "1"));
  }
});

// The first view arrives inline with the page (server.py): rendered before the load event, so the page
// is complete without waiting for a request. Returns false when it is missing or not for this view.
function firstView() {
  const block = document.getElementById("first-view");
  if (!block) return false;
  let first;
  try {
    first = JSON.parse(block.textContent);
  } catch (err) {
    return false;
  }
  if (first.error) return false;
  renderHealth(first.health);
  renderList(first.conversations);
  const id = currentId();
  if (!id) {
    loadDetail();
  } else if (first.conversation && first.conversation.conversation.id === id) {
    renderDetail(first.conversation);
  } else {
    loadDetail().then(() => document.body.setAttribute("data-detail", "1"));
    return true;
  }
  document.body.setAttribute("data-detail", "1");
  return true;
}
