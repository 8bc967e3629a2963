//! Reading a definition strictly, with every problem found rather than
//! the first.
//!
//! The types read here deny unknown fields, so serde's error names the
//! fields it expected: the nearest is offered as "did you mean". A field
//! that is unknown or of the wrong type is then taken out and the value
//! read again, until it reads or a problem cannot be taken out (a missing
//! field, a problem of the whole value), so one pass reports them all.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::locate::{Segment, segments};
use super::nearest;

/// How many problems one value may report before the rest are left
/// unread.
const MAX_PROBLEMS: usize = 50;

/// One problem of a value being read: the field (a path such as
/// `skills[0].tags`; none for the value as a whole) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    /// The field to blame.
    pub field: Option<String>,
    /// Its line, when the parser knows it (a syntax error).
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl FieldProblem {
    /// A problem of `field`.
    pub fn new(field: impl Into<String>, message: impl std::fmt::Display) -> FieldProblem {
        let field = field.into();
        FieldProblem {
            field: (!field.is_empty()).then_some(field),
            line: None,
            message: message.to_string(),
        }
    }

    /// This problem with its field under `prefix` (`agents` + `entry`).
    pub fn under(mut self, prefix: &str) -> FieldProblem {
        if !prefix.is_empty() {
            self.field = Some(match self.field {
                Some(f) if f.starts_with('[') => format!("{prefix}{f}"),
                Some(f) => format!("{prefix}.{f}"),
                None => prefix.to_string(),
            });
        }
        self
    }
}

/// Reads a `T` from `value`, or says every problem found in it.
pub fn read_strict<T: DeserializeOwned>(mut value: Value) -> Result<T, Vec<FieldProblem>> {
    let mut problems = Vec::new();
    while problems.len() < MAX_PROBLEMS {
        let mut track = serde_path_to_error::Track::new();
        let read = T::deserialize(serde_path_to_error::Deserializer::new(&value, &mut track));
        let error = match read {
            Ok(t) if problems.is_empty() => return Ok(t),
            Ok(_) => return Err(problems),
            Err(e) => e,
        };
        let path = track.path().to_string();
        let path = if path == "." { String::new() } else { path };
        let (problem, removable) = explain(&path, &error.to_string());
        let field = problem.field.clone();
        problems.push(problem);
        let taken = removable && field.as_deref().is_some_and(|f| take_out(&mut value, f));
        if !taken {
            break;
        }
    }
    Err(problems)
}

/// The value a definition file's text holds: JSON, or (`yaml`) YAML, of
/// which JSON is a subset. A syntax error says its line.
pub fn parse(text: &str, yaml: bool) -> Result<Value, FieldProblem> {
    if yaml {
        serde_norway::from_str(text).map_err(|e| FieldProblem {
            field: None,
            line: e.location().map(|l| l.line()),
            message: format!("not YAML: {}", strip_position(&e.to_string())),
        })
    } else {
        serde_json::from_str(text).map_err(|e| FieldProblem {
            field: None,
            line: Some(e.line()),
            message: format!("not JSON: {}", strip_position(&e.to_string())),
        })
    }
}

/// A parser's message without the position it appends (reported apart).
fn strip_position(message: &str) -> &str {
    match message.rfind(" at line ") {
        Some(at) => &message[..at],
        None => message,
    }
}

/// The problem serde's `message` about `path` describes, and whether its
/// field can be taken out to read on.
fn explain(path: &str, message: &str) -> (FieldProblem, bool) {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let name = rest.split('`').next().unwrap_or_default();
        // Below an internally tagged enum the path stops at the enum.
        let field = if path == name || path.ends_with(&format!(".{name}")) {
            path.to_string()
        } else if path.is_empty() {
            name.to_string()
        } else {
            format!("{path}.{name}")
        };
        let mut text = "unknown field".to_string();
        if let Some(near) = nearest(name, expected(rest)) {
            text.push_str(&format!("; did you mean `{near}`?"));
        }
        return (FieldProblem::new(field, text), true);
    }
    if let Some(rest) = message.strip_prefix("unknown variant `") {
        let name = rest.split('`').next().unwrap_or_default();
        let known = expected(rest);
        let mut text = format!("`{name}` is not one of {}", list(&known));
        if let Some(near) = nearest(name, known.iter().copied()) {
            text.push_str(&format!("; did you mean `{near}`?"));
        }
        return (FieldProblem::new(path, text), true);
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        let name = rest.split('`').next().unwrap_or_default();
        let field = if path.is_empty() {
            name.to_string()
        } else {
            format!("{path}.{name}")
        };
        return (FieldProblem::new(field, "missing"), false);
    }
    (FieldProblem::new(path, message), !path.is_empty())
}

