//! Template rendering for trigger step params: `{{ input.query }}`.
//!
//! A string that is exactly one placeholder becomes the value it names, with
//! its JSON type kept; placeholders inside a longer string are replaced by
//! the value's text (strings bare, other values as JSON). A path that does
//! not resolve is an error naming it. Pure functions.

use serde_json::{Map, Value};

/// Why a template could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// `{{` without `}}`.
    #[error("`{template}`: unclosed `{{{{`")]
    Unclosed {
        /// The template text.
        template: String,
    },
    /// The path names nothing in the context.
    #[error("`{{{{ {path} }}}}` does not resolve")]
    Unresolved {
        /// The dotted path.
        path: String,
    },
}

/// Renders every string in `params` against `context`.
pub fn render(
    params: &Map<String, Value>,
    context: &Value,
) -> Result<Map<String, Value>, TemplateError> {
    params
        .iter()
        .map(|(k, v)| Ok((k.clone(), render_value(v, context)?)))
        .collect()
}

fn render_value(value: &Value, context: &Value) -> Result<Value, TemplateError> {
    match value {
        Value::String(s) => render_string(s, context),
        Value::Array(items) => items
            .iter()
            .map(|v| render_value(v, context))
            .collect::<Result<_, _>>()
            .map(Value::Array),
        Value::Object(map) => render(map, context).map(Value::Object),
        other => Ok(other.clone()),
    }
}

fn render_string(s: &str, context: &Value) -> Result<Value, TemplateError> {
    let trimmed = s.trim();
    if let Some(inner) = trimmed
        .strip_prefix("{{")
        .and_then(|r| r.strip_suffix("}}"))
        && !inner.contains("{{")
    {
        return lookup(inner.trim(), context).cloned();
    }
    let mut out = String::new();
    let mut rest = s;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or_else(|| TemplateError::Unclosed {
            template: s.to_string(),
        })?;
        match lookup(after[..end].trim(), context)? {
            Value::String(v) => out.push_str(v),
            other => out.push_str(&other.to_string()),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(Value::String(out))
}

fn lookup<'a>(path: &str, context: &'a Value) -> Result<&'a Value, TemplateError> {
    let unresolved = || TemplateError::Unresolved {
        path: path.to_string(),
    };
    if path.is_empty() {
        return Err(unresolved());
    }
    path.split('.')
        .try_fold(context, |v, key| v.get(key).ok_or_else(unresolved))
}

/// Every placeholder path in `params`, to check statically.
pub fn paths(params: &Map<String, Value>) -> Vec<String> {
    let mut out = Vec::new();
    collect(&Value::Object(params.clone()), &mut out);
    out
}

fn collect(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => {
            let mut rest = s.as_str();
            while let Some(start) = rest.find("{{") {
                let after = &rest[start + 2..];
                let Some(end) = after.find("}}") else { return };
                out.push(after[..end].trim().to_string());
                rest = &after[end + 2..];
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect(v, out)),
        Value::Object(map) => map.values().for_each(|v| collect(v, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn a_lone_placeholder_keeps_the_type_and_mixed_text_interpolates() {
        let ctx = json!({"input": {"query": "project X", "n": 3, "tags": ["a"]}});
        let out = render(
            &params(json!({
                "q": "{{ input.query }}", "n": "{{input.n}}", "tags": " {{ input.tags }} ",
                "subject": "Summary: {{ input.query }} ({{ input.n }})",
                "nested": [{"x": "{{ input.query }}"}], "plain": 7
            })),
            &ctx,
        )
        .unwrap();
        assert_eq!(out["q"], "project X");
        assert_eq!(out["n"], 3);
        assert_eq!(out["tags"], json!(["a"]));
        assert_eq!(out["subject"], "Summary: project X (3)");
        assert_eq!(out["nested"][0]["x"], "project X");
        assert_eq!(out["plain"], 7);
    }

    #[test]
    fn unresolved_and_unclosed_placeholders_are_errors() {
        let ctx = json!({"input": {}});
        assert_eq!(
            render(&params(json!({"q": "{{ input.missing }}"})), &ctx),
            Err(TemplateError::Unresolved {
                path: "input.missing".into()
            })
        );
        assert!(matches!(
            render(&params(json!({"q": "a {{ input"})), &ctx),
            Err(TemplateError::Unclosed { .. })
        ));
        assert!(render(&params(json!({"q": "{{ }}"})), &ctx).is_err());
    }

    #[test]
    fn paths_lists_every_placeholder() {
        let p =
            params(json!({"a": "{{ input.x }} and {{ steps.s.result }}", "b": ["{{input.y}}"]}));
        let mut got = paths(&p);
        got.sort();
        assert_eq!(got, ["input.x", "input.y", "steps.s.result"]);
    }
}
