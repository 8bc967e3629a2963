//! What a card's attributes make: an agent that is a prompt for a model,
//! or (`chain`, `parallel`, a `router` without a model) a workflow over
//! other agents; or every problem found, with the warnings it deserves.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::attributes;
use super::types::{REFERENCES, check_attributes, kind_of};
use crate::agent::agent_id;
use crate::agent::card::{AgentCard, Dependencies, Origin};
use crate::agent::prompt::Prompt;
use crate::agent::skill::Skill;
use crate::agent::workflow::{CardWorkflow, Pattern};
use crate::envelope::AgentName;
use crate::source::FieldProblem;

/// An agent a card made, with what the catalog needs besides.
pub(super) struct MadeAgent {
    pub(super) card: AgentCard,
    pub(super) default: bool,
    pub(super) history_files: Vec<PathBuf>,
}

/// What a card made.
pub(super) enum Made {
    Agent(Box<MadeAgent>),
    Workflow(Box<CardWorkflow>),
}

/// A card's attributes being read: those not read yet, and the problems
/// and warnings found so far.
struct Attributes {
    v: Map<String, Value>,
    problems: Vec<FieldProblem>,
    warnings: Vec<FieldProblem>,
}

impl Attributes {
    /// A text attribute, taken out.
    fn text(&mut self, k: &str) -> Option<String> {
        match self.v.remove(k) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(other) => {
                self.problem(k, format!("must be a text, not {other}"));
                None
            }
        }
    }

    /// A true-or-false attribute, taken out; `absent` when it is not given.
    fn flag(&mut self, k: &str, absent: bool) -> bool {
        match self.v.remove(k) {
            None | Some(Value::Null) => absent,
            Some(Value::Bool(b)) => b,
            Some(other) => {
                self.problem(k, format!("must be true or false, not {other}"));
                absent
            }
        }
    }

    /// A mapping attribute, taken out (empty when absent).
    fn mapping(&mut self, k: &str) -> Map<String, Value> {
        match self.v.remove(k) {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m,
            Some(other) => {
                self.problem(k, format!("must be a mapping, not {other}"));
                Map::new()
            }
        }
    }

    fn problem(&mut self, field: impl Into<String>, message: impl std::fmt::Display) {
        self.problems.push(FieldProblem::new(field, message));
    }
}

/// The agent or workflow of a card's attributes `v` and body, or every
/// problem found; with the warnings it deserves.
pub(super) fn card(
    file: &Path,
    mut v: Map<String, Value>,
    body: Option<&str>,
    origin: Origin,
) -> Result<(Made, Vec<FieldProblem>), Vec<FieldProblem>> {
    let kind = kind_of(&mut v).map_err(|p| vec![p])?;
    let mut problems = Vec::new();
    check_attributes(&kind, &mut v, &mut problems);
    let mut a = Attributes {
        v,
        problems,
        warnings: Vec::new(),
    };
    let stem = file
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_string();
    let written_name = a.text("name").unwrap_or(stem);
    let name = match agent_id(&written_name) {
        Ok(n) => n,
        Err(e) => {
            a.problem("name", e);
            return Err(a.problems);
        }
    };
    let description = a.text("description");
    let default = a.flag("default", false);
    let tool_only = a.flag("tool_only", false);
    if default && tool_only {
        a.problem(
            "tool_only",
            "a `tool_only` card cannot be the `default` one: it is hidden from listings",
        );
    }
    let instruction = instruction(&mut a, body, &kind);
    let mut refs = references(&mut a, &name);
    let workflow = pattern(&kind, &mut a, &mut refs);
    // The one agent a pattern names for a role stays named for it.
    for key in ["generator", "evaluator", "worker"] {
        if let Some(n) = refs.get(key).and_then(|names| names.first()) {
            a.v.insert(key.into(), Value::String(n.to_string()));
        }
    }
    let calls: Vec<AgentName> = refs.into_values().flatten().collect();
    // History files, relative to the card.
    let (history, history_files) = attributes::messages(file, &mut a.v, &mut a.problems);
    let (servers, tools) = attributes::mcp(&mut a.v, &mut a.problems, &mut a.warnings);
    let model = a.text("model");
    let request_params = a.mapping("request_params");
    if a.v.remove("api_key").is_some() {
        a.warnings.push(FieldProblem::new(
            "api_key",
            "a key written in a card is a secret in a file: it is not kept; give the model's key through the environment",
        ));
    }
    for (attribute, what) in NOT_RUN {
        if a.v.contains_key(attribute) {
            a.warnings.push(FieldProblem::new(
                attribute,
                format!("read and not run here (the RFC: {what}); the agent runs without it"),
            ));
        }
    }
    let Attributes {
        v,
        problems,
        mut warnings,
    } = a;
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
        let workflow = CardWorkflow {
            name,
            display_name: written_name,
            description,
            instruction,
            pattern,
            origin,
        };
        return Ok((Made::Workflow(Box::new(workflow)), warnings));
    }
    let pattern = (kind != "agent").then(|| kind.clone());
    if let Err((field, why)) = crate::agent::kind::Kind::of(pattern.as_deref(), &v) {
        return Err(vec![FieldProblem::new(field, why)]);
    }
    let prompt = Prompt {
        instruction: instruction.unwrap_or_default(),
        pattern,
        model,
        request_params,
        servers,
        tools,
        functions: BTreeMap::new(),
        history,
        attributes: v,
    };
    let mut card = agent_card(name, written_name, description, calls, prompt, origin);
    card.tool_only = tool_only;
    let made = MadeAgent {
        card,
        default,
        history_files,
    };
    Ok((Made::Agent(Box::new(made)), warnings))
}

