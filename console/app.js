// The orchestrator's console: pages over the HTTP API (docs/api in
// docs/console.md), written for this project, no framework, no build step.
// The credential signed in with lives in this tab's sessionStorage and goes
// in each request's Authorization header: never in a cookie (no
// cross-site request can ride it) nor in a URL.

const KEY = "orchestrator.credential";
const main = document.getElementById("main");

// ---- DOM -------------------------------------------------------------------

// An element: `h("a", {href: "#/"}, "text", child)`. Text is always text.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

function show(...nodes) {
  main.replaceChildren(h("div", {}, ...nodes));
}

// A time in the viewer's zone, the UTC time on hover.
function when(ts) {
  if (!ts) return "";
  const d = new Date(ts);
  if (Number.isNaN(d.getTime())) return ts;
  return h("time", { datetime: d.toISOString(), title: d.toISOString().replace(".000Z", "Z") + " (UTC)" },
    d.toLocaleString());
}

function state(s) {
  return h("span", { class: `state state-${s}` }, s);
}

function json(v) {
  return h("pre", {}, JSON.stringify(v, null, 2));
}

function problem(e) {
  return h("p", { class: "error", role: "alert" }, e.message || String(e));
}

// ---- the API ---------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function credential() {
  return sessionStorage.getItem(KEY);
}

// A call of the API; its error as the API words it.
async function api(path, options = {}) {
  const headers = { Accept: "application/json", Authorization: `Bearer ${credential()}` };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {
    method: options.method || "GET",
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    credentials: "omit",
    cache: "no-store",
  });
  const text = await res.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch { body = null; }
  if (!res.ok) {
    const err = body && body.error;
    const message = err ? `${err.message}${err.field ? ` (${err.field})` : ""}` : `HTTP ${res.status}`;
    if (res.status === 401 && !options.signingIn) {
      signOut(`Signed out: ${message}`);
    }
    throw new ApiError(res.status, err ? err.code : "http", message);
  }
  return body;
}

// ---- live changes (GET /v1/changes, server-sent events) ---------------------

let liveAbort = null;
let onChange = null;

function setLive(text) {
  document.getElementById("live").textContent = text;
}

// Reads the stream with fetch (EventSource cannot send the credential).
async function follow() {
  liveAbort?.abort();
  const abort = new AbortController();
  liveAbort = abort;
  let delay = 1000;
  while (!abort.signal.aborted && credential()) {
    try {
      const res = await fetch("/v1/changes", {
        headers: { Accept: "text/event-stream", Authorization: `Bearer ${credential()}` },
        credentials: "omit",
        signal: abort.signal,
      });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          let event = "message";
          const data = [];
          for (const line of block.split("\n")) {
            if (line.startsWith("event:")) event = line.slice(6).trim();
            else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
          }
          if (event === "ready") {
            setLive("live");
            delay = 1000;
          } else if (event === "changes" && onChange) {
            onChange(JSON.parse(data.join("\n")));
          }
        }
      }
    } catch (e) {
      if (abort.signal.aborted) return;
    }
    setLive("reconnecting…");
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 15000);
  }
}

// ---- signing in and out ----------------------------------------------------

function signOut(message) {
  sessionStorage.removeItem(KEY);
  liveAbort?.abort();
  document.getElementById("nav").hidden = true;
  document.getElementById("who").hidden = true;
  signInPage(message);
}

function signInPage(message) {
  const input = h("input", { id: "credential", type: "password", autocomplete: "off", required: true,
    "aria-describedby": "credential-help" });
  const form = h("form", { class: "signin", onsubmit: async (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(KEY, input.value.trim());
    try {
      await api("/v1/me", { signingIn: true });
    } catch (e) {
      sessionStorage.removeItem(KEY);
      form.querySelector(".error")?.remove();
      form.append(problem(e));
      return;
    }
    input.value = "";
    start();
  } },
  h("h1", {}, "Sign in"),
  h("label", { for: "credential" }, "API key or bearer token", input),
  h("p", { id: "credential-help" },
    "The key `orchestrator run` printed at start (or data/keys/admin.api-key), or a token. ",
    "It is kept in this tab only, and sent with each request."),
  h("button", { type: "submit", class: "primary" }, "Sign in"),
  message ? h("p", { class: "error", role: "alert" }, message) : null);
  show(form);
  input.focus();
}

