//! PromptPack packs with an `agents` section (RFC 0007,
//! `../shared/seeds/promptpack-rfc-0007-agents.txt`): each member prompt
//! is an agent whose card is derived from the prompt, `entry` is the
//! pack's entry agent, and the topology comes from the members' tool
//! references to one another.
//!
//! Read strictly at the levels the orchestrator uses (the pack, each
//! prompt, `agents` and each member); the parts it does not use
//! (`pipeline`, `validators`, `evals`, `workflow`, ...) are kept as
//! written. The RFC's rules: `entry` and every member name a prompt; the
//! entry is a member (implicitly, with a warning, when not listed); no
//! member's tools name itself; a tool naming a prompt that is not a
//! member is a warning; so is a tool that is neither a pack tool nor a
//! member, with the nearest name offered.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::card::{AgentCard, Dependencies, Format, Origin};
use super::prompt::Prompt;
use super::skill::Skill;
use super::{Loaded, agent_id};
use crate::envelope::AgentName;
use crate::source::{Diagnostic, FieldProblem, nearest, read_strict};

/// A pack as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Pack {
    #[serde(rename = "$schema", default)]
    _schema: Option<String>,
    id: String,
    #[serde(rename = "name")]
    _name: String,
    #[serde(rename = "version")]
    _version: String,
    #[serde(default, rename = "description")]
    _description: Option<String>,
    #[serde(rename = "template_engine")]
    _template_engine: Value,
    prompts: BTreeMap<String, PackPrompt>,
    #[serde(default, rename = "fragments")]
    _fragments: Option<Map<String, Value>>,
    #[serde(default)]
    tools: BTreeMap<String, Value>,
    #[serde(default, rename = "metadata")]
    _metadata: Option<Map<String, Value>>,
    #[serde(default, rename = "compilation")]
    _compilation: Option<Value>,
    #[serde(default, rename = "evals")]
    _evals: Option<Vec<Value>>,
    #[serde(default, rename = "workflow")]
    _workflow: Option<Value>,
    #[serde(default)]
    agents: Option<Agents>,
    #[serde(default, rename = "skills")]
    _skills: Option<Vec<Value>>,
}

/// One prompt of a pack.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PackPrompt {
    #[serde(rename = "id")]
    _id: String,
    name: String,
    #[serde(default)]
    description: Option<String>,
    version: String,
    system_template: String,
    #[serde(default)]
    variables: Option<Vec<Value>>,
    #[serde(default)]
    tools: Vec<String>,
    #[serde(default)]
    tool_policy: Option<Value>,
    #[serde(default)]
    pipeline: Option<Value>,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
    #[serde(default)]
    validators: Option<Vec<Value>>,
    #[serde(default)]
    evals: Option<Vec<Value>>,
    #[serde(default)]
    tested_models: Option<Vec<Value>>,
    #[serde(default)]
    model_overrides: Option<Map<String, Value>>,
    #[serde(default)]
    media: Option<Value>,
}

/// The `agents` section.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Agents {
    entry: String,
    #[serde(default)]
    members: BTreeMap<String, AgentDef>,
}

/// One member's agent settings.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct AgentDef {
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    input_modes: Option<Vec<String>>,
    #[serde(default)]
    output_modes: Option<Vec<String>>,
}

/// Whether `value` (a YAML or JSON file's) looks like a pack.
pub(super) fn is_pack(value: &Value) -> bool {
    value.get("prompts").is_some() && value.get("template_engine").is_some()
}

