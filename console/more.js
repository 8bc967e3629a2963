// The overview, agents, dead letters and the audit trail.

import { h, svg, show, when, state, empty, table, api, may, refreshOn, acting, diagnostic, STATES } from "./core.js";

export async function overviewPage() {
  const o = await api("/v1/overview");
  refreshOn(() => true);
  const rate = (n) => (n === null || n === undefined ? "—" : n.toFixed(n < 10 ? 2 : 0));
  const ms = (n) => (n === null || n === undefined ? "—" : `${n.toFixed(0)} ms`);
  show(
    h("h1", {}, "Overview"),
    h("h2", {}, "Tasks by state"),
    h("div", { class: "cards" }, STATES.map((s) =>
      h("a", { class: "card", href: `#/tasks?state=${s}` },
        h("div", { class: "n", id: `count-${s}` }, `${o.tasks_by_state[s] ?? 0}${o.at_least.includes(s) ? "+" : ""}`), state(s)))),
    h("h2", {}, `The last ${o.window_minutes} minutes`),
    h("div", { class: "cards" },
      h("div", { class: "card" }, h("div", { class: "n" }, rate(o.completed_per_second)), "tasks ended per second"),
      h("div", { class: "card" }, h("div", { class: "n" }, ms(o.latency_ms.p50)), "latency p50"),
      h("div", { class: "card" }, h("div", { class: "n" }, ms(o.latency_ms.p99)), "latency p99"),
      h("div", { class: "card" }, h("div", { class: "n" }, o.queue_depth ?? "—"), "queued on the broker"),
      h("a", { class: "card", href: "#/dlq" }, h("div", { class: "n" }, o.dead_letters ?? "—"), "dead letters")),
    h("h2", {}, "Live agents"),
    o.agents.length ? table("Live agents", ["Agent", "Replicas"], o.agents.map((a) => [
      h("a", { href: "#/agents" }, a.name), a.replicas])) :
      empty("No agents declared. Add a card to the agents directory (docs/agents.md)."),
    h("h2", {}, "Recent failures"),
    o.recent_failures.length ? table("Recent failures", ["Task", "Agent", "State", "Error", "When"], o.recent_failures.map((t) => [
      h("a", { href: `#/tasks/${t.task_id}` }, h("code", {}, t.task_id)), t.agent, state(t.state),
      t.error ? t.error.message : "", when(t.updated_at)])) :
      empty("No task failed lately."),
  );
}

export async function agentsPage() {
  const a = await api("/v1/agents?tool_only=true");
  refreshOn(() => false);
  show(
    h("h1", {}, "Agents"),
    a.problems && a.problems.length ? [h("h2", {}, "Problems"), h("ul", {}, a.problems.map((p) => h("li", { class: "error" }, diagnostic(p))))] : null,
    a.agents.length ? table("Agents", ["Agent", "Skills", "Format", "Replicas", "Description"], a.agents.map((x) => [
      h("span", { id: x.card.name }, x.card.name),
      (x.card.skills || []).map((s) => s.id).join(", "),
      x.card.origin ? `${x.card.origin.format}` : "",
      x.instances.length,
      x.card.description || ""])) :
      empty("No agents declared. Add a card to the agents directory (docs/agents.md)."),
    a.edges && a.edges.length ? [h("h2", {}, "Topology"), topology(a.edges)] : null,
  );
}

// Who uses whom: each node a circle on a ring, each edge a line with its kind.
function topology(edges) {
  const names = [...new Set(edges.flatMap((e) => [e.from, e.to]))];
  const R = Math.max(120, names.length * 22), C = R + 90;
  const at = new Map(names.map((n, i) => {
    const a = (2 * Math.PI * i) / names.length - Math.PI / 2;
    return [n, [C + R * Math.cos(a), C + R * Math.sin(a)]];
  }));
  // Room on the right for the longest name.
  const W = 2 * C + 8 * Math.max(...names.map((n) => n.length));
  return h("div", { class: "graph" }, svg("svg", { viewBox: `0 0 ${W} ${2 * C}`, width: W, height: 2 * C, role: "img",
    "aria-label": edges.map((e) => `${e.from} ${e.kind} ${e.to}`).join("; ") },
  edges.map((e) => {
    const [x1, y1] = at.get(e.from), [x2, y2] = at.get(e.to);
    return svg("line", { x1, y1, x2, y2, class: `edge edge-${e.kind}` }, svg("title", {}, `${e.from} ${e.kind} ${e.to}`));
  }),
  names.map((n) => {
    const [x, y] = at.get(n);
    return svg("g", { class: "node" }, svg("circle", { cx: x, cy: y, r: 6 }), svg("text", { x: x + 9, y: y + 4 }, n));
  })));
}