// ---- pages -----------------------------------------------------------------

const STATES = ["submitted", "working", "input_required", "auth_required", "completed", "failed", "canceled", "rejected"];

// Whether the signed-in caller holds `scope` (its grants may end in `*`).
let me = { principal: "", scopes: [] };
function may(scope) {
  return me.scopes.some((g) => g === scope || g === "*" || (g.endsWith("*") && scope.startsWith(g.slice(0, -1))));
}

async function overviewPage() {
  onChange = debounce(overviewPage);
  const counts = await Promise.all(STATES.map(async (s) => {
    const page = await api(`/v1/tasks?state=${s}&limit=200`);
    return [s, page.tasks.length, Boolean(page.next_cursor)];
  }));
  const dlq = may("orch:dlq:manage") ? await api("/v1/dlq").catch(() => null) : null;
  const agents = await api("/v1/agents").catch(() => null);
  show(
    h("h1", {}, "Overview"),
    h("h2", {}, "Tasks by state"),
    h("div", { class: "cards" }, counts.map(([s, n, more]) =>
      h("a", { class: "card", href: `#/tasks?state=${s}` },
        h("div", { class: "n" }, more ? `${n}+` : n), state(s)))),
    h("h2", {}, "Dead letters"),
    dlq ? h("p", {}, `${(dlq.dead_letters || dlq.items || []).length} waiting`) :
      h("p", { class: "empty" }, "Listing dead letters needs orch:dlq:manage."),
    h("h2", {}, "Agents"),
    agents ? agentsTable(agents) : h("p", { class: "empty" }, "No agents could be listed."),
  );
}

function agentsTable(list) {
  const agents = Array.isArray(list) ? list : (list.agents || []);
  if (!agents.length) {
    return h("p", { class: "empty" }, "No agents declared. Add a card under the agents directory (see docs/agents.md).");
  }
  return h("div", { class: "table-wrap" }, h("table", {},
    h("thead", {}, h("tr", {}, h("th", {}, "Agent"), h("th", {}, "Skills"), h("th", {}, "Replicas"))),
    h("tbody", {}, agents.map((a) => h("tr", {},
      h("td", {}, a.name),
      h("td", {}, (a.skills || []).map((s) => s.id || s.name || s).join(", ")),
      h("td", {}, a.instances !== undefined ? (a.instances.length ?? a.instances) : (a.live ?? "")))))));
}

