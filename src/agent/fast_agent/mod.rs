//! AgentCards in fast-agent's text format: a Markdown file (YAML
//! frontmatter, then the instruction as the body) or a YAML file, one
//! card per file (`../shared/seeds/fast-agent-agentcard-rfc.md`).
//!
//! `type` (default `agent`) decides which attributes a card may have; any
//! other is an error naming it. `agent` cards and the patterns that need a
//! model (`evaluator_optimizer`, `orchestrator`, `iterative_planner`,
//! `MAKER`) become agents that are prompts for a model; `chain`,
//! `parallel` and `router` cards become workflows over other agents.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::card::{AgentCard, Dependencies, Format, Origin};
use super::prompt::Prompt;
use super::skill::Skill;
use super::workflow::{CardWorkflow, Pattern};
use super::{Loaded, agent_id};
use crate::envelope::AgentName;
use crate::source::{Diagnostic, FieldProblem, nearest, parse};
use types::{COMMON, REFERENCES, TYPES, allowed};

mod attributes;
mod types;

/// Whether `path` is an AgentCard file by its extension.
pub(super) fn is_card_file(path: &Path) -> bool {
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
pub(super) fn has_frontmatter(text: &str) -> bool {
    split_markdown(text.strip_prefix('\u{feff}').unwrap_or(text)).is_some()
}

/// Reads the card in `file`, whose text is `text`.
pub(super) fn read(file: &Path, text: &str) -> Loaded {
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

/// An agent a card made, with what the catalog needs besides.
struct MadeAgent {
    card: AgentCard,
    default: bool,
    history_files: Vec<PathBuf>,
}

enum Made {
    Agent(Box<MadeAgent>),
    Workflow(Box<CardWorkflow>),
}

/// The agent or workflow of a card's attributes `v` and body, or every
/// problem found; with the warnings it deserves.
fn card(
    file: &Path,
    mut v: Map<String, Value>,
    body: Option<&str>,
    origin: Origin,
) -> Result<(Made, Vec<FieldProblem>), Vec<FieldProblem>> {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let kind = match v.remove("type") {
        None => "agent".to_string(),
        Some(Value::String(t)) if TYPES.contains(&t.as_str()) => t,
        Some(other) => {
            let written = other
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| other.to_string());
            let mut m = format!("`{written}` is not a card type ({})", TYPES.join(", "));
            if let Some(near) = nearest(&written, TYPES) {
                m.push_str(&format!("; did you mean `{near}`?"));
            }
            return Err(vec![FieldProblem::new("type", m)]);
        }
    };
    if let Some(s) = v.remove("schema_version")
        && !s.is_i64()
        && !s.is_u64()
    {
        problems.push(FieldProblem::new(
            "schema_version",
            format!("must be an integer, not {s}"),
        ));
    }
    // Unknown attributes for this type, with the nearest allowed one.
    let own = allowed(&kind);
    for key in v.keys() {
        if COMMON.contains(&key.as_str()) || own.contains(&key.as_str()) {
            continue;
        }
        let mut m = format!("not an attribute of `{kind}` cards");
        let others: Vec<&str> = TYPES
            .iter()
            .filter(|t| allowed(t).contains(&key.as_str()))
            .copied()
            .collect();
        let everywhere = TYPES.iter().flat_map(|t| allowed(t).iter().copied());
        if !others.is_empty() {
            m.push_str(&format!(" (it is one of `{}` cards)", others.join("`, `")));
        } else if let Some(near) = nearest(key, COMMON.iter().chain(own).copied()) {
            m.push_str(&format!("; did you mean `{near}`?"));
        } else if let Some(near) = nearest(key, everywhere) {
            let of: Vec<&str> = TYPES
                .iter()
                .filter(|t| allowed(t).contains(&near))
                .copied()
                .collect();
            m.push_str(&format!(
                "; did you mean `{near}` (of `{}` cards)?",
                of.join("`, `")
            ));
        }
        problems.push(FieldProblem::new(key.clone(), m));
    }
    let string =
        |v: &mut Map<String, Value>, k: &str, problems: &mut Vec<FieldProblem>| -> Option<String> {
            match v.remove(k) {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s),
                Some(other) => {
                    problems.push(FieldProblem::new(k, format!("must be a text, not {other}")));
                    None
                }
            }
        };
    // A true-or-false attribute, `absent` when it is not given.
    let flag = |v: &mut Map<String, Value>,
                k: &str,
                absent: bool,
                problems: &mut Vec<FieldProblem>|
     -> bool {
        match v.remove(k) {
            None | Some(Value::Null) => absent,
            Some(Value::Bool(b)) => b,
            Some(other) => {
                problems.push(FieldProblem::new(
                    k,
                    format!("must be true or false, not {other}"),
                ));
                absent
            }
        }
    };
    let stem = file
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_string();
    let written_name = string(&mut v, "name", &mut problems).unwrap_or(stem);
    let name = match agent_id(&written_name) {
        Ok(n) => n,
        Err(e) => {
            problems.push(FieldProblem::new("name", e));
            return Err(problems);
        }
    };
    let description = string(&mut v, "description", &mut problems);
    let default = flag(&mut v, "default", false, &mut problems);
    let tool_only = flag(&mut v, "tool_only", false, &mut problems);
    if default && tool_only {
        problems.push(FieldProblem::new(
            "tool_only",
            "a `tool_only` card cannot be the `default` one: it is hidden from listings",
        ));
    }
    // The instruction: the body or the attribute, not both.
    let body = body.map(|b| {
        let b = b.trim_start_matches(['\n', '\r']);
        let b = b
            .strip_prefix("---SYSTEM")
            .map(|r| r.trim_start_matches([' ', '\t', '\r']))
            .unwrap_or(b);
        b.trim().to_string()
    });
    let attribute = string(&mut v, "instruction", &mut problems);
    let instruction = match (attribute, body.filter(|b| !b.is_empty())) {
        (Some(_), Some(_)) => {
            problems.push(FieldProblem::new(
                "instruction",
                "given twice: as the attribute and as the body (one source only; leave the body empty)",
            ));
            None
        }
        (Some(i), None) | (None, Some(i)) => Some(i.trim().to_string()),
        (None, None) => None,
    };
    if instruction.is_none() && kind == "agent" {
        problems.push(FieldProblem::new(
            "instruction",
            "missing: an agent card needs an instruction, as the body or the `instruction` attribute",
        ));
    }
    // References to other agents.
    let mut refs: BTreeMap<&str, Vec<AgentName>> = BTreeMap::new();
    for (key, list) in REFERENCES {
        let Some(value) = v.remove(key) else { continue };
        let items: Vec<(String, Value)> = match (list, value) {
            (true, Value::Array(items)) => items
                .into_iter()
                .enumerate()
                .map(|(i, x)| (format!("{key}[{i}]"), x))
                .collect(),
            (false, x @ Value::String(_)) => vec![(key.to_string(), x)],
            (true, other) => {
                problems.push(FieldProblem::new(
                    key,
                    format!("must be a list of agent names, not {other}"),
                ));
                continue;
            }
            (false, other) => {
                problems.push(FieldProblem::new(
                    key,
                    format!("must be an agent's name, not {other}"),
                ));
                continue;
            }
        };
        let mut names = Vec::new();
        for (field, item) in items {
            match item.as_str().map(agent_id) {
                Some(Ok(n)) if n == name => {
                    problems.push(FieldProblem::new(field, "names the card itself"))
                }
                Some(Ok(n)) => names.push(n),
                Some(Err(e)) => problems.push(FieldProblem::new(field, e)),
                None => problems.push(FieldProblem::new(
                    field,
                    format!("must be an agent's name, not {item}"),
                )),
            }
        }
        refs.insert(key, names);
    }
    let mut take = |key: &str| refs.remove(key).unwrap_or_default();
    let workflow = match kind.as_str() {
        "chain" => {
            let sequence = take("sequence");
            if sequence.is_empty() {
                problems.push(FieldProblem::new(
                    "sequence",
                    "missing: the agents of the chain, in order",
                ));
            }
            let cumulative = flag(&mut v, "cumulative", false, &mut problems);
            Some(Pattern::Chain {
                sequence,
                cumulative,
            })
        }
        "parallel" => {
            let fan_out = take("fan_out");
            if fan_out.is_empty() {
                problems.push(FieldProblem::new(
                    "fan_out",
                    "missing: the agents that run at once",
                ));
            }
            let fan_in = take("fan_in").into_iter().next();
            let include_request = flag(&mut v, "include_request", true, &mut problems);
            Some(Pattern::Parallel {
                fan_out,
                fan_in,
                include_request,
            })
        }
        // With a model, a router is a prompt whose model picks.
        "router" if !v.contains_key("model") => {
            let agents = take("agents");
            if agents.is_empty() {
                problems.push(FieldProblem::new(
                    "agents",
                    "missing: the agents the router picks from",
                ));
            }
            Some(Pattern::Router { agents })
        }
        _ => None,
    };
    // The one agent a pattern names for a role stays named for it.
    for key in ["generator", "evaluator", "worker"] {
        if let Some(n) = refs.get(key).and_then(|names| names.first()) {
            v.insert(key.into(), Value::String(n.to_string()));
        }
    }
    let calls: Vec<AgentName> = refs.into_values().flatten().collect();
    // History files, relative to the card.
    let (history, history_files) = attributes::messages(file, &mut v, &mut problems);
    let (servers, tools) = attributes::mcp(&mut v, &mut problems, &mut warnings);
    let model = string(&mut v, "model", &mut problems);
    let request_params = match v.remove("request_params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m,
        Some(other) => {
            problems.push(FieldProblem::new(
                "request_params",
                format!("must be a mapping, not {other}"),
            ));
            Map::new()
        }
    };
    if v.remove("api_key").is_some() {
        warnings.push(FieldProblem::new(
            "api_key",
            "a key written in a card is a secret in a file: it is not kept; give the model's key through the environment",
        ));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let description = description.unwrap_or_else(|| {
        instruction
            .as_deref()
            .and_then(|i| i.lines().map(str::trim).find(|l| !l.is_empty()))
            .map(|l| l.chars().take(200).collect())
            .unwrap_or_else(|| format!("{kind} `{written_name}`"))
    });
    if let Some(pattern) = workflow {
        // A card's workflow is a trigger: neither the entry agent nor a
        // tool of another agent.
        for (set, field) in [(default, "default"), (tool_only, "tool_only")] {
            if set {
                warnings.push(FieldProblem::new(
                    field,
                    format!("has no effect on a `{kind}` card: its workflow is a trigger"),
                ));
            }
        }
        return Ok((
            Made::Workflow(Box::new(CardWorkflow {
                name,
                display_name: written_name,
                description,
                instruction,
                pattern,
                origin,
            })),
            warnings,
        ));
    }
    let pattern = (kind != "agent").then(|| kind.clone());
    if let Err((field, why)) = crate::agent::kind::Kind::of(pattern.as_deref(), &v) {
        return Err(vec![FieldProblem::new(field, why)]);
    }
    let mut card = AgentCard::new(name.clone(), "0.0.0", description.clone());
    if written_name != name.as_str() {
        card.display_name = Some(written_name.clone());
    }
    card.skills = vec![Skill {
        name: Some(written_name),
        input_modes: vec!["text/plain".into()],
        output_modes: vec!["text/plain".into()],
        ..Skill::new(name.as_str(), description)
    }];
    if !calls.is_empty() {
        card.dependencies = Some(Dependencies {
            agents: calls,
            ..Dependencies::default()
        });
    }
    card.tool_only = tool_only;
    card.prompt = Some(Prompt {
        instruction: instruction.unwrap_or_default(),
        pattern,
        model,
        request_params,
        servers,
        tools,
        functions: BTreeMap::new(),
        history,
        attributes: v,
    });
    card.origin = Some(origin);
    Ok((
        Made::Agent(Box::new(MadeAgent {
            card,
            default,
            history_files,
        })),
        warnings,
    ))
}