/// The names serde lists after "expected" in an unknown field's or
/// variant's message.
fn expected(rest: &str) -> Vec<&str> {
    let Some((_, after)) = rest.split_once("expected") else {
        return Vec::new();
    };
    after.split('`').skip(1).step_by(2).collect()
}

fn list(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.len() {
        0 => "the values allowed".into(),
        _ => quoted.join(", "),
    }
}

/// Removes `field` from `value` (an item of a list takes the whole list
/// with it, so the positions of the others stay as written); whether it
/// was there.
fn take_out(value: &mut Value, field: &str) -> bool {
    let mut path = segments(field);
    if let Some(i) = path.iter().rposition(|s| matches!(s, Segment::Key(_))) {
        path.truncate(i + 1);
    }
    let Some(Segment::Key(last)) = path.pop() else {
        return false;
    };
    let mut at = value;
    for segment in path {
        at = match (segment, at) {
            (Segment::Key(k), Value::Object(map)) => match map.get_mut(k) {
                Some(v) => v,
                None => return false,
            },
            (Segment::Index(i), Value::Array(items)) => match items.get_mut(i) {
                Some(v) => v,
                None => return false,
            },
            _ => return false,
        };
    }
    match at {
        Value::Object(map) => map.remove(last).is_some(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    #[allow(dead_code)] // read only to be checked
    struct Card {
        name: String,
        #[serde(default)]
        display_name: Option<String>,
        #[serde(default)]
        skills: Vec<Skill>,
        #[serde(default)]
        context: Option<Context>,
        #[serde(default)]
        signals: Vec<String>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Skill {
        id: String,
        #[serde(default)]
        input_schema: Option<Value>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Context {
        Personal,
        Work,
        Shared,
    }

    #[test]
    fn every_problem_is_found_with_a_suggestion_for_near_misses() {
        let problems = read_strict::<Card>(json!({
            "name": "a",
            "displayname": "A",
            "skills": [{"id": "x"}, {"id": "y", "input_schema": {}}],
            "context": "wrok",
            "signals": [1],
            "colour": "red"
        }))
        .unwrap_err();
        // In the order serde meets them: the value's keys, sorted.
        let found: Vec<(Option<&str>, &str)> = problems
            .iter()
            .map(|p| (p.field.as_deref(), p.message.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                (Some("colour"), "unknown field"),
                (
                    Some("context"),
                    "`wrok` is not one of `personal`, `work`, `shared`; did you mean `work`?"
                ),
                (
                    Some("displayname"),
                    "unknown field; did you mean `displayName`?"
                ),
                (
                    Some("signals[0]"),
                    "invalid type: integer `1`, expected a string"
                ),
                (
                    Some("skills[1].input_schema"),
                    "unknown field; did you mean `inputSchema`?"
                ),
            ]
        );
    }

    #[test]
    fn a_missing_field_ends_the_reading() {
        let problems = read_strict::<Card>(json!({"skills": [{}], "x": 1})).unwrap_err();
        let fields: Vec<_> = problems.iter().map(|p| p.field.as_deref()).collect();
        assert_eq!(fields, [Some("skills[0].id")]);
        assert_eq!(problems[0].message, "missing");
    }

    #[test]
    fn a_good_value_reads() {
        let card: Card = read_strict(json!({"name": "a", "context": "work"})).unwrap();
        assert_eq!(card.name, "a");
    }
}
