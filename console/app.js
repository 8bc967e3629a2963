// The orchestrator's console (docs/console.md): pages over the HTTP API,
// written for this project, no framework, no build step. The credential
// signed in with lives in this tab's sessionStorage and goes in each
// request's Authorization header: never in a cookie (no cross-site request
// can ride it) nor in a URL.

import { h, show, main, problem, api, credential, keep, onSignedOut, setMe, changed, onRepaint } from "./core.js";
import { tasksPage, taskPage } from "./tasks.js";
import { runsPage, runPage } from "./runs.js";
import { triggersPage } from "./triggers.js";
import { overviewPage, agentsPage, dlqPage, auditPage } from "./more.js";

// ---- live changes (GET /v1/changes, server-sent events) ---------------------

let liveAbort = null;

function setLive(text) {
  document.getElementById("live").textContent = text;
}

// Reads the stream with fetch (EventSource cannot send the credential),
// reconnecting after a break (1 s, doubling up to 15 s).
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
          } else if (event === "changes") {
            changed(JSON.parse(data.join("\n")));
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
  keep(null);
  liveAbort?.abort();
  document.getElementById("nav").hidden = true;
  document.getElementById("who").hidden = true;
  signInPage(message);
}
onSignedOut(signOut);

function signInPage(message) {
  const input = h("input", { id: "credential", type: "password", autocomplete: "off", required: true,
    "aria-describedby": "credential-help" });
  const form = h("form", { class: "signin", onsubmit: async (ev) => {
    ev.preventDefault();
    keep(input.value.trim());
    try {
      setMe(await api("/v1/me", { signingIn: true }));
    } catch (e) {
      keep(null);
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
    "The key `orchestrator run` printed at its first start (also in data/keys/admin.api-key), or a token from your issuer. ",
    "It is kept in this tab only, and sent with each request."),
  h("button", { type: "submit", class: "primary" }, "Sign in"),
  message ? h("p", { class: "error", role: "alert" }, message) : null);
  show(form);
  input.focus();
}

// ---- routing ---------------------------------------------------------------

const PAGES = [
  [/^\/$/, () => overviewPage()],
  [/^\/tasks\/(.+)$/, (m) => taskPage(decodeURIComponent(m[1]))],
  [/^\/tasks$/, (m, q) => tasksPage(q)],
  [/^\/runs\/(.+)$/, (m) => runPage(decodeURIComponent(m[1]))],
  [/^\/runs$/, (m, q) => runsPage(q)],
  [/^\/triggers$/, () => triggersPage()],
  [/^\/agents$/, () => agentsPage()],
  [/^\/dlq$/, () => dlqPage()],
  [/^\/audit$/, (m, q) => auditPage(q)],
];

async function route(quiet) {
  if (!credential()) return signInPage();
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  for (const a of document.querySelectorAll("nav a")) {
    const target = a.getAttribute("href").slice(1);
    const current = target === "/" ? path === "/" : path.startsWith(target);
    if (current) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const page = PAGES.find(([re]) => re.test(path));
  try {
    if (page) await page[1](path.match(page[0]), query || "");
    else show(h("h1", {}, "Not found"), h("p", {}, "No page here. ", h("a", { href: "#/" }, "Go to the overview.")));
  } catch (e) {
    if (credential()) show(h("h1", {}, "Something went wrong"), problem(e));
  }
  if (!quiet) main.focus({ preventScroll: true });
}
onRepaint(() => route(true));

async function start() {
  let me;
  try {
    me = await api("/v1/me");
  } catch (e) {
    return signOut(e.message);
  }
  setMe(me);
  document.getElementById("principal").textContent = me.principal;
  document.getElementById("nav").hidden = false;
  document.getElementById("who").hidden = false;
  follow();
  route();
}

document.getElementById("sign-out").addEventListener("click", () => signOut("Signed out."));
window.addEventListener("hashchange", () => route());
if (credential()) start(); else signInPage();
