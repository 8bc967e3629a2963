//! An agent that is a prompt for a model: its instruction, the model and
//! what the model may use, and the history it starts from. AgentCards and
//! PromptPack members are such agents; an `agent.json` whose invocation
//! names a system prompt file has the instruction too. The orchestrator
//! holds such an agent's tasks (`docs/llm.md`).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::source::FieldProblem;

/// What an agent that is a prompt for a model is made of.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Prompt {
    /// The system instruction.
    pub instruction: String,
    /// The card's `type` when it is not a plain agent
    /// (`evaluator_optimizer`, `orchestrator`, `iterative_planner`,
    /// `MAKER`, a `router` with a model): a pattern over other agents
    /// ([`super::kind::Kind`] says how it runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// The model, as the card names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Parameters of each model request (temperature, max_tokens, ...).
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub request_params: Map<String, Value>,
    /// MCP servers by name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<String>,
    /// Per MCP server, the tools allowed (names or `search_*` patterns);
    /// a server not named here allows all of its tools.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, Vec<String>>,
    /// Function tools that are neither agents nor MCP tools (a pack's
    /// `tools`), by name, as defined.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub functions: BTreeMap<String, Value>,
    /// The conversation the agent starts from (`messages` history files).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<HistoryMessage>,
    /// The card's other attributes, as written (`use_history`,
    /// `human_input`, a pattern's `generator` or `k`, ...).
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub attributes: Map<String, Value>,
}

/// One message of a preloaded conversation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryMessage {
    /// `user` or `assistant`.
    pub role: String,
    /// Its text.
    pub text: String,
    /// Resources embedded after it (`---RESOURCE` blocks), as JSON.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<Value>,
}

/// Reads a history file: `.json` (`{"messages": [{"role", "content"}]}`,
/// the text parts of each content taken) or the text format with
/// `---USER`, `---ASSISTANT` and `---RESOURCE` lines (a file with none is
/// one user message).
pub fn read_history(path: &Path) -> Result<Vec<HistoryMessage>, FieldProblem> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| FieldProblem::new("", format!("{}: {e}", path.display())))?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    if path.extension().is_some_and(|e| e == "json") {
        history_json(text)
    } else {
        history_text(text)
    }
}

fn history_json(text: &str) -> Result<Vec<HistoryMessage>, FieldProblem> {
    let value: Value = serde_json::from_str(text).map_err(|e| FieldProblem {
        field: None,
        line: Some(e.line()),
        message: format!("not JSON: {e}"),
    })?;
    let messages = value
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| FieldProblem::new("messages", "missing: a list of messages"))?;
    let mut out = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = match m.get("role").and_then(Value::as_str) {
            Some(r @ ("user" | "assistant")) => r.to_string(),
            _ => {
                return Err(FieldProblem::new(
                    format!("messages[{i}].role"),
                    "must be `user` or `assistant`",
                ));
            }
        };
        let text = match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            Some(Value::Object(part)) => part
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            _ => {
                return Err(FieldProblem::new(
                    format!("messages[{i}].content"),
                    "missing: a text, or a list of content parts",
                ));
            }
        };
        out.push(HistoryMessage {
            role,
            text,
            resources: Vec::new(),
        });
    }
    Ok(out)
}

