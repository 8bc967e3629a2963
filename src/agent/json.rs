//! `agent.json` files (the A2A conventions): one agent per file, in a
//! directory of its own that may hold its system prompt (`CLAUDE.md`),
//! knowledge and MCP configuration.

use std::path::Path;

use super::Loaded;
use super::card::{AgentCard, Format, Origin};
use super::invocation::Invocation;
use super::prompt::Prompt;
use crate::codec::Validate;
use crate::source::{Diagnostic, FieldProblem, parse, read_strict};
use serde_json::Map;

/// Reads the card in `file` (an `agent.json`), whose text is `text`; in
/// a file named `agent.json`, the card's name must be its directory's.
pub(super) fn read(file: &Path, text: &str) -> Loaded {
    let mut out = Loaded::default();
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let at = |p: FieldProblem| Diagnostic::located(file, text, 0, p);
    let value = match parse(text, false) {
        Ok(v) => v,
        Err(p) => {
            out.errors.push(at(p));
            return out;
        }
    };
    let mut card: AgentCard = match read_strict(value) {
        Ok(c) => c,
        Err(problems) => {
            out.errors.extend(problems.into_iter().map(at));
            return out;
        }
    };
    if let Err(e) = card.validate() {
        out.errors.push(Diagnostic::at(
            file,
            text,
            0,
            e.field().unwrap_or_default(),
            invalid_message(&e),
        ));
        return out;
    }
    let dir = file.parent().unwrap_or(Path::new("."));
    if file.file_name().is_some_and(|n| n == "agent.json")
        && let Some(dir_name) = dir
            .canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        && dir_name != card.name.as_str()
    {
        out.errors.push(Diagnostic::at(
            file,
            text,
            0,
            "name",
            format!(
                "`{}` differs from the directory name `{dir_name}`",
                card.name
            ),
        ));
        return out;
    }
    // What `orchestrator worker` would refuse: a broken invocation of a
    // kind it runs is a problem; one of a kind it does not run, or none
    // (a worker of one's own serves it), a warning in the same words.
    let runs_here = matches!(
        card.invocation,
        Some(
            Invocation::Command { .. }
                | Invocation::Builtin { .. }
                | Invocation::A2a { .. }
                | Invocation::Http { .. }
                | Invocation::Llm { .. }
        )
    );
    if let Err(e) = card.runnable() {
        let d = Diagnostic::at(
            file,
            text,
            0,
            e.field().unwrap_or_default(),
            invalid_message(&e),
        );
        if runs_here {
            out.errors.push(d);
            return out;
        }
        out.warnings.push(d);
    }
    // The conventions' system prompt file is the agent's instruction; an
    // `llm` invocation's model and params are its prompt's.
    let (file_name, model, request_params) = match &card.invocation {
        Some(Invocation::ClaudeSubprocess { system_prompt, .. }) => {
            (system_prompt.as_ref(), None, Map::new())
        }
        Some(Invocation::Llm {
            system_prompt,
            model,
            params,
            ..
        }) => (system_prompt.as_ref(), model.clone(), params.clone()),
        _ => (None, None, Map::new()),
    };
    let llm = matches!(card.invocation, Some(Invocation::Llm { .. }));
    let instruction = match file_name.map(|f| dir.join(f)) {
        Some(path) => match std::fs::read_to_string(&path) {
            Ok(text) => Some(text.trim().to_string()),
            Err(e) => {
                let d = Diagnostic::at(
                    file,
                    text,
                    0,
                    "invocation.systemPrompt",
                    format!("{}: {e}", path.display()),
                );
                // A model given no instruction would run as another agent.
                if llm {
                    out.errors.push(d);
                    return out;
                }
                out.warnings.push(d);
                None
            }
        },
        None => None,
    };
    if instruction.is_some() || llm {
        card.prompt = Some(Prompt {
            instruction: instruction.unwrap_or_default(),
            model,
            request_params,
            ..Prompt::default()
        });
    }
    if let Some(deps) = &card.dependencies {
        for (i, k) in deps.knowledge.iter().enumerate() {
            if !dir.join(k).exists() {
                out.warnings.push(Diagnostic::at(
                    file,
                    text,
                    0,
                    format!("dependencies.knowledge[{i}]"),
                    format!("`{k}` is not in the agent's directory"),
                ));
            }
        }
    }
    card.origin = Some(Origin::new(Format::AgentJson, file));
    out.agents.push(card);
    out
}

/// What a rule says is wrong, without the field (the diagnostic names it).
fn invalid_message(e: &crate::codec::DecodeError) -> String {
    match e {
        crate::codec::DecodeError::InvalidField { message, .. } => message.clone(),
        other => other.to_string(),
    }
}
