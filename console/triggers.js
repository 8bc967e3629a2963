// Triggers: each with its manifest and a form to start a run from its
// input schema; the files that did not load, with why.

import { h, show, json, empty, api, acting, diagnostic } from "./core.js";
import { schemaFields } from "./forms.js";

export async function triggersPage() {
  const list = await api("/v1/triggers");
  show(
    h("h1", {}, "Triggers"),
    list.errors && list.errors.length ? [h("h2", {}, "Files that did not load"),
      h("ul", { id: "trigger-errors" }, list.errors.map((e) => h("li", { class: "error" }, diagnostic(e))))] : null,
    list.triggers.length ? list.triggers.map(trigger) :
      empty("No triggers loaded. Put a workflow in the triggers directory (docs/triggers.md) and it loads at once."),
  );
}

function trigger(t) {
  const fields = schemaFields(t.input_schema || { type: "object", properties: {} });
  const key = h("input", { id: `k-${t.id}`, name: "idempotency_key" });
  const out = h("div", { "aria-live": "polite" });
  return h("section", { id: t.id, class: "trigger", "aria-labelledby": `t-${t.id}` },
    h("h2", { id: `t-${t.id}` }, t.name ? `${t.name} (${t.id})` : t.id),
    t.description ? h("p", {}, t.description) : null,
    h("details", {}, h("summary", {}, "Manifest"), json(t)),
    h("form", { class: "row start", "aria-label": `Start ${t.id}`, onsubmit: acting(out, async () => {
      const body = { input: fields.read() };
      if (key.value.trim()) body.idempotency_key = key.value.trim();
      const run = await api(`/v1/triggers/${encodeURIComponent(t.id)}/runs`, { method: "POST", body });
      location.hash = `#/runs/${run.run_id}`;
    }) },
    fields.fields,
    h("label", { for: `k-${t.id}` }, "Idempotency key (optional)", key),
    h("button", { type: "submit", class: "primary" }, "Start run")),
    out);
}