async function tasksPage(query) {
  const params = new URLSearchParams(query);
  const filters = { state: params.get("state") || "", correlation_id: params.get("correlation_id") || "" };
  const cursor = params.get("cursor");
  const q = new URLSearchParams();
  if (filters.state) q.set("state", filters.state);
  if (filters.correlation_id) q.set("correlation_id", filters.correlation_id);
  q.set("limit", "50");
  if (cursor) q.set("cursor", cursor);
  const page = await api(`/v1/tasks?${q}`);
  onChange = debounce(() => tasksPage(query));
  const stateSelect = h("select", { id: "f-state", name: "state" },
    h("option", { value: "" }, "any"),
    STATES.map((s) => h("option", { value: s, selected: s === filters.state }, s)));
  const corr = h("input", { id: "f-corr", name: "correlation_id", value: filters.correlation_id });
  const filter = h("form", { class: "row", role: "search", onsubmit: (ev) => {
    ev.preventDefault();
    const next = new URLSearchParams();
    if (stateSelect.value) next.set("state", stateSelect.value);
    if (corr.value.trim()) next.set("correlation_id", corr.value.trim());
    location.hash = `#/tasks?${next}`;
  } },
  h("label", { for: "f-state" }, "State", stateSelect),
  h("label", { for: "f-corr" }, "Correlation id", corr),
  h("button", { type: "submit" }, "Filter"));
  const rows = page.tasks.map((t) => h("tr", { "data-task": t.task_id },
    h("td", {}, h("a", { href: `#/tasks/${t.task_id}` }, h("code", {}, t.task_id))),
    h("td", {}, t.agent), h("td", {}, t.action), h("td", {}, state(t.state)),
    h("td", {}, `${t.attempt}/${t.max_attempts}`), h("td", {}, when(t.created_at))));
  const next = new URLSearchParams(query);
  if (page.next_cursor) next.set("cursor", page.next_cursor);
  show(
    h("h1", {}, "Tasks"),
    filter,
    rows.length ? h("div", { class: "table-wrap" }, h("table", { "aria-label": "Tasks" },
      h("thead", {}, h("tr", {}, ["Task", "Agent", "Action", "State", "Attempt", "Created"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, rows))) :
      h("p", { class: "empty" }, filters.state || filters.correlation_id ?
        "No task matches these filters." :
        "No tasks yet. Submit one below, or with `orchestrator submit`."),
    page.next_cursor ? h("p", {}, h("a", { href: `#/tasks?${next}` }, "Next page")) : null,
    submitForm(),
  );
}

function submitForm() {
  const agent = h("input", { id: "s-agent", required: true });
  const action = h("input", { id: "s-action", required: true });
  const params = h("textarea", { id: "s-params" }, "{}");
  const out = h("div", { "aria-live": "polite" });
  return h("section", { "aria-labelledby": "submit-h" },
    h("h2", { id: "submit-h" }, "Submit a task"),
    h("form", { class: "row", onsubmit: async (ev) => {
      ev.preventDefault();
      out.replaceChildren();
      let p;
      try { p = JSON.parse(params.value || "{}"); } catch (e) {
        out.append(problem(new Error(`The params are not JSON: ${e.message}`)));
        return;
      }
      try {
        const t = await api("/v1/tasks", { method: "POST", body: { to: agent.value.trim(), action: action.value.trim(), params: p } });
        location.hash = `#/tasks/${t.task_id}`;
      } catch (e) {
        out.append(problem(e));
      }
    } },
    h("label", { for: "s-agent" }, "Agent", agent),
    h("label", { for: "s-action" }, "Action", action),
    h("label", { for: "s-params" }, "Params (JSON)", params),
    h("button", { type: "submit", class: "primary" }, "Submit")),
    out);
}

async function taskPage(id) {
  const t = await api(`/v1/tasks/${encodeURIComponent(id)}`);
  onChange = debounce(() => taskPage(id), (c) => c.more || c.tasks[id] !== undefined);
  const audit = may("orch:audit:read") ?
    await api(`/v1/audit?task_id=${encodeURIComponent(id)}`).catch((e) => e) : null;
  const children = await api(`/v1/tasks?correlation_id=${encodeURIComponent(t.correlation_id)}&limit=200`)
    .then((p) => p.tasks.filter((c) => c.causation_id === t.task_id)).catch(() => []);
  const cancel = ["submitted", "working", "input_required", "auth_required"].includes(t.state) ?
    h("button", { type: "button", onclick: async (ev) => {
      try { await api(`/v1/tasks/${t.task_id}/cancel`, { method: "POST", body: {} }); } catch (e) {
        ev.target.after(problem(e));
      }
    } }, "Cancel task") : null;
  show(
    h("h1", {}, "Task ", h("code", {}, t.task_id)),
    h("dl", {},
      h("dt", {}, "State"), h("dd", { id: "task-state" }, state(t.state)),
      h("dt", {}, "Agent"), h("dd", {}, t.agent),
      h("dt", {}, "Action"), h("dd", {}, t.action),
      h("dt", {}, "Attempt"), h("dd", {}, `${t.attempt} of ${t.max_attempts}`),
      h("dt", {}, "Correlation"), h("dd", {}, h("a", { href: `#/tasks?correlation_id=${encodeURIComponent(t.correlation_id)}` }, t.correlation_id)),
      t.causation_id ? [h("dt", {}, "Caused by"), h("dd", {}, h("a", { href: `#/tasks/${t.causation_id}` }, t.causation_id))] : null,
      h("dt", {}, "Created"), h("dd", {}, when(t.created_at)),
      h("dt", {}, "Updated"), h("dd", {}, when(t.updated_at)),
      h("dt", {}, "Trace"), h("dd", {}, t.trace_url ? h("a", { href: t.trace_url, rel: "noreferrer", target: "_blank" }, t.trace_id) : (t.trace_id || "none"))),
    cancel,
    t.result !== null && t.result !== undefined ? [h("h2", {}, "Result"), json(t.result)] : null,
    t.error ? [h("h2", {}, "Error"), json(t.error)] : null,
    h("h2", {}, "History"),
    h("div", { class: "table-wrap" }, h("table", { "aria-label": "History" },
      h("thead", {}, h("tr", {}, ["When", "State", "Attempt", "By", "Why"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, t.history.map((e) => h("tr", {},
        h("td", {}, when(e.at)), h("td", {}, state(e.to)), h("td", {}, e.attempt),
        h("td", {}, e.actor || ""), h("td", {}, e.reason || (e.error ? e.error.message : "")))))),
    ),
    children.length ? [h("h2", {}, "Tasks it caused"), h("ul", {}, children.map((c) =>
      h("li", {}, h("a", { href: `#/tasks/${c.task_id}` }, h("code", {}, c.task_id)), " ", c.agent, " ", state(c.state))))] : null,
    h("h2", {}, "Audit"),
    audit === null ? h("p", { class: "empty" }, "Reading the audit trail needs orch:audit:read.") :
    audit instanceof Error ? problem(audit) : h("div", { class: "table-wrap" }, h("table", { "aria-label": "Audit" },
      h("thead", {}, h("tr", {}, ["Seq", "When", "Kind", "Actor"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, (audit.records || []).map((r) => h("tr", {},
        h("td", {}, r.seq), h("td", {}, when(r.at)), h("td", {}, r.kind), h("td", {}, r.actor)))))),
  );
}

// ---- routing ---------------------------------------------------------------

// Shows the page again at most every 500 ms, for the changes `wanted`
// picks (`_page`: the page asking, for the reader).
function debounce(_page, wanted = () => true) {
  let timer = null;
  return (changes) => {
    if (!wanted(changes) || timer) return;
    timer = setTimeout(() => { timer = null; route(true); }, 500);
  };
}

async function route(quiet) {
  if (!credential()) return signInPage();
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const parts = path.split("/").filter(Boolean);
  for (const a of document.querySelectorAll("nav a")) {
    const target = a.getAttribute("href").slice(1);
    const current = target === "/" ? path === "/" : path.startsWith(target);
    if (current) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  try {
    if (parts.length === 0) await overviewPage();
    else if (parts[0] === "tasks" && parts[1]) await taskPage(decodeURIComponent(parts[1]));
    else if (parts[0] === "tasks") await tasksPage(query || "");
    else show(h("h1", {}, "Not found"), h("p", {}, "No page here. ", h("a", { href: "#/" }, "Go to the overview.")));
  } catch (e) {
    if (credential()) show(h("h1", {}, "Something went wrong"), problem(e));
  }
  if (!quiet) main.focus();
}

async function start() {
  try {
    me = await api("/v1/me");
  } catch (e) {
    return signOut(e.message);
  }
  document.getElementById("principal").textContent = me.principal;
  document.getElementById("nav").hidden = false;
  document.getElementById("who").hidden = false;
  follow();
  route();
}

document.getElementById("sign-out").addEventListener("click", () => signOut("Signed out."));
window.addEventListener("hashchange", () => route());
if (credential()) start(); else signInPage();
