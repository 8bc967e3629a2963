// What every page of the console uses: building elements, calling the API,
// showing times, states and errors, and knowing what the caller may do.

const KEY = "orchestrator.credential";
export const main = document.getElementById("main");

// An element: `h("a", {href: "#/"}, "text", child)`. Text is always text
// (never parsed as HTML), so nothing the API returns can run as script.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

// An SVG element.
export function svg(tag, attrs, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  for (const c of children.flat(Infinity)) {
    if (c !== undefined && c !== null && c !== false) el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

export function show(...nodes) {
  const typed = repainting ? typedFields() : null;
  main.replaceChildren(h("div", {}, ...nodes));
  if (typed) restoreFields(typed);
}

// What a person has typed or chosen on the page, and which field has the
// focus: a repaint of the same page (a live change) puts it back, so an
// answer being written is not wiped by someone else's change. A field is
// known by its form's place on the page and its name (or id): generated
// forms number their ids anew each time.
function fieldKey(el) {
  const forms = [...main.querySelectorAll("form")];
  return `${forms.indexOf(el.form)}:${el.name || el.id}`;
}

function fields() {
  return [...main.querySelectorAll("input, textarea, select")].filter((el) => el.name || el.id);
}

function typedFields() {
  const values = new Map();
  const active = document.activeElement;
  let focus = null;
  for (const el of fields()) {
    const key = fieldKey(el);
    if (el === active) focus = key;
    if (el.type === "checkbox" || el.type === "radio") {
      if (el.checked !== el.defaultChecked) values.set(key, { checked: el.checked });
    } else if (el.value !== el.defaultValue || el.tagName === "SELECT") {
      values.set(key, { value: el.value });
    }
  }
  return { values, focus };
}

function restoreFields({ values, focus }) {
  for (const el of fields()) {
    const key = fieldKey(el);
    const kept = values.get(key);
    if (kept && "checked" in kept) el.checked = kept.checked;
    else if (kept) el.value = kept.value;
    if (key === focus) el.focus({ preventScroll: true });
  }
}

// A time in the viewer's zone, the UTC time on hover.
export function when(ts) {
  if (!ts) return "";
  const d = new Date(ts);
  if (Number.isNaN(d.getTime())) return ts;
  return h("time", { datetime: d.toISOString(), title: d.toISOString().replace(".000Z", "Z") + " (UTC)" },
    d.toLocaleString());
}

export function state(s) {
  return h("span", { class: `state state-${s}` }, s);
}

export function json(v) {
  return h("pre", {}, JSON.stringify(v, null, 2));
}

export function problem(e) {
  return h("p", { class: "error", role: "alert" }, e.message || String(e));
}

// A problem found in a file: `file:line (field) message`.
export function diagnostic(d) {
  if (typeof d === "string") return d;
  const where = `${d.file || ""}${d.line ? `:${d.line}` : ""}`;
  return `${where}${d.field ? ` (${d.field})` : ""}: ${d.message}`;
}

export function empty(text) {
  return h("p", { class: "empty" }, text);
}

// A table: `columns` are headings, `rows` arrays of cells.
export function table(label, columns, rows) {
  return h("div", { class: "table-wrap" }, h("table", { "aria-label": label },
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c) => h("td", {}, c)))))));
}

// ---- the API ---------------------------------------------------------------

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function credential() {
  return sessionStorage.getItem(KEY);
}

export function keep(value) {
  if (value === null) sessionStorage.removeItem(KEY);
  else sessionStorage.setItem(KEY, value);
}

let signedOut = () => {};
export function onSignedOut(fn) {
  signedOut = fn;
}

// A call of the API; its error as the API words it.
export async function api(path, options = {}) {
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
    if (res.status === 401 && !options.signingIn) signedOut(`Signed out: ${message}`);
    throw new ApiError(res.status, err ? err.code : "http", message);
  }
  return body;
}

// ---- who is signed in ------------------------------------------------------

let me = { principal: "", scopes: [] };
export function setMe(m) {
  me = m;
}
export function principal() {
  return me.principal;
}

// Whether the caller holds `scope` (a grant ending in `*` covers a prefix).
export function may(scope) {
  return me.scopes.some((g) => (g.endsWith("*") ? scope.startsWith(g.slice(0, -1)) : g === scope));
}

// ---- live changes ------------------------------------------------------------

let listener = null;
let repaint = () => {};
// Set while the current page shows again for a live change (`show` keeps
// what was typed then), not when a person goes to a page.
let repainting = false;
export function onRepaint(fn) {
  repaint = async () => {
    repainting = true;
    try {
      await fn();
    } finally {
      repainting = false;
    }
  };
}

// The current page shows again (at most every 500 ms) on the changes
// `wanted` picks; a new page replaces the last one's wish.
export function refreshOn(wanted = () => true) {
  let timer = null;
  listener = (changes) => {
    if (timer || !(changes.more || wanted(changes))) return;
    timer = setTimeout(() => { timer = null; repaint(); }, 500);
  };
}

export function changed(changes) {
  if (listener) listener(changes);
}

// A form's submit handler that shows the API's refusal in `out`.
export function acting(out, fn) {
  return async (ev) => {
    ev.preventDefault();
    out.replaceChildren();
    try {
      await fn(ev);
    } catch (e) {
      out.append(problem(e));
    }
  };
}

export const STATES = ["submitted", "working", "input_required", "auth_required", "completed", "failed", "canceled", "rejected"];
export const RUN_STATES = ["working", "input_required", "completed", "failed", "canceled", "rejected"];
