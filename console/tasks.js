// Tasks: the list (filters, paging, a submit form) and a task's page.

import { h, show, when, state, json, problem, empty, table, api, may, refreshOn, acting, STATES } from "./core.js";

export async function tasksPage(query) {
  const params = new URLSearchParams(query);
  const filters = {};
  for (const f of ["state", "agent", "trigger_id", "correlation_id", "since"]) {
    if (params.get(f)) filters[f] = params.get(f);
  }
  const q = new URLSearchParams(filters);
  q.set("limit", "50");
  q.set("order", "newest");
  if (params.get("cursor")) q.set("cursor", params.get("cursor"));
  const page = await api(`/v1/tasks?${q}`);
  refreshOn((c) => Object.keys(c.tasks).length > 0);
  const field = (name, label, input) => h("label", { for: `f-${name}` }, label, input);
  const stateSelect = h("select", { id: "f-state", name: "state" },
    h("option", { value: "" }, "any"),
    STATES.map((s) => h("option", { value: s, selected: s === filters.state }, s)));
  const text = (name) => h("input", { id: `f-${name}`, name, value: filters[name] || "" });
  const since = h("select", { id: "f-since", name: "since" },
    [["", "any time"], ["5m", "last 5 minutes"], ["1h", "last hour"], ["24h", "last day"]].map(([v, l]) =>
      h("option", { value: v, selected: (filters.since || "") === v }, l)));
  const filter = h("form", { class: "row", role: "search", "aria-label": "Filter tasks", onsubmit: (ev) => {
    ev.preventDefault();
    const next = new URLSearchParams();
    for (const el of ev.target.querySelectorAll("input, select")) {
      if (el.value.trim()) next.set(el.name, el.value.trim());
    }
    location.hash = `#/tasks?${next}`;
  } },
  field("state", "State", stateSelect), field("agent", "Agent", text("agent")),
  field("trigger_id", "Trigger", text("trigger_id")), field("correlation_id", "Correlation id", text("correlation_id")),
  field("since", "Created", since),
  h("button", { type: "submit" }, "Filter"));
  const next = new URLSearchParams(query);
  if (page.next_cursor) next.set("cursor", page.next_cursor);
  const filtered = Object.keys(filters).length > 0;
  show(
    h("h1", {}, "Tasks"),
    filter,
    page.tasks.length ?
      table("Tasks", ["Task", "Agent", "Action", "State", "Attempt", "Created"], page.tasks.map((t) => [
        h("a", { href: `#/tasks/${t.task_id}` }, h("code", {}, t.task_id)),
        t.agent, t.action, state(t.state), `${t.attempt}/${t.max_attempts}`, when(t.created_at)])) :
      empty(filtered ? "No task matches these filters." : "No tasks yet. Submit one below, or with `orchestrator submit`."),
    page.next_cursor ? h("p", {}, h("a", { href: `#/tasks?${next}` }, "Older tasks")) : null,
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
    h("form", { class: "row", onsubmit: acting(out, async () => {
      let p;
      try { p = JSON.parse(params.value || "{}"); } catch (e) {
        throw new Error(`The params are not JSON: ${e.message}`);
      }
      const t = await api("/v1/tasks", { method: "POST", body: { to: agent.value.trim(), action: action.value.trim(), params: p } });
      location.hash = `#/tasks/${t.task_id}`;
    }) },
    h("label", { for: "s-agent" }, "Agent", agent),
    h("label", { for: "s-action" }, "Action", action),
    h("label", { for: "s-params" }, "Params (JSON)", params),
    h("button", { type: "submit", class: "primary" }, "Submit")),
    out);
}

const LIVE = ["submitted", "working", "input_required", "auth_required"];

export async function taskPage(id) {
  const t = await api(`/v1/tasks/${encodeURIComponent(id)}`);
  refreshOn((c) => c.tasks[id] !== undefined || Object.keys(c.tasks).length > 0 && LIVE.includes(t.state));
  const audit = may("orch:audit:read") ?
    await api(`/v1/audit?task_id=${encodeURIComponent(id)}`).catch((e) => e) : null;
  const children = await api(`/v1/tasks?correlation_id=${encodeURIComponent(t.correlation_id)}&limit=200`)
    .then((p) => p.tasks.filter((c) => c.causation_id === t.task_id)).catch(() => []);
  const out = h("div", { "aria-live": "polite" });
  const cancel = LIVE.includes(t.state) ?
    h("form", { onsubmit: acting(out, () => api(`/v1/tasks/${t.task_id}/cancel`, { method: "POST", body: {} })) },
      h("button", { type: "submit" }, "Cancel task"), out) : null;
  const envelope = t.envelope ? [h("h2", {}, "Envelope (token removed)"), json(t.envelope)] : null;
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
      h("dt", {}, "Trace"), h("dd", {}, t.trace_url ?
        h("a", { href: t.trace_url, rel: "noreferrer", target: "_blank" }, `${t.trace_id} in Jaeger`) :
        (t.trace_id || "none"))),
    cancel,
    t.result !== null && t.result !== undefined ? [h("h2", {}, "Result"), h("div", { id: "task-result" }, json(t.result))] : null,
    t.error ? [h("h2", {}, "Error"), json(t.error)] : null,
    h("h2", {}, "History"),
    table("History", ["When", "State", "Attempt", "By", "Why"], t.history.map((e) => [
      when(e.at), state(e.to), e.attempt, e.actor || "", e.reason || (e.error ? e.error.message : "")])),
    t.steps && t.steps.length ? [h("h2", {}, "Steps"), table("Steps", ["Step", "Task", "State"], t.steps.map((s) => [
      s.step, h("a", { href: `#/tasks/${s.task_id}` }, h("code", {}, s.task_id)), state(s.state)]))] : null,
    children.length ? [h("h2", {}, "Tasks it caused"), table("Tasks it caused", ["Task", "Agent", "State"], children.map((c) => [
      h("a", { href: `#/tasks/${c.task_id}` }, h("code", {}, c.task_id)), c.agent, state(c.state)]))] : null,
    envelope,
    h("h2", {}, "Audit"),
    audit === null ? empty("Reading the audit trail needs orch:audit:read.") :
      audit instanceof Error ? problem(audit) :
        table("Audit", ["Seq", "When", "Kind", "Actor"], (audit.records || []).map((r) => [r.seq, when(r.at), r.kind, r.actor])),
  );
}