/// The RFC's attributes this orchestrator reads but does not act on, with
/// what the RFC has them do: a card that has one is told so.
const NOT_RUN: [(&str, &str); 12] = [
    ("shell", "the agent may run shell commands"),
    ("cwd", "the working directory of its shell and tools"),
    ("use_history", "the conversation is kept between requests"),
    ("human_input", "the agent may ask a person for input"),
    ("max_parallel", "how many of its tool calls run at once"),
    ("function_tools", "local functions offered as tools"),
    ("tool_hooks", "hooks run around its tool calls"),
    ("history_mode", "how its history is kept"),
    ("child_timeout_sec", "a time limit for the agents it calls"),
    ("resources", "MCP resources given to the model"),
    ("prompts", "MCP prompts given to the model"),
    ("skills", "skill files given to the model"),
];

/// The instruction: the body or the attribute, not both; an `agent` card
/// needs one.
fn instruction(a: &mut Attributes, body: Option<&str>, kind: &str) -> Option<String> {
    let body = body.map(|b| {
        let b = b.trim_start_matches(['\n', '\r']);
        let b = b
            .strip_prefix("---SYSTEM")
            .map(|r| r.trim_start_matches([' ', '\t', '\r']))
            .unwrap_or(b);
        b.trim().to_string()
    });
    let attribute = a.text("instruction");
    let instruction = match (attribute, body.filter(|b| !b.is_empty())) {
        (Some(_), Some(_)) => {
            a.problem(
                "instruction",
                "given twice: as the attribute and as the body (one source only; leave the body empty)",
            );
            None
        }
        (Some(i), None) | (None, Some(i)) => Some(i.trim().to_string()),
        (None, None) => None,
    };
    if instruction.is_none() && kind == "agent" {
        a.problem(
            "instruction",
            "missing: an agent card needs an instruction, as the body or the `instruction` attribute",
        );
    }
    instruction
}

/// The other agents each referencing attribute names (taken out), the
/// card `name` itself refused.
fn references(a: &mut Attributes, name: &AgentName) -> BTreeMap<&'static str, Vec<AgentName>> {
    let mut refs = BTreeMap::new();
    for (key, list) in REFERENCES {
        let Some(value) = a.v.remove(key) else {
            continue;
        };
        let items: Vec<(String, Value)> = match (list, value) {
            (true, Value::Array(items)) => items
                .into_iter()
                .enumerate()
                .map(|(i, x)| (format!("{key}[{i}]"), x))
                .collect(),
            (false, x @ Value::String(_)) => vec![(key.to_string(), x)],
            (true, other) => {
                a.problem(key, format!("must be a list of agent names, not {other}"));
                continue;
            }
            (false, other) => {
                a.problem(key, format!("must be an agent's name, not {other}"));
                continue;
            }
        };
        let mut names = Vec::new();
        for (field, item) in items {
            match item.as_str().map(agent_id) {
                Some(Ok(n)) if n == *name => a.problem(field, "names the card itself"),
                Some(Ok(n)) => names.push(n),
                Some(Err(e)) => a.problem(field, e),
                None => a.problem(field, format!("must be an agent's name, not {item}")),
            }
        }
        refs.insert(key, names);
    }
    refs
}

/// The workflow a `chain`, `parallel` or model-less `router` card is, its
/// agents taken from `refs`; `None` for the other types.
fn pattern(
    kind: &str,
    a: &mut Attributes,
    refs: &mut BTreeMap<&'static str, Vec<AgentName>>,
) -> Option<Pattern> {
    let mut take = |key: &str| refs.remove(key).unwrap_or_default();
    match kind {
        "chain" => {
            let sequence = take("sequence");
            if sequence.is_empty() {
                a.problem("sequence", "missing: the agents of the chain, in order");
            }
            let cumulative = a.flag("cumulative", false);
            Some(Pattern::Chain {
                sequence,
                cumulative,
            })
        }
        "parallel" => {
            let fan_out = take("fan_out");
            if fan_out.is_empty() {
                a.problem("fan_out", "missing: the agents that run at once");
            }
            let fan_in = take("fan_in").into_iter().next();
            let include_request = a.flag("include_request", true);
            Some(Pattern::Parallel {
                fan_out,
                fan_in,
                include_request,
            })
        }
        // With a model, a router is a prompt whose model picks.
        "router" if !a.v.contains_key("model") => {
            let agents = take("agents");
            if agents.is_empty() {
                a.problem("agents", "missing: the agents the router picks from");
            }
            Some(Pattern::Router { agents })
        }
        _ => None,
    }
}

/// The card of an agent that is `prompt`: one skill, named as written,
/// and the agents it calls as its dependencies.
fn agent_card(
    name: AgentName,
    written_name: String,
    description: String,
    calls: Vec<AgentName>,
    prompt: Prompt,
    origin: Origin,
) -> AgentCard {
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
    card.prompt = Some(prompt);
    card.origin = Some(origin);
    card
}
