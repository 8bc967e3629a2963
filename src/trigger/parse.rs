//! Reading a trigger file's text into a [`Trigger`], with every format
//! problem that can be found, not only the first: each unknown field
//! (a misspelled one is named as such, not as the problem it causes
//! further on), and each step's own problem, every step read on its own.

use serde::de::DeserializeOwned;

use super::{Step, Trigger};
use crate::source::line_of;

/// A problem with a file's format: the field to blame (when one is), its
/// line (when it can be found) and what is wrong.
pub(super) struct FormatProblem {
    pub(super) field: Option<String>,
    pub(super) line: Option<usize>,
    pub(super) message: String,
}

/// The trigger `text` holds, or every format problem found in it.
pub(super) fn parse(text: &str) -> Result<Trigger, Vec<FormatProblem>> {
    match read_as::<Trigger, _>(serde_norway::Deserializer::from_str(text), text, "") {
        Ok(trigger) => Ok(trigger),
        Err(first) => match every_problem(text) {
            Some(all) if !all.is_empty() => Err(all),
            _ => Err(first),
        },
    }
}

/// The problems of the trigger outside its steps, then of each step read
/// on its own; `None` when the text is not even YAML (then its first
/// problem is all there is).
fn every_problem(text: &str) -> Option<Vec<FormatProblem>> {
    let mut value: serde_norway::Value = serde_norway::from_str(text).ok()?;
    let steps = match value.as_mapping_mut()?.get_mut("steps") {
        Some(serde_norway::Value::Sequence(steps)) => std::mem::take(steps),
        _ => Vec::new(),
    };
    let mut problems = Vec::new();
    if let Err(found) = read_as::<Trigger, _>(value, text, "") {
        problems.extend(found);
    }
    for (i, step) in steps.into_iter().enumerate() {
        if let Err(found) = read_as::<Step, _>(step, text, &format!("steps[{i}]")) {
            problems.extend(found);
        }
    }
    Some(problems)
}

/// A `T` read from `de`, when it reads with no unknown field; else every
/// unknown field (a misspelled field is what makes the rest fail), or, with
/// none, the error; fields named under `prefix`.
fn read_as<'de, T, D>(de: D, text: &str, prefix: &str) -> Result<T, Vec<FormatProblem>>
where
    T: DeserializeOwned,
    D: serde::Deserializer<'de>,
{
    let mut unknown: Vec<String> = Vec::new();
    let mut track = serde_path_to_error::Track::new();
    let read: Result<T, D::Error> = {
        let mut note = |path: serde_ignored::Path<'_>| unknown.push(bracketed(&path.to_string()));
        let ignored = serde_ignored::Deserializer::new(de, &mut note);
        let tracked = serde_path_to_error::Deserializer::new(ignored, &mut track);
        T::deserialize(tracked)
    };
    if !unknown.is_empty() {
        return Err(unknown
            .into_iter()
            .map(|field| {
                let field = under(prefix, &field);
                FormatProblem {
                    line: line_of(text, &field),
                    field: Some(field),
                    message: "unknown field".into(),
                }
            })
            .collect());
    }
    let e = match read {
        Ok(value) => return Ok(value),
        Err(e) => e,
    };
    let path = track.path().to_string();
    let field = under(prefix, if path == "." { "" } else { &path });
    let field = (!field.is_empty()).then_some(field);
    // serde_norway's message is "<its path>: <what> at line N column M";
    // the field and line are reported apart.
    let mut message = e.to_string();
    let at = message
        .rfind(" at line ")
        .and_then(|i| line_number(&message[i + 9..]).map(|n| (i, n)));
    if let Some((i, _)) = at {
        message.truncate(i);
    }
    if let Some((head, rest)) = message.split_once(": ")
        && !head.contains(' ')
        && field
            .as_deref()
            .is_some_and(|f| f.ends_with(head) || f.starts_with(head))
    {
        message = rest.to_string();
    }
    // The field's own line when it can be found; the reader's otherwise
    // (a syntax error has no field).
    let line = field
        .as_deref()
        .and_then(|f| line_of(text, f))
        .or(at.map(|(_, n)| n));
    Err(vec![FormatProblem {
        field,
        line,
        message,
    }])
}

/// The line number at the start of `text` (`12 column 3`).
fn line_number(text: &str) -> Option<usize> {
    text.split(' ').next()?.parse().ok()
}

/// `path` under `prefix` (`steps[2]` and `agnet`: `steps[2].agnet`).
fn under(prefix: &str, path: &str) -> String {
    match (prefix.is_empty(), path.is_empty() || path.starts_with('[')) {
        (true, _) => path.to_string(),
        (false, true) => format!("{prefix}{path}"),
        (false, false) => format!("{prefix}.{path}"),
    }
}

/// `steps.0.foo` (serde_ignored's form) as `steps[0].foo`.
fn bracketed(path: &str) -> String {
    let mut out = String::new();
    for part in path.split('.') {
        if part.bytes().all(|b| b.is_ascii_digit()) && !part.is_empty() {
            out.push_str(&format!("[{part}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(part);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A misspelled field is named as unknown (not as the step kind it
    /// leaves out), and every step's problem is found, not just the first.
    #[test]
    fn every_format_problem_of_a_file_is_named() {
        let text = "\
id: t
colour: red
steps:
  - id: one
    agnet: work
    action: do
  - id: two
    agent: work
    action: do
  - id: three
    agent: work
    action: do
    max_attempts: many
";
        let problems = match parse(text) {
            Ok(_) => panic!("it parsed"),
            Err(problems) => problems,
        };
        let found: Vec<(Option<&str>, Option<usize>, &str)> = problems
            .iter()
            .map(|p| (p.field.as_deref(), p.line, p.message.as_str()))
            .collect();
        assert_eq!(found.len(), 3, "{found:?}");
        assert_eq!(found[0], (Some("colour"), Some(2), "unknown field"));
        assert_eq!(found[1], (Some("steps[0].agnet"), Some(5), "unknown field"));
        assert_eq!(found[2].0, Some("steps[2].max_attempts"), "{found:?}");
        assert_eq!(found[2].1, Some(13), "{found:?}");
        // A file that is not YAML has its one problem, with its line.
        let broken = match parse("id: t\nsteps: [\n") {
            Ok(_) => panic!("it parsed"),
            Err(problems) => problems,
        };
        assert_eq!(broken.len(), 1);
        assert!(broken[0].line.is_some());
    }
}
