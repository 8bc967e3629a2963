//! Reading a card's file: a Markdown file's frontmatter and body (only a
//! file with frontmatter is a card), or a YAML file; its attributes parsed
//! and what they make added to what the catalog loaded, each problem at
//! its line.

use std::path::Path;

use serde_json::{Map, Value};

use super::made::{Made, card};
use crate::agent::Loaded;
use crate::agent::card::{Format, Origin};
use crate::source::{Diagnostic, FieldProblem, parse};

/// Whether `path` is an AgentCard file by its extension.
pub(in crate::agent) fn is_card_file(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e, "md" | "markdown" | "yaml" | "yml"))
}

/// The frontmatter and body of a Markdown card, and the line the
/// frontmatter starts after; `None` when the text has no frontmatter.
fn split_markdown(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix("---")?;
    let rest = rest
        .strip_prefix("\r\n")
        .or_else(|| rest.strip_prefix('\n'))?;
    let mut at = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return Some((&rest[..at], &rest[at + line.len()..]));
        }
        at += line.len();
    }
    None
}

/// Whether `text` (a Markdown file's) starts with frontmatter: only such
/// files are cards.
pub(in crate::agent) fn has_frontmatter(text: &str) -> bool {
    split_markdown(text.strip_prefix('\u{feff}').unwrap_or(text)).is_some()
}

/// Reads the card in `file`, whose text is `text`.
pub(in crate::agent) fn read(file: &Path, text: &str) -> Loaded {
    let mut out = Loaded::default();
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let markdown = file
        .extension()
        .is_some_and(|e| e == "md" || e == "markdown");
    // The frontmatter (or the YAML file), the body, and how many lines
    // come before the frontmatter.
    let (yaml, body, offset) = if markdown {
        match split_markdown(text) {
            Some((front, body)) => (front, Some(body), 1),
            None => {
                out.errors.push(Diagnostic::file(
                    file,
                    "a Markdown AgentCard starts with YAML frontmatter between `---` lines",
                ));
                return out;
            }
        }
    } else {
        (text, None, 0)
    };
    let at = |p: FieldProblem| Diagnostic::located(file, yaml, offset, p);
    let value = match parse(yaml, true) {
        Ok(Value::Object(map)) => map,
        Ok(Value::Null) if markdown => Map::new(),
        Ok(_) => {
            out.errors.push(at(FieldProblem::new(
                "",
                "a card is a mapping of attributes",
            )));
            return out;
        }
        Err(p) => {
            out.errors.push(at(p));
            return out;
        }
    };
    let format = if markdown {
        Format::AgentCardMarkdown
    } else {
        Format::AgentCardYaml
    };
    let origin = Origin::new(format, file);
    match card(file, value, body, origin) {
        Ok((made, warnings)) => {
            out.warnings.extend(warnings.into_iter().map(&at));
            match made {
                Made::Agent(card) => {
                    out.referenced.extend(card.history_files.iter().cloned());
                    if card.default {
                        out.default = Some(card.card.name.clone());
                    }
                    out.agents.push(card.card);
                }
                Made::Workflow(w) => out.workflows.push(*w),
            }
        }
        Err(problems) => out.errors.extend(problems.into_iter().map(at)),
    }
    out
}