/// Reads the pack in `file`, whose text is `text` and value `value`.
pub(super) fn read(file: &Path, text: &str, value: Value) -> Loaded {
    let mut out = Loaded::default();
    let at = |p: FieldProblem| Diagnostic::located(file, text, 0, p);
    let pack: Pack = match read_strict(value) {
        Ok(p) => p,
        Err(problems) => {
            out.errors.extend(problems.into_iter().map(at));
            return out;
        }
    };
    let Some(agents) = &pack.agents else {
        out.warnings.push(Diagnostic::file(
            file,
            format!(
                "pack `{}` has no `agents` section: it declares no agents",
                pack.id
            ),
        ));
        return out;
    };
    let (members, problems, warnings) = check(&pack, agents);
    out.warnings.extend(warnings.into_iter().map(&at));
    if !problems.is_empty() {
        out.errors.extend(problems.into_iter().map(at));
        return out;
    }
    let mut names: BTreeMap<&str, AgentName> = BTreeMap::new();
    for key in &members {
        match agent_id(key) {
            Ok(n) => {
                names.insert(key.as_str(), n);
            }
            Err(e) => out
                .errors
                .push(at(FieldProblem::new(format!("agents.members.{key}"), e))),
        }
    }
    if !out.errors.is_empty() {
        return out;
    }
    for key in &members {
        let prompt = &pack.prompts[key];
        let def = agents.members.get(key);
        let def_default = AgentDef::default();
        let def = def.unwrap_or(&def_default);
        let description = def
            .description
            .clone()
            .or_else(|| prompt.description.clone())
            .unwrap_or_else(|| prompt.name.clone());
        let version = prompt.version.trim_start_matches('v').to_string();
        let mut card = AgentCard::new(names[key.as_str()].clone(), version, description.clone());
        card.display_name = Some(prompt.name.clone());
        card.skills = vec![Skill {
            name: Some(prompt.name.clone()),
            tags: def.tags.clone(),
            input_modes: def
                .input_modes
                .clone()
                .unwrap_or_else(|| vec!["text/plain".into()]),
            output_modes: def
                .output_modes
                .clone()
                .unwrap_or_else(|| vec!["text/plain".into()]),
            ..Skill::new(key.clone(), description)
        }];
        let calls: Vec<AgentName> = prompt
            .tools
            .iter()
            .filter_map(|t| names.get(t.as_str()).cloned())
            .collect();
        if !calls.is_empty() {
            card.dependencies = Some(Dependencies {
                agents: calls,
                ..Dependencies::default()
            });
        }
        let functions = prompt
            .tools
            .iter()
            .filter_map(|t| pack.tools.get(t).map(|d| (t.clone(), d.clone())))
            .collect();
        let mut attributes = Map::new();
        for (k, v) in [
            ("variables", prompt.variables.clone().map(Value::from)),
            ("tool_policy", prompt.tool_policy.clone()),
            ("pipeline", prompt.pipeline.clone()),
            ("validators", prompt.validators.clone().map(Value::from)),
            ("evals", prompt.evals.clone().map(Value::from)),
            (
                "tested_models",
                prompt.tested_models.clone().map(Value::from),
            ),
            (
                "model_overrides",
                prompt.model_overrides.clone().map(Value::Object),
            ),
            ("media", prompt.media.clone()),
        ] {
            if let Some(v) = v {
                attributes.insert(k.into(), v);
            }
        }
        card.prompt = Some(Prompt {
            instruction: prompt.system_template.clone(),
            request_params: prompt.parameters.clone().unwrap_or_default(),
            functions,
            attributes,
            ..Prompt::default()
        });
        card.origin = Some(Origin::new(Format::PromptPack, file));
        out.agents.push(card);
    }
    out.entry = Some(names[agents.entry.as_str()].clone());
    out
}

/// The member keys (the entry among them), the problems and the warnings
/// of `agents` against the pack's prompts and tools.
fn check(pack: &Pack, agents: &Agents) -> (Vec<String>, Vec<FieldProblem>, Vec<FieldProblem>) {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let prompt_keys: Vec<&str> = pack.prompts.keys().map(String::as_str).collect();
    let unknown_prompt = |field: String, name: &str| {
        let mut m = format!("`{name}` is not a prompt of the pack");
        if let Some(near) = nearest(name, prompt_keys.iter().copied()) {
            m.push_str(&format!("; did you mean `{near}`?"));
        }
        FieldProblem::new(field, m)
    };
    if !pack.prompts.contains_key(&agents.entry) {
        problems.push(unknown_prompt("agents.entry".into(), &agents.entry));
    }
    let mut members: Vec<String> = Vec::new();
    for key in agents.members.keys() {
        if pack.prompts.contains_key(key) {
            members.push(key.clone());
        } else {
            problems.push(unknown_prompt(format!("agents.members.{key}"), key));
        }
    }
    if pack.prompts.contains_key(&agents.entry) && !agents.members.contains_key(&agents.entry) {
        warnings.push(FieldProblem::new(
            "agents.entry",
            format!(
                "`{}` is not listed in `agents.members`: it is a member all the same",
                agents.entry
            ),
        ));
        members.push(agents.entry.clone());
    }
    members.sort();
    for key in &members {
        for (i, tool) in pack.prompts[key].tools.iter().enumerate() {
            let field = format!("prompts.{key}.tools[{i}]");
            if tool == key {
                problems.push(FieldProblem::new(
                    field,
                    "an agent's tools must not name the agent itself",
                ));
            } else if members.contains(tool) || pack.tools.contains_key(tool) {
            } else if pack.prompts.contains_key(tool) {
                warnings.push(FieldProblem::new(
                    field,
                    format!("`{tool}` is a prompt of the pack but not a member of `agents`: it cannot be called as an agent"),
                ));
            } else {
                let mut m = format!("`{tool}` is neither a tool of the pack nor a member agent");
                let candidates = members
                    .iter()
                    .map(String::as_str)
                    .chain(pack.tools.keys().map(String::as_str));
                if let Some(near) =
                    nearest(tool, candidates.clone()).or_else(|| prefixed(tool, candidates))
                {
                    m.push_str(&format!("; did you mean `{near}`?"));
                }
                warnings.push(FieldProblem::new(field, m));
            }
        }
    }
    (members, problems, warnings)
}

/// The one candidate sharing the longest beginning with `name`, at least
/// four letters long (`tech_agent` for `technical`), when only one does.
fn prefixed<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let shared = |c: &str| {
        name.chars()
            .zip(c.chars())
            .take_while(|(a, b)| a.eq_ignore_ascii_case(b))
            .count()
    };
    let mut best: Option<(usize, &str)> = None;
    let mut tie = false;
    for c in candidates {
        let n = shared(c);
        match best {
            Some((b, _)) if n == b => tie = true,
            Some((b, _)) if n < b => {}
            _ => {
                best = Some((n, c));
                tie = false;
            }
        }
    }
    best.filter(|(n, _)| *n >= 4 && !tie).map(|(_, c)| c)
}
