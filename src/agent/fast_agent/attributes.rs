//! Reading the attributes of a card that need more than a type check:
//! `messages` (history files, relative to the card) and the MCP
//! `servers` with their `tools` filters.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::agent::prompt::{HistoryMessage, read_history};
use crate::source::FieldProblem;

/// The history `messages` names (one file or a list, relative to the
/// card `file`), and the files read.
pub(super) fn messages(
    file: &Path,
    v: &mut Map<String, Value>,
    problems: &mut Vec<FieldProblem>,
) -> (Vec<HistoryMessage>, Vec<PathBuf>) {
    let mut history = Vec::new();
    let mut history_files = Vec::new();
    if let Some(messages) = v.remove("messages") {
        let listed: Vec<(String, Value)> = match messages {
            Value::Array(items) => items
                .into_iter()
                .enumerate()
                .map(|(i, x)| (format!("messages[{i}]"), x))
                .collect(),
            one => vec![("messages".to_string(), one)],
        };
        let dir = file.parent().unwrap_or(Path::new("."));
        for (field, item) in listed {
            let Some(path) = item.as_str() else {
                problems.push(FieldProblem::new(field, "must be a file's path"));
                continue;
            };
            let path = crate::agent::catalog::joined(dir, path);
            match read_history(&path) {
                Ok(h) => history.extend(h),
                Err(e) => problems.push(FieldProblem::new(
                    field,
                    match e.line {
                        Some(l) => format!("{}:{l}: {}", path.display(), e.message),
                        None => format!("{}: {}", path.display(), e.message),
                    },
                )),
            }
            history_files.push(path);
        }
    }
    (history, history_files)
}

/// The MCP `servers` and per-server `tools` filters.
pub(super) fn mcp(
    v: &mut Map<String, Value>,
    problems: &mut Vec<FieldProblem>,
    warnings: &mut Vec<FieldProblem>,
) -> (Vec<String>, BTreeMap<String, Vec<String>>) {
    let servers: Vec<String> = match v.remove("servers") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => items
            .into_iter()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect(),
        Some(other) => {
            problems.push(FieldProblem::new(
                "servers",
                format!("must be a list of MCP server names, not {other}"),
            ));
            Vec::new()
        }
    };
    let mut tools = BTreeMap::new();
    match v.remove("tools") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (server, filters) in map {
                match filters {
                    Value::Array(items) if items.iter().all(Value::is_string) => {
                        if !servers.contains(&server) {
                            warnings.push(FieldProblem::new(
                                format!("tools.{server}"),
                                format!(
                                    "filters the tools of `{server}`, which is not among `servers`"
                                ),
                            ));
                        }
                        tools.insert(
                            server,
                            items
                                .into_iter()
                                .filter_map(|s| s.as_str().map(str::to_string))
                                .collect(),
                        );
                    }
                    other => problems.push(FieldProblem::new(
                        format!("tools.{server}"),
                        format!("must be a list of tool names or patterns, not {other}"),
                    )),
                }
            }
        }
        Some(other) => problems.push(FieldProblem::new(
            "tools",
            format!("must map MCP server names to lists of tools, not {other}"),
        )),
    }
    (servers, tools)
}