export async function dlqPage() {
  if (!may("orch:dlq:manage")) {
    return show(h("h1", {}, "Dead letters"), empty("Listing and replaying dead letters needs orch:dlq:manage."));
  }
  const page = await api("/v1/dlq?limit=200");
  refreshOn((c) => Object.values(c.tasks).some((s) => s === "failed"));
  const out = h("div", { "aria-live": "polite", id: "dlq-out" });
  show(
    h("h1", {}, "Dead letters"), out,
    page.dead_letters.length ?
      table("Dead letters", ["Task", "Agent", "Reason", "When", ""], page.dead_letters.map((d) => [
        d.task_id ? h("a", { href: `#/tasks/${d.task_id}` }, h("code", {}, d.task_id)) : "",
        d.agent, [d.code ? h("code", {}, d.code) : null, " ", d.reason || ""], when(d.at),
        d.task_id ? h("form", { onsubmit: acting(out, async () => {
          const t = await api(`/v1/dlq/${d.task_id}/replay`, { method: "POST", body: {} });
          out.append(h("p", { role: "status" }, "Replayed as ", h("a", { href: `#/tasks/${t.task_id}` }, t.task_id), "."));
        }) }, h("button", { type: "submit", "aria-label": `Replay ${d.task_id}` }, "Replay")) : ""])) :
      empty("No dead letters: a message the broker gave up on (delivered too often without an answer, or unreadable) would be listed here, to replay. Tasks that failed by their own report are under Tasks, state failed."),
  );
}

export async function auditPage(query) {
  if (!may("orch:audit:read")) {
    return show(h("h1", {}, "Audit"), empty("Reading the audit trail needs orch:audit:read."));
  }
  const params = new URLSearchParams(query);
  const q = new URLSearchParams();
  for (const f of ["correlation_id", "task_id", "cursor"]) if (params.get(f)) q.set(f, params.get(f));
  q.set("limit", "100");
  const page = await api(`/v1/audit?${q}`);
  refreshOn(() => false);
  const corr = h("input", { id: "a-corr", name: "correlation_id", value: params.get("correlation_id") || "" });
  const task = h("input", { id: "a-task", name: "task_id", value: params.get("task_id") || "" });
  const out = h("div", { "aria-live": "polite", id: "verify-out" });
  const next = new URLSearchParams(query);
  if (page.next_cursor) next.set("cursor", page.next_cursor);
  show(
    h("h1", {}, "Audit"),
    h("form", { class: "row", role: "search", "aria-label": "Filter the audit trail", onsubmit: (ev) => {
      ev.preventDefault();
      const f = new URLSearchParams();
      if (corr.value.trim()) f.set("correlation_id", corr.value.trim());
      if (task.value.trim()) f.set("task_id", task.value.trim());
      location.hash = `#/audit?${f}`;
    } },
    h("label", { for: "a-corr" }, "Correlation id", corr),
    h("label", { for: "a-task" }, "Task id", task),
    h("button", { type: "submit" }, "Show")),
    h("form", { onsubmit: acting(out, async () => {
      const r = await api("/v1/audit/verify");
      out.append(h("p", { role: "status", class: r.ok ? "ok" : "error" },
        r.ok ? `The chain holds: ${r.records} records checked.` : `The chain is broken: ${JSON.stringify(r)}`));
    }) }, h("button", { type: "submit" }, "Check the chain")),
    out,
    page.records.length ?
      table("Audit", ["Seq", "When", "Kind", "Actor", "Task", "Detail"], page.records.map((r) => [
        r.seq, when(r.at), r.kind, r.actor,
        r.task_id ? h("a", { href: `#/tasks/${r.task_id}` }, h("code", {}, r.task_id)) : "",
        h("code", {}, JSON.stringify(r.detail))])) :
      empty("No audit records match."),
    page.next_cursor ? h("p", {}, h("a", { href: `#/audit?${next}` }, "More")) : null,
  );
}