fn history_text(text: &str) -> Result<Vec<HistoryMessage>, FieldProblem> {
    let mut out: Vec<HistoryMessage> = Vec::new();
    // What the lines since the last marker belong to.
    enum Into {
        Message,
        Resource(usize),
    }
    let mut into = Into::Message;
    let mut lines: Vec<&str> = Vec::new();
    let flush = |out: &mut Vec<HistoryMessage>, into: &Into, lines: &mut Vec<&str>| {
        let body = lines.join("\n").trim().to_string();
        lines.clear();
        match into {
            Into::Message => {
                if let Some(last) = out.last_mut() {
                    last.text = body;
                } else if !body.is_empty() {
                    out.push(HistoryMessage {
                        role: "user".into(),
                        text: body,
                        resources: Vec::new(),
                    });
                }
                Ok(())
            }
            Into::Resource(line) => {
                let value: Value = serde_json::from_str(&body).map_err(|e| FieldProblem {
                    field: None,
                    line: Some(line + e.line()),
                    message: format!("a ---RESOURCE block is not JSON: {e}"),
                })?;
                match out.last_mut() {
                    Some(last) => {
                        last.resources.push(value);
                        Ok(())
                    }
                    None => Err(FieldProblem {
                        field: None,
                        line: Some(*line),
                        message: "a ---RESOURCE block before any message".into(),
                    }),
                }
            }
        }
    };
    for (i, line) in text.lines().enumerate() {
        let role = match line.trim_end() {
            "---USER" => Some("user"),
            "---ASSISTANT" => Some("assistant"),
            "---RESOURCE" => None,
            _ => {
                lines.push(line);
                continue;
            }
        };
        flush(&mut out, &into, &mut lines)?;
        match role {
            Some(role) => {
                out.push(HistoryMessage {
                    role: role.into(),
                    text: String::new(),
                    resources: Vec::new(),
                });
                into = Into::Message;
            }
            None => into = Into::Resource(i + 1),
        }
    }
    flush(&mut out, &into, &mut lines)?;
    Ok(out)
}

/// Whether `tool` passes a card's filter for its MCP server (`tools:
/// {server: [...]}`): no filter
/// allows every tool; else a name or pattern (`*` any run of characters)
/// must match it whole.
pub fn tool_allowed(filter: Option<&[String]>, tool: &str) -> bool {
    match filter {
        None => true,
        Some(patterns) => patterns.iter().any(|p| matches(p, tool)),
    }
}

/// Whether `pattern` (`*` any run of characters) matches all of `text`.
fn matches(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No `*`: the whole text.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_whole_names() {
        assert!(matches("search_*", "search_issues"));
        assert!(matches("search_*", "search_"));
        assert!(!matches("search_*", "list_issues"));
        assert!(matches("get_time", "get_time"));
        assert!(!matches("get_time", "get_time_zone"));
        assert!(matches("*_issue*", "create_issue_comment"));
        assert!(!matches("a*a", "a"));
        assert!(matches("*", "anything"));
        assert!(tool_allowed(None, "x"));
        assert!(!tool_allowed(Some(&[]), "x"));
    }

    #[test]
    fn the_text_format_has_roles_and_resources() {
        let h = history_text(
            "---USER\nhi\nthere\n---ASSISTANT\nhello\n---RESOURCE\n{\"uri\": \"file:///a\"}\n---USER\nbye\n",
        )
        .unwrap();
        let roles: Vec<(&str, &str)> = h
            .iter()
            .map(|m| (m.role.as_str(), m.text.as_str()))
            .collect();
        assert_eq!(
            roles,
            [
                ("user", "hi\nthere"),
                ("assistant", "hello"),
                ("user", "bye")
            ]
        );
        assert_eq!(h[1].resources, [serde_json::json!({"uri": "file:///a"})]);
    }

    #[test]
    fn a_text_without_markers_is_one_user_message() {
        let h = history_text("just this\n").unwrap();
        assert_eq!(h.len(), 1);
        assert_eq!(
            (h[0].role.as_str(), h[0].text.as_str()),
            ("user", "just this")
        );
    }

    #[test]
    fn bad_resources_and_json_are_named() {
        let e = history_text("---USER\nx\n---RESOURCE\n{oops\n").unwrap_err();
        assert_eq!(e.line, Some(4));
        let e = history_json(r#"{"messages": [{"role": "system", "content": "x"}]}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("messages[0].role"));
        let h = history_json(
            r#"{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}]}"#,
        )
        .unwrap();
        assert_eq!(h[0].text, "a");
    }
}
