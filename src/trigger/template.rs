//! Templates in step params and `when:` conditions, rendered by minijinja
//! (Jinja2 syntax: `{{ input.query }}`, `{{ steps.search.result.summary }}`,
//! filters such as `{{ input.names | join(", ") }}`).
//!
//! A string that is exactly one `{{ expression }}` becomes the expression's
//! value with its JSON type kept (a number stays a number, an object an
//! object); any other string is rendered as text. A name that does not
//! resolve is an error naming it, never an empty string. Pure functions.

use std::sync::OnceLock;

use minijinja::{Environment, UndefinedBehavior, Value as Jinja};
use serde_json::{Map, Value};

/// Why a template could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{template}`: {message}")]
pub struct TemplateError {
    /// The template text.
    pub template: String,
    /// What went wrong (minijinja's words).
    pub message: String,
}

/// Instructions one rendering may take: far more than any template of a
/// step or condition needs.
const FUEL: u64 = 1_000_000;

/// The one environment: strict about undefined names when printing,
/// lenient (false) when testing truth, so `when: steps.a.result.ok` works
/// for a result without `ok`.
fn env() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::SemiStrict);
        // A template over a caller's input (a loop over a list it sent)
        // ends: past this many instructions it is an error, not a hang.
        env.set_fuel(Some(FUEL));
        env
    })
}

fn error(template: &str, e: impl std::fmt::Display) -> TemplateError {
    TemplateError {
        template: template.to_string(),
        message: e.to_string(),
    }
}

/// Renders every string in `params` against `context`.
pub fn render(
    params: &Map<String, Value>,
    context: &Value,
) -> Result<Map<String, Value>, TemplateError> {
    let ctx = Jinja::from(minijinja::value::Serde(context));
    params
        .iter()
        .map(|(k, v)| Ok((k.clone(), render_value(v, &ctx)?)))
        .collect()
}

/// Renders one template string as text (a router's request).
pub fn render_text(template: &str, context: &Value) -> Result<String, TemplateError> {
    let ctx = Jinja::from(minijinja::value::Serde(context));
    match render_string(template, &ctx)? {
        Value::String(s) => Ok(s),
        other => Ok(other.to_string()),
    }
}

/// Evaluates a `when:` condition: a bare expression (`steps.a.result.n > 2`)
/// or one wrapped in `{{ }}`.
pub fn condition(expression: &str, context: &Value) -> Result<bool, TemplateError> {
    let inner = lone_expression(expression).unwrap_or(expression);
    let compiled = env()
        .compile_expression_owned(inner.to_string())
        .map_err(|e| error(expression, e))?;
    let value = compiled
        .eval(Jinja::from(minijinja::value::Serde(context)))
        .map_err(|e| error(expression, e))?;
    Ok(value.is_true())
}

fn render_value(value: &Value, ctx: &Jinja) -> Result<Value, TemplateError> {
    match value {
        Value::String(s) => render_string(s, ctx),
        Value::Array(items) => items
            .iter()
            .map(|v| render_value(v, ctx))
            .collect::<Result<_, _>>()
            .map(Value::Array),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| Ok((k.clone(), render_value(v, ctx)?)))
            .collect::<Result<_, _>>()
            .map(Value::Object),
        other => Ok(other.clone()),
    }
}

/// The expression of a string that is exactly one `{{ … }}`.
fn lone_expression(s: &str) -> Option<&str> {
    let inner = s.trim().strip_prefix("{{")?.strip_suffix("}}")?;
    (!inner.contains("{{") && !inner.contains("}}")).then(|| inner.trim())
}

fn render_string(s: &str, ctx: &Jinja) -> Result<Value, TemplateError> {
    if !s.contains("{{") && !s.contains("{%") {
        return Ok(Value::String(s.to_string()));
    }
    if let Some(expression) = lone_expression(s) {
        let compiled = env()
            .compile_expression_owned(expression.to_string())
            .map_err(|e| error(s, e))?;
        let value = compiled.eval(ctx.clone()).map_err(|e| error(s, e))?;
        if value.is_undefined() {
            return Err(error(s, format!("`{expression}` is undefined")));
        }
        return serde_json::to_value(&value).map_err(|e| error(s, e));
    }
    env()
        .render_str(s, ctx.clone())
        .map(Value::String)
        .map_err(|e| error(s, e))
}

