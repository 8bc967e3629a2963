// A form generated from a JSON Schema (a trigger's `input_schema`, a gate's):
// a field per property of an object (text, number, a checkbox, a choice
// for an `enum`, one line per item for an array of strings); anything else,
// or a schema it does not know, is a JSON text area. The server checks the
// value against the schema and its words are shown when it refuses.

import { h } from "./core.js";

let serial = 0;

// The form's fields, and a function that reads the value they hold.
export function schemaFields(schema) {
  const id = `f${++serial}`;
  const props = schema && schema.type === "object" && schema.properties;
  if (!props) {
    const area = h("textarea", { id: `${id}-json`, "aria-describedby": `${id}-help` }, "{}");
    return {
      fields: [h("label", { for: `${id}-json` }, "Input (JSON)", area),
        h("p", { id: `${id}-help`, class: "empty" }, "Any JSON value the workflow accepts.")],
      read: () => JSON.parse(area.value || "null"),
    };
  }
  const required = new Set(schema.required || []);
  const readers = [];
  const fields = Object.entries(props).map(([name, p], i) => {
    const fid = `${id}-${i}`;
    const label = `${name}${required.has(name) ? " (required)" : ""}`;
    const hint = p.description ? h("span", { class: "hint" }, p.description) : null;
    let input;
    let read;
    if (Array.isArray(p.enum)) {
      input = h("select", { id: fid, name },
        required.has(name) ? null : h("option", { value: "" }, "—"),
        p.enum.map((v) => h("option", { value: JSON.stringify(v) }, String(v))));
      read = () => (input.value === "" ? undefined : JSON.parse(input.value));
    } else if (p.type === "boolean") {
      input = h("input", { id: fid, name, type: "checkbox" });
      read = () => input.checked;
    } else if (p.type === "integer" || p.type === "number") {
      input = h("input", { id: fid, name, type: "number", step: p.type === "integer" ? "1" : "any", required: required.has(name) });
      read = () => (input.value === "" ? undefined : Number(input.value));
    } else if (p.type === "array" && (!p.items || p.items.type === "string")) {
      input = h("textarea", { id: fid, name, required: required.has(name), "aria-describedby": `${fid}-help` });
      read = () => {
        const items = input.value.split("\n").map((s) => s.trim()).filter(Boolean);
        return items.length || required.has(name) ? items : undefined;
      };
      readers.push([name, read]);
      return h("label", { for: fid }, label, input, hint,
        h("span", { id: `${fid}-help`, class: "hint" }, "One per line."));
    } else if (p.type === "string" || p.type === undefined && !p.properties) {
      input = h("input", { id: fid, name, required: required.has(name) });
      read = () => (input.value === "" && !required.has(name) ? undefined : input.value);
    } else {
      input = h("textarea", { id: fid, name, "aria-describedby": `${fid}-help` });
      read = () => (input.value.trim() === "" ? undefined : JSON.parse(input.value));
      readers.push([name, read]);
      return h("label", { for: fid }, label, input, hint,
        h("span", { id: `${fid}-help`, class: "hint" }, "JSON."));
    }
    readers.push([name, read]);
    return h("label", { for: fid }, label, input, hint);
  });
  return {
    fields,
    read: () => {
      const out = {};
      for (const [name, read] of readers) {
        const v = read();
        if (v !== undefined) out[name] = v;
      }
      return out;
    },
  };
}
