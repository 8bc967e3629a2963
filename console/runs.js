// Runs: the list, and a run's page with its step graph and the forms that
// answer its gate or cancel it.

import { h, svg, show, when, state, json, problem, empty, table, api, may, principal, refreshOn, acting, RUN_STATES } from "./core.js";
import { schemaFields } from "./forms.js";

export async function runsPage(query) {
  const params = new URLSearchParams(query);
  const q = new URLSearchParams();
  for (const f of ["state", "trigger_id", "cursor"]) if (params.get(f)) q.set(f, params.get(f));
  q.set("limit", "50");
  const page = await api(`/v1/runs?${q}`);
  refreshOn((c) => Object.keys(c.runs).length > 0);
  const stateSelect = h("select", { id: "r-state", name: "state" }, h("option", { value: "" }, "any"),
    RUN_STATES.map((s) => h("option", { value: s, selected: s === params.get("state") }, s)));
  const trigger = h("input", { id: "r-trigger", name: "trigger_id", value: params.get("trigger_id") || "" });
  const next = new URLSearchParams(query);
  if (page.next_cursor) next.set("cursor", page.next_cursor);
  show(
    h("h1", {}, "Runs"),
    h("form", { class: "row", role: "search", "aria-label": "Filter runs", onsubmit: (ev) => {
      ev.preventDefault();
      const f = new URLSearchParams();
      if (stateSelect.value) f.set("state", stateSelect.value);
      if (trigger.value.trim()) f.set("trigger_id", trigger.value.trim());
      location.hash = `#/runs?${f}`;
    } },
    h("label", { for: "r-state" }, "State", stateSelect),
    h("label", { for: "r-trigger" }, "Trigger", trigger),
    h("button", { type: "submit" }, "Filter")),
    page.runs.length ?
      table("Runs", ["Run", "Trigger", "State", "Started by", "Started"], page.runs.map((r) => [
        h("a", { href: `#/runs/${r.run_id}` }, h("code", {}, r.run_id)), r.trigger_id, state(r.state), r.started_by,
        when(r.steps.find((s) => s.started_at)?.started_at)])) :
      empty(params.toString() ? "No run matches these filters." : "No runs yet. Start one from a trigger's page (Triggers)."),
    page.next_cursor ? h("p", {}, h("a", { href: `#/runs?${next}` }, "Older runs")) : null,
  );
}

// The run's steps drawn in order: a row per step, a parallel step's
// branches side by side in one row; each box says its state.
function graph(steps) {
  const rows = [];
  for (const s of steps) {
    if (s.branch_of) {
      const row = rows.find((r) => r.parent === s.branch_of);
      if (row) { row.items.push(s); continue; }
      rows.push({ parent: s.branch_of, items: [s] });
    } else {
      rows.push({ parent: null, items: [s] });
    }
  }
  const W = 180, H = 44, GAP = 26, PAD = 10;
  const width = Math.max(...rows.map((r) => r.items.length)) * (W + PAD) + PAD;
  const height = rows.length * (H + GAP) + PAD;
  const nodes = [];
  rows.forEach((row, y) => {
    const left = (width - row.items.length * (W + PAD) + PAD) / 2;
    row.items.forEach((s, x) => {
      const X = left + x * (W + PAD), Y = PAD + y * (H + GAP);
      if (y > 0) {
        nodes.push(svg("line", { x1: width / 2, y1: Y - GAP, x2: X + W / 2, y2: Y, class: "edge" }));
      }
      nodes.push(svg("g", { class: `node step-${s.state}` },
        svg("title", {}, `${s.id}: ${s.state}`),
        svg("rect", { x: X, y: Y, width: W, height: H, rx: 6 }),
        svg("text", { x: X + 10, y: Y + 18 }, `${s.id} (${s.kind})`),
        svg("text", { x: X + 10, y: Y + 36, class: "sub" }, s.state)));
    });
  });
  return svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
    "aria-label": `Steps: ${steps.map((s) => `${s.id} ${s.state}`).join(", ")}` }, nodes);
}