/// Every name a template in `value` reads, as a dotted path
/// (`steps.search.result.summary`), to check statically; a template that
/// does not parse is an error.
pub fn paths(value: &Value) -> Result<Vec<String>, TemplateError> {
    let mut out = Vec::new();
    collect(value, &mut out)?;
    out.sort();
    out.dedup();
    Ok(out)
}

/// The names a `when:` condition reads.
pub fn condition_paths(expression: &str) -> Result<Vec<String>, TemplateError> {
    let inner = lone_expression(expression).unwrap_or(expression);
    let compiled = env()
        .compile_expression_owned(inner.to_string())
        .map_err(|e| error(expression, e))?;
    let mut out: Vec<String> = compiled.undeclared_variables(true).into_iter().collect();
    out.sort();
    Ok(out)
}

fn collect(value: &Value, out: &mut Vec<String>) -> Result<(), TemplateError> {
    match value {
        Value::String(s) if s.contains("{{") || s.contains("{%") => {
            // Static checks only: a local environment borrows the text.
            let env = Environment::new();
            let template = env.template_from_str(s).map_err(|e| error(s, e))?;
            out.extend(template.undeclared_variables(true));
        }
        Value::Array(items) => {
            for v in items {
                collect(v, out)?;
            }
        }
        Value::Object(map) => {
            for v in map.values() {
                collect(v, out)?;
            }
        }
        _ => {}
    }
    Ok(())
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
        let ctx = json!({"input": {"query": "project X", "n": 3, "tags": ["a"], "o": {"k": true}},
                         "steps": {"s": {"result": {"x": 1.5}}}});
        let out = render(
            &params(json!({
                "q": "{{ input.query }}", "n": "{{input.n}}", "tags": " {{ input.tags }} ",
                "o": "{{ input.o }}", "x": "{{ steps.s.result.x }}",
                "subject": "Summary: {{ input.query }} ({{ input.n }})",
                "joined": "{{ input.tags | join(', ') }}",
                "nested": [{"x": "{{ input.query }}"}], "plain": 7, "text": "no templates"
            })),
            &ctx,
        )
        .unwrap();
        assert_eq!(out["q"], "project X");
        assert_eq!(out["n"], 3);
        assert_eq!(out["tags"], json!(["a"]));
        assert_eq!(out["o"], json!({"k": true}));
        assert_eq!(out["x"], 1.5);
        assert_eq!(out["subject"], "Summary: project X (3)");
        assert_eq!(out["joined"], "a");
        assert_eq!(out["nested"][0]["x"], "project X");
        assert_eq!(out["plain"], 7);
        assert_eq!(out["text"], "no templates");
    }

    #[test]
    fn unresolved_and_broken_templates_are_errors_naming_the_template() {
        let ctx = json!({"input": {}});
        for bad in [
            "{{ input.missing }}",
            "a {{ input.missing }} b",
            "{{ nothing.at.all }}",
            "a {{ input",
            "{{ }}",
        ] {
            let err = render(&params(json!({ "q": bad })), &ctx).unwrap_err();
            assert_eq!(err.template, bad, "{err}");
        }
    }

    #[test]
    fn conditions_are_expressions_and_an_absent_field_is_false() {
        let ctx = json!({"steps": {"a": {"result": {"n": 3, "ok": true}}}});
        assert!(condition("steps.a.result.n > 2", &ctx).unwrap());
        assert!(condition("{{ steps.a.result.ok }}", &ctx).unwrap());
        assert!(!condition("steps.a.result.absent", &ctx).unwrap());
        assert!(!condition("steps.a.result.n == 4", &ctx).unwrap());
        assert!(condition("steps.a.result.n >", &ctx).is_err());
    }

    #[test]
    fn paths_lists_every_name_read() {
        let got = paths(&json!({"a": "{{ input.x }} and {{ steps.s.result }}",
                                "b": ["{{input.y | upper}}"], "c": 1}))
        .unwrap();
        assert_eq!(got, ["input.x", "input.y", "steps.s.result"]);
        assert_eq!(
            condition_paths("steps.a.result.n > input.min").unwrap(),
            ["input.min", "steps.a.result.n"]
        );
        assert!(paths(&json!("{{ oops")).is_err());
    }
}