export async function runPage(id) {
  const r = await api(`/v1/runs/${encodeURIComponent(id)}`);
  refreshOn((c) => c.runs[id] !== undefined || Object.keys(c.tasks).length > 0);
  const out = h("div", { "aria-live": "polite", id: "run-out" });
  const mayAnswer = r.started_by === principal() || may("orch:runs:approve");
  let gate = null;
  if (r.waiting && mayAnswer) {
    const reason = h("input", { id: "g-reason", name: "reason" });
    const input = r.waiting.input_schema ? schemaFields(r.waiting.input_schema) : null;
    const act = (what) => acting(out, async () => {
      const body = { reason: reason.value };
      if (what === "input") body.input = input.read();
      await api(`/v1/runs/${r.run_id}/${what}`, { method: "POST", body });
    });
    gate = h("section", { "aria-labelledby": "gate-h", class: "gate" },
      h("h2", { id: "gate-h" }, `Waiting at ${r.waiting.step}`),
      h("p", { id: "gate-prompt" }, r.waiting.prompt),
      input ? h("form", { class: "row", onsubmit: act("input") }, input.fields,
        h("label", { for: "g-reason" }, "Why (audited)", reason),
        h("button", { type: "submit", class: "primary", id: "answer" }, "Answer"),
        h("button", { type: "button", id: "reject", onclick: act("reject") }, "Reject")) :
        h("form", { class: "row", onsubmit: act("approve") },
          h("label", { for: "g-reason" }, "Why (audited)", reason),
          h("button", { type: "submit", class: "primary", id: "approve" }, "Approve"),
          h("button", { type: "button", id: "reject", onclick: act("reject") }, "Reject")));
  } else if (r.waiting) {
    gate = h("p", {}, `Waiting at ${r.waiting.step}: “${r.waiting.prompt}”. Answering needs orch:runs:approve.`);
  }
  const cancel = ["working", "input_required"].includes(r.state) ?
    h("form", { onsubmit: acting(out, () => api(`/v1/runs/${r.run_id}/cancel`, { method: "POST", body: { reason: "canceled from the console" } })) },
      h("button", { type: "submit" }, "Cancel run")) : null;
  show(
    h("h1", {}, "Run ", h("code", {}, r.run_id)),
    h("dl", {},
      h("dt", {}, "State"), h("dd", { id: "run-state" }, state(r.state)),
      h("dt", {}, "Trigger"), h("dd", {}, h("a", { href: "#/triggers" }, r.trigger_id)),
      h("dt", {}, "Started by"), h("dd", {}, r.started_by),
      h("dt", {}, "Tasks"), h("dd", {}, h("a", { href: `#/tasks?correlation_id=${encodeURIComponent(r.correlation_id)}` }, r.correlation_id)),
      h("dt", {}, "Trace"), h("dd", {}, r.trace_url ? h("a", { href: r.trace_url, rel: "noreferrer", target: "_blank" }, `${r.trace_id} in Jaeger`) : (r.trace_id || "none"))),
    gate, cancel, out,
    h("h2", {}, "Steps"),
    h("div", { class: "graph" }, graph(r.steps)),
    table("Steps", ["Step", "Kind", "State", "Task", "Decision"], r.steps.map((s) => [
      s.id, s.kind, state(s.state),
      s.task_id ? h("a", { href: `#/tasks/${s.task_id}` }, h("code", {}, s.task_id)) : "",
      s.decision ? `${s.decision.approved ? "approved" : "rejected"} by ${s.decision.by}${s.decision.reason ? `: ${s.decision.reason}` : ""}` : ""])),
    h("h2", {}, "Input"), json(r.input),
    r.result !== undefined ? [h("h2", {}, "Result"), json(r.result)] : null,
    r.error ? [h("h2", {}, "Error"), problem(new Error(r.error.message))] : null,
  );
}
